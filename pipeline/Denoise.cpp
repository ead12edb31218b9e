#include "pipeline/Denoise.hpp"
#include "core/Timing.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/detail/JsonReader.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "reference_cpu/Nlm.hpp"

namespace kortex::pipeline {

namespace {


template <class T, class Mem>
using Volume = Kokkos::View<T***, Kokkos::LayoutRight, Mem>;

// `filter(exec, in, out)` on the default Kokkos execution space for host volumes of T; the
// report splits transfers and compute.
template <class T, class Filter>
void runOnKokkos(Volume<const T, Kokkos::HostSpace> const& in, Volume<T, Kokkos::HostSpace> const& out,
                 Filter&& filter, RunReport* report) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  Exec exec;
  auto t0 = Clock::now();
  Volume<T, Mem> din("kortex::pipeline::input", in.extent(0), in.extent(1), in.extent(2));
  Volume<T, Mem> dout("kortex::pipeline::output", in.extent(0), in.extent(1), in.extent(2));
  Kokkos::deep_copy(exec, din, in);
  exec.fence();
  double transfer = msSince(t0);
  auto t1 = Clock::now();
  filter(exec, Volume<const T, Mem>(din), dout);
  exec.fence();
  const double compute = msSince(t1);
  auto t2 = Clock::now();
  Kokkos::deep_copy(exec, out, dout);
  exec.fence();
  transfer += msSince(t2);
  if (report) {
    report->backend = Backend::Kokkos;
    report->executionSpace = Exec::name();
    report->computeMs = compute;
    report->transferMs = transfer;
  }
}

template <class Reference>
void runOnCpu(Reference&& reference, RunReport* report) {
  auto t0 = Clock::now();
  reference();
  if (report) {
    report->backend = Backend::Cpu;
    report->executionSpace = "OpenMP reference";
    report->computeMs = msSince(t0);
    report->transferMs = 0.0;
  }
}

// One float job: the CPU reference or the Kokkos filter, inputs already checked.
template <class Reference, class KokkosFilter>
HostImage runFloat(HostImage const& in, Backend b, RunReport* report, Reference&& reference,
                   KokkosFilter&& kokkosFilter) {
  HostImage out("kortex::pipeline::result", in.geometry);
  out.metadata = in.metadata;
  if (resolve(b) == Backend::Cpu)
    runOnCpu([&] { reference(ConstImageView<Kokkos::HostSpace>(in.data), out.data); }, report);
  else
    runOnKokkos<float>(ConstImageView<Kokkos::HostSpace>(in.data), out.data, kokkosFilter, report);
  return out;
}

// True when every voxel is an integer in [0, 2^15 - 1].
bool holdsFifteenBitIntegers(HostImage const& img) {
  const float* p = img.data.data();
  const float top = static_cast<float>((1 << MultiresParams::kMaxBits) - 1);
  for (Index i = 0; i < img.numVoxels(); ++i)
    if (!(p[i] >= 0.0f && p[i] <= top) || p[i] != std::floor(p[i])) return false;
  return true;
}

}  // namespace

HostImage denoiseBilateral(HostImage const& in, BilateralParams const& p, Backend b, RunReport* report) {
  p.validateFor(in.geometry);
  requireFinite(in, "bilateral filter input");
  return runFloat(
      in, b, report, [&](auto const& i, auto const& o) { ref::bilateral(i, o, p); },
      [&](auto const& exec, auto const& i, auto const& o) { gpu::bilateral(exec, i, o, p); });
}

HostImage denoiseNlm(HostImage const& in, NlmParams const& p, Backend b, RunReport* report) {
  p.validateFor(in.geometry);
  requireFinite(in, "non-local means input");
  return runFloat(
      in, b, report, [&](auto const& i, auto const& o) { ref::nlm(i, o, p); },
      [&](auto const& exec, auto const& i, auto const& o) { gpu::nlm(exec, i, o, p); });
}

IntegerMode parseIntegerMode(std::string const& s) {
  if (s == "auto") return IntegerMode::Auto;
  if (s == "yes") return IntegerMode::Yes;
  if (s == "no") return IntegerMode::No;
  throw InvalidArgument("integer pipeline mode must be auto, yes or no; got '" + s + "'");
}

HostImage denoiseMultires(HostImage const& in, MultiresJob const& job, MultiresRun* run) {
  MultiresParams p = job.params;
  p.validateFor(in.geometry);
  requireFinite(in, "multiresolution filter input");
  const bool fits = holdsFifteenBitIntegers(in);
  if (job.integer == IntegerMode::Yes && !fits)
    throw InvalidArgument("the integer pipeline needs every voxel to be an integer in [0, 32767]");
  const bool useInteger = job.integer == IntegerMode::Yes || (job.integer == IntegerMode::Auto && fits);
  if (!job.bilateralGiven)
    p.bilateral = useInteger ? MultiresBilateralVariant::ClosenessSimilarityLut
                             : MultiresParams{}.bilateral;
  p.validateVariants(useInteger);
  double noise = 0.0;
  if (job.autoSigmaRange) {
    noise = estimateNoiseSigma(in);
    if (!(noise > 0.0))
      throw InvalidArgument("automatic similarity sigma: the image shows no noise to estimate "
                            "(give sigma_r explicitly)");
    p.sigmaRange = static_cast<float>(2.0 * noise);
  }
  RunReport report;
  HostImage out;
  if (!useInteger) {
    out = runFloat(
        in, job.backend, &report, [&](auto const& i, auto const& o) { ref::multires(i, o, p); },
        [&](auto const& exec, auto const& i, auto const& o) { gpu::multires(exec, i, o, p); });
  } else {
    // Integer pipeline: uint16 in and out, converted back to float for writing.
    U16ImageView<Kokkos::HostSpace> hin("kortex::pipeline::inputU16", in.data.extent(0), in.data.extent(1),
                                        in.data.extent(2));
    for (Index i = 0; i < in.numVoxels(); ++i) hin.data()[i] = static_cast<std::uint16_t>(in.data.data()[i]);
    U16ImageView<Kokkos::HostSpace> hout("kortex::pipeline::outputU16", hin.extent(0), hin.extent(1),
                                         hin.extent(2));
    const ConstU16ImageView<Kokkos::HostSpace> chin(hin);
    if (resolve(job.backend) == Backend::Cpu)
      runOnCpu([&] { ref::multires(chin, hout, p); }, &report);
    else
      runOnKokkos<std::uint16_t>(
          chin, hout, [&](auto const& exec, auto const& i, auto const& o) { gpu::multires(exec, i, o, p); },
          &report);
    out = HostImage("kortex::pipeline::result", in.geometry);
    out.metadata = in.metadata;
    for (Index i = 0; i < in.numVoxels(); ++i) out.data.data()[i] = static_cast<float>(hout.data()[i]);
  }
  if (run) {
    run->integer = useInteger;
    run->params = p;
    run->noiseSigma = noise;
    run->report = report;
  }
  return out;
}

double estimateNoiseSigma(HostImage const& img) {
  const Index nx = img.geometry.nx(), ny = img.geometry.ny(), nz = img.geometry.nz();
  if (nx < 3 || ny < 3) return 0.0;
  double sum = 0.0;
  for (Index k = 0; k < nz; ++k) {
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (Index j = 1; j < ny - 1; ++j)
      for (Index i = 1; i < nx - 1; ++i) {
        auto v = [&](Index dj, Index di) { return static_cast<double>(img.data(k, j + dj, i + di)); };
        const double c = v(-1, -1) + v(-1, 1) + v(1, -1) + v(1, 1) -
                         2.0 * (v(-1, 0) + v(1, 0) + v(0, -1) + v(0, 1)) + 4.0 * v(0, 0);
        sum += std::fabs(c);
      }
  }
  const double kPi = 3.14159265358979323846;
  return std::sqrt(kPi / 2.0) * sum / (6.0 * static_cast<double>(nx - 2) * static_cast<double>(ny - 2) * nz);
}

const char* toString(DenoiseMethod m) {
  switch (m) {
    case DenoiseMethod::Bilateral: return "bilateral";
    case DenoiseMethod::Nlm: return "nlm";
    case DenoiseMethod::Multires: return "multires";
  }
  return "?";
}

DenoiseMethod parseDenoiseMethod(std::string const& s) {
  if (s == "bilateral") return DenoiseMethod::Bilateral;
  if (s == "nlm") return DenoiseMethod::Nlm;
  if (s == "multires") return DenoiseMethod::Multires;
  throw InvalidArgument("unknown denoise method '" + s + "' (expected bilateral|nlm|multires)");
}

namespace {
const char* toString(IntegerMode m) { return m == IntegerMode::Yes ? "yes" : m == IntegerMode::No ? "no" : "auto"; }
}  // namespace

void DenoiseJob::validate() const {
  requireKokkosForVariant(variantGiven, backend, "denoise", "a variant selects a Kokkos implementation");
  // The input: a file, or a folder of DICOM slices (io::readImage says why a folder is not one series).
  if (!input.inMemory()) {
    std::error_code ec;
    if (input.path.empty()) throw InvalidArgument("denoise: the input image is not given");
    if (!std::filesystem::exists(input.path, ec)) throw IoError("the input image '" + input.path.string() + "' does not exist");
  } else {
    requireImageInput(input, "input image", "denoise");
  }
  if (output.empty()) {
    if (!keepResult) throw InvalidArgument("denoise: no output is named");
    return;
  }
  io::requireWritableFile(output, "the output image");
  io::requireSupportedExtension(output, io::Access::Write);
  std::vector<JobFile> inputs;
  if (!input.inMemory()) inputs.push_back({"image", input.path});
  requireDistinctFiles(inputs, {{"output image", output}});
}

nlohmann::json toJson(DenoiseJob const& job) {
  nlohmann::json j = {{"job", "denoise"},
                      {"method", toString(job.method)},
                      {"input", toJson(job.input)},
                      {"output", job.output.string()},
                      {"backend", toString(job.backend)},
                      {"variant_given", job.variantGiven},
                      {"keep_result", job.keepResult}};
  switch (job.method) {
    case DenoiseMethod::Bilateral: j["bilateral"] = toJson(job.bilateral); break;
    case DenoiseMethod::Nlm: j["nlm"] = toJson(job.nlm); break;
    case DenoiseMethod::Multires:
      j["multires"] = toJson(job.multires.params);
      j["integer"] = toString(job.multires.integer);
      j["auto_sigma_range"] = job.multires.autoSigmaRange;
      j["bilateral_given"] = job.multires.bilateralGiven;
      break;
  }
  return j;
}

DenoiseJob denoiseJobFromJson(nlohmann::json const& j) {
  DenoiseJob job;
  detail::JsonReader r(j, "denoise job");
  r.jobKind("denoise");
  r.choice("method", job.method, parseDenoiseMethod).choice("backend", job.backend, parseBackend);
  job.input.path = inputPathFromJson(r.raw("input"), "denoise job", "input");
  r.path("output", job.output).flag("variant_given", job.variantGiven).flag("keep_result", job.keepResult);
  r.object("bilateral", job.bilateral).object("nlm", job.nlm).object("multires", job.multires.params);
  r.choice("integer", job.multires.integer, parseIntegerMode)
      .flag("auto_sigma_range", job.multires.autoSigmaRange)
      .flag("bilateral_given", job.multires.bilateralGiven);
  r.done();
  return job;
}

DenoiseJobResult runDenoiseJob(DenoiseJob const& job) {
  {
    kx::ScopedRegion region("kortex::denoise::check");
    job.validate();
  }
  DenoiseJobResult r;
  {
    kx::ScopedRegion region("kortex::denoise::read");
    r.input = readImageInput(job.input);
  }
  {
    kx::ScopedRegion region("kortex::denoise::filter");
    switch (job.method) {
      case DenoiseMethod::Bilateral: r.image = denoiseBilateral(r.input, job.bilateral, job.backend, &r.report); break;
      case DenoiseMethod::Nlm: r.image = denoiseNlm(r.input, job.nlm, job.backend, &r.report); break;
      case DenoiseMethod::Multires: {
        MultiresJob m = job.multires;
        m.backend = job.backend;
        r.image = denoiseMultires(r.input, m, &r.multires);
        r.report = r.multires.report;
        break;
      }
    }
  }
  if (!job.output.empty()) {
    kx::ScopedRegion region("kortex::denoise::write");
    r.written = writeAllOrNone({{"output image", job.output, [&](std::filesystem::path const& p) { io::writeImage(r.image, p); }}});
  }
  return r;
}

}  // namespace kortex::pipeline
