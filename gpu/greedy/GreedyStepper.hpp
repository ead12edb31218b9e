// The Kokkos greedy step (specification: core/Greedy.hpp, "One iteration"): one workspace per
// scale grid that owns the fluid solver and the step's scratch and runs
//   force -> solve (the solver rule) -> step size -> composition with fold refusal -> warp.
// GreedyRegistration (gpu/greedy/Greedy.hpp) and the atlas (gpu/atlas/Atlas.hpp) are loops over
// it; a new metric or solver is added here once, not in each of them.
//
// Two ways to take the step, both the spec's steps 3-5 with greedyStepWithFoldRefusal:
//   stepImage  - registration: every candidate is composed, warped, scored and checked in one
//                pass (GreedyParams::stepVariant: ScratchTiled, or Naive in three passes), max |v|
//                stays on the device; the accepted candidate's warped image (Naive) or next force
//                (ScratchTiled) comes with it. With the LNCC metric the step is the Naive sequence
//                whatever stepVariant says: the next force needs W (core/Greedy.hpp, "Metrics").
//   stepField  - atlas: the candidate is composed and checked for folds; the caller warps (the
//                atlas snaps its warped images onto the fixed-point grid of its sums).
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <cstdint>
#include <utility>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/greedy/Lncc.hpp"
#include "gpu/greedy/Mi.hpp"

namespace kortex::gpu {

// Bytes a GreedyStepper allocates (Kokkos Views), its fluid solver's included
// (fluidSolverBytes): the force and the candidate field, LNCC's workspace (lnccWorkspaceComponents doubles per voxel), MI's histogram,
// the step-size scalar, and for image steps (`imageUse`) the candidate's warped image (Naive step
// or LNCC) or its force (the fused ScratchTiled SSD step).
std::int64_t greedyStepperBytes(GridExtents e, GreedyParams const& params, bool imageUse);

template <class Exec>
class GreedyStepper {
 public:
  using memory_space = typename Exec::memory_space;
  // Which step the owner takes: the workspace of the other is not allocated.
  enum class Use { Image, Field };
  // Extents of the scale grid; the parameters are validated by the job (preconditions here).
  GreedyStepper(Exec const& exec, GridExtents e, GreedyParams const& params, Use use);
  GreedyStepper(GreedyStepper const&) = delete;
  GreedyStepper& operator=(GreedyStepper const&) = delete;

  // Step 1: the force of GreedyParams::metric into force(): SSD F = -(W - target) grad W, the
  // LNCC force (gpu/greedy/Lncc.hpp) or the MI force (gpu/greedy/Mi.hpp).
  void computeForce(ConstImageView<memory_space> W, ConstImageView<memory_space> target);
  // Whether stepImage left the force of the next iteration in force() (ScratchTiled with SSD) or
  // the next iteration computes it from W (Naive; LNCC, whose step hands back W; and every scale's
  // first iteration).
  bool forceFromStep() const { return fusedForce_; }
  Field<memory_space> force() const { return f_; }

  // Step 2: L v = F by the solver rule (greedySolveKind) from the v passed in; `coldStart` zeroes
  // v first (nothing came before: the first iteration of the first scale). The residual is
  // computed when GreedyParams::recordResidual.
  FluidSolveReport solve(Field<memory_space> v, bool firstOfScale, bool coldStart);

  // Steps 3-6, registration: u and W (Naive) or force() (ScratchTiled) are replaced by the
  // accepted candidate's; outcome.sse and minJacobian are the accepted candidate's.
  GreedyStepOutcome stepImage(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                              Field<memory_space>& u, ConstField<memory_space> v, ImageView<memory_space>& W);
  // stepImage's first trial (delta = maxStep) without its read-back, for GreedyRegistration's
  // speculative blocks: the candidate's sums are left in `sums` on the device and the candidate is
  // kept as if accepted (u and W, or force(), replaced). The caller judges the sums (greedyTrialOf)
  // and goes back to its own copy of the state where the trial was not accepted.
  void stepImageUnchecked(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed, Field<memory_space>& u,
                          ConstField<memory_space> v, ImageView<memory_space>& W,
                          Kokkos::View<GreedyTrialSums, memory_space> sums);
  // Steps 3-5, atlas: u is replaced by the accepted candidate (no warp, no min det recorded).
  GreedyStepOutcome stepField(Field<memory_space>& u, ConstField<memory_space> v);
  // The atlas's centring in two calls: the candidate u(x + w(x)) - w(x) (returned: the stepper's
  // buffer, valid until its next step), which the caller checks for folds (fused with its warp);
  // keepCandidate then makes it u.
  Field<memory_space> composeCandidate(ConstField<memory_space> u, ConstField<memory_space> w);
  void keepCandidate(Field<memory_space>& u) { std::swap(u, cand_); }

  FluidSolver<Exec>& solver() { return solver_; }

  // The buffers the steps exchange (the candidate's and the force's), to be put back by a caller that
  // recorded steps without running them (GreedyRegistration's recorded blocks).
  struct Buffers {
    Field<memory_space> f, cand, fc;
    ImageView<memory_space> wc;
  };
  Buffers buffers() const { return {f_, cand_, fc_, wc_}; }
  void setBuffers(Buffers const& b) {
    f_ = b.f;
    cand_ = b.cand;
    fc_ = b.fc;
    wc_ = b.wc;
  }

 private:
  // vmax2_ <- max |v|^2, left on the device (step 3's eps is formed from it by each candidate).
  void maxNorm2(ConstField<memory_space> v);
  // cand_ <- u(x + eps v) - eps v with eps = greedyEps(delta, vmax2_) (Naive and the atlas's step).
  void composeScaled(ConstField<memory_space> u, ConstField<memory_space> v, float delta);
  // The candidate of step size `delta` composed, warped (Naive, LNCC) or its force formed
  // (ScratchTiled) and checked, its sums into `sums` (a host GreedyTrialSums: fences; a device View:
  // enqueued); keepImageCandidate makes it the state.
  template <class Sums>
  void trialImage(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed, ConstField<memory_space> u,
                  ConstField<memory_space> v, float delta, Sums&& sums);
  void keepImageCandidate(Field<memory_space>& u, ImageView<memory_space>& W);

  Exec exec_;
  GreedyParams params_;
  bool fusedForce_;  // the one-pass step writes the next (SSD) force; otherwise it writes W
  int nz_, ny_, nx_;
  FluidSolver<Exec> solver_;
  Field<memory_space> f_, cand_, fc_;  // fc_: the candidate's force (ScratchTiled)
  ImageView<memory_space> wc_;         // the candidate's warped image (Naive, LNCC)
  LnccTerms<memory_space> lnccTerms_;  // LNCC: the window coefficients (4 x the grid)
  std::array<LnccVariant, 2> lnccVariants_{};  // LNCC: its passes' variants (lnccVariantsFor, chosen once)
  MiWorkspace<memory_space> mi_;               // MI: the histogram and its log ratios
  Kokkos::View<float, memory_space> vmax2_;
};

}  // namespace kortex::gpu
