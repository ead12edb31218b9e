// Measurements that judge a registration (pipeline/Register.hpp runs it) and the registration
// study of `kortex validate`.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "core/Image.hpp"
#include "pipeline/Register.hpp"

namespace kortex::validation {

using pipeline::RegistrationPipelineOptions;
using pipeline::RegistrationPipelineResult;

// ---- measurements ---------------------------------------------------------------------------------

struct DistanceStats {
  double max = 0, mean = 0, p99 = 0;
  Index count = 0;
  std::array<Index, 3> worst{};  // (x, y, z) of the largest distance
};
// |Phi_a(p) - Phi_b(p)| in voxels of the moving grid over the fixed voxels where mask > 0 (all
// voxels when mask is empty).
DistanceStats mapDifference(RegistrationPipelineResult const& a, RegistrationPipelineResult const& b,
                            HostImage const* mask = nullptr);
// Inverse consistency: |Phi_ba(Phi_ab(p)) - p| in mm (fixed grid of ab) over mask > 0, where ab
// registers B (moving) to A (fixed) and ba registers A to B.
DistanceStats inverseConsistency(RegistrationPipelineResult const& ab, RegistrationPipelineResult const& ba,
                                 HostImage const* mask = nullptr);
// Mean Dice over the labels present in `fixedLabels` (non-zero), and per named group.
struct DiceSummary {
  double meanAllLabels = 0.0;  // mean over individual labels present in the fixed map
  int labels = 0;
  std::vector<std::pair<std::string, double>> groups;  // e.g. "white matter", "ventricles"
};
DiceSummary diceSummary(HostImage const& fixedLabels, HostImage const& warpedMovingLabels);

// log det J statistics over mask > 0 (for the unbiasedness study).
struct LogJacobianStats {
  double mean = 0, sd = 0, min = 0, max = 0;
  Index count = 0;
};
LogJacobianStats logJacobianStats(HostImage const& jacobian, HostImage const* mask = nullptr);

using pipeline::headMask;  // fixedNormalised > threshold (pipeline/Register.hpp)

// A study's image or label map: as read, or (quick) at 4 mm: images by affineReduce (binomial),
// labels by taking every second voxel (the same grid).
HostImage loadStudyImage(std::filesystem::path const& path, bool labels, bool quick);

// The subject ids of a folder of "<id>-T1_ds.nii.gz" volumes (mri/ixi_2mm_more/t1), sorted; empty
// when the folder does not exist.
std::vector<std::string> studySubjectIds(std::filesystem::path const& t1Folder);

// What every study over the greedy study's IXI pairs takes (the multi-modal, lesion and symmetric
// studies): the pairs `firstPair` .. (IxiStudyData::lastPair) and the greedy stage's schedule.
struct IxiPairStudyOptions {
  bool quick = false;
  std::string dataDir;
  int pairs = 20;
  int firstPair = 1;
  GreedyParams greedy = greedyRegistrationDefaults();
  std::ostream* progress = nullptr;
};

// The IXI subjects of mri/ixi_2mm_more under a data folder (the greedy and multi-modal studies): ids[0]
// is the fixed subject; images and label maps loaded by loadStudyImage.
struct IxiStudyData {
  std::filesystem::path root;
  std::vector<std::string> ids;
  bool quick = false;
  IxiStudyData() = default;
  IxiStudyData(std::string const& dataDir, bool quick);
  // A fixed subject with its labels and at least one moving subject.
  bool complete() const;
  // "<study> study skipped: IXI volumes and labels not found under ..." when dataDir is empty or the
  // data is not complete(), else "" (the study runs).
  std::string skipNote(std::string const& dataDir, std::string const& study) const;
  // The index of the last moving subject of `pairs` pairs from `firstPair` (quick: at most 2), within
  // ids; InvalidArgument ("<study> study: the first pair must be in [1, n], got k") outside [1, n].
  int lastPair(int firstPair, int pairs, std::string const& study) const;
  HostImage image(std::string const& id) const;
  HostImage labels(std::string const& id) const;
};



}  // namespace kortex::validation

namespace kortex::validation {

// ---- the registration study of `kortex validate` (needs the IXI data) -------------------------------
// For pairs (fixed IXI012, moving each other subject): affine-only vs affine + unbiased fluid on the
// Kokkos back end: mean Dice over the DLMUSE labels (and white matter, lateral ventricles), min det J,
// log-Jacobian statistics; CPU reference vs Kokkos on the first pair(s) (max, mean and 99th
// percentile of |Phi_cpu - Phi_kokkos| in voxels); inverse consistency of the first pair (A->B
// composed with B->A, mm), affine-only vs full.
// CPU vs Kokkos is measured three ways, all with the same fluid iteration count:
//   same input  - both fluid stages from the Kokkos affine (the paper's setup: both back ends
//                 register the same affinely aligned images). Bound kMaxMapDifferenceVoxels.
//   pipeline    - each back end's whole pipeline, its own affine included. Reported, not bounded:
//   sensitivity - the CPU fluid stage from the CPU affine vs from the Kokkos affine (one back end,
//                 inputs that differ only by the affine stages' rounding, ~0.003 voxel RMS).
// On IXI pairs "pipeline" and "sensitivity" are of the same size (voxels at the worst voxel, where
// the data term has competing matches): the spread comes from the problem, not from a back end.
// quick: both images reduced once (core/Affine.hpp affineReduce: 4 mm), 2 pairs, fewer iterations.
inline constexpr double kMaxMapDifferenceVoxels = 0.5;  // the paper's GPU-CPU bound
// The CPU-vs-Kokkos comparison runs both back ends for this many fluid iterations (tolerance 0):
// the two then make the same number of steps unless one stops on a step underflow. Runs to
// convergence stop at different iterations (a near-tie E(u') ~ E(u) decides the last steps, and
// float vs double sums decide near-ties differently); past that point regions that keep moving
// (background next to the edge of the moving image's field of view) drift apart by whole voxels
// - a difference in when the runs stopped, not in what they compute.
inline constexpr int kCompareIterations = 100;

struct RegistrationStudyOptions {
  bool quick = false;
  std::string dataDir;
  RegistrationParams fluid;   // lambda, sigma, iterations (iterations capped in quick mode)
  int pairs = 6;
  int cpuPairs = 1;           // pairs also run on the CPU reference
  std::ostream* progress = nullptr;
};

struct RegistrationPairResult {
  std::string fixed, moving;
  DiceSummary diceAffine, diceFull;
  double minJacobian = 0.0;
  LogJacobianStats logJ;
  int iterations = 0;
  std::string stop;
  double secondsKokkos = 0.0, secondsCpu = -1.0;
  bool cpuCompared = false;
  DistanceStats cpuVsKokkos, cpuVsKokkosHead;
  double affineCpuVsKokkos = 0.0;        // RMS mapped-point distance of the two affine stages (voxels)
  DistanceStats fluidCpuVsKokkos;        // |u_cpu - u_kokkos| (voxels), end to end
  DistanceStats sameInputCpuVsKokkos;    // |Phi_cpu - Phi_kokkos|, CPU fluid from the Kokkos affine
  DistanceStats cpuAffineSensitivity;    // |Phi_cpu(CPU affine) - Phi_cpu(Kokkos affine)|
  std::string cpuRun, kokkosRun;         // "its/accepted/rejected stop"
  bool pass = false;
};

struct RegistrationStudyReport {
  bool ran = false, pass = false;
  std::string note;
  std::vector<RegistrationPairResult> pairs;
  bool icRan = false;
  DistanceStats icAffine, icFull;  // mm, head mask
  // Unbiasedness: IXI012 registered to a noisy copy of itself (no affine), log det J inside the head,
  // with the study's lambda and with lambda = 0.
  bool unbiasedRan = false;
  LogJacobianStats logJLambda, logJZero;
  double noiseSigma = 0.0;
  nlohmann::json json;
  std::string markdown;
};

RegistrationStudyReport runRegistrationStudy(RegistrationStudyOptions const& opt);

}  // namespace kortex::validation
