// The greedy registration study of `kortex validate` (needs the IXI data):
//   Dice    for pairs from ../shared/data/mri/ixi_2mm_more (fixed: its first subject, moving: the
//           next ones), mean Dice over the DLMUSE labels of affine-only, affine + greedy and
//           affine + unbiased (register unbiased, its defaults), all on the Kokkos back end, and of
//           elastix (affine + B-spline) when a folder of its warped label maps is given
//           (bench/peers/elastix_ixi.sh writes it); min det Dh, fold stops, times.
//   CPU vs Kokkos, as a user runs each back end (each doing its own normalisation and affine):
//           |Phi_cpu(p) - Phi_kokkos(p)| (voxels of the moving grid) over the head, max / mean /
//           p99, for the greedy registration and for `register unbiased` (its defaults), on the
//           first `cpuPairs` pairs. Bound: kMaxMapDifferenceVoxels (0.5) on the max. Also reported:
//           the RMS distance of the two affine stages and the greedy stage alone (the CPU greedy
//           from the Kokkos affine).
// Pass: every pair's greedy Dice above its affine Dice, det Dh > 0, and the CPU-vs-Kokkos bounds.
// quick: images at 4 mm (validation/Registration.hpp loadStudyImage), 2 pairs, 1 CPU pair.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "core/Greedy.hpp"
#include "core/Registration.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

struct GreedyStudyOptions {
  bool quick = false;
  std::string dataDir;
  GreedyParams greedy;           // the greedy registration's parameters
  RegistrationParams unbiased;   // register unbiased, beside it
  bool runUnbiased = true;
  int pairs = 10;
  int cpuPairs = 1;              // pairs also run end to end on the CPU reference
  std::string elastixDir;        // <moving>_to_<fixed>_labels.nii.gz (+ .json with seconds); empty: none
  std::ostream* progress = nullptr;
};

struct GreedyPairResult {
  std::string fixed, moving;
  DiceSummary diceAffine, diceGreedy, diceUnbiased, diceElastix;
  bool unbiasedRan = false, elastixRan = false;
  double secondsGreedy = 0, secondsUnbiased = 0, secondsElastix = -1;
  float minJacobian = 0.0f;
  int refused = 0;
  bool folded = false;
  bool cpuCompared = false;
  DistanceStats greedyCpuVsKokkos, unbiasedCpuVsKokkos;
  double affineCpuVsKokkos = 0.0;       // RMS mapped-point distance of the two affine stages (voxels)
  DistanceStats greedySameInput;        // CPU greedy from the Kokkos affine vs Kokkos
  double secondsCpuGreedy = 0, secondsCpuUnbiased = 0;
  bool pass = false;
};

struct GreedyStudyReport {
  bool ran = false, pass = false;
  std::string note;
  std::vector<GreedyPairResult> pairs;
  nlohmann::json json;
  std::string markdown;
};

GreedyStudyReport runGreedyStudy(GreedyStudyOptions const& opt);

}  // namespace kortex::validation
