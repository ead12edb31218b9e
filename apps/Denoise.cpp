#include "apps/Denoise.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cmath>
#include <string>

#include "gpu/Bilateral.hpp"
#include "gpu/Nlm.hpp"
#include "reference_cpu/Bilateral.hpp"
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

}  // namespace kortex::app
