// CPU reference of greedy diffeomorphic registration (specification: core/Greedy.hpp; the fluid
// solves: reference_cpu/Fluid.hpp): double arithmetic where it accumulates, OpenMP loops, written
// independently of the Kokkos code. It reuses the reference warp (reference_cpu/ImageOps.hpp) and
// Jacobian determinant (det(I - grad u)), which implement the same conventions.
#pragma once

#include <vector>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "reference_cpu/Fluid.hpp"

namespace kortex::ref {

using ConstHostImageView = ConstImageView<Kokkos::HostSpace>;

// F = -(W - I1) grad W (clamped central differences).
void greedyForce(ConstHostImageView warped, ConstHostImageView fixed, HostField f);
// The LNCC force of core/Greedy.hpp ("Metrics", window radius R, clamp rule) into f: the exact
// gradient of E = sum_x cc(x) times grad W. Returns E. Written from the spec: separable window
// sums, and their transpose as the scatter of every window sample back to the voxel it was read from.
double lnccForce(ConstHostImageView warped, ConstHostImageView fixed, int radius, HostField f);
// The LNCC reference's double buffers (window sums, coefficients, a transpose scratch): a caller that
// computes many forces keeps one and passes it (every element is written before it is read, so the
// results are those of fresh buffers; fresh 10-MB buffers per call cost page faults and zeroing).
struct LnccBuffers {
  std::vector<double> sums[5], coef[4], tmp;
};
double lnccForce(ConstHostImageView warped, ConstHostImageView fixed, int radius, HostField f, LnccBuffers& buffers);
// E = sum_x cc(x) alone.
double lnccEnergy(ConstHostImageView warped, ConstHostImageView fixed, int radius);
// Mattes MI of W against the fixed image over every voxel (core/Greedy.hpp "Metrics", Mi; `bins` bins):
// its force F = dMI/dW grad W into f, returning MI; and MI alone.
double miForce(ConstHostImageView warped, ConstHostImageView fixed, int bins, HostField f);
double miEnergy(ConstHostImageView warped, ConstHostImageView fixed, int bins);
// uOut(x) = u(x + eps v(x)) - eps v(x) (trilinear, clamp rule); uOut must not alias u or v.
void greedyCompose(ConstHostField u, ConstHostField v, float eps, HostField uOut);
// max_x |v(x)|.
double fieldMaxNorm(ConstHostField v);
// sqrt(mean (a - b)^2).
double imageRmse(ConstHostImageView a, ConstHostImageView b);

// The scale-f image of core/Greedy.hpp's multi-scale rule (blur sigma f/2, trilinear sample at
// f x + (f - 1)/2); factor 1 copies. Every extent must be divisible by the factor.
HostImage downsampleImage(HostImage const& in, int factor);
// u (or v) of the scale-`from` grid up-sampled to the scale-`to` grid (extents of `out`), rescaled.
void upsampleField(ConstHostField in, int from, int to, HostField out);

// A subject's state on one scale grid of the multi-scale rule: its scale image I, I warped by its
// displacement (W), the displacement u and the velocity v. greedyRegister holds the moving
// image's per scale, the reference atlas (reference_cpu/Atlas.hpp) one per subject; each warps W
// by its own rule.
struct SubjectScale {
  HostImage I;
  HostField u, v;
  ImageView<Kokkos::HostSpace> W;
};
struct SubjectScaleLabels {
  const char *u, *v, *W;
};
// The state at scale `factor` of the full-grid `image`: I down-sampled, u and v up-sampled from
// `prev`'s on the scale-`from` grid (from 0: zero), W allocated (not warped).
SubjectScale enterScale(HostImage const& image, int factor, SubjectScale const& prev, int from, SubjectScaleLabels const& labels);

// The CPU reference's greedy step (core/Greedy.hpp, "One iteration"): the force, candidate and
// Jacobian workspaces of one scale grid, and force -> solve (the solver rule) -> step size ->
// composition with fold refusal. greedyRegister and the reference atlas (reference_cpu/Atlas.hpp)
// are loops over it; the caller warps after the step.
class GreedyStepper {
 public:
  GreedyStepper(GreedyParams const& params, Index nz, Index ny, Index nx);
  // Step 1: the force of GreedyParams::metric (SSD: F = -(W - target) grad W; LNCC: lnccForce).
  void computeForce(ConstHostImageView W, ConstHostImageView target);
  HostField force() const { return force_; }
  // Step 2: L v = F by the solver rule from the v passed in; `coldStart` zeroes v first.
  FluidSolveReport solve(HostField const& v, bool firstOfScale, bool coldStart);
  // Steps 3-5: u is replaced by the accepted candidate; minJacobian is the accepted field's.
  GreedyStepOutcome step(HostField& u, ConstHostField v);
  // u <- u(x + w(x)) - w(x) when that has det > 0 everywhere; returns whether it was kept.
  bool composeUnfolded(HostField& u, ConstHostField w);
  // min det(I - grad u).
  float minJacobian(ConstHostField u);

 private:
  GreedyParams params_;
  HostField force_, cand_;
  ImageView<Kokkos::HostSpace> jac_;
  LnccBuffers lncc_;
  SpectralWorkspace spectral_;  // the spectral solves' FFTW buffers and plans of this grid
};

// The whole multi-scale registration. `u` receives the full-grid displacement (allocated here).
// Extents and grids only are checked (InvalidArgument); parameters and NaN/Inf are the caller's
// (pipeline/Register.hpp validates once).
// `forceMask` (optional, 0 / 1 on the fixed grid): the force is zero where it is 0 (every scale takes
// the block minimum of the finer mask: a coarse voxel counts only where all its fine voxels do).
// `movingMask` (optional, 0 / 1, on the grid of `moving`, i.e. the moving image's mask carried with
// it): the force at x is zero where this mask (at the scale, the same block minimum) is 0 at the
// nearest voxel of x - u(x), the point the current deformation samples (clamped to the grid): the
// mask follows the deformation as it grows. An all-ones mask changes nothing.
GreedyResult greedyRegister(HostImage const& moving, HostImage const& fixed, VectorField<Kokkos::HostSpace>& u,
                            GreedyParams const& params, GreedyProgress const& progress = {},
                            HostImage const* forceMask = nullptr, HostImage const* movingMask = nullptr);

}  // namespace kortex::ref
