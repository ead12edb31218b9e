// Unbiased diffeomorphic atlas construction (Joshi et al. 2004; Ha et al. 2010, Algorithms 1 and 4):
// the specification every back end implements, its parameters and result types. The template is
// the Frechet mean of N images under the greedy diffeomorphic flow of core/Greedy.hpp; the CPU
// reference (reference_cpu/Atlas.cpp) implements this text independently of the Kokkos one
// (gpu/atlas/Atlas.hpp).
//
// ---- Inputs and conventions --------------------------------------------------------------------------
// N >= 2 images I_i on one grid (the job aligns and resamples them first), each with a displacement
// u_i in the convention of core/Greedy.hpp: h_i(x) = x - u_i(x), W_i = I_i(x - u_i(x)) (trilinear,
// clamp-extended), voxel units of the current scale. u_i = 0 on the coarsest scale.
//
// ---- One iteration at a scale (every back end) -------------------------------------------------------
//   1. template   T(x) = (1/N) sum_i W_i(x), summed in double in subject order i = 0..N-1, then
//                 rounded to float (so the template does not depend on how subjects are grouped).
//                 change = sqrt(mean (T - T_prev)^2), T_prev the previous iteration's template at
//                 this scale (0 at a scale's first iteration).
//   2. per subject, independently (the greedy iteration of core/Greedy.hpp with I1 = T):
//                 F_i = -(W_i - T) grad W_i; solve L v_i = F_i (the GreedyParams solver rule, v_i
//                 carried per subject for the warm-started solvers); m_i = max |v_i| (m_i == 0: the
//                 subject does not move); delta = maxStep, u_i' = u_i(x + eps v_i) - eps v_i with
//                 eps = delta / m_i; if min det(I - grad u_i') <= 0 the step is refused and delta
//                 halves; below minStep the subject is frozen for the rest of the scale (its last
//                 field, det > 0 everywhere, is kept and counted); W_i = I_i(x - u_i').
//   3. centring   ubar = (1/N) sum_i u_i (double sums in subject order, then float); every subject
//                 is composed with the inverse of the common part, h_i <- h_i o (x + ubar(x)), i.e.
//                 u_i(x) <- u_i(x + ubar(x)) - ubar(x) (the greedy composition with v = ubar,
//                 eps = 1; refused for a subject whose det would fall to <= 0, which keeps its
//                 field); W_i = I_i(x - u_i) again. Without it the subjects drift together: the
//                 template is transported by their common deformation (on four deformed copies of
//                 one blob the mean displacement reached 57 % of a subject's, and the template
//                 moved 0.28 voxel off the undeformed image: tstAtlas). With it sum_i u_i = 0 to
//                 second order (Avants and Gee's template centring, applied every iteration).
//   4. mismatch   sqrt(mean_i mean_x (W_i - T)^2) with the new W_i and the template of step 1;
//                 min det is taken over the subjects' fields after step 3.
// A scale runs iterations[s] iterations. Between scales u_i (and v_i) are up-sampled as in
// core/Greedy.hpp; the images are blurred and down-sampled by the same multi-scale rule.
// After the last iteration the returned template is T = (1/N) sum_i W_i of the final fields.
//
// Unbiasedness: every subject moves towards the common template, none is the reference, so the
// mean displacement (1/N) sum_i u_i stays near 0 (reported: its RMS over the grid).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/Greedy.hpp"
#include "core/Image.hpp"

namespace kortex {

struct AtlasParams {
  // The greedy flow of every subject (operator, scales, iterations per scale, steps, solver).
  // Defaults: those of the pairwise registration (alpha 0.1, gamma 0.001, scales 2,1, 25 + 50).
  GreedyParams greedy;

  static constexpr int kMinSubjects = 2;

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
  double seconds = 0.0;         // since the start
};

struct AtlasResult {
  std::vector<AtlasIteration> history;
  int iterations = 0;       // over all scales
  int refused = 0;
  float minJacobian = 1.0f;     // min over subjects of det Dh_i, final fields
  double meanDisplacementRms = 0.0;  // sqrt(mean_x |(1/N) sum_i u_i(x)|^2), voxels of the full grid
  double seconds = 0.0;
};

using AtlasProgress = std::function<void(AtlasIteration const&)>;

}  // namespace kortex
