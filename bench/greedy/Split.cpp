// Greedy benchmark, Iteration (continued): the kernel split of one iteration (each pass timed alone,
// fenced: the passes GreedyRegistration::run makes) and the ScratchTiled step's launch sweep.
#include "bench/greedy/GreedyBench.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/Timing.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/detail/Spectral.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/detail/GreedyKernels.hpp"

namespace kortex::bench::greedy {

using common::fixedDecimals;

void runIterationSplit(Context& ctx, ImageView<Mem> const& dMoving, ImageView<Mem> const& dFixed, gpu::Field<Mem>& u) {
  Exec& exec = ctx.exec;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  const int reps = ctx.reps, warm = ctx.warm;
  const double copyGBs = ctx.copyGBs;
  GridExtents const& target = ctx.target;
  auto fence = [&] { ctx.fence(); };
  // Kernel split of one iteration (each timed alone, fenced): the passes run() makes.
  namespace gd = gpu::greedy_detail;
  const int nz = target.nz, ny = target.ny, nx = target.nx, n = nz * ny * nx;
  gpu::FluidSolver<Exec> solver(exec, nz, ny, nx, GreedyParams{}.fluid);
  gpu::Field<Mem> f("kortex::bench::f", 3, nz, ny, nx), v("kortex::bench::v", 3, nz, ny, nx),
      cand("kortex::bench::cand", 3, nz, ny, nx), fc("kortex::bench::fc", 3, nz, ny, nx);
  ImageView<Mem> W("kortex::bench::W", nz, ny, nx), Wc("kortex::bench::Wc", nz, ny, nx);
  Kokkos::View<float, Mem> vmax2("kortex::bench::vmax2");
  Kokkos::deep_copy(W, dMoving);
  Kokkos::deep_copy(u, 0.0f);
  gpu::greedyForce(exec, W, dFixed, f);
  solver.spectral(f, v);
  // The FFT library's share of the solve: the same R2C + C2R alone (symbol kernel left out).
  gpu::detail::SpectralPlan<Exec>::Spectrum spectrum("kortex::bench::spectrum", 3, nz, ny, nx / 2 + 1);
  gpu::detail::SpectralPlan<Exec> fft(exec, nz, ny, nx, v, spectrum);
  using IntPolicy = Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>;
  struct Part {
    const char* name;
    double bytes;  // per voxel
    std::function<void()> run;
  };
  std::vector<Part> parts = {
      {"force", 20, [&] { gpu::greedyForce(exec, W, dFixed, f); }},
      {"spectral solve (R2C, symbol, C2R)", 48, [&] { solver.spectral(f, v); }},
      {"  of which R2C + C2R alone (FFT library)", 48, [&] {
         fft.forward(f, spectrum);
         fft.inverse(spectrum, v);
       }},
      {"max norm of v (to a device scalar)", 12,
       [&] { Kokkos::parallel_reduce("kortex::bench::max_norm2", IntPolicy(exec, 0, n), gd::MaxNorm2Functor<Mem>{v.data(), n}, vmax2); }},
      {"composition", 36,
       [&] { gpu::parallelForVoxels("kortex::bench::compose", exec, nz, ny, nx, gd::ComposeScaledFunctor<Mem>{u, v, cand, vmax2, 1.0f}); }},
      {"warp + SSE + fold check (read back)", 24, [&] {
         gd::CheckSums cs{0.0, 0.0f, 0.0f};
         Kokkos::parallel_reduce("kortex::bench::check", IntPolicy(exec, 0, n),
                                 gd::CheckFunctor<Mem>{{cand, vmax2, nz, ny, nx}, dMoving, dFixed, Wc}, cs);
       }},
      {"step in one pass, ScratchTiled (replaces force, composition, warp + check; read back)", 56,
       [&] { gd::stepTiled(exec, dMoving, dFixed, u, v, vmax2, 1.0f, cand, fc); }}};
  md << "\nKernel split (fft, each pass timed alone; the last row is the ScratchTiled step that replaces the "
        "force, composition and warp + check rows). Roofline: counting the operations of core/'s per-voxel maths, every "
        "pass does about 1-4 fp32 flop per byte of its minimum traffic, far under an H100's or H200's ridge point (about "
        "14 flop/B), so its roof is the memory one: the floor is the minimum bytes at the measured copy bandwidth.\n\n| pass | ms | GB/s (minimum bytes) | % of copy | floor ms | x floor |\n|---|---|---|---|---|---|\n";
  nlohmann::json split = nlohmann::json::array();
  double naiveSum = 0.0, tiledSum = 0.0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    auto& part = parts[k];
    const double ms = timeMedian(part.run, fence, warm, reps).medianMs;
    const bool sub = part.name[0] == ' ';  // indented rows are parts of the row above
    const bool tiled = k + 1 == parts.size();
    if (!sub && !tiled) naiveSum += ms;
    if (!sub && (tiled || k == 1 || k == 3)) tiledSum += ms;  // solve, max |v|, step
    const double gb = part.bytes * double(n) / (ms * 1e-3) * 1e-9;
    const double floorMs = part.bytes * double(n) / (copyGBs * 1e9) * 1e3;
    md << "| " << part.name << " | " << fixedDecimals(ms) << " | " << fixedDecimals(gb, 0) << " (" << fixedDecimals(part.bytes, 0) << " B) | "
       << fixedDecimals(100 * gb / copyGBs, 0) << " | " << fixedDecimals(floorMs) << " | " << fixedDecimals(ms / floorMs, 1) << " |\n";
    split.push_back({{"pass", part.name}, {"ms", ms}, {"GBs", gb}, {"bytes_per_voxel", part.bytes},
                     {"copy_share", gb / copyGBs}, {"floor_ms", floorMs}});
  }
  md << "| sum, Naive step | " << fixedDecimals(naiveSum) << " | | |\n| sum, ScratchTiled step | " << fixedDecimals(tiledSum) << " | | |\n";
  // The one-pass step's launch: slices per team (league size and apron overhead) x team size.
  const int tiles = ((nx + gd::StepTiledFunctor<Exec>::kTileX - 1) / gd::StepTiledFunctor<Exec>::kTileX) *
                    ((ny + gd::StepTiledFunctor<Exec>::kTileY - 1) / gd::StepTiledFunctor<Exec>::kTileY);
  const int chosen = gd::stepTiledChunk(kx::concurrency(exec), tiles, nz);
  md << "\nScratchTiled step launch sweep (ms; the registration lets stepTiledChunk choose: " << chosen
     << " slices per team here, Kokkos::AUTO threads):\n\n| slices per team | AUTO | 128 | 256 | 384 |\n|---|---|---|---|---|\n";
  j["step_tiled_chunk"] = chosen;
  nlohmann::json sweep = nlohmann::json::array();
  const int maxTeam = Kokkos::TeamPolicy<Exec>(exec, 1, Kokkos::AUTO)
                          .team_size_max(gd::StepTiledFunctor<Exec>{}, Kokkos::ParallelReduceTag());
  std::vector<int> chunks = {8, 16, 24, 36};
  if (std::find(chunks.begin(), chunks.end(), chosen) == chunks.end()) chunks.push_back(chosen);
  std::sort(chunks.begin(), chunks.end());
  for (int chunk : chunks) {
    md << "| " << chunk;
    for (int team : {0, 128, 256, 384}) {
      if (team > maxTeam) {
        md << " | -";
        continue;
      }
      const double ms = timeMedian([&] { gd::stepTiled(exec, dMoving, dFixed, u, v, vmax2, 1.0f, cand, fc, {chunk, team}); },
                                   fence, warm, reps)
                            .medianMs;
      md << " | " << fixedDecimals(ms);
      sweep.push_back({{"chunk_z", chunk}, {"team_size", team}, {"ms", ms}});
    }
    md << " |\n";
  }
  j["step_tiled_sweep"] = sweep;
  j["iteration_split"] = split;
}

}  // namespace kortex::bench::greedy
