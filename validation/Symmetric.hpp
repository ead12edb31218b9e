// The symmetric study (`kortex validate --only symmetric`, issue 41): the greedy study's IXI pairs
// (mri/ixi_2mm_more: fixed its first subject A, moving the next `pairs`, B), each registered both
// ways (B to A and A to B) on the Kokkos back end with the study's greedy schedule (the pairwise
// defaults: LNCC), in the default mode and with GreedyParams::symmetric. Per pair and mode: mean Dice
// over A's DLMUSE labels (B to A), inverse consistency |Phi_AB(Phi_BA(p)) - p| in mm over A's head
// (validation/Registration.hpp inverseConsistency, headMask of the B-to-A run), mean and p99, min
// det of the greedy stage, seconds.
// Pass (every pair): the symmetric mode's inverse consistency (mean) below the default mode's and
// det > 0 (the Dice is reported beside the default mode's).
// quick: at most 2 pairs, images at 4 mm.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/Greedy.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

struct SymmetricStudyOptions : IxiPairStudyOptions {};

struct SymmetricModeResult {
  double dice = 0, consistencyMean = 0, consistencyP99 = 0, seconds = 0;
  float minJacobian = 0.0f;
};

struct SymmetricPairResult {
  std::string fixed, moving;
  SymmetricModeResult plain, symmetric;
  bool pass = false;
};

struct SymmetricStudyReport {
  bool ran = false, pass = false;
  std::string note;
  std::vector<SymmetricPairResult> pairs;
  SymmetricModeResult meanPlain, meanSymmetric;
  nlohmann::json json;
  std::string markdown;
};

SymmetricStudyReport runSymmetricStudy(SymmetricStudyOptions const& opt);

}  // namespace kortex::validation
