#include "gpu/greedy/Greedy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/detail/Recording.hpp"
#include "gpu/gaussian/Gaussian.hpp"
#include "gpu/greedy/GreedyStepper.hpp"
#include "gpu/greedy/detail/GreedyKernels.hpp"
#include "gpu/greedy/detail/SubjectScale.hpp"
#include "gpu/imageops/ImageOps.hpp"
#include "gpu/imageops/Inverse.hpp"

namespace kortex::gpu {
namespace {

using namespace greedy_detail;

template <class A, class B>
void requireSameGrid(A const& a, B const& b, const char* who, const char* what) {
  for (int k = 0; k < 3; ++k)
    if (a.extent(k) != b.extent(k)) throw InvalidArgument(std::string(who) + ": " + what + " on different grids");
}

template <class F>
void requireField3(F const& f, const char* who) {
  if (f.data() == nullptr) throw InvalidArgument(std::string(who) + ": field not allocated");
  if (f.extent(0) != 3) throw InvalidArgument(std::string(who) + ": fields need 3 components");
}

}  // namespace

template <class Exec>
void greedyForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, Field<typename Exec::memory_space> f) {
  using Mem = typename Exec::memory_space;
  requireSameGrid(warped, fixed, "greedyForce", "the warped and fixed images are");
  requireField3(f, "greedyForce");
  for (int k = 0; k < 3; ++k)
    if (f.extent(k + 1) != warped.extent(k)) throw InvalidArgument("greedyForce: the force is not on the image grid");
  parallelForVoxels("kortex::greedy::force", exec, int(warped.extent(0)), int(warped.extent(1)),
                    int(warped.extent(2)), ForceFunctor<Mem>{warped, fixed, f});
}

template <class Exec>
void greedyCompose(Exec const& exec, ConstField<typename Exec::memory_space> u,
                   ConstField<typename Exec::memory_space> v, float eps, Field<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  requireField3(u, "greedyCompose");
  for (int k = 0; k < 4; ++k)
    if (u.extent(k) != v.extent(k) || u.extent(k) != out.extent(k))
      throw InvalidArgument("greedyCompose: fields of different extents");
  if (spansOverlap(out, u) || spansOverlap(out, v)) throw InvalidArgument("greedyCompose: the output overlaps an input");
  parallelForVoxels("kortex::greedy::compose", exec, int(u.extent(1)), int(u.extent(2)), int(u.extent(3)),
                    ComposeFunctor<Mem>{u, v, out, eps});
}

template <class Exec>
double fieldMaxNorm(Exec const& exec, ConstField<typename Exec::memory_space> v) {
  requireField3(v, "fieldMaxNorm");
  const long n = long(v.extent(1)) * long(v.extent(2)) * long(v.extent(3));
  const float* p = v.data();
  float m2 = 0.0f;
  Kokkos::parallel_reduce(
      "kortex::greedy::max_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>(exec, 0, n),
      KOKKOS_LAMBDA(long i, float& m) {
        const float a = p[i], b = p[n + i], c = p[2 * n + i];
        const float s = a * a + b * b + c * c;
        if (s > m) m = s;
      },
      Kokkos::Max<float>(m2));
  return std::sqrt(double(m2));
}

template <class Exec>
float minJacobian(Exec const& exec, ConstField<typename Exec::memory_space> u) {
  using Mem = typename Exec::memory_space;
  requireField3(u, "minJacobian");
  const int nz = int(u.extent(1)), ny = int(u.extent(2)), nx = int(u.extent(3));
  float m = 0.0f;
  Kokkos::parallel_reduce("kortex::greedy::min_jacobian",
                          Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, nz * ny * nx),
                          MinJacobianFunctor<Mem>{u, ny, nx, nz}, m);
  return m;
}

template <class Exec>
double imageRmse(Exec const& exec, ConstImageView<typename Exec::memory_space> a,
                 ConstImageView<typename Exec::memory_space> b) {
  requireSameGrid(a, b, "imageRmse", "images");
  const long n = long(a.size());
  const float* pa = a.data();
  const float* pb = b.data();
  double s = 0.0;
  Kokkos::parallel_reduce(
      "kortex::greedy::rmse", Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>(exec, 0, n),
      KOKKOS_LAMBDA(long i, double& acc) {
        const double d = double(pa[i]) - double(pb[i]);
        acc += d * d;
      },
      s);
  return std::sqrt(s / double(n));
}

template <class Exec>
void downsampleImage(Exec const& exec, ConstImageView<typename Exec::memory_space> in, int factor,
                     ImageView<typename Exec::memory_space> blurred, ImageView<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  if (factor < 1 || in.extent(0) % factor || in.extent(1) % factor || in.extent(2) % factor)
    throw InvalidArgument("downsampleImage: factor " + std::to_string(factor) + " does not divide the extents");
  for (int k = 0; k < 3; ++k)
    if (out.extent(k) != in.extent(k) / std::size_t(factor))
      throw InvalidArgument("downsampleImage: the output extents are not the input's / factor");
  if (factor == 1) {
    Kokkos::deep_copy(exec, out, in);
    return;
  }
  requireSameGrid(in, blurred, "downsampleImage", "the input and the blur workspace are");
  gaussianBlur(exec, in, blurred, GaussianParams{double(scaleSigma(factor)), GaussianVariant::Recursive});
  parallelForVoxels("kortex::greedy::downsample", exec, int(out.extent(0)), int(out.extent(1)), int(out.extent(2)),
                    DownsampleFunctor<Mem>{blurred, out, float(factor), 0.5f * float(factor - 1)});
}

template <class Exec>
void upsampleField(Exec const& exec, ConstField<typename Exec::memory_space> in, int from, int to,
                   Field<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  requireField3(in, "upsampleField");
  requireField3(out, "upsampleField");
  const float a = float(to) / float(from), b = (0.5f * float(to - 1) - 0.5f * float(from - 1)) / float(from);
  parallelForVoxels("kortex::greedy::upsample", exec, int(out.extent(1)), int(out.extent(2)), int(out.extent(3)),
                    UpsampleFunctor<Mem>{in, out, a, b, float(from) / float(to)});
}

template <class Exec>
GreedyStepSums greedyStep(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                          ConstImageView<typename Exec::memory_space> fixed, ConstField<typename Exec::memory_space> u,
                          ConstField<typename Exec::memory_space> v, float eps, Field<typename Exec::memory_space> uOut,
                          Field<typename Exec::memory_space> force, GreedyStepVariant variant, int chunkZ) {
  using Mem = typename Exec::memory_space;
  requireSameGrid(moving, fixed, "greedyStep", "the moving and fixed images are");
  if (chunkZ < 0) throw InvalidArgument("greedyStep: slices per team must be >= 0 (0: the registration's choice)");
  for (auto const* f : {&u, &v}) requireField3(*f, "greedyStep");
  requireField3(uOut, "greedyStep");
  requireField3(force, "greedyStep");
  for (int k = 0; k < 3; ++k)
    if (u.extent(k + 1) != moving.extent(k) || v.extent(k + 1) != moving.extent(k) || uOut.extent(k + 1) != moving.extent(k) ||
        force.extent(k + 1) != moving.extent(k))
      throw InvalidArgument("greedyStep: the fields are not on the image grid");
  if (spansOverlap(uOut, u) || spansOverlap(uOut, v) || spansOverlap(force, u) || spansOverlap(force, v) ||
      spansOverlap(force, uOut))
    throw InvalidArgument("greedyStep: an output overlaps an input or the other output");
  // eps = delta / sqrt(vmax2) with vmax2 = 1.
  Kokkos::View<float, Mem> one("kortex::greedy::one");
  Kokkos::deep_copy(exec, one, 1.0f);
  const int nz = int(u.extent(1)), ny = int(u.extent(2)), nx = int(u.extent(3));
  CheckSums cs{0.0, 0.0f, 0.0f};
  if (variant == GreedyStepVariant::Naive) {
    ImageView<Mem> w("kortex::greedy::step_W", nz, ny, nx);
    parallelForVoxels("kortex::greedy::compose", exec, nz, ny, nx, ComposeScaledFunctor<Mem>{u, v, uOut, one, eps});
    Kokkos::parallel_reduce("kortex::greedy::check", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, nz * ny * nx),
                            CheckFunctor<Mem>{{uOut, one, nz, ny, nx}, moving, fixed, w}, cs);
    greedyForce(exec, w, fixed, force);
    exec.fence();
  } else {
    cs = greedy_detail::stepTiled(exec, moving, fixed, u, v, one, eps, uOut, force, {chunkZ, 0});
  }
  return GreedyStepSums{cs.sse, cs.minJ};
}

// ---- the stepper (gpu/greedy/GreedyStepper.hpp) -------------------------------------------------------

std::int64_t greedyStepperBytes(GridExtents e, GreedyParams const& params, bool imageUse) {
  const std::int64_t voxels = e.voxels(), field = 3 * voxels * std::int64_t(sizeof(float));
  std::int64_t bytes = 2 * field + std::int64_t(sizeof(float));  // f, candidate, vmax2
  if (params.metric == GreedyMetric::Lncc)  // lncc_terms: the workspace of lnccVariantsFor's variants
    bytes += lnccWorkspaceComponents(lnccVariantsFor<Kokkos::DefaultExecutionSpace>(params.lnccRadius)) * voxels *
             std::int64_t(sizeof(double));
  if (params.metric == GreedyMetric::Mi) bytes += miWorkspaceBytes(params.miBins);
  if (imageUse) {
    const bool fused = params.stepVariant == GreedyStepVariant::ScratchTiled && params.metric == GreedyMetric::Ssd;
    bytes += fused ? field : voxels * std::int64_t(sizeof(float));  // f_candidate or W_candidate
  }
  return bytes + fluidSolverBytes(e.nz, e.ny, e.nx, params.solver, params.sorVariant, params.matvecVariant, params.fluid.beta);
}


template <class Exec>
GreedyStepper<Exec>::GreedyStepper(Exec const& exec, GridExtents e, GreedyParams const& params, Use use)
    : exec_(exec), params_(params),
      fusedForce_(params.stepVariant == GreedyStepVariant::ScratchTiled && params.metric == GreedyMetric::Ssd),
      nz_(e.nz), ny_(e.ny), nx_(e.nx), solver_(exec, e.nz, e.ny, e.nx, params.fluid),
      f_("kortex::greedy::f", 3, e.nz, e.ny, e.nx), cand_("kortex::greedy::candidate", 3, e.nz, e.ny, e.nx) {
  if (params_.metric == GreedyMetric::Lncc) {
    lnccVariants_ = lnccVariantsFor<Exec>(params_.lnccRadius);
    lnccTerms_ = LnccTerms<memory_space>("kortex::greedy::lncc_terms", lnccWorkspaceComponents(lnccVariants_), e.nz, e.ny, e.nx);
  }
  if (params_.metric == GreedyMetric::Mi) mi_ = miWorkspace(exec, params_.miBins);
  vmax2_ = Kokkos::View<float, memory_space>("kortex::greedy::vmax2");
  if (use != Use::Image) return;
  if (!fusedForce_)
    wc_ = ImageView<memory_space>("kortex::greedy::W_candidate", e.nz, e.ny, e.nx);
  else
    fc_ = Field<memory_space>("kortex::greedy::f_candidate", 3, e.nz, e.ny, e.nx);
}

template <class Exec>
void GreedyStepper<Exec>::computeForce(ConstImageView<memory_space> W, ConstImageView<memory_space> target) {
  if (params_.metric == GreedyMetric::Lncc)
    lnccForce(exec_, W, target, params_.lnccRadius, lnccTerms_, f_, lnccVariants_, nullptr, 0);
  else if (params_.metric == GreedyMetric::Mi)
    miForce(exec_, W, target, mi_, f_);
  else
    greedyForce(exec_, W, target, f_);
}

template <class Exec>
FluidSolveReport GreedyStepper<Exec>::solve(Field<memory_space> v, bool firstOfScale, bool coldStart) {
  const bool residual = params_.recordResidual;
  FluidSolveReport r;
  switch (greedySolveKind(params_.solver, firstOfScale)) {
    case GreedySolveKind::Spectral: solver_.spectral(f_, v); break;
    case GreedySolveKind::SorCold:
      if (coldStart) Kokkos::deep_copy(exec_, v, 0.0f);
      r = solver_.sor(f_, v, params_.coldSweeps, params_.sorVariant, residual);
      break;
    case GreedySolveKind::SorWarm: r = solver_.sor(f_, v, params_.warmSweeps, params_.sorVariant, residual); break;
    case GreedySolveKind::Cg: r = solver_.cg(f_, v, params_.cgMaxIterations, params_.cgTolerance, params_.matvecVariant); break;
  }
  if (residual && r.residual < 0.0) r.residual = solver_.residual(f_, v);
  return r;
}

template <class Exec>
void GreedyStepper<Exec>::maxNorm2(ConstField<memory_space> v) {
  const int n = nz_ * ny_ * nx_;
  Kokkos::parallel_reduce("kortex::greedy::max_norm2", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec_, 0, n),
                          MaxNorm2Functor<memory_space>{v.data(), n}, vmax2_);
}

template <class Exec>
void GreedyStepper<Exec>::composeScaled(ConstField<memory_space> u, ConstField<memory_space> v, float delta) {
  parallelForVoxels("kortex::greedy::compose", exec_, nz_, ny_, nx_, ComposeScaledFunctor<memory_space>{u, v, cand_, vmax2_, delta});
}

template <class Exec>
template <class Sums>
void GreedyStepper<Exec>::trialImage(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                                     ConstField<memory_space> u, ConstField<memory_space> v, float delta, Sums&& sums) {
  if (fusedForce_) {
    greedy_detail::stepTiledInto(exec_, moving, fixed, u, v, vmax2_, delta, cand_, fc_, sums);
    return;
  }
  const int n = nz_ * ny_ * nx_;  // < 2^31 (parallelForVoxels checks the same grids)
  composeScaled(u, v, delta);
  Kokkos::parallel_reduce("kortex::greedy::check", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec_, 0, n),
                          CheckFunctor<memory_space>{{cand_, vmax2_, nz_, ny_, nx_}, moving, fixed, wc_}, sums);
}

template <class Exec>
void GreedyStepper<Exec>::keepImageCandidate(Field<memory_space>& u, ImageView<memory_space>& W) {
  std::swap(u, cand_);
  if (fusedForce_)
    std::swap(f_, fc_);
  else
    std::swap(W, wc_);
}

template <class Exec>
GreedyStepOutcome GreedyStepper<Exec>::stepImage(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                                                 Field<memory_space>& u, ConstField<memory_space> v,
                                                 ImageView<memory_space>& W) {
  // max |v| stays on the device (the composition reads it); each candidate is composed, then
  // warped, scored and checked for folds in one pass, the only read-back.
  maxNorm2(v);
  GreedyStepOutcome out = greedyStepWithFoldRefusal(params_, [&](float delta, GreedyStepOutcome& o) {
    CheckSums cs{0.0, 0.0f, 0.0f};
    trialImage(moving, fixed, u, v, delta, cs);
    const GreedyTrial t = greedyTrialOf(cs);
    if (t == GreedyTrial::Accepted) {
      o.minJacobian = cs.minJ;
      o.sse = cs.sse;
    }
    return t;
  });
  if (out.accepted) keepImageCandidate(u, W);
  return out;
}

template <class Exec>
void GreedyStepper<Exec>::stepImageUnchecked(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                                             Field<memory_space>& u, ConstField<memory_space> v,
                                             ImageView<memory_space>& W, Kokkos::View<GreedyTrialSums, memory_space> sums) {
  maxNorm2(v);
  trialImage(moving, fixed, u, v, params_.maxStep, sums);
  keepImageCandidate(u, W);
}

template <class Exec>
GreedyStepOutcome GreedyStepper<Exec>::stepField(Field<memory_space>& u, ConstField<memory_space> v) {
  // As stepImage: max |v| stays on the device, one read-back per candidate (its fold check).
  const int n = nz_ * ny_ * nx_;
  maxNorm2(v);
  GreedyStepOutcome out = greedyStepWithFoldRefusal(params_, [&](float delta, GreedyStepOutcome&) {
    composeScaled(u, v, delta);
    CheckSums cs{0.0, 0.0f, 0.0f};
    Kokkos::parallel_reduce("kortex::greedy::fold_check", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec_, 0, n),
                            FoldCheckFunctor<memory_space>{cand_, vmax2_, nz_, ny_, nx_}, cs);
    return greedyTrialOf(cs);
  });
  if (out.accepted) std::swap(u, cand_);
  return out;
}

template <class Exec>
Field<typename Exec::memory_space> GreedyStepper<Exec>::composeCandidate(ConstField<memory_space> u, ConstField<memory_space> w) {
  greedyCompose(exec_, u, w, 1.0f, cand_);
  return cand_;
}

// ---- the registration -----------------------------------------------------------------------------

// A scale grid's moving-image state (I0 = the subject's I), fixed image and GreedyStepper.
template <class Exec>
struct GreedyRegistration<Exec>::Scale {
  int factor;
  SubjectScale<memory_space> m;
  ImageView<memory_space> I1;
  ImageView<memory_space> mask;        // the fixed force mask at this scale (allocated when a run is given one)
  ImageView<memory_space> movingMask;  // the moving mask at this scale (likewise)
  SubjectScale<memory_space> f;        // symmetric mode: the fixed image's state (I0 = I1's copy)
  Field<memory_space> keptM, keptF;    // symmetric mode, the last scale's replay: both u's before the iteration
  Field<memory_space> preimage;        // symmetric mode, the last scale: h_f^-1 of the map (midpointMap)
  Field<memory_space> heldU, heldV, heldF;  // speculative blocks: the state at the block's start
  ImageView<memory_space> heldW;
  Recording recording;                        // recorded blocks: this scale's, and what it was made with
  std::vector<FluidSolveReport> recordedSolves;
  GreedyStepper<Exec> stepper;
  Scale(Exec const& exec, int fct, GridExtents e, GreedyParams const& p)
      : factor(fct),
        m(allocateSubjectScale<memory_space>(
            e, {"kortex::greedy::I0", "kortex::greedy::W", "kortex::greedy::u", "kortex::greedy::v"})),
        I1("kortex::greedy::I1", e.nz, e.ny, e.nx), stepper(exec, e, stepperParams(p), GreedyStepper<Exec>::Use::Image) {
    if (p.symmetric)
      f = allocateSubjectScale<memory_space>(
          e, {"kortex::greedy::fixed_I0", "kortex::greedy::fixed_W", "kortex::greedy::fixed_u", "kortex::greedy::fixed_v"});
  }
  // The symmetric mode steps each side by half the step (core/Greedy.hpp) and needs both W's after
  // every step: the Naive sequence.
  static GreedyParams stepperParams(GreedyParams p) {
    if (!p.symmetric) return p;
    p = symmetricSideParams(p);
    p.stepVariant = GreedyStepVariant::Naive;
    return p;
  }
};

template <class Exec>
GreedyRegistration<Exec>::GreedyRegistration(Exec const& exec, Geometry const& grid, GreedyParams const& params,
                                             int speculation)
    : exec_(exec), grid_(grid), params_(params) {
  setSpeculation(speculation);
  // Only what the workspace depends on: every scale grid exists (the job validates the rest once).
  if (params_.scales.empty() || params_.scales.size() != params_.iterations.size())
    throw InvalidArgument("greedy registration: one iteration count per scale is needed");
  for (int f : params_.scales)
    if (const std::string why = scaleMisfit(grid, f); !why.empty())
      throw InvalidArgument("greedy registration: " + why + " of " + describe(grid));
  for (int f : params_.scales) scales_.push_back(std::make_unique<Scale>(exec_, f, scaledExtents(grid, f), params_));
  if (params_.scales.front() > 1)
    blurred_ = ImageView<memory_space>("kortex::greedy::blurred", grid.nz(), grid.ny(), grid.nx());
}

template <class Exec>
GreedyRegistration<Exec>::~GreedyRegistration() = default;

template <class Exec>
void GreedyRegistration<Exec>::setSpeculation(int speculation) {
  speculativeBlock_ = speculation < 0 ? 0 : speculation;
  if (speculativeBlock_ > 1 && int(trialSums_.extent(0)) < speculativeBlock_) {
    trialSums_ = Kokkos::View<GreedyTrialSums*, memory_space>("kortex::greedy::trial_sums", speculativeBlock_);
    trialSumsHost_ = Kokkos::create_mirror_view(trialSums_);
  }
}

template <class Exec>
bool GreedyRegistration<Exec>::recordable(int it, int n) const {
  return record_ && Recording::supported<Exec>() && !recordingFailed_ && it > 1 && n == speculativeBlock_ && n % 2 == 0 &&
         greedySolveKind(params_.solver, false) != GreedySolveKind::Cg && !params_.recordResidual &&
         params_.metric != GreedyMetric::Mi;
}

template <class Exec>
template <class ForceSolve, class Record>
bool GreedyRegistration<Exec>::speculate(Scale& S, int it, int n, ForceSolve&& forceAndSolve, Record&& record) {
  kx::ScopedRegion region("kortex::greedy::speculative_block");
  // The state iteration `it` starts from: u, W, v (a warm solver's start) and a force left by the
  // step before (ScratchTiled with SSD).
  const bool heldForce = S.stepper.forceFromStep() && it > 1;
  // The copies are allocated here, never while a block is recorded.
  auto allocate = [&](auto& held, auto const& live, const char* label) {
    using View = std::remove_reference_t<decltype(held)>;
    if (held.data() == nullptr) held = View(Kokkos::view_alloc(exec_, Kokkos::WithoutInitializing, std::string(label)), live.layout());
  };
  allocate(S.heldU, S.m.u, "kortex::greedy::held_u");
  allocate(S.heldW, S.m.W, "kortex::greedy::held_W");
  allocate(S.heldV, S.m.v, "kortex::greedy::held_v");
  if (S.stepper.forceFromStep()) allocate(S.heldF, S.stepper.force(), "kortex::greedy::held_force");
  std::vector<FluidSolveReport> solves(std::size_t(n), FluidSolveReport{});
  auto enqueue = [&] {
    Kokkos::deep_copy(exec_, S.heldU, S.m.u);
    Kokkos::deep_copy(exec_, S.heldW, S.m.W);
    Kokkos::deep_copy(exec_, S.heldV, S.m.v);
    if (heldForce) Kokkos::deep_copy(exec_, S.heldF, S.stepper.force());
    for (int k = 0; k < n; ++k) {
      solves[std::size_t(k)] = forceAndSolve(it + k);
      S.stepper.stepImageUnchecked(S.m.I, S.I1, S.m.u, S.m.v, S.m.W, Kokkos::subview(trialSums_, k));
    }
  };
  if (!recordable(it, n)) {
    enqueue();
  } else if (S.recording.recorded()) {
    S.recording.launch(exec_);  // the buffers are where the recording left them: n is even
    ++recordedBlocks_;
    solves = S.recordedSolves;
  } else {
    const auto buffers = S.stepper.buffers();
    const Field<memory_space> u = S.m.u;
    const ImageView<memory_space> W = S.m.W;
    if (S.recording.record(exec_, enqueue)) {
      S.recordedSolves = solves;
      S.recording.launch(exec_);
      ++recordedBlocks_;
    } else {  // nothing ran: the buffers back in their places, the block enqueued as it comes
      S.stepper.setBuffers(buffers);
      S.m.u = u;
      S.m.W = W;
      recordingFailed_ = true;  // the back end cannot record this work: not tried again
      enqueue();
    }
  }
  Kokkos::deep_copy(exec_, trialSumsHost_, trialSums_);
  exec_.fence();
  for (int k = 0; k < n; ++k)
    if (greedyTrialOf(trialSumsHost_(k)) != GreedyTrial::Accepted) {
      // The replay one step at a time may leave the exchanged buffers elsewhere than the recording has
      // them: the next block records again.
      S.recording.reset();
      Kokkos::deep_copy(exec_, S.m.u, S.heldU);
      Kokkos::deep_copy(exec_, S.m.W, S.heldW);
      Kokkos::deep_copy(exec_, S.m.v, S.heldV);
      if (heldForce) Kokkos::deep_copy(exec_, S.stepper.force(), S.heldF);
      return false;
    }
  for (int k = 0; k < n; ++k) {
    GreedyStepOutcome step;
    step.accepted = true;
    step.step = params_.maxStep;
    step.minJacobian = trialSumsHost_(k).minJ;
    step.sse = trialSumsHost_(k).sse;
    record(it + k, step, solves[std::size_t(k)], false);
  }
  return true;
}

// A scale's images and fields: the images down-sampled, u and v carried from the previous scale
// (zero on the first), W warped; in the symmetric mode the fixed side's too.
template <class Exec>
void GreedyRegistration<Exec>::enterScale(Scale& S, Scale const* prev, ConstImageView<memory_space> moving,
                                          ConstImageView<memory_space> fixed) {
  downsampleImage(exec_, moving, S.factor, blurred_, S.m.I);
  downsampleImage(exec_, fixed, S.factor, blurred_, S.I1);
  auto enterSide = [&](SubjectScale<memory_space> const* before, SubjectScale<memory_space>& side) {
    if (before)
      carryFields(exec_, *before, prev->factor, S.factor, side);
    else
      zeroFields(exec_, side);
    warp(exec_, side.I, side.u, side.W);
  };
  enterSide(prev ? &prev->m : nullptr, S.m);
  if (params_.symmetric) {
    Kokkos::deep_copy(exec_, S.f.I, S.I1);
    enterSide(prev ? &prev->f : nullptr, S.f);
  }
}

namespace {

// out(z, y, x) = min over the factor^3 block of `mask` (0 / 1), clipped to its extents.
template <class Mem>
struct MaskScaleFunctor {
  ConstImageView<Mem> mask;
  ImageView<Mem> out;
  int factor, mz, my, mx;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float v = 1.0f;
    for (int k = z * factor; k < (z + 1) * factor && k < mz; ++k)
      for (int j = y * factor; j < (y + 1) * factor && j < my; ++j)
        for (int i = x * factor; i < (x + 1) * factor && i < mx; ++i) v = mask(k, j, i) != 0.0f ? v : 0.0f;
    out(z, y, x) = v;
  }
};

// f = 0 where the fixed mask is 0 or the moving mask is 0 at the nearest voxel of x - u(x) (clamped
// to the grid; ref::greedyRegister states the rule). Either mask may be empty.
template <class Mem>
struct MaskForceFunctor {
  Field<Mem> f;
  ConstImageView<Mem> fixedMask, movingMask;
  ConstField<Mem> u;
  int nz, ny, nx;
  KOKKOS_INLINE_FUNCTION static int nearest(double p, int n) {
    const double q = p + 0.5;  // floor(q) = the truncation for q >= 0; below 0 the clamp gives 0
    if (!(q >= 0.0)) return 0;
    return q >= double(n - 1) ? n - 1 : static_cast<int>(q);
  }
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    bool keep = fixedMask.data() == nullptr || fixedMask(z, y, x) != 0.0f;
    if (keep && movingMask.data() != nullptr)
      keep = movingMask(nearest(double(z) - double(u(2, z, y, x)), nz), nearest(double(y) - double(u(1, z, y, x)), ny),
                        nearest(double(x) - double(u(0, z, y, x)), nx)) != 0.0f;
    if (!keep)
      for (int c = 0; c < 3; ++c) f(c, z, y, x) = 0.0f;
  }
};

template <class Exec, class Mem = typename Exec::memory_space>
void maskAtScale(Exec const& exec, ConstImageView<Mem> mask, int factor, ImageView<Mem> out) {
  parallelForVoxels("kortex::greedy::mask_scale", exec, int(out.extent(0)), int(out.extent(1)), int(out.extent(2)),
                    MaskScaleFunctor<Mem>{mask, out, factor, int(mask.extent(0)), int(mask.extent(1)), int(mask.extent(2))});
}

template <class Exec, class Mem = typename Exec::memory_space>
void maskForce(Exec const& exec, Field<Mem> f, ConstImageView<Mem> fixedMask, ConstImageView<Mem> movingMask,
               ConstField<Mem> u) {
  const int nz = int(f.extent(1)), ny = int(f.extent(2)), nx = int(f.extent(3));
  parallelForVoxels("kortex::greedy::mask_force", exec, nz, ny, nx,
                    MaskForceFunctor<Mem>{f, fixedMask, movingMask, u, nz, ny, nx});
}

}  // namespace

namespace {

// run()'s preconditions on its inputs (InvalidArgument).
template <class Mem>
void checkRunInputs(Geometry const& grid, GreedyParams const& params, ConstImageView<Mem> moving, ConstImageView<Mem> fixed,
                    Field<Mem> uOut, ConstImageView<Mem> forceMask, ConstImageView<Mem> movingMask) {
  if (int(moving.extent(0)) != int(grid.nz()) || int(moving.extent(1)) != int(grid.ny()) ||
      int(moving.extent(2)) != int(grid.nx()))
    throw InvalidArgument("greedy registration: the moving image is not on the registration grid");
  requireSameGrid(moving, fixed, "greedy registration", "the moving and fixed images are");
  requireField3(uOut, "greedy registration");
  for (int k = 0; k < 3; ++k)
    if (uOut.extent(k + 1) != moving.extent(k))
      throw InvalidArgument("greedy registration: the displacement is not on the registration grid");
  if (params.symmetric && (forceMask.data() != nullptr || movingMask.data() != nullptr))
    throw InvalidArgument("greedy registration: the symmetric mode takes no cost-function masks");
}

// A full-grid mask at scale `factor` in `out` (allocated on the first call; empty without a mask).
template <class Exec, class Mem = typename Exec::memory_space>
ConstImageView<Mem> maskOfScale(Exec const& exec, ConstImageView<Mem> full, int factor, ImageView<Mem>& out,
                                const char* label) {
  if (full.data() == nullptr) return ConstImageView<Mem>();
  if (out.data() == nullptr)
    out = ImageView<Mem>(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label)), full.extent(0) / factor,
                         full.extent(1) / factor, full.extent(2) / factor);
  maskAtScale(exec, full, factor, out);
  return ConstImageView<Mem>(out);
}

// One iteration's record (into result and progress) and the scale's state after it (sr); false where
// the scale stops.
bool recordIteration(GreedyResult& result, GreedyScaleResult& sr, int scale, int it, GreedyStepOutcome const& step,
                     FluidSolveReport const& solve, bool mapFolded, double voxels, double seconds,
                     GreedyProgress const& progress) {
  GreedyIteration rec;
  rec.scale = scale;
  rec.factor = sr.factor;
  rec.iteration = it;
  rec.solve = solve;
  sr.iterations = it;
  rec.refused = step.refused;
  if (step.accepted) {
    rec.minJacobian = step.minJacobian;
    rec.step = step.step;
    sr.rmseEnd = std::sqrt(step.sse / voxels);
  }
  if (step.zeroVelocity) sr.stop = GreedyStop::ZeroVelocity;
  if (!step.zeroVelocity && !step.accepted) sr.stop = mapFolded ? GreedyStop::MapFolded : GreedyStop::Folded;
  result.refused += step.refused;  // 0 with zero velocity: no candidate was tried
  rec.rmse = sr.rmseEnd;
  rec.seconds = seconds;
  result.history.push_back(rec);
  ++result.iterations;
  if (progress) progress(rec);
  return step.accepted;
}

}  // namespace

template <class Exec>
GreedyResult GreedyRegistration<Exec>::run(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                                           Field<memory_space> uOut, GreedyProgress const& progress,
                                           ConstImageView<memory_space> forceMask,
                                           ConstImageView<memory_space> movingMask) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  checkRunInputs(grid_, params_, moving, fixed, uOut, forceMask, movingMask);

  GreedyResult result;
  recordedBlocks_ = 0;
  Scale* prev = nullptr;
  // One scale from the previous one's state; `checkMap`: the symmetric mode's map checked after
  // every accepted iteration (core/Greedy.hpp "Symmetric mode").
  auto runScale = [&](std::size_t s, bool checkMap) {
    kx::ScopedRegion region("kortex::greedy::scale");
    Scale& S = *scales_[s];
    const double scaleStart = elapsed();
    enterScale(S, prev, moving, fixed);
    // A recording lives one scale of one run: a graph holds the addresses of Kokkos's reduction
    // scratch, which later work on the instance (a finer scale, the next pair) may reallocate.
    S.recording.reset();
    const ConstImageView<memory_space> fixedMaskS = maskOfScale(exec_, forceMask, S.factor, S.mask, "kortex::greedy::mask");
    const ConstImageView<memory_space> movingMaskS =
        maskOfScale(exec_, movingMask, S.factor, S.movingMask, "kortex::greedy::moving_mask");
    const bool masked = forceMask.data() != nullptr || movingMask.data() != nullptr;
    GreedyScaleResult sr;
    sr.factor = S.factor;
    sr.rmseStart = imageRmse(exec_, S.m.W, params_.symmetric ? S.f.W : S.I1);
    sr.rmseEnd = sr.rmseStart;
    auto finishScale = [&] {
      sr.seconds = elapsed() - scaleStart;
      result.scales.push_back(sr);
      prev = &S;
    };
    const double voxels = double(S.I1.size());
    // Steps 1-2 of a (non-symmetric) iteration: the force and the solve.
    auto forceAndSolve = [&](int it) {
      if (!S.stepper.forceFromStep() || it == 1) S.stepper.computeForce(S.m.W, S.I1);
      if (masked) maskForce(exec_, S.stepper.force(), fixedMaskS, movingMaskS, ConstField<memory_space>(S.m.u));
      return S.stepper.solve(S.m.v, it == 1, false);  // v is zero on the first scale already
    };
    // One iteration's record and the scale's state after it; false where the scale stops.
    auto record = [&](int it, GreedyStepOutcome const& step, FluidSolveReport const& solve, bool mapFolded) {
      return recordIteration(result, sr, int(s), it, step, solve, mapFolded, voxels, elapsed(), progress);
    };
    const int iterations = params_.iterations[s];
    for (int it = 1; it <= iterations;) {
      kx::ScopedRegion stepRegion("kortex::greedy::step");
      const int block = speculativeBlock_ > 0 && !params_.symmetric ? std::min(speculativeBlock_, iterations - it + 1) : 0;
      if (block > 1 && speculate(S, it, block, forceAndSolve, record)) {
        it += block;
        continue;
      }
      // One iteration with its read-back: a block of one, or one whose speculation was not kept, replayed.
      for (const int end = it + std::max(block, 1); it < end; ++it) {
        GreedyStepOutcome step;
        FluidSolveReport solve;
        bool mapFolded = false;
        if (params_.symmetric) {
          step = checkMap ? checkedSymmetricIteration(S, it, solve, uOut, mapFolded) : symmetricIteration(S, it, solve);
        } else {
          solve = forceAndSolve(it);
          step = S.stepper.stepImage(S.m.I, S.I1, S.m.u, S.m.v, S.m.W);
        }
        if (!record(it, step, solve, mapFolded)) return finishScale();
      }
    }
    finishScale();
  };
  Scale* beforeLast = nullptr;  // the last scale's starting point
  for (std::size_t s = 0; s < scales_.size(); ++s) {
    beforeLast = prev;
    runScale(s, false);
  }
  if (params_.symmetric) {
    result.midpointInverse = midpointMap(*prev, uOut);
    result.minJacobian = minJacobian(exec_, uOut);
    if (result.minJacobian <= 0.0f) {  // the last scale again, its map checked
      dropLastScale(result);
      prev = beforeLast;
      runScale(scales_.size() - 1, true);
      result.midpointInverse = midpointMap(*prev, uOut);
      result.minJacobian = minJacobian(exec_, uOut);
    }
  } else {
    Kokkos::deep_copy(exec_, uOut, prev->m.u);
    result.minJacobian = minJacobian(exec_, uOut);
  }
  result.recordedBlocks = recordedBlocks_;
  result.seconds = elapsed();
  return result;
}

namespace {

// uOut(x) = x - p + u_m(p), p = preimage(x) (core/Greedy.hpp "Symmetric mode"; u_m trilinear with the
// clamp rule of core/Inverse.hpp's sampler).
template <class Mem>
struct MidpointMapFunctor {
  ConstField<Mem> uMoving, preimage;
  Field<Mem> uOut;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const double p[3] = {double(preimage(0, z, y, x)), double(preimage(1, z, y, x)), double(preimage(2, z, y, x))};
    const double q[3] = {double(x), double(y), double(z)};
    double val[3], jac[3][3];
    inverseSampleField(uMoving, p, val, jac);
    for (int a = 0; a < 3; ++a) uOut(a, z, y, x) = static_cast<float>(q[a] - p[a] + val[a]);
  }
};

}  // namespace

// One symmetric iteration: both forces and solves from the same state, then each side's step (the
// fixed side's SSE is then between the two new W's).
template <class Exec>
GreedyStepOutcome GreedyRegistration<Exec>::symmetricIteration(Scale& S, int it, FluidSolveReport& solve) {
  S.stepper.computeForce(S.m.W, S.f.W);
  solve = S.stepper.solve(S.m.v, it == 1, false);  // v is zero on the first scale already
  S.stepper.computeForce(S.f.W, S.m.W);
  S.stepper.solve(S.f.v, it == 1, false);
  const GreedyStepOutcome sm = S.stepper.stepImage(S.m.I, S.f.W, S.m.u, S.m.v, S.m.W);
  const GreedyStepOutcome sf = S.stepper.stepImage(S.f.I, S.m.W, S.f.u, S.f.v, S.f.W);
  return symmetricOutcome(sm, sf);
}

// symmetricIteration, then the map of the two sides into `map`: where it folds, both sides go back to
// before the iteration, which is not accepted (`mapFolded`; the last scale's replay).
template <class Exec>
GreedyStepOutcome GreedyRegistration<Exec>::checkedSymmetricIteration(Scale& S, int it, FluidSolveReport& solve,
                                                                      Field<memory_space> map, bool& mapFolded) {
  auto keep = [&](Field<memory_space>& held, const char* label) {
    if (held.data() == nullptr)
      held = Field<memory_space>(Kokkos::view_alloc(exec_, Kokkos::WithoutInitializing, std::string(label)), 3,
                                 S.m.u.extent(1), S.m.u.extent(2), S.m.u.extent(3));
  };
  keep(S.keptM, "kortex::greedy::kept_u");
  keep(S.keptF, "kortex::greedy::fixed_kept_u");
  Kokkos::deep_copy(exec_, S.keptM, S.m.u);
  Kokkos::deep_copy(exec_, S.keptF, S.f.u);
  GreedyStepOutcome step = symmetricIteration(S, it, solve);
  mapFolded = false;
  if (!step.accepted) return step;
  midpointMap(S, map);
  if (minJacobian(exec_, ConstField<memory_space>(map)) > 0.0f) return step;
  Kokkos::deep_copy(exec_, S.m.u, S.keptM);
  Kokkos::deep_copy(exec_, S.f.u, S.keptF);
  step.accepted = false;
  mapFolded = true;
  return step;
}

// The symmetric mode's map from the last scale's two sides: p = h_f^-1(x), u(x) = x - p + u_m(p).
template <class Exec>
InverseStats GreedyRegistration<Exec>::midpointMap(Scale& S, Field<memory_space> uOut) {
  kx::ScopedRegion region("kortex::greedy::midpoint_map");
  const int nz = int(uOut.extent(1)), ny = int(uOut.extent(2)), nx = int(uOut.extent(3));
  if (S.preimage.data() == nullptr)  // kept: the last scale's replay forms the map every iteration
    S.preimage = Field<memory_space>(
        Kokkos::view_alloc(exec_, Kokkos::WithoutInitializing, std::string("kortex::greedy::midpoint_preimage")), 3, nz, ny, nx);
  const InverseStats stats =
      invertMap(exec_, ConstField<memory_space>(S.f.u), AffineTransform{}, S.preimage, midpointInverseParams());
  parallelForVoxels("kortex::greedy::midpoint_map", exec_, nz, ny, nx,
                    MidpointMapFunctor<memory_space>{ConstField<memory_space>(S.m.u), ConstField<memory_space>(S.preimage), uOut});
  return stats;
}

std::int64_t greedyRegistrationBytes(Geometry const& grid, GreedyParams const& params, int speculation) {
  const std::int64_t f = sizeof(float);
  std::int64_t bytes = f * 6 * grid.numVoxels();  // moving, fixed, u (3) and the blurred workspace
  if (params.symmetric) bytes += f * 9 * grid.numVoxels();  // the midpoint map's preimage, both u's kept (replay)
  for (int factor : params.scales) {
    const GridExtents e = scaledExtents(grid, factor);
    bytes += f * (params.symmetric ? 17 : 9) * e.voxels();  // I0, W, u, v (SubjectScale) and I1; symmetric: the fixed side's too
    if (!params.symmetric && speculation > 1) bytes += f * 10 * e.voxels();  // a speculative block's held u, W, v, force
    bytes += greedyStepperBytes(e, params, true);
  }
  return bytes;
}

namespace {

// out = in extended to out's extents by the clamp rule at the high end of every axis (in's extents <=
// out's), or cropped to out's extents (>=): out(z, y, x) = in(min(z, nz - 1), ...) either way.
template <class In, class Out>
struct ExtendFunctor {
  In in;
  Out out;
  int nz, ny, nx;  // in's
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    out(z, y, x) = in(clampIndex(z, nz), clampIndex(y, ny), clampIndex(x, nx));
  }
};
template <class Exec, class Mem = typename Exec::memory_space>
void extendImage(Exec const& exec, ConstImageView<Mem> in, ImageView<Mem> out) {
  parallelForVoxels("kortex::greedy::extend", exec, int(out.extent(0)), int(out.extent(1)), int(out.extent(2)),
                    ExtendFunctor<ConstImageView<Mem>, ImageView<Mem>>{in, out, int(in.extent(0)), int(in.extent(1)),
                                                                      int(in.extent(2))});
}
template <class Exec, class Mem = typename Exec::memory_space>
void cropField(Exec const& exec, ConstField<Mem> in, Field<Mem> out) {
  for (int c = 0; c < 3; ++c) {
    auto i = Kokkos::subview(in, c, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    auto o = Kokkos::subview(out, c, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    parallelForVoxels("kortex::greedy::crop", exec, int(out.extent(1)), int(out.extent(2)), int(out.extent(3)),
                      ExtendFunctor<decltype(i), decltype(o)>{i, o, int(in.extent(1)), int(in.extent(2)), int(in.extent(3))});
  }
}

// The workspace's registration and device images for `g` (made where it holds none for this grid).
template <class Exec>
void prepareWorkspace(Exec const& exec, GreedyWorkspace<Exec>& ws, Geometry const& g, GreedyParams const& params) {
  using Mem = typename Exec::memory_space;
  if (!ws.reg || !ws.reg->grid().sameGrid(g)) {
    auto onExec = [&](std::string const& label) { return Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, label); };
    ws = GreedyWorkspace<Exec>{ws.speculation, ws.recording};
    ws.moving = ImageView<Mem>(onExec("kortex::greedy::moving"), g.nz(), g.ny(), g.nx());
    ws.fixed = ImageView<Mem>(onExec("kortex::greedy::fixed"), g.nz(), g.ny(), g.nx());
    ws.u = Field<Mem>(onExec("kortex::greedy::u_out"), 3, g.nz(), g.ny(), g.nx());
    ws.reg = std::make_unique<GreedyRegistration<Exec>>(exec, g, params, ws.speculation);
  }
  ws.reg->setSpeculation(ws.speculation);
  ws.reg->setRecording(ws.recording);
}

// The masks (host, on the registration grid `g`; optional) copied into the workspace's Views, then
// the registration of the workspace's images into ws.u.
template <class Exec, class Mem = typename Exec::memory_space>
GreedyResult runOnWorkspace(Exec const& exec, GreedyWorkspace<Exec>& ws, Geometry const& g, GreedyProgress const& progress,
                            HostImage const* forceMask, HostImage const* movingMask) {
  auto upload = [&](HostImage const* in, ImageView<Mem>& held, const char* label) {
    if (!in) return ImageView<Mem>();
    if (held.data() == nullptr)
      held = ImageView<Mem>(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label)), g.nz(), g.ny(), g.nx());
    Kokkos::deep_copy(exec, held, in->data);
    return held;
  };
  const ImageView<Mem> mask = upload(forceMask, ws.mask, "kortex::greedy::mask_in");
  const ImageView<Mem> moving = upload(movingMask, ws.movingMask, "kortex::greedy::moving_mask_in");
  return ws.reg->run(ws.moving, ws.fixed, ws.u, progress, mask, moving);
}

}  // namespace

template <class Exec>
GreedyResult greedyRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                            VectorField<Kokkos::HostSpace>& u, GreedyParams const& params,
                            GreedyProgress const& progress, GreedyWorkspace<Exec>* workspace,
                            HostImage const* forceMask, HostImage const* movingMask) {
  if (moving.data.extent(0) != fixed.data.extent(0) || moving.data.extent(1) != fixed.data.extent(1) ||
      moving.data.extent(2) != fixed.data.extent(2))
    throw InvalidArgument("greedyRegister: the moving and fixed images are on different grids");
  // Every copy and allocation on exec's queue (no device-wide fence: pairs may run concurrently).
  Geometry const& g = fixed.geometry;
  GreedyWorkspace<Exec> local;
  GreedyWorkspace<Exec>& ws = workspace ? *workspace : local;
  prepareWorkspace(exec, ws, g, params);
  Kokkos::deep_copy(exec, ws.moving, moving.data);
  Kokkos::deep_copy(exec, ws.fixed, fixed.data);
  GreedyResult r = runOnWorkspace(exec, ws, g, progress, forceMask, movingMask);
  u = VectorField<Kokkos::HostSpace>("greedy displacement", g);
  Kokkos::deep_copy(exec, u.data, ws.u);
  exec.fence();
  return r;
}

template <class Exec>
GreedyResult greedyRegisterOnGrid(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                  HostImage const& fixed, Geometry const& grid,
                                  VectorField<Kokkos::HostSpace>& u, GreedyParams const& params,
                                  GreedyProgress const& progress, GreedyWorkspace<Exec>* workspace,
                                  HostImage const* forceMask, HostImage const* movingMask) {
  using Mem = typename Exec::memory_space;
  requireSameGrid(moving, fixed.data, "greedyRegisterOnGrid", "the moving and fixed images are");
  requireField3(u.data, "greedyRegisterOnGrid");
  for (int k = 0; k < 3; ++k) {
    if (u.data.extent(k + 1) != moving.extent(k))
      throw InvalidArgument("greedyRegisterOnGrid: the field is not on the images' grid");
    if (std::size_t(grid.size[2 - k]) < moving.extent(k))
      throw InvalidArgument("greedyRegisterOnGrid: the registration grid is smaller than the images'");
  }
  GreedyWorkspace<Exec> local;
  GreedyWorkspace<Exec>& ws = workspace ? *workspace : local;
  prepareWorkspace(exec, ws, grid, params);
  // Views the workspace keeps (reallocated only for other extents: a free synchronises a device).
  auto keep = [&](auto& view, const char* label, auto... n) {
    using View = std::remove_reference_t<decltype(view)>;
    const std::size_t want[] = {std::size_t(n)...};
    for (std::size_t k = 0; k < sizeof...(n); ++k)
      if (view.extent(k) != want[k]) {
        view = View(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label)), n...);
        break;
      }
  };
  keep(ws.fixedIn, "kortex::greedy::fixed_in", fixed.data.extent(0), fixed.data.extent(1), fixed.data.extent(2));
  keep(ws.uCropped, "kortex::greedy::u_cropped", 3, u.data.extent(1), u.data.extent(2), u.data.extent(3));
  Kokkos::deep_copy(exec, ws.fixedIn, fixed.data);
  extendImage(exec, moving, ws.moving);
  extendImage(exec, ConstImageView<Mem>(ws.fixedIn), ws.fixed);
  GreedyResult r = runOnWorkspace(exec, ws, grid, progress, forceMask, movingMask);
  cropField(exec, ConstField<Mem>(ws.u), ws.uCropped);
  Kokkos::deep_copy(exec, u.data, ws.uCropped);
  exec.fence();
  return r;
}

#define KORTEX_INSTANTIATE_GREEDY(SPACE)                                                                   \
  template void greedyForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                     \
                                   ConstImageView<SPACE::memory_space>, Field<SPACE::memory_space>);       \
  template void greedyCompose<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,                       \
                                     ConstField<SPACE::memory_space>, float, Field<SPACE::memory_space>);  \
  template double fieldMaxNorm<SPACE>(SPACE const&, ConstField<SPACE::memory_space>);                     \
  template float minJacobian<SPACE>(SPACE const&, ConstField<SPACE::memory_space>);                       \
  template GreedyStepSums greedyStep<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,          \
                                            ConstImageView<SPACE::memory_space>, ConstField<SPACE::memory_space>, \
                                            ConstField<SPACE::memory_space>, float, Field<SPACE::memory_space>,   \
                                            Field<SPACE::memory_space>, GreedyStepVariant, int);                 \
  template double imageRmse<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                     \
                                   ConstImageView<SPACE::memory_space>);                                   \
  template void downsampleImage<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>, int,            \
                                       ImageView<SPACE::memory_space>, ImageView<SPACE::memory_space>);    \
  template void upsampleField<SPACE>(SPACE const&, ConstField<SPACE::memory_space>, int, int,             \
                                     Field<SPACE::memory_space>);                                          \
  template class GreedyStepper<SPACE>;                                                                     \
  template class GreedyRegistration<SPACE>;                                                                \
  template GreedyResult greedyRegister<SPACE>(SPACE const&, HostImage const&, HostImage const&,           \
                                              VectorField<Kokkos::HostSpace>&, GreedyParams const&,        \
                                              GreedyProgress const&, GreedyWorkspace<SPACE>*, HostImage const*, \
                                              HostImage const*);                                                  \
  template GreedyResult greedyRegisterOnGrid<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,          \
                                                    HostImage const&, Geometry const&,                            \
                                                    VectorField<Kokkos::HostSpace>&, GreedyParams const&,        \
                                                    GreedyProgress const&, GreedyWorkspace<SPACE>*, HostImage const*, \
                                                    HostImage const*);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_GREEDY(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_GREEDY(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_GREEDY(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_GREEDY(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_GREEDY

}  // namespace kortex::gpu
