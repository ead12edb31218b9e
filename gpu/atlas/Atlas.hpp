// Kokkos unbiased atlas construction (specification: core/Atlas.hpp) for one process: this
// process's subjects stay on its device, the template and centring sums are reduced over the
// process group (AtlasRun::comm) as int64 fixed-point sums. Per subject on the device: the scale
// image I_i, warped image W_i, displacement u_i and, for the warm-started solvers, velocity v_i
// (atlasMemory below states the bytes); shared by all subjects: the template, its
// int64 sum, the previous template, a force, a velocity, a candidate field and the mean
// displacement with its sum. The per-subject step uses the greedy registration's entry points
// (force, fluid solve, max |v|, composition, min det, warp); the sums run over up to eight subjects
// per pass.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/Atlas.hpp"
#include "core/Compat.hpp"
#include "core/Image.hpp"
#include "gpu/Communicator.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

// The state an atlas run carries from one iteration to the next, for a checkpoint: this process's
// subjects' fields on the grid of scale `scale` after `iteration` iterations there, the template
// of that iteration (the next one's T_prev) and the history. W_i and the next template follow
// from the fields, so a run resumed from it computes the same bits as one that never stopped.
struct AtlasState {
  int scale = 0;
  int iteration = 0;                       // done at `scale`
  std::vector<int> frozen;                 // per local subject
  std::vector<Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>> u, v;  // v: warm-started solvers only
  Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace> templ;
  std::vector<AtlasIteration> history;     // every iteration so far (all scales)
  int refused = 0;
  double seconds = 0.0;                    // wall time of the runs so far
};

// How one process takes part: which subjects it holds, the group, progress and checkpoints.
struct AtlasRun {
  Communicator* comm = nullptr;  // null: this process holds every subject
  int first = 0;              // global index of this process's first image
  int total = 0;              // subjects over all ranks (0: this process's count)
  AtlasProgress progress;     // every rank calls it with the same record
  AtlasScaleTemplate scaleTemplate;  // every rank, at each scale's end (core/Atlas.hpp); empty: none (no copy)
  int checkpointEvery = 0;    // iterations (over all scales); 0: never
  std::function<void(AtlasState const&)> checkpoint;  // called on every rank with its state
  AtlasState const* resume = nullptr;                 // start from this state
  bool returnFields = true;   // copy every local subject's final field to the host (false: `fields` comes back empty)
  // Local subjects kept on the device (-1: all). The others live in (pinned) host memory and are
  // streamed through two device slots twice per iteration (the step, then the centring), the
  // next subject's upload overlapping the current one's kernels; the results have the same bits.
  int residentSubjects = -1;
};


template <class Mem>
using FixedSum = Kokkos::View<std::int64_t***, Kokkos::LayoutRight, Mem>;

// sum = (accumulate ? sum : 0) + q(w[0]) + q(w[1]) + ... (the fixed-point rule of core/Atlas.hpp),
// up to 8 images per call. All views on one grid.
template <class Exec>
void atlasAccumulate(Exec const& exec, std::vector<ConstImageView<typename Exec::memory_space>> const& w,
                     FixedSum<typename Exec::memory_space> sum, bool accumulate);

// out = the mean of n terms whose fixed-point values sum to `sum`.
template <class Exec>
void atlasMean(Exec const& exec, FixedSum<typename Exec::memory_space> sum, int n,
               ImageView<typename Exec::memory_space> out);

// Values per chunk of the host-staged sums by default: the whole array (one chunk, no overlap).
// The chunk sweep of `kortex bench atlas --only Sums` on 2 H200 (bench/results/
// atlas_sums_nvidia-h200-x2.md): one rank per GPU, 1 Mi values 11.1 / 14.6 ms against
// whole 14.8 / 17.9 ms; two ranks per GPU, 1 Mi values 17.7-70.2 ms against whole 17.8-31.0 ms
// (the GPU switches between the ranks' contexts at every chunk). Whole: the smaller worst case.
inline constexpr std::size_t kAtlasStagedChunk = ~std::size_t(0);

// The sums over the ranks of `comm` of an int64 array in the memory of Exec, staged through host
// memory (the path for a transport that cannot read device memory): chunk k is summed in place in
// a pinned host buffer (comm.sumStaged: the group's own buffer where it has one, the node's shared
// memory for MPI; else this object's) while the instance's stream copies chunk k + 1 down and
// chunk k - 1 back up. Integer sums: the chunking changes no bit. This object's buffer grows to
// the largest array summed and is kept.
template <class Exec>
class StagedRankSum {
 public:
  using Array = Kokkos::View<std::int64_t*, typename Exec::memory_space>;
  explicit StagedRankSum(std::size_t chunk = kAtlasStagedChunk);  // chunk >= 1 values (kAtlasStagedChunk: whole)
  // A collective call (every rank with an array of the same length); returns when `a` holds the sums.
  void operator()(Exec const& exec, Communicator& comm, Array a);

 private:
  std::size_t chunk_;
  Kokkos::View<std::int64_t*, kx::PinnedHostSpace<Exec>> staging_;
};

// Median seconds of one sum over the ranks of `comm` of an int64 device buffer of `count` values
// (the path of comm's reduction(); staged through host memory in chunks of `stagedChunk` values
// when the transport does not read device memory), for the run-time model's T_network and the
// bench's chunk sweep. A collective call; 0 for one process.
template <class Exec>
double atlasSumSeconds(Exec const& exec, Communicator* comm, std::size_t count, int repetitions,
                       std::size_t stagedChunk = kAtlasStagedChunk);

// The atlas of this process's `images` (on the host, one grid; subjects run.first .. of run.total).
// `templ` receives the template (the same on every rank), `fields[i]` the full-grid displacement
// of local subject i (none when run.returnFields is false: they stay on the device and go). Extents, grids and the partition only are checked; parameters and NaN/Inf
// are the caller's (the job validates once).
// The Views buildAtlas allocates on an atlas grid `g` (the finest scale, where the peak is), in
// bytes: per subject its full-grid image I_i ("image"), W_i, u_i, v_i for the warm-started solvers
// and its mismatch slot; shared: the template, the previous template, the int64 template sum, the
// mean displacement and its int64 sum, the blur buffer (a coarse first scale), one velocity for
// the spectral solver, and the greedy stepper (gpu/greedy/GreedyStepper.hpp greedyStepperBytes).
// Streaming: the two device slots (I, W, u, v) with the upload buffer, and a streamed subject's
// host state (I_i, u_i, v_i). tstAtlas checks the model against the allocations Kokkos reports.
AtlasMemory atlasMemory(Geometry const& g, AtlasParams const& params);

template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields,
                       AtlasRun const& run = {});

}  // namespace kortex::gpu
