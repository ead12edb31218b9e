// Kokkos greedy diffeomorphic registration (specification: core/Greedy.hpp; the fluid solves:
// gpu/fluid/Fluid.hpp). Every kernel is an entry point of its own, so that tests compare each with
// the CPU reference:
//   greedyForce     - F = -(W - I1) grad W (gradient and force fused in one pass);
//   greedyCompose   - u'(x) = u(x + eps v(x)) - eps v(x);
//   fieldMaxNorm    - max |v| (fences);
//   minJacobian     - min det(I - grad u) without storing it (fences);
//   imageRmse       - sqrt(mean (a - b)^2) (fences);
//   greedyStep      - one candidate: composition, warp, SSE, fold check and the next force (fences);
//   downsampleImage - the multi-scale rule's scale-f image (blur + trilinear sample);
//   upsampleField   - u or v carried from one scale to the next.
// The warp W = I0(x - u(x)) is gpu/imageops' `warp`. GreedyRegistration is a loop over the
// GreedyStepper of each scale (gpu/greedy/GreedyStepper.hpp); it
// allocates the workspace of every scale once and runs the spec's multi-scale iteration, the step of
// each candidate as GreedyParams::stepVariant says (core/Greedy.hpp: Naive three passes,
// ScratchTiled one).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"
#include "gpu/detail/Recording.hpp"
#include "gpu/fluid/Fluid.hpp"

namespace kortex::gpu {

template <class Exec>
void greedyForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, Field<typename Exec::memory_space> f);

template <class Exec>
void greedyCompose(Exec const& exec, ConstField<typename Exec::memory_space> u,
                   ConstField<typename Exec::memory_space> v, float eps, Field<typename Exec::memory_space> out);

template <class Exec>
double fieldMaxNorm(Exec const& exec, ConstField<typename Exec::memory_space> v);

template <class Exec>
float minJacobian(Exec const& exec, ConstField<typename Exec::memory_space> u);

template <class Exec>
double imageRmse(Exec const& exec, ConstImageView<typename Exec::memory_space> a,
                 ConstImageView<typename Exec::memory_space> b);

// out (extents in / factor) = the scale-`factor` image of `in`; `blurred` has the extents of `in`
// (workspace; unused for factor 1).
template <class Exec>
void downsampleImage(Exec const& exec, ConstImageView<typename Exec::memory_space> in, int factor,
                     ImageView<typename Exec::memory_space> blurred, ImageView<typename Exec::memory_space> out);

template <class Exec>
void upsampleField(Exec const& exec, ConstField<typename Exec::memory_space> in, int from, int to,
                   Field<typename Exec::memory_space> out);

// One candidate of the iteration (core/Greedy.hpp steps 4-6 and the force of the next iteration)
// with a given eps: uOut = u(x + eps v) - eps v, W = I0(x - uOut) (not stored), force = -(W - I1)
// grad W; returns sum (W - I1)^2 and min det(I - grad uOut). `variant` as in GreedyRegistration
// (Naive: three passes with a W image; ScratchTiled: one, its z chunk `chunkZ` slices per team, 0:
// the registration's choice; the schedule changes no value). Fences.
struct GreedyStepSums {
  double sse = 0.0;
  float minJacobian = 0.0f;
};
template <class Exec>
GreedyStepSums greedyStep(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                          ConstImageView<typename Exec::memory_space> fixed, ConstField<typename Exec::memory_space> u,
                          ConstField<typename Exec::memory_space> v, float eps, Field<typename Exec::memory_space> uOut,
                          Field<typename Exec::memory_space> force, GreedyStepVariant variant, int chunkZ = 0);

// Speculative blocks (GreedyRegistration, not the symmetric mode): a block of iterations is run with
// every step taken as accepted and the candidates' checks left on the device, then read back at once;
// where one was not accepted (a fold refusal, zero velocity), the state copied at the block's start is
// put back and the block run again one iteration (one read-back) at a time. The kernels and their
// inputs are those of one iteration at a time, so the results are the same bits; only the records'
// seconds (and so the progress) come per block. Off by default: on an H200 the 2-mm IXI pair's greedy
// stage took the same time with blocks of 8, 16 or 32 as with a read-back every iteration (its small
// scales are bound by the host's kernel launches, not by the read-back; docs/greedy.md "Speculative
// blocks"), and the block's copy of the state costs device memory.
// Recorded blocks (setRecording; a plan option, off by default): a block of an even number of
// iterations after a scale's first (the same kernels on the same buffers each time: the buffers the
// steps exchange come back to their places after an even number of steps) is recorded once per scale
// and run (gpu/detail/Recording.hpp: a CUDA graph) and launched again for every later such block of
// the scale, instead of enqueueing its kernels one by one. Not with a solver or metric that reads back
// every iteration (CG, residuals, MI). The same bits as enqueueing them.
template <class Exec>
class GreedyRegistration {
 public:
  using memory_space = typename Exec::memory_space;
  // `grid` is the full grid (the last scale). Throws InvalidArgument when a scale factor does not
  // divide it into extents >= kFluidMinExtent; the other parameters are preconditions (the job,
  // pipeline/Register.hpp, calls GreedyParams::validateFor once). `speculation`: iterations per
  // speculative block (above; 0 or 1: a read-back every iteration), a plan choice that changes no
  // result.
  GreedyRegistration(Exec const& exec, Geometry const& grid, GreedyParams const& params, int speculation = 0);
  ~GreedyRegistration();
  void setSpeculation(int speculation);
  int speculation() const { return speculativeBlock_; }
  // Recorded blocks (below): off by default; on back ends that cannot record, no effect.
  void setRecording(bool on) { record_ = on; }
  bool recording() const { return record_; }
  // Whether Exec records blocks (CUDA); elsewhere setRecording has no effect.
  static constexpr bool recordingSupported() { return Recording::supported<Exec>(); }
  // Registers `moving` to `fixed` (full grid, on exec's memory space); `u` (3, nz, ny, nx) receives
  // the full-grid displacement.
  // `forceMask` (optional, 0 / 1 on the full grid): the force is zero where it is 0, at every scale
  // its block minimum; `movingMask` (optional, 0 / 1 on the grid of `moving`): the force is zero
  // where it is 0 at the nearest voxel of x - u(x), following the deformation (ref::greedyRegister
  // states both rules).
  GreedyResult run(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                   Field<memory_space> u, GreedyProgress const& progress = {},
                   ConstImageView<memory_space> forceMask = {}, ConstImageView<memory_space> movingMask = {});
  GreedyParams const& params() const { return params_; }
  Geometry const& grid() const { return grid_; }

 private:
  struct Scale;  // a scale grid's images, fields and GreedyStepper
  void enterScale(Scale& S, Scale const* prev, ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed);
  // GreedyParams::symmetric (core/Greedy.hpp "Symmetric mode"): one iteration of both sides, and the
  // map of the last scale's two sides into u.
  GreedyStepOutcome symmetricIteration(Scale& S, int it, FluidSolveReport& solve);
  GreedyStepOutcome checkedSymmetricIteration(Scale& S, int it, FluidSolveReport& solve, Field<memory_space> map,
                                              bool& mapFolded);
  InverseStats midpointMap(Scale& S, Field<memory_space> u);
  // Iterations [it, it + n) of scale S as one speculative block: true when all were accepted (and
  // recorded), else S's state is back at iteration `it` and nothing is recorded.
  template <class ForceSolve, class Record>
  bool speculate(Scale& S, int it, int n, ForceSolve&& forceAndSolve, Record&& record);
  // Whether the block [it, it + n) of S may be recorded (Recorded blocks above).
  bool recordable(int it, int n) const;
  Exec exec_;
  Geometry grid_;
  GreedyParams params_;
  std::vector<std::unique_ptr<Scale>> scales_;
  ImageView<memory_space> blurred_;
  int speculativeBlock_ = 0;
  bool record_ = false, recordingFailed_ = false;
  int recordedBlocks_ = 0;  // this run's blocks launched from a recording (GreedyResult::recordedBlocks)
  Kokkos::View<GreedyTrialSums*, memory_space> trialSums_;  // a block's checks, one per iteration
  typename Kokkos::View<GreedyTrialSums*, memory_space>::HostMirror trialSumsHost_;
};

// Device bytes greedyRegister allocates for a registration on `grid` (without a force mask): the
// inputs, the output field and the blur workspace, and every scale's images, fields and stepper (and
// with speculative blocks, `speculation` > 1, their copy of the state).
std::int64_t greedyRegistrationBytes(Geometry const& grid, GreedyParams const& params, int speculation = 0);

// What greedyRegister keeps between the pairs of one worker (a cohort's): the registration with its
// scales' images, fields, steppers and FFT plans, and the device inputs and output, allocated once
// (every allocation freed is a device-wide synchronisation on CUDA).
template <class Exec>
struct GreedyWorkspace {
  int speculation = 0;     // the registration's speculative blocks (GreedyRegistration), set on every call
  bool recording = false;  // and its recorded blocks
  std::unique_ptr<GreedyRegistration<Exec>> reg;
  ImageView<typename Exec::memory_space> moving, fixed, mask, movingMask;
  Field<typename Exec::memory_space> u;
  ImageView<typename Exec::memory_space> fixedIn;  // greedyRegisterOnGrid: the fixed image on its own grid
  Field<typename Exec::memory_space> uCropped;     // greedyRegisterOnGrid: u on the images' grid
};

// Convenience: copies host images to the device, runs, copies the field back into `u` (allocated
// here on the fixed grid). With a workspace, what it holds is used where it was made for this grid
// (the caller gives one workspace the same parameters on every call), else made there; the result
// is the same either way.
template <class Exec>
GreedyResult greedyRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                            VectorField<Kokkos::HostSpace>& u, GreedyParams const& params,
                            GreedyProgress const& progress = {}, GreedyWorkspace<Exec>* workspace = nullptr,
                            HostImage const* forceMask = nullptr, HostImage const* movingMask = nullptr);

// The same with the moving image already on exec's memory space, both images on u's grid (`u`
// allocated by the caller, on the host), registered on `grid`, whose extents are >= theirs: the fixed
// image is copied to the workspace's device copy, both are extended to `grid` on the device by the
// clamp rule at the high end of every axis (the registration job's padding), and the field is cropped
// back to u's grid there before its copy to the host. The masks (optional) are on `grid`.
template <class Exec>
GreedyResult greedyRegisterOnGrid(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                  HostImage const& fixed, Geometry const& grid,
                                  VectorField<Kokkos::HostSpace>& u, GreedyParams const& params,
                                  GreedyProgress const& progress = {}, GreedyWorkspace<Exec>* workspace = nullptr,
                                  HostImage const* forceMask = nullptr, HostImage const* movingMask = nullptr);

}  // namespace kortex::gpu
