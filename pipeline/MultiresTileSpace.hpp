// Candidate tiles of the multires layer bilateral kernel (tuning key "multires.bilateral";
// gpu/multires/MultiresBilateral.hpp): the configuration space of the paper's Fig 6, shared by
// `kortex bench multires` (Fig 6) and the tuner (`kortex tune --kernel multires.bilateral`).
//
// Space: tiles of x * y outputs per team (one output per thread on CUDA), x and y powers of two
// in 1 .. 1024: 11 x 11 = 121 shapes. Kept, rule by rule (a shape is counted under the first rule
// it breaks):
//   1. x * y >= 32: fewer outputs than a warp leave lanes idle;
//   2. x * y <= 1024: the CUDA block limit (the kernel runs one thread per output); the same
//      list is used on host backends so that results compare across devices;
//      -> 51 shapes: the space before pruning;
//   3. x >= 16: a tile row must hold at least 16 elements (64 B of floats), the paper's
//      coalescing rule (3280 -> 119 configurations there);
//   4. only when the image is smaller than 1024: x <= image width and y <= image height (wider
//      or taller tiles only add idle threads; nothing is removed at 1024^2 and above).
// At 1024^2: 27 candidates (x = 16 .. 1024). The default (no database entry) is
// gpu::multires_detail::kDefaultBilateralTile (32x8); the reference shape is the paper's
// "assumed optimal" 16x16.
#pragma once

#include "pipeline/Tune.hpp"

namespace kortex::pipeline::tune {

// Counts of the space above, for reports.
struct MultiresTileSpaceCounts {
  int grid = 0;       // shapes in the power-of-two grid (121)
  int inSpace = 0;    // after rules 1-2 (51): "before pruning"
  int candidates = 0; // after rules 3-4: "after pruning"
};

// The candidates for an image of edge `size` (>= 1), in enumeration order (x outer, y inner,
// ascending), with every pruning rule and its count, the default and the 16x16 reference.
// Configs hold {"x", "y"}. Throws InvalidArgument for size < 1.
CandidateSet multiresBilateralCandidates(int size);
MultiresTileSpaceCounts multiresBilateralCounts(CandidateSet const& s);

// One-paragraph statement of the rules (for reports).
const char* multiresBilateralPruningRule();

}  // namespace kortex::pipeline::tune
