// Unbiased diffeomorphic atlas construction (Joshi et al. 2004; Ha et al. 2010, Algorithms 1 and 4):
// the specification every back end implements, its parameters and result types. The template is
// the Frechet mean of N images under the greedy diffeomorphic flow of core/Greedy.hpp; the CPU
// reference (reference_cpu/Atlas.cpp) implements this text independently of the Kokkos one
// (gpu/atlas/Atlas.hpp).
//
// ---- Inputs and conventions --------------------------------------------------------------------------
// N >= 2 images I_i on one grid (the job aligns and resamples them first), each with a displacement
// u_i in the convention of core/Greedy.hpp: h_i(x) = x - u_i(x), W_i = snap(I_i(x - u_i(x)))
// (trilinear, clamp-extended, then put on the grid of the sums: below), voxel units of the
// current scale. u_i = 0 on the coarsest scale.
//
// ---- One iteration at a scale (every back end) -------------------------------------------------------
//   1. template   T(x) = mean_i W_i(x) by the fixed-point rule below (so the template has the same
//                 bits however the subjects are grouped, split over ranks or reduced).
//                 change = sqrt(mean (T - T_prev)^2), T_prev the previous iteration's template at
//                 this scale (0 at a scale's first iteration).
//   2. per subject, independently (the greedy iteration of core/Greedy.hpp with I1 = T):
//                 F_i = -(W_i - T) grad W_i; solve L v_i = F_i (the GreedyParams solver rule, v_i
//                 carried per subject for the warm-started solvers); m_i = max |v_i| (m_i == 0: the
//                 subject does not move); delta = maxStep, u_i' = u_i(x + eps v_i) - eps v_i with
//                 eps = delta / m_i; if min det(I - grad u_i') <= 0 the step is refused and delta
//                 halves; below minStep the subject is frozen for the rest of the scale (its last
//                 field, det > 0 everywhere, is kept and counted).
//   3. centring   ubar = mean_i u_i (the fixed-point rule, per component); every subject
//                 is composed with the inverse of the common part, h_i <- h_i o (x + ubar(x)), i.e.
//                 u_i(x) <- u_i(x + ubar(x)) - ubar(x) (the greedy composition with v = ubar,
//                 eps = 1; refused for a subject whose det would fall to <= 0, which keeps its
//                 field); then W_i from the centred u_i. Without it the subjects drift together: the
//                 template is transported by their common deformation (on four deformed copies of
//                 one blob the mean displacement reached 57 % of a subject's, and the template
//                 moved 0.28 voxel off the undeformed image: tstAtlas). With it sum_i u_i = 0 to
//                 second order (Avants and Gee's template centring, applied every iteration).
//   4. mismatch   sqrt((1/N) sum_i mean_x (W_i - T)^2) with the new W_i and the template of step 1
//                 (the per-subject means summed in double in subject order); min det is taken over
//                 the subjects' fields after step 3.
// A scale runs iterations[s] iterations. Between scales u_i (and v_i) are up-sampled as in
// core/Greedy.hpp; the images are blurred and down-sampled by the same multi-scale rule.
// After the last iteration the returned template is T = mean_i W_i of the final fields.
//
// ---- The fixed-point mean (determinism) ---------------------------------------------------------------
// snap(a) = float(q(a) 2^-kAtlasFixedBits) is exact in float (a value below 2^-5 has <= 23
// significant bits on that grid; one above lies on it already), so N equal W_i average to W_i
// itself: N identical inputs give the image back (on the grid: within half a quantum).
// mean_i a_i = float(double(S) * 2^-kAtlasFixedBits / N),  S = sum_i q(a_i) in 64-bit integers,
// q(a) = round-half-away-from-zero(a * 2^kAtlasFixedBits) with a * 2^kAtlasFixedBits clamped to
// +-2^48 first. Integer addition is associative, so S, and with it the template, the centring and
// every field, has the same bits for any grouping of the subjects: passes of eight on a device,
// subjects split over MPI ranks, any reduction order of the network. The quantum 2^-28 = 3.7e-9
// lies below float's resolution for |a| > 0.03 (images are normalised to [0, 1], displacements are
// voxels); with |q| <= 2^48 and N <= kAtlasMaxSubjects no sum can overflow.
//
// Unbiasedness: every subject moves towards the common template, none is the reference, so the
// mean displacement (1/N) sum_i u_i stays near 0 (reported: its RMS over the grid).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/Greedy.hpp"
#include "core/Image.hpp"

namespace kortex {

constexpr int kAtlasFixedBits = 28;
constexpr int kAtlasMaxSubjects = 16384;

// q(a) of the fixed-point rule.
KOKKOS_INLINE_FUNCTION std::int64_t atlasFixed(float a) {
  constexpr double kScale = double(std::int64_t(1) << kAtlasFixedBits), kLimit = 281474976710656.0;  // 2^48
  double s = double(a) * kScale;
  s = s > kLimit ? kLimit : (s < -kLimit ? -kLimit : s);
  return static_cast<std::int64_t>(s >= 0.0 ? s + 0.5 : s - 0.5);  // the conversion truncates
}
// The mean of N terms whose q-values sum to s; atlasSnap(a) = atlasMean(q(a), 1).
KOKKOS_INLINE_FUNCTION float atlasMean(std::int64_t s, int n) {
  constexpr double kQuantum = 1.0 / double(std::int64_t(1) << kAtlasFixedBits);
  return static_cast<float>(double(s) * kQuantum / double(n));
}

KOKKOS_INLINE_FUNCTION float atlasSnap(float a) { return atlasMean(atlasFixed(a), 1); }

struct AtlasParams {
  // The greedy flow of every subject (operator, scales, iterations per scale, steps, solver).
  // Defaults: those of the pairwise registration (alpha 0.1, gamma 0.001, scales 2,1, 25 + 50).
  GreedyParams greedy;

  static constexpr int kMinSubjects = 2;
  static constexpr int kMaxSubjects = kAtlasMaxSubjects;

  void validate() const;                                    // throws InvalidArgument
  void validateFor(Geometry const& g, int subjects) const;  // + the grid rules of GreedyParams
};

struct AtlasIteration {
  int scale = 0;           // index into greedy.scales
  int factor = 1;
  int iteration = 0;       // 1-based within the scale
  double templateChange = 0.0;  // RMS(T - T_prev), 0 at a scale's first iteration
  double mismatch = 0.0;        // RMS over subjects and voxels of W_i - T after the step
  int refused = 0;              // fold refusals over all subjects (steps and centring)
  int frozen = 0;               // subjects frozen at this scale so far
  float minJacobian = 1.0f;     // min over subjects of det Dh_i after the step
  double seconds = 0.0;         // since the start (of this process's run, plus a resumed run's time)
};

struct AtlasResult {
  std::vector<AtlasIteration> history;
  int iterations = 0;       // over all scales
  int refused = 0;
  float minJacobian = 1.0f;     // min over subjects of det Dh_i, final fields
  double meanDisplacementRms = 0.0;  // sqrt(mean_x |(1/N) sum_i u_i(x)|^2), voxels of the full grid
  double seconds = 0.0;
  // This process's wall time split (fenced), for the run-time model T = T_GPU + T_CPU + T_network:
  double secondsSetup = 0.0;    // images to the device, scale set-up, outputs back
  double secondsCompute = 0.0;  // the iterations' kernels on this process's subjects
  double secondsReduce = 0.0;   // the sums over ranks (staging included), 0 for one process
  int resumedAt = 0;            // iterations already done by the run this one resumed (0: none)
  int streamed = 0;             // local subjects streamed from host memory (gpu::AtlasRun::residentSubjects, gpu/atlas/Atlas.hpp)
};

using AtlasProgress = std::function<void(AtlasIteration const&)>;
// Called at the end of each scale (every rank, in scale order) with the template of that scale on its
// grid (scaledGeometry of the images' grid): the template its last iteration stepped against, and at
// the last scale the final template. The QC report's "template at each scale" (pipeline/Qc.hpp).
using AtlasScaleTemplate = std::function<void(int scale, int factor, HostImage const& templ)>;

// Whether the solver carries v_i from one iteration to the next (SOR, CG, hybrids).
bool atlasKeepsVelocity(GreedySolver s);

// Device bytes of one atlas process: per subject and shared (gpu::atlasMemory, gpu/atlas/Atlas.hpp,
// counts them next to the allocations it predicts).
struct AtlasMemory {
  std::int64_t perSubject = 0;
  std::int64_t shared = 0;
  // Streaming (gpu::AtlasRun::residentSubjects, gpu/atlas/Atlas.hpp): the device's two slots (I, W, u, v) and image buffer,
  // and a streamed subject's state in (pinned) host memory (I_i, u_i and v_i at the full grid).
  std::int64_t streamBuffers = 0;
  std::int64_t perStreamedHost = 0;
  std::int64_t total(int subjects) const { return shared + perSubject * subjects; }
  // How many of `subjects` stay on a device of `deviceBytes`: all when they fit, else as many as
  // fit beside the stream buffers (the rest streamed); -1 when not even the buffers fit.
  int resident(int subjects, std::int64_t deviceBytes) const;
};

// ---- Load balancing: the run-time model of Ha et al. 2010 (section 4) ------------------------------
// T = T_GPU + T_CPU + T_network for a cohort split over K ranks. Per scale s (iterations it_s):
//   T_GPU     = max over ranks r of  sum_s it_s (t0_s,r + n_r ts_s,r)    (n_r subjects on rank r)
//   T_CPU     = max over ranks r of  n_r c_r                             (per-subject set-up: upload,
//               down-sampling and up-sampling over all scales, fields back)
//   T_network = sum_s it_s net_s                                        (the sums of one iteration
//               over the K ranks: the template and the mean displacement, 32 B per voxel)
// t0, ts and c come from a dry run on each rank's device (a few iterations on one subject and on
// a few subjects), net from timing the sums of that iteration's buffers on the K ranks.
struct AtlasRankCost {
  std::vector<double> fixedS;       // t0_s: per iteration, independent of the subjects (launches, template mean)
  std::vector<double> perSubjectS;  // ts_s: per subject and iteration
  double setupPerSubjectS = 0.0;    // c
};
struct AtlasCostModel {
  std::vector<int> iterations;      // it_s
  std::vector<AtlasRankCost> ranks; // one per rank
  std::vector<double> networkS;     // net_s (0 for one rank)
  struct Prediction {
    double gpu = 0.0, cpu = 0.0, network = 0.0;
    double total() const { return gpu + cpu + network; }
  };
  Prediction predict(std::vector<int> const& subjectsPerRank) const;  // throws on a size mismatch
};

// Subjects per rank for `subjects` subjects: proportional to each rank's speed (1 / its
// per-subject seconds, summed over the scales' iterations), every rank at least one, largest
// remainders first (ties to the lower rank), so equal speeds give the even split of contiguous
// blocks (counts differ by at most one, the larger first). Throws when a rank would get none.
std::vector<int> atlasBalance(int subjects, std::vector<double> const& perSubjectSeconds);

}  // namespace kortex
