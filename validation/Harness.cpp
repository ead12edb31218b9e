#include "validation/Harness.hpp"

#include <Kokkos_Core.hpp>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <sstream>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "gpu/registration/Registration.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "reference_cpu/Nlm.hpp"
#include "reference_cpu/Registration.hpp"
#include "reference_cpu/SurfaceNlm.hpp"
#include "validation/Report.hpp"

namespace kortex::validation {

const char* toString(Algorithm a) {
  switch (a) {
    case Algorithm::Bilateral: return "bilateral";
    case Algorithm::Nlm: return "nlm";
    case Algorithm::Multires: return "multires";
    case Algorithm::MultiresInteger: return "multires-u16";
    case Algorithm::SurfaceNlm: return "surface-nlm";
    case Algorithm::RegistrationForce: return "registration-force";
  }
  return "?";
}

int variantCount(Algorithm a) {
  switch (a) {
    case Algorithm::Bilateral: return 2;
    case Algorithm::Nlm: return 3;
    case Algorithm::Multires: return 16;  // 4 pyramids x 4 layer bilaterals
    case Algorithm::MultiresInteger: return 5;
    case Algorithm::SurfaceNlm: return 5;
    case Algorithm::RegistrationForce: return 4;
  }
  return 0;
}

MultiresParams multiresVariantParams(Algorithm a, MultiresParams p, int v) {
  if (a == Algorithm::Multires) {
    static const PyramidVariant pyr[] = {PyramidVariant::Unfused, PyramidVariant::FusedDirect,
                                         PyramidVariant::FusedExpand, PyramidVariant::FusedReduce};
    static const MultiresBilateralVariant bil[] = {MultiresBilateralVariant::Naive,
                                                   MultiresBilateralVariant::ClosenessLut,
                                                   MultiresBilateralVariant::FastMath,
                                                   MultiresBilateralVariant::Reuse};
    p.pyramid = pyr[v / 4];
    p.bilateral = bil[v % 4];
  } else {
    static const PyramidVariant pyr[] = {PyramidVariant::Unfused, PyramidVariant::FusedDirect,
                                         PyramidVariant::FusedExpand, PyramidVariant::Packed16,
                                         PyramidVariant::FusedReduce};
    p.pyramid = pyr[v];
    p.bilateral = MultiresBilateralVariant::ClosenessSimilarityLut;
  }
  return p;
}

namespace {

bool isMultires(Algorithm a) { return a == Algorithm::Multires || a == Algorithm::MultiresInteger; }

std::string variantName(Algorithm a, int v) {
  switch (a) {
    case Algorithm::Bilateral: return toString(static_cast<BilateralVariant>(v));
    case Algorithm::Nlm: return toString(static_cast<NlmVariant>(v));
    case Algorithm::SurfaceNlm: return toString(static_cast<SurfaceNlmVariant>(v));
    case Algorithm::RegistrationForce: return toString(static_cast<RegistrationVariant>(v));
    default: {
      const MultiresParams p = multiresVariantParams(a, MultiresParams{}, v);
      return std::string(toString(p.pyramid)) + "+" + toString(p.bilateral);
    }
  }
}

// Float image holding integers in [0, 65535] <-> uint16 (the integer pipeline's I/O).
Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Kokkos::HostSpace> toU16(HostImage const& img) {
  Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Kokkos::HostSpace> v(
      "kortex::validation::u16", img.data.extent(0), img.data.extent(1), img.data.extent(2));
  const float* p = img.data.data();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float x = p[i];
    if (!(x >= 0.0f && x <= 65535.0f) || x != static_cast<float>(static_cast<std::uint32_t>(x)))
      throw InvalidArgument("integer multires case: input voxel " + std::to_string(i) +
                            " is not an integer in [0, 65535]");
    v.data()[i] = static_cast<std::uint16_t>(x);
  }
  return v;
}

template <class Mem>
struct U16ToFloat {
  Kokkos::View<const std::uint16_t*, Mem> src;
  Kokkos::View<float*, Mem> dst;
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t i) const { dst(i) = static_cast<float>(src(i)); }
};

using Clock = std::chrono::steady_clock;

// Timing after the first (checked) run of `firstMs`: the remaining warm-up runs and the
// repetitions that fit opt.timeBudgetMs; when not even one more warm-up run and one repetition
// fit, the first run itself is the single sample (warm-up 0, 1 repetition), so an expensive
// implementation costs one run, not two.
template <class Run, class Fence>
TimingStats timeAfterFirstRun(HarnessOptions const& opt, double firstMs, Run&& run, Fence&& fence) {
  const int moreWarmup = std::max(0, opt.warmup - 1);
  if (firstMs * (moreWarmup + 1) > opt.timeBudgetMs) {
    TimingStats t;
    t.medianMs = t.minMs = t.maxMs = firstMs;
    t.samplesMs = {firstMs};
    t.warmup = 0;
    t.repetitions = 1;
    return t;
  }
  const int fit = firstMs > 0.0 ? static_cast<int>(opt.timeBudgetMs / firstMs) - moreWarmup : opt.repetitions;
  const int reps = std::max(1, std::min(opt.repetitions, fit));
  TimingStats t = timeMedian(run, fence, moreWarmup, reps);
  t.warmup += 1;  // the checked run
  return t;
}

// Sets the OpenMP thread count for the lifetime of the object.
struct OmpThreads {
  int saved;
  explicit OmpThreads(int n) : saved(omp_get_max_threads()) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

// Device buffers beyond the input and output image: the integer pipeline's, the registration force's
// fixed image and displacement (empty for the other algorithms).
template <class Mem>
struct ExtraBuffers {
  U16ImageView<Mem> in, out;
  ImageView<Mem> fixed;
  gpu::Field<Mem> u;
};

// The force's three components stacked along z (the layout of a (3, nz, ny, nx) field): the image the
// harness compares.
Geometry outputGeometry(Case const& c) {
  if (c.algorithm != Algorithm::RegistrationForce) return c.input.geometry;
  const Geometry& g = c.input.geometry;
  return Geometry::make3D(g.nx(), g.ny(), 3 * g.nz());
}

template <class Exec>
void launchVariant(Exec const& exec, Case const& c, int v,
                   ConstImageView<typename Exec::memory_space> in,
                   ImageView<typename Exec::memory_space> out,
                   ExtraBuffers<typename Exec::memory_space> const& u16) {
  switch (c.algorithm) {
    case Algorithm::Bilateral: {
      BilateralParams p = c.bilateral;
      p.variant = static_cast<BilateralVariant>(v);
      gpu::bilateral(exec, in, out, p);
      return;
    }
    case Algorithm::Nlm: {
      NlmParams p = c.nlm;
      p.variant = static_cast<NlmVariant>(v);
      gpu::nlm(exec, in, out, p);
      return;
    }
    case Algorithm::Multires:
      gpu::multires(exec, in, out, multiresVariantParams(c.algorithm, c.multires, v));
      return;
    case Algorithm::MultiresInteger:
      gpu::multires(exec, ConstU16ImageView<typename Exec::memory_space>(u16.in), u16.out,
                    multiresVariantParams(c.algorithm, c.multires, v));
      return;
    case Algorithm::SurfaceNlm: {
      SurfaceNlmParams p = c.surface;
      p.variant = static_cast<SurfaceNlmVariant>(v);
      gpu::surfaceDenoise(exec, in, out, p);
      return;
    }
    case Algorithm::RegistrationForce: {
      RegistrationParams p = c.registration;
      p.variant = static_cast<RegistrationVariant>(v);
      const auto& g = c.input.geometry;
      gpu::Field<typename Exec::memory_space> f(out.data(), 3, g.nz(), g.ny(), g.nx());  // out's memory
      gpu::registrationForce(exec, in, ConstImageView<typename Exec::memory_space>(u16.fixed),
                             gpu::ConstField<typename Exec::memory_space>(u16.u), f, p);
      return;
    }
  }
}

// The integer pipeline's output as float in `out` (for the comparison).
template <class Exec>
void integerOutputToFloat(Exec const& exec, ExtraBuffers<typename Exec::memory_space> const& u16,
                          ImageView<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  U16ToFloat<Mem> f{Kokkos::View<const std::uint16_t*, Mem>(u16.out.data(), u16.out.size()),
                    Kokkos::View<float*, Mem>(out.data(), out.size())};
  Kokkos::parallel_for("kortex::validation::u16ToFloat",
                       Kokkos::RangePolicy<Exec>(exec, 0, u16.out.size()), f);
}

template <class Exec>
void runSpace(Case const& c, HostImage const& reference, HarnessOptions const& opt, double tolerance,
              double referenceMs, std::vector<VariantResult>& results) {
  using Mem = typename Exec::memory_space;
  constexpr bool hostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  Exec exec;
  const auto& in = c.input.data;
  ImageView<Mem> din("kortex::validation::input", in.extent(0), in.extent(1), in.extent(2));
  const Geometry og = outputGeometry(c);
  ImageView<Mem> dout("kortex::validation::output", og.nz(), og.ny(), og.nx());
  Kokkos::deep_copy(din, in);
  HostImage back("kortex::validation::result", og);
  ExtraBuffers<Mem> u16;
  if (c.algorithm == Algorithm::RegistrationForce) {
    u16.fixed = Kokkos::create_mirror_view_and_copy(Mem(), c.fixed.data);
    u16.u = Kokkos::create_mirror_view_and_copy(Mem(), c.displacement.data);
  }
  if (c.algorithm == Algorithm::MultiresInteger) {
    u16.in = U16ImageView<Mem>("kortex::validation::inputU16", in.extent(0), in.extent(1), in.extent(2));
    u16.out = U16ImageView<Mem>("kortex::validation::outputU16", in.extent(0), in.extent(1), in.extent(2));
    Kokkos::deep_copy(u16.in, toU16(c.input));
  }

  double upMs = -1.0, downMs = -1.0;
  if (!hostMemory && opt.time) {
    const int reps = std::max(3, opt.repetitions);
    upMs = timeMedian([&] { Kokkos::deep_copy(din, in); }, [&] { exec.fence(); }, 1, reps).medianMs;
    downMs = timeMedian([&] { Kokkos::deep_copy(back.data, dout); }, [&] { exec.fence(); }, 1, reps)
                 .medianMs;
  }

  for (int v = 0; v < variantCount(c.algorithm); ++v) {
    VariantResult r;
    r.space = kx::spaceName<Exec>();
    r.variant = variantName(c.algorithm, v);
    r.concurrency = kx::concurrency(exec);
    r.uploadMs = upMs;
    r.downloadMs = downMs;
    try {
      // Poison the output so a variant that skips voxels cannot pass on a stale result.
      Kokkos::deep_copy(dout, std::numeric_limits<float>::quiet_NaN());
      Kokkos::fence();
      const auto t0 = Clock::now();
      launchVariant(exec, c, v, din, dout, u16);
      exec.fence();
      const double firstMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (c.algorithm == Algorithm::MultiresInteger) {
        integerOutputToFloat(exec, u16, dout);
        exec.fence();
      }
      Kokkos::deep_copy(back.data, dout);
      r.check = checkAgainstReference(back, reference, tolerance);
      r.ran = true;
      if (opt.time) {
        r.timing = timeAfterFirstRun(opt, firstMs, [&] { launchVariant(exec, c, v, din, dout, u16); },
                                     [&] { exec.fence(); });
        r.timed = true;
        r.speedup = r.timing.medianMs > 0.0 ? referenceMs / r.timing.medianMs : 0.0;
      }
    } catch (std::exception const& e) {
      r.ran = false;
      r.check.pass = false;
      r.check.message = std::string("threw: ") + e.what();
    }
    results.push_back(std::move(r));
  }
}

}  // namespace

std::vector<std::string> enabledExecutionSpaces() {
  std::vector<std::string> s;
#ifdef KOKKOS_ENABLE_SERIAL
  s.push_back(Kokkos::Serial::name());
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  s.push_back(Kokkos::OpenMP::name());
#endif
#ifdef KOKKOS_ENABLE_THREADS
  s.push_back(Kokkos::Threads::name());
#endif
#ifdef KOKKOS_ENABLE_CUDA
  s.push_back(Kokkos::Cuda::name());
#endif
  return s;
}

Check checkAgainstReference(HostImage const& output, HostImage const& reference, double tol) {
  Check c;
  for (int r = 0; r < 3; ++r)
    if (output.data.extent(r) != reference.data.extent(r)) {
      c.pass = false;
      c.message = "output extents differ from the reference";
      c.errors.maxAbs = c.errors.maxRel = c.errors.rmse = std::numeric_limits<double>::infinity();
      return c;
    }
  c.errors = compare(output, reference);
  if (c.errors.nonFinite > 0) {
    c.pass = false;
    c.message = std::to_string(c.errors.nonFinite) + " non-finite voxel(s) in the output";
  } else if (!(c.errors.maxRel <= tol)) {
    c.pass = false;
    c.message = "max relative error " + fmtSci(c.errors.maxRel) + " > tolerance " + fmtSci(tol);
  } else {
    c.pass = true;
  }
  return c;
}

std::string describeParams(BilateralParams const& p) {
  std::ostringstream os;
  os << "r=" << p.radius << " (window " << 2 * p.radius + 1 << ") sigma_s=" << fmt(p.sigmaSpatial)
     << " sigma_r=" << fmt(p.sigmaRange);
  return os.str();
}

std::string describeParams(MultiresParams const& p) {
  std::ostringstream os;
  os << "levels=" << p.levels << " r=" << p.radius << " sigma_s=" << fmt(p.sigmaSpatial)
     << " sigma_r=" << fmt(p.sigmaRange);
  if (p.bits > 0) os << " bits=" << p.bits;
  return os.str();
}

std::string describeParams(SurfaceNlmParams const& p) {
  std::ostringstream os;
  os << "band " << fmt(p.band) << " patch " << p.patch << "^3 m=" << p.neighbors << " K=" << p.iterations
     << " seed radius " << p.seedRadius;
  return os.str();
}

std::string describeParams(RegistrationParams const& p) {
  std::ostringstream os;
  os << "force f = -dE/du, lambda " << fmt(p.lambda);
  return os.str();
}

// The registration force case's inputs: the parameters for the moving image's grid, the fixed image and u
// on that grid.
void checkRegistrationCase(Case const& c) {
  const Geometry& g = c.input.geometry;
  c.registration.validateFor(g);
  if (!(c.fixed.geometry.nx() == g.nx() && c.fixed.geometry.ny() == g.ny() && c.fixed.geometry.nz() == g.nz()))
    throw InvalidArgument("validation case '" + c.name + "': the fixed image is not on the moving image's grid");
  const auto& u = c.displacement.data;
  if (!(u.extent(0) == 3 && Index(u.extent(1)) == g.nz() && Index(u.extent(2)) == g.ny() && Index(u.extent(3)) == g.nx()))
    throw InvalidArgument("validation case '" + c.name + "': the displacement is not a 3-component field on the grid");
}

std::string describeParams(NlmParams const& p) {
  std::ostringstream os;
  os << "patch r=" << p.patchRadius << " (" << 2 * p.patchRadius + 1 << ") search R="
     << p.searchRadius << " (" << 2 * p.searchRadius + 1 << ") h=" << fmt(p.h);
  return os.str();
}

CaseResult runCase(Case const& c, HarnessOptions const& opt) {
  const auto wall0 = Clock::now();
  CaseResult res;
  res.name = c.name;
  res.algorithm = c.algorithm;
  res.inputDescription = c.inputDescription;
  res.geometry = c.input.geometry;
  // The integer pipeline is exact by definition (core/Multires.hpp): tolerance 0.
  res.tolerance = c.algorithm == Algorithm::MultiresInteger ? 0.0 : opt.maxRelativeErrorTolerance;
  res.params = c.algorithm == Algorithm::Bilateral           ? describeParams(c.bilateral)
               : c.algorithm == Algorithm::Nlm               ? describeParams(c.nlm)
               : c.algorithm == Algorithm::SurfaceNlm        ? describeParams(c.surface)
               : c.algorithm == Algorithm::RegistrationForce ? describeParams(c.registration)
                                                             : describeParams(c.multires);
  if (c.input.data.size() == 0) throw InvalidArgument("validation case '" + c.name + "': empty input");
  if (c.algorithm == Algorithm::Bilateral)
    c.bilateral.validateFor(c.input.geometry);
  else if (c.algorithm == Algorithm::Nlm)
    c.nlm.validateFor(c.input.geometry);
  else if (c.algorithm == Algorithm::SurfaceNlm)
    c.surface.validate();
  else if (c.algorithm == Algorithm::RegistrationForce)
    checkRegistrationCase(c);
  else
    c.multires.validateFor(c.input.geometry);
  Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Kokkos::HostSpace> inU16, refU16;
  if (c.algorithm == Algorithm::MultiresInteger) {
    inU16 = toU16(c.input);
    refU16 = decltype(refU16)("kortex::validation::referenceU16", inU16.extent(0), inU16.extent(1),
                              inU16.extent(2));
  }

  HostImage reference("kortex::validation::reference", outputGeometry(c));
  {
    OmpThreads threads(opt.referenceThreads);
    res.referenceThreads = omp_get_max_threads();
    auto runRef = [&] {
      switch (c.algorithm) {
        case Algorithm::Bilateral: ref::bilateral(c.input.data, reference.data, c.bilateral); break;
        case Algorithm::Nlm: ref::nlm(c.input.data, reference.data, c.nlm); break;
        case Algorithm::Multires: ref::multires(c.input.data, reference.data, c.multires); break;
        case Algorithm::MultiresInteger:  // (the reference has no variants; its check wants the integer one)
          ref::multires(inU16, refU16, multiresVariantParams(c.algorithm, c.multires, 0));
          break;
        case Algorithm::SurfaceNlm: reference = ref::surfaceDenoise(c.input, c.surface); break;
        case Algorithm::RegistrationForce: {
          const auto& g = c.input.geometry;
          ref::HostField f(reference.data.data(), 3, g.nz(), g.ny(), g.nx());  // the stacked image's memory
          ref::registrationForce(c.input.data, c.fixed.data, c.displacement.data, f, c.registration.lambda);
          break;
        }
      }
    };
    const auto t0 = Clock::now();
    runRef();  // produces the reference output; counts as the first warm-up run
    const double firstMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (opt.time) {
      res.reference = timeAfterFirstRun(opt, firstMs, runRef, [] {});
      res.referenceTimed = true;
    }
  }
  const double refMs = res.reference.medianMs;
  if (c.algorithm == Algorithm::MultiresInteger)
    for (std::size_t i = 0; i < refU16.size(); ++i) reference.data.data()[i] = static_cast<float>(refU16.data()[i]);

#ifdef KOKKOS_ENABLE_SERIAL
  runSpace<Kokkos::Serial>(c, reference, opt, res.tolerance, refMs, res.variants);
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  runSpace<Kokkos::OpenMP>(c, reference, opt, res.tolerance, refMs, res.variants);
#endif
#ifdef KOKKOS_ENABLE_THREADS
  runSpace<Kokkos::Threads>(c, reference, opt, res.tolerance, refMs, res.variants);
#endif
#ifdef KOKKOS_ENABLE_CUDA
  runSpace<Kokkos::Cuda>(c, reference, opt, res.tolerance, refMs, res.variants);
#endif

  res.pass = !res.variants.empty();
  for (auto const& v : res.variants) res.pass = res.pass && v.ran && v.check.pass;
  res.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - wall0).count();
  return res;
}

nlohmann::json toJson(ErrorStats const& e) {
  auto num = [](double v) -> nlohmann::json {
    if (std::isfinite(v)) return v;
    return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  };
  return {{"max_abs", num(e.maxAbs)},       {"max_rel", num(e.maxRel)},
          {"rmse", num(e.rmse)},            {"psnr_db", num(e.psnr)},
          {"psnr_data_range", e.dataRange}, {"reference_peak", e.refPeak},
          {"non_finite", e.nonFinite}};
}

nlohmann::json toJson(TimingStats const& t) {
  return {{"median_ms", t.medianMs}, {"min_ms", t.minMs},   {"max_ms", t.maxMs},
          {"warmup", t.warmup},      {"repetitions", t.repetitions}, {"samples_ms", t.samplesMs}};
}

nlohmann::json toJson(CaseResult const& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["algorithm"] = toString(r.algorithm);
  j["params"] = r.params;
  j["input"] = r.inputDescription;
  j["size"] = {r.geometry.nx(), r.geometry.ny(), r.geometry.nz()};
  j["dimension"] = r.geometry.dimension;
  j["tolerance_max_rel"] = r.tolerance;
  j["pass"] = r.pass;
  j["wall_ms"] = r.wallMs;
  j["reference"] = {{"implementation", "reference_cpu (Eigen + OpenMP)"},
                    {"threads", r.referenceThreads}};
  if (r.referenceTimed) j["reference"]["timing"] = toJson(r.reference);
  j["variants"] = nlohmann::json::array();
  for (auto const& v : r.variants) {
    nlohmann::json jv;
    jv["space"] = v.space;
    jv["variant"] = v.variant;
    jv["concurrency"] = v.concurrency;
    jv["ran"] = v.ran;
    jv["pass"] = v.check.pass;
    if (!v.check.message.empty()) jv["message"] = v.check.message;
    if (v.ran) jv["errors"] = toJson(v.check.errors);
    if (v.timed) {
      jv["timing"] = toJson(v.timing);
      jv["speedup_vs_reference"] = v.speedup;
    }
    if (v.uploadMs >= 0.0) {
      jv["transfer_ms"] = {{"upload", v.uploadMs}, {"download", v.downloadMs},
                           {"total", v.uploadMs + v.downloadMs}};
    } else {
      jv["transfer_ms"] = nullptr;  // host memory: no transfer needed
    }
    j["variants"].push_back(jv);
  }
  return j;
}

std::string toMarkdown(std::vector<CaseResult> const& results) {
  std::ostringstream os;
  os << "| case | params | implementation | max abs | max rel | RMSE | PSNR (dB) | median ms | "
        "speedup | transfer ms (up+down) | result |\n"
     << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (auto const& r : results) {
    os << "| " << r.name << " | " << r.params << " | CPU reference (OpenMP, " << r.referenceThreads
       << " threads) | | | | | " << (r.referenceTimed ? fmtMs(r.reference.medianMs) : "-")
       << " | 1 | | reference |\n";
    for (auto const& v : r.variants) {
      os << "| | | " << v.variant << " on " << v.space << " (" << v.concurrency << ") | ";
      if (v.ran)
        os << fmtSci(v.check.errors.maxAbs) << " | " << fmtSci(v.check.errors.maxRel) << " | "
           << fmtSci(v.check.errors.rmse) << " | " << fmt(v.check.errors.psnr, 4) << " | ";
      else
        os << "- | - | - | - | ";
      os << (v.timed ? fmtMs(v.timing.medianMs) : "-") << " | "
         << (v.timed ? fmt(v.speedup, 3) : "-") << " | "
         << (v.uploadMs >= 0.0 ? fmtMs(v.uploadMs) + "+" + fmtMs(v.downloadMs) : "n/a (host)")
         << " | " << (v.check.pass ? "pass" : "**FAIL**: " + v.check.message) << " |\n";
    }
  }
  return os.str();
}

}  // namespace kortex::validation
