// The greedy registration study of `kortex validate` (needs the IXI data; issue 28's quality study).
//   Pairs   from ../shared/data/mri/ixi_2mm_more: fixed its first subject, moving the next `pairs`
//           ones (20; quick: 2, images at 4 mm, validation/Registration.hpp loadStudyImage).
//   Methods affine only (the baseline), Kortex greedy with SSD and with LNCC (the study's greedy
//           parameters, metric set per run, radius `greedy.lnccRadius`), register unbiased (its
//           defaults), all on the Kokkos back end; elastix and FireANTs read from folders (below).
//   Per pair and method:
//     - mean Dice over the DLMUSE labels of the fixed subject;
//     - det of the Jacobian of the TOTAL map (affine included) on the fixed grid, world volume ratio
//       det(I + grad d) of its ITK/ANTs world displacement d (io::worldDisplacementToIndex, then
//       ref::jacobianDeterminant): the share of voxels with det <= 0 inside the head and over the
//       whole grid, min and max det inside the head;
//     - inverse consistency |p - Phi^-1(Phi(p))| inside the head (fixed voxels), mean and p99
//       (pipeline::invertRegistration + pipeline::inverseConsistency; Kortex methods only);
//     - wall time end to end (registerPair: normalisation, affine, deformable; peers: their JSON
//       "seconds"), after one short untimed run of each Kokkos method (device start-up).
//   Peers   a folder per peer (`elastixDir`: bench/peers/elastix_ixi.sh, `fireantsDir`:
//           bench/peers/fireants_ixi.py) holding, per pair, <moving>_to_<fixed>_labels.nii.gz (the
//           moving labels on the fixed grid), <moving>_to_<fixed>.json (at least "seconds") and
//           (its "seconds_total", the wall time with file I/O, is shown beside it when given) and
//           optionally <moving>_to_<fixed>_field.nii.gz (an ITK/ANTs world displacement field on
//           the fixed grid; det statistics from it). Files at 2 mm are subsampled in quick mode.
//   CPU vs Kokkos, as a user runs each back end (each its own normalisation and affine):
//           |Phi_cpu(p) - Phi_kokkos(p)| (voxels of the moving grid) inside the head, max / mean /
//           p99, for greedy SSD, greedy LNCC and register unbiased, on the first `cpuPairs` pairs
//           (-1: every pair). Bound kMaxMapDifferenceVoxels (0.5) on the max. Also: the RMS
//           distance of the two affine stages, and the CPU greedy SSD stage alone from the Kokkos
//           affine (on the first compared pair and wherever the SSD bound fails).
// Pass (every pair): both greedy runs above the affine Dice with det Dh > 0 (no fold), and the
// CPU-vs-Kokkos bounds of every compared run.
// Goals (issue 28; reported met / missed / n/a per pair and overall, not part of the pass): the
// better greedy metric (by mean Dice over the pairs) reaches FireANTs' Dice on every pair, its mean
// Dice >= elastix's mean + 0.05, no voxel with det <= 0, and >= 5x faster than FireANTs (Kortex's
// registerPair seconds against the "seconds" of FireANTs' JSON).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <ostream>
#include <string>
#include <vector>

#include "core/Greedy.hpp"
#include "core/Registration.hpp"
#include "pipeline/Inverse.hpp"
#include "validation/Registration.hpp"

namespace kortex::validation {

// The pairs (quick: at most 2), the greedy registrations' schedule (metric: set per run) and the
// data: IxiPairStudyOptions; firstPair 1 is the subject after the fixed one, and a study split over
// several runs takes firstPair 1, 1 + pairs, ...
struct GreedyStudyOptions : IxiPairStudyOptions {
  RegistrationParams unbiased;   // register unbiased, beside it
  bool runUnbiased = true;
  int cpuPairs = -1;             // pairs also run end to end on the CPU reference; -1: every pair
  std::string elastixDir;        // peer folders (see above); empty: none
  std::string fireantsDir;
};

// The methods of the study, in the order of the tables.
enum class StudyMethod { Affine, GreedySsd, GreedyLncc, Unbiased, Elastix, FireAnts };
inline constexpr int kStudyMethods = 6;
const char* toString(StudyMethod m);  // "affine", "greedy_ssd", "greedy_lncc", "unbiased", "elastix", "fireants"

// det of the total map's Jacobian on the fixed grid.
struct JacobianStudyStats {
  double foldShareHead = 0, foldShareAll = 0;  // share of voxels with det <= 0
  double minHead = 0, maxHead = 0;
  Index headVoxels = 0, voxels = 0;
};

struct MethodResult {
  bool ran = false;
  DiceSummary dice;
  double seconds = -1;             // end to end; -1: not known
  double secondsTotal = -1;        // a peer's "seconds_total" (its wall time with file I/O), when given
  bool hasJacobian = false;
  JacobianStudyStats jacobian;
  bool hasInverse = false;
  pipeline::InverseConsistency inverse;  // fixed voxels, inside the head
  long inverseUnconverged = 0;
  int foldRefusals = 0;            // greedy: refused steps; a fold stop sets stoppedOnFold
  bool stoppedOnFold = false;
  float minJacobianFluid = 1.0f;   // greedy / unbiased: det Dh of the deformable part (the pass rule)
  nlohmann::json peerRecord;       // a peer's JSON as written
};

// CPU reference vs Kokkos end to end for one pair.
struct CpuKokkosComparison {
  bool ran = false;
  DistanceStats greedySsd, greedyLncc, unbiased;
  bool unbiasedRan = false;
  double affineRms = 0.0;          // RMS mapped-point distance of the two affine stages (voxels)
  bool sameInputRan = false;
  DistanceStats greedySsdSameInput;  // CPU greedy SSD from the Kokkos affine vs Kokkos
  double secondsGreedySsd = 0, secondsGreedyLncc = 0, secondsUnbiased = 0;
  // The two unbiased runs' trajectories (where their maps part, these say whether the iteration
  // counts, the rejected steps or the stop reasons did).
  RegistrationResult unbiasedCpu, unbiasedKokkos;
};

enum class GoalState { NotApplicable, Met, Missed };
const char* toString(GoalState g);  // "n/a", "met", "missed"

// The goals for the better greedy metric.
struct StudyGoals {
  GoalState diceVsFireants = GoalState::NotApplicable;    // >= FireANTs' Dice
  GoalState diceVsElastix = GoalState::NotApplicable;     // >= elastix + 0.05 (overall: the means)
  GoalState noFold = GoalState::NotApplicable;            // det <= 0 share 0 over the whole grid
  GoalState speedVsFireants = GoalState::NotApplicable;   // FireANTs seconds / Kortex seconds >= 5
  double speedup = -1;                                    // FireANTs seconds / Kortex seconds
};
inline constexpr double kGoalDiceOverElastix = 0.05;
inline constexpr double kGoalSpeedupOverFireants = 5.0;

struct GreedyPairResult {
  std::string fixed, moving;
  std::array<MethodResult, kStudyMethods> methods;
  MethodResult const& method(StudyMethod m) const { return methods[std::size_t(m)]; }
  MethodResult& method(StudyMethod m) { return methods[std::size_t(m)]; }
  CpuKokkosComparison cpu;
  StudyGoals goals;
  bool pass = false;
};

struct GreedyStudyReport {
  bool ran = false, pass = false;
  std::string note;
  std::vector<GreedyPairResult> pairs;
  StudyMethod bestGreedy = StudyMethod::GreedySsd;  // the better metric by mean Dice
  StudyGoals goals;                                 // overall
  nlohmann::json json;
  std::string markdown;
};

GreedyStudyReport runGreedyStudy(GreedyStudyOptions const& opt);

}  // namespace kortex::validation
