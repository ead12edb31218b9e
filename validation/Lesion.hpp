// The lesion study (`kortex validate --only lesion`, issue 41): what a lesion in the moving image costs
// the registration, with and without a cost-function mask (antsRegistration's -x). The greedy study's
// IXI pairs (mri/ixi_2mm_more: fixed its first subject, moving the next `pairs`); each moving T1 gets a
// synthetic lesion (paintLesion) and is registered to the fixed T1 three times on the Kokkos back end
// with the study's greedy schedule (the pairwise defaults: LNCC): lesion-free, lesioned without a mask,
// lesioned with the lesion's moving mask. Dice: mean over the fixed subject's DLMUSE labels, counted
// only on the fixed voxels outside the lesion's image under the lesion-free map (the lesion's ball
// carried to the fixed grid by that map, nearest voxel), for all three runs.
// Pass (the goal, every pair): the masked run's Dice within kLesionDiceTolerance of the
// lesion-free run's (at most that much below). The unmasked run's loss is reported beside it.
// quick: at most 2 pairs, images at 4 mm.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

// The bound on the Dice outside the lesion: the masked registration at most this far below
// the lesion-free one.
constexpr double kLesionDiceTolerance = 0.01;

// A synthetic lesion in a T1 volume: a ball of `radiusMm` (the voxel spacing's mean converts it)
// centred on a labelled voxel drawn from `seed` whose whole ball lies inside the labels (the brain; the
// first of up to 1000 draws with at least 95 % of it inside, else the draw with the most of it
// inside), its voxels set to `level` with a one-voxel linear edge:
// I' = (1 - w) I + w level, w = clamp(r + 0.5 - d, 0, 1), d the distance to the centre in voxels.
// `mask` is the cost-function mask that leaves it out: 0 within r + 1 voxels of the centre, else 1.
struct Lesion {
  HostImage image, mask;
  double centre[3] = {0, 0, 0};  // voxel index (x, y, z)
  double radiusVoxels = 0;
  Index voxels = 0;  // voxels with w > 0
};
Lesion paintLesion(HostImage const& t1, HostImage const& labels, double radiusMm, float level, std::uint64_t seed);

struct LesionStudyOptions : IxiPairStudyOptions {};

struct LesionPairResult {
  std::string fixed, moving;
  double radiusMm = 0;
  std::string kind;  // "bright" (2 x the T1's 99.5th percentile) or "cavity" (0)
  Index lesionVoxels = 0, excludedFixedVoxels = 0;
  double diceFree = 0, diceUnmasked = 0, diceMasked = 0;
  double secondsMasked = 0;
  float minJacobianMasked = 0.0f;
  bool pass = false;
};

struct LesionStudyReport {
  bool ran = false, pass = false;
  std::string note;
  std::vector<LesionPairResult> pairs;
  double meanFree = 0, meanUnmasked = 0, meanMasked = 0;
  double worstMaskedLoss = 0, worstUnmaskedLoss = 0;  // max over pairs of free - run
  nlohmann::json json;
  std::string markdown;
};

LesionStudyReport runLesionStudy(LesionStudyOptions const& opt);

}  // namespace kortex::validation
