// Atlas benchmark, Sums over ranks: the two int64 sums of one atlas iteration at the full-scale
// grid (the template's: V values; the mean displacement's: 3V) over the ranks of the process
// group, per reduction path the group can take; the host-staged path over a sweep of its chunk
// (gpu::kAtlasStagedChunk is the default). Each time is the median of the repetitions, the max over
// ranks. The goal: <= 25 ms per iteration host-staged at 4 ranks.
#include "bench/atlas/AtlasBench.hpp"

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "core/Greedy.hpp"
#include "gpu/atlas/Atlas.hpp"

namespace kortex::bench::atlas {

using common::fixedDecimals;

namespace {

// The largest value over the ranks (each rank's in its slot of an exact double sum).
double maxOverRanks(gpu::Communicator* comm, double mine) {
  if (comm == nullptr) return mine;
  std::vector<double> slots(std::size_t(comm->size()), 0.0);
  slots[std::size_t(comm->rank())] = mine;
  comm->sum(slots.data(), slots.size());
  return *std::max_element(slots.begin(), slots.end());
}

}  // namespace

void runSums(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  gpu::Communicator* comm = ctx.comm;
  const int K = comm ? comm->size() : 1;
  const std::size_t V = std::size_t(scaledExtents(ctx.g, 1).voxels());
  const int reps = opt.tiny ? 2 : 11;
  md << "## Sums over ranks: one iteration's two int64 sums (template: " << V << " values; mean displacement: " << 3 * V
     << ")\n\n";
  if (comm == nullptr) {
    md << "One process: nothing to sum (run under mpirun with 2 or more ranks).\n\n";
    j["sums"] = {{"ranks", 1}, {"rows", nlohmann::json::array()}};
    return;
  }
  md << "Group: " << comm->describe() << ". " << reps << " repetitions after a warm-up, median, the max over ranks; "
     << "GB/s counts the " << fixedDecimals(32.0 * double(V) / 1e6, 1) << " MB summed per iteration (4V int64). Host-staged: pinned host "
     << "buffer, chunk k summed (MPI_Allreduce in place) while chunk k + 1 goes down and k - 1 comes back up; "
     << "'whole' = one chunk (no overlap); host back ends sum their arrays in place. Goal: <= " << kTargetSumsS * 1e3 << " ms per iteration host-staged at "
     << kTargetSumsRanks << " ranks.\n\n"
     << "| ranks | path | chunk (values) | ms per iteration | GB/s |\n|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  std::vector<gpu::ReductionPath> paths{gpu::ReductionPath::HostStaged};
  if (ctx.onDevice) paths = {gpu::ReductionPath::HostStaged, gpu::ReductionPath::Nccl, gpu::ReductionPath::DeviceMpi};
  double stagedDefault = -1.0;
  for (gpu::ReductionPath path : paths) {
    const std::string name = toString(path);
    if (!comm->useReduction(path)) {
      md << "| " << K << " | " << name << " | | not available on this machine | |\n";
      rows.push_back({{"ranks", K}, {"path", name}, {"available", false}});
      continue;
    }
    std::vector<std::size_t> chunks{gpu::kAtlasStagedChunk};
    if (path == gpu::ReductionPath::HostStaged && ctx.onDevice)
      chunks = {gpu::kAtlasStagedChunk, std::size_t(1) << 22, std::size_t(1) << 20, std::size_t(1) << 18};
    for (std::size_t chunk : chunks) {
      ctx.say("sums, path " + name + ", chunk " + std::to_string(chunk));
      const double s = maxOverRanks(comm, gpu::atlasSumSeconds(ctx.exec, comm, V, reps, chunk) +
                                              gpu::atlasSumSeconds(ctx.exec, comm, 3 * V, reps, chunk));
      // Host back ends sum their host arrays in place: no staging, no chunks.
      const bool staged = path == gpu::ReductionPath::HostStaged && ctx.onDevice;
      const std::string chunkText = !staged ? "-" : (chunk >= 3 * V ? "whole" : std::to_string(chunk));
      ++ctx.rep.measured;
      md << "| " << K << " | " << name << " | " << chunkText << (staged && chunk == gpu::kAtlasStagedChunk ? " (default)" : "")
         << " | " << fixedDecimals(s * 1e3, 2) << " | " << fixedDecimals(32.0 * double(V) / s / 1e9, 1) << " |\n";
      rows.push_back({{"ranks", K}, {"path", name}, {"available", true}, {"chunk", !staged ? nlohmann::json(nullptr) : chunk >= 3 * V ? nlohmann::json("whole") : nlohmann::json(chunk)},
                      {"seconds_per_iteration", s}});
      if (path == gpu::ReductionPath::HostStaged && chunk == gpu::kAtlasStagedChunk) stagedDefault = s;
    }
  }
  j["sums"] = {{"ranks", K}, {"group", comm->describe()}, {"values_per_iteration", 4 * V}, {"rows", rows}};
  if (stagedDefault >= 0.0) {
    const bool met = K >= kTargetSumsRanks && stagedDefault <= kTargetSumsS;
    j["target_sums"] = {{"target_s", kTargetSumsS}, {"ranks", K}, {"goal_ranks", kTargetSumsRanks}, {"measured_s", stagedDefault},
                        {"met", met}};
    md << "\nGoal (host-staged, default chunk, " << kTargetSumsRanks << " ranks): " << fixedDecimals(stagedDefault * 1e3, 2)
       << " ms at " << K << " ranks: " << (K < kTargetSumsRanks ? "not the goal's rank count" : (met ? "met" : "missed")) << ".\n";
  }
  md << "\n";
}

}  // namespace kortex::bench::atlas
