#include "apps/Denoise.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/Bilateral.hpp"
#include "gpu/Multires.hpp"
#include "gpu/Nlm.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "reference_cpu/Nlm.hpp"

namespace kortex::app {

namespace {
using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs `filter(exec, in, out)` on the default Kokkos execution space; timings split into
// transfers and compute.
template <class Filter>
HostImage runOnKokkos(HostImage const& in, Filter&& filter, RunReport* report) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  Exec exec;
  auto t0 = Clock::now();
  ImageView<Mem> din("kortex::app::input", in.data.extent(0), in.data.extent(1), in.data.extent(2));
  ImageView<Mem> dout("kortex::app::output", in.data.extent(0), in.data.extent(1),
                      in.data.extent(2));
  Kokkos::deep_copy(exec, din, in.data);
  exec.fence();
  double transfer = msSince(t0);
  auto t1 = Clock::now();
  filter(exec, ConstImageView<Mem>(din), dout);
  exec.fence();
  const double compute = msSince(t1);
  HostImage out("kortex::app::result", in.geometry);
  out.metadata = in.metadata;
  auto t2 = Clock::now();
  Kokkos::deep_copy(exec, out.data, dout);
  exec.fence();
  transfer += msSince(t2);
  if (report) {
    report->backend = Backend::Kokkos;
    report->executionSpace = Exec::name();
    report->computeMs = compute;
    report->transferMs = transfer;
  }
  return out;
}
}  // namespace

void requireFinite(HostImage const& img) {
  const float* p = img.data.data();
  const Index nx = img.geometry.nx(), ny = img.geometry.ny();
  for (Index i = 0; i < img.numVoxels(); ++i)
    if (!std::isfinite(p[i]))
      throw InvalidArgument("input contains a NaN or Inf voxel at (x=" + std::to_string(i % nx) +
                            ", y=" + std::to_string(i / nx % ny) +
                            ", z=" + std::to_string(i / (nx * ny)) +
                            "); the filters are not defined for non-finite values");
}

namespace {
// Common driver: validate, then the CPU reference (which rejects non-finite voxels itself) or
// Kokkos (whose kernels do not scan for them, so the scan happens here).
template <class Params, class Reference, class Kokkos>
HostImage runFilter(HostImage const& in, Params const& p, Backend b, RunReport* report,
                    Reference&& reference, Kokkos&& kokkosFilter) {
  p.validateFor(in.geometry);
  if (resolve(b) == Backend::Cpu) {
    auto t0 = Clock::now();
    HostImage out = reference(in, p);
    if (report) {
      report->backend = Backend::Cpu;
      report->executionSpace = "OpenMP reference";
      report->computeMs = msSince(t0);
    }
    return out;
  }
  requireFinite(in);
  return runOnKokkos(in, kokkosFilter, report);
}
}  // namespace

HostImage runBilateral(HostImage const& in, BilateralParams const& p, Backend b, RunReport* report) {
  return runFilter(
      in, p, b, report, [](HostImage const& i, BilateralParams const& q) { return ref::bilateral(i, q); },
      [&](auto const& exec, auto din, auto dout) { gpu::bilateral(exec, din, dout, p); });
}

HostImage runNlm(HostImage const& in, NlmParams const& p, Backend b, RunReport* report) {
  return runFilter(
      in, p, b, report, [](HostImage const& i, NlmParams const& q) { return ref::nlm(i, q); },
      [&](auto const& exec, auto din, auto dout) { gpu::nlm(exec, din, dout, p); });
}

IntegerMode parseIntegerMode(std::string const& s) {
  if (s == "auto") return IntegerMode::Auto;
  if (s == "yes") return IntegerMode::Yes;
  if (s == "no") return IntegerMode::No;
  throw InvalidArgument("--integer must be auto, yes or no; got '" + s + "'");
}

namespace {
// True when every voxel is an integer in [0, 2^15 - 1].
bool holdsFifteenBitIntegers(HostImage const& img) {
  const float* p = img.data.data();
  const float top = static_cast<float>((1 << MultiresParams::kMaxBits) - 1);
  for (Index i = 0; i < img.numVoxels(); ++i)
    if (!(p[i] >= 0.0f && p[i] <= top) || p[i] != std::floor(p[i])) return false;
  return true;
}
}  // namespace

HostImage runMultires(HostImage const& in, MultiresParams p, bool bilateralGiven, IntegerMode integer,
                      Backend b, RunReport* report, MultiresRun* run) {
  p.validateFor(in.geometry);
  requireFinite(in);
  const bool fits = holdsFifteenBitIntegers(in);
  if (integer == IntegerMode::Yes && !fits)
    throw InvalidArgument("--integer yes needs every voxel to be an integer in [0, 32767]");
  const bool useInteger = integer == IntegerMode::Yes || (integer == IntegerMode::Auto && fits);
  if (!bilateralGiven)
    p.bilateral = useInteger ? MultiresBilateralVariant::ClosenessSimilarityLut
                             : MultiresBilateralVariant::ClosenessLut;
  p.validateVariants(useInteger);
  if (run) {
    run->integer = useInteger;
    run->params = p;
  }
  if (!useInteger) {
    return runFilter(
        in, p, b, report, [](HostImage const& i, MultiresParams const& q) { return ref::multires(i, q); },
        [&](auto const& exec, auto din, auto dout) { gpu::multires(exec, din, dout, p); });
  }
  // Integer pipeline: uint16 in and out, converted back to float for writing.
  using U16Host = U16ImageView<Kokkos::HostSpace>;
  U16Host hin("kortex::app::inputU16", in.data.extent(0), in.data.extent(1), in.data.extent(2));
  for (Index i = 0; i < in.numVoxels(); ++i) hin.data()[i] = static_cast<std::uint16_t>(in.data.data()[i]);
  U16Host hout("kortex::app::outputU16", in.data.extent(0), in.data.extent(1), in.data.extent(2));
  if (resolve(b) == Backend::Cpu) {
    auto t0 = Clock::now();
    ref::multires(ConstU16ImageView<Kokkos::HostSpace>(hin), hout, p);
    if (report) {
      report->backend = Backend::Cpu;
      report->executionSpace = "OpenMP reference";
      report->computeMs = msSince(t0);
    }
  } else {
    using Exec = Kokkos::DefaultExecutionSpace;
    using Mem = Exec::memory_space;
    Exec exec;
    auto t0 = Clock::now();
    U16ImageView<Mem> din("kortex::app::inputU16", hin.extent(0), hin.extent(1), hin.extent(2));
    U16ImageView<Mem> dout("kortex::app::outputU16", hin.extent(0), hin.extent(1), hin.extent(2));
    Kokkos::deep_copy(exec, din, hin);
    exec.fence();
    double transfer = msSince(t0);
    auto t1 = Clock::now();
    gpu::multires(exec, ConstU16ImageView<Mem>(din), dout, p);
    exec.fence();
    const double compute = msSince(t1);
    auto t2 = Clock::now();
    Kokkos::deep_copy(exec, hout, dout);
    exec.fence();
    transfer += msSince(t2);
    if (report) {
      report->backend = Backend::Kokkos;
      report->executionSpace = Exec::name();
      report->computeMs = compute;
      report->transferMs = transfer;
    }
  }
  HostImage out("kortex::app::result", in.geometry);
  out.metadata = in.metadata;
  for (Index i = 0; i < in.numVoxels(); ++i) out.data.data()[i] = static_cast<float>(hout.data()[i]);
  return out;
}

}  // namespace kortex::app
