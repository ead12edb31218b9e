#include "bench/BenchGreedy.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <sstream>

#include "bench/BenchCommon.hpp"
#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "core/Timing.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/gaussian/Gaussian.hpp"
#include "gpu/imageops/ImageOps.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/detail/GreedyKernels.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/detail/Spectral.hpp"
#include "gpu/registration/Registration.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/Register.hpp"
#include "reference_cpu/Registration.hpp"
#include "validation/Registration.hpp"

namespace kortex::bench {
namespace {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
namespace fs = std::filesystem;

// The targets (H100 / H200).
constexpr double kTargetIterationMs = 0.35;  // one greedy iteration at 144x192x160
constexpr double kTargetTorchRatio = 3.0;    // at least 3x faster than the PyTorch step
constexpr double kTargetIxiPairS = 0.3;      // IXI pair end to end, affine + 2 scales
constexpr double kTargetBandwidthShare = 0.6;

// Minimum traffic per voxel of one greedy iteration (float32), with the step in one pass
// (GreedyStepVariant::ScratchTiled):
//   spectral R2C + C2R of 3 components: each at least one read + one write of the real field and
//            of the half spectrum (~ 12 + 12 + 12 + 12)                      = 48
//   max |v|  reads v                                                          = 12
//   step     reads v, u (24 B), I1, I0 (8 B); writes u', F (24 B)            = 56
// Total 116 B per voxel. The three-pass step (Naive) moves 80 B instead of 56: compose (u, v ->
// u': 36), warp + check (u', I0, I1 -> W: 24), force (W, I1 -> F: 20).
constexpr double kIterationBytesPerVoxel = 116.0;
constexpr double kMatvecBytesPerVoxel = 24.0;
// Greedy iterations run before the solver comparison's warm-start problem is taken.
constexpr int kWarmupIterations = 10;

using common::fixedDecimals;
using common::selected;

// A structured image and the same image warped by a smooth displacement (maxVoxels), on grid g.
std::pair<HostImage, HostImage> makePair(Geometry const& g, double maxVoxels, std::uint64_t seed) {
  HostImage fixed = structuredImage(g, seed);
  const auto u = smoothDisplacement(g, maxVoxels, seed + 1);
  HostImage moving("kortex::bench::moving", g);
  ref::warp(fixed.data, u.data, moving.data);
  return {fixed, moving};
}

}  // namespace

BenchReport runGreedyBench(BenchOptions const& opt) {
  const auto tStart = Clock::now();
  BenchReport rep;
  const nlohmann::json peers = common::checkOptions(opt, "greedy");
  common::requireOnlyMatches(opt, {"Matvec", "Solvers", "Iteration", "Kernels", "IXI"}, "greedy", "\"Solvers\"");
  auto say = [&](std::string const& s) {
    if (opt.progress) *opt.progress << "bench greedy: " << s << std::endl;
  };
  Exec exec;
  const bool onDevice = !common::kDeviceIsHostMemory;
  const int reps = opt.tiny ? 2 : 10, warm = opt.tiny ? 1 : 3;
  auto fence = [&] { exec.fence(); };
  const double copyGBs = common::measureCopyBandwidth(exec, opt.tiny || !onDevice);
  // The target grid; host execution spaces and the smoke test use smaller ones.
  const GridExtents target = opt.tiny ? GridExtents{24, 32, 28}
                                      : (onDevice ? GridExtents{144, 192, 160} : GridExtents{48, 64, 56});
  const Geometry targetGrid = Geometry::make3D(target.nx, target.ny, target.nz);

  nlohmann::json j;
  j["kind"] = "kortex-bench-greedy";
  j["environment"] = io::environmentJson(true);
  j["copy_bandwidth_GBs"] = copyGBs;
  const FluidParams fp;  // the paper's alpha 0.01, beta 0, gamma 0.001
  j["params"] = pipeline::toJson(fp);
  j["params"]["iteration_bytes_per_voxel"] = kIterationBytesPerVoxel;
  std::ostringstream md;
  md << "# Kortex greedy registration benchmark (Ha et al. 2010)\n\n"
     << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos " << Exec::name() << ", git "
     << j["environment"].value("git_hash", std::string("?")) << ". Measured copy bandwidth " << fixedDecimals(copyGBs, 0)
     << " GB/s (read + write). Fluid operator alpha " << fp.alpha << ", beta " << fp.beta << ", gamma " << fp.gamma
     << ", periodic (core/Fluid.hpp), for the matvec and solver sections; the iteration and IXI sections use the "
        "registration's defaults (alpha "
     << GreedyParams{}.fluid.alpha << ").\n\n";
  auto fail = [&](std::string const& what) {
    ++rep.failed;
    md << "\n**FAILED:** " << what << "\n";
    say("FAILED: " + what);
  };

  // ---- Matvec ----------------------------------------------------------------------------------
  if (selected(opt.only, "Matvec")) {
    std::vector<int> sizes = opt.tiny ? std::vector<int>{16, 24}
                                      : (onDevice ? std::vector<int>{64, 96, 128, 160, 192, 224, 256}
                                                  : std::vector<int>{32, 48, 64});
    const double paper[] = {17, 37, 53, 42, 54, 51, 59};
    md << "## Helmholtz matvec (Fig 6): GFLOP/s, 2 flops per stored non-zero (7 per row)\n\n"
       << "| size | implicit ms | implicit GFLOP/s | implicit GB/s (24 B/voxel) | % of copy | explicit CSR ms | "
          "explicit GFLOP/s | paper implicit GFLOP/s |\n|---|---|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const int n = sizes[k];
      say("matvec " + std::to_string(n) + "^3");
      gpu::Field<Mem> v("kortex::bench::v", 3, n, n, n), out("kortex::bench::Lv", 3, n, n, n);
      Kokkos::deep_copy(v, 1.0f);
      const double vox = double(n) * n * n, flops = 2.0 * 7.0 * 3.0 * vox;
      const TimingStats ti = timeMedian([&] { gpu::fluidApply(exec, v, out, fp); }, fence, warm, reps);
      double te = NAN;
      try {
        gpu::FluidSolver<Exec> solver(exec, n, n, n, fp);
        solver.applyExplicit(v, out);  // assembles
        te = timeMedian([&] { solver.applyExplicit(v, out); }, fence, warm, reps).medianMs;
      } catch (std::exception const& ex) {
        md << "(explicit at " << n << "^3: " << ex.what() << ")\n";
      }
      ++rep.measured;
      const double gi = flops / (ti.medianMs * 1e-3) * 1e-9, ge = flops / (te * 1e-3) * 1e-9;
      const double gbs = kMatvecBytesPerVoxel * vox / (ti.medianMs * 1e-3) * 1e-9;
      const double p = onDevice && k < 7 ? paper[k] : NAN;
      md << "| " << n << "^3 | " << fixedDecimals(ti.medianMs) << " | " << fixedDecimals(gi, 0) << " | " << fixedDecimals(gbs, 0) << " | "
         << fixedDecimals(100 * gbs / copyGBs, 0) << " | " << fixedDecimals(te) << " | " << fixedDecimals(ge, 0) << " | " << fixedDecimals(p, 0) << " |\n";
      rows.push_back({{"size", n}, {"implicit_ms", ti.medianMs}, {"implicit_gflops", gi}, {"implicit_GBs", gbs},
                      {"explicit_ms", te}, {"explicit_gflops", ge}, {"paper_implicit_gflops", p}});
    }
    md << "\nPaper (Tesla C1060 class): implicit 17-59 GFLOP/s, explicit DIA 25-27, ELL 16-17.\n\n";
    j["matvec"] = rows;
  }

  // ---- Solvers -----------------------------------------------------------------------------------
  if (selected(opt.only, "Solvers")) {
    say("solver comparison");
    auto [fixed, moving] = makePair(targetGrid, 3.0, 77);
    auto dFixed = Kokkos::create_mirror_view_and_copy(Mem(), fixed.data);
    auto dMoving = Kokkos::create_mirror_view_and_copy(Mem(), moving.data);
    const int nz = target.nz, ny = target.ny, nx = target.nx;
    gpu::FluidSolver<Exec> solver(exec, nz, ny, nx, fp);
    gpu::Field<Mem> f0("kortex::bench::f0", 3, nz, ny, nx), f1("kortex::bench::f1", 3, nz, ny, nx),
        v0("kortex::bench::v0", 3, nz, ny, nx), v("kortex::bench::v", 3, nz, ny, nx),
        u("kortex::bench::u", 3, nz, ny, nx), u1("kortex::bench::u1", 3, nz, ny, nx);
    ImageView<Mem> W("kortex::bench::W", nz, ny, nx);
    // The warm-start problem of a registration in progress: 10 greedy iterations (spectral
    // solves), then F1 = the force of iteration 11 and v0 = the solution of iteration 10.
    Kokkos::deep_copy(W, dMoving);
    for (int it = 0; it < kWarmupIterations; ++it) {
      gpu::greedyForce(exec, W, dFixed, f0);
      solver.spectral(f0, v0);
      const double m = gpu::fieldMaxNorm(exec, v0);
      gpu::greedyCompose(exec, u, v0, float(1.0 / m), u1);
      std::swap(u, u1);
      gpu::warp(exec, dMoving, u, W);
    }
    gpu::greedyForce(exec, W, dFixed, f1);
    const TimingStats tf = timeMedian([&] { solver.spectral(f1, v); }, fence, warm, reps);
    const double rf = solver.residual(f1, v);
    md << "## Solvers (grid " << nx << "x" << ny << "x" << nz << ", the right-hand side of iteration "
       << kWarmupIterations + 1 << " of a registration; warm = from iteration " << kWarmupIterations
       << "'s solution)\n\n"
       << "Spectral solve: " << fixedDecimals(tf.medianMs) << " ms, relative residual " << std::scientific << std::setprecision(2)
       << rf << std::fixed << ".\n\n"
       << "| solver | start | to residual | iterations | residual reached | ms |\n|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    rows.push_back({{"solver", "spectral"}, {"ms", tf.medianMs}, {"residual", rf}});
    ++rep.measured;
    if (!(rf < 1e-4)) fail("spectral solve residual " + std::to_string(rf));
    const int cap = opt.tiny ? 200 : 400;
    for (double tol : {1e-3, 1e-5}) {
      for (bool warmStart : {false, true}) {
        auto start = [&] {
          if (warmStart)
            Kokkos::deep_copy(exec, v, v0);
          else
            Kokkos::deep_copy(exec, v, 0.0f);
        };
        // SOR: sweeps to reach tol, counted one sweep at a time, then the count timed.
        for (SorVariant sv : {SorVariant::Naive, SorVariant::ScratchTiled}) {
          start();
          int sweeps = 0;
          double res = solver.residual(f1, v);
          while (res > tol && sweeps < cap) {
            solver.sor(f1, v, 1, sv, false);
            ++sweeps;
            res = solver.residual(f1, v);
          }
          const TimingStats ts = timeMedian(
              [&] {
                start();
                solver.sor(f1, v, sweeps, sv, false);
              },
              fence, warm, reps);
          const std::string name = std::string("SOR ") + toString(sv);
          md << "| " << name << " | " << (warmStart ? "warm" : "cold") << " | " << std::scientific
             << std::setprecision(0) << tol << std::fixed << " | " << sweeps << (res > tol ? " (cap)" : "") << " | "
             << std::scientific << std::setprecision(2) << res << std::fixed << " | " << fixedDecimals(ts.medianMs) << " |\n";
          rows.push_back({{"solver", name}, {"warm", warmStart}, {"tolerance", tol}, {"iterations", sweeps},
                          {"residual", res}, {"ms", ts.medianMs}});
          ++rep.measured;
        }
        if (tol == 1e-3) {  // the paper's fixed sweep counts, once per start
          start();
          const double r0 = solver.residual(f1, v);
          const int fixedSweeps = warmStart ? GreedyParams{}.warmSweeps : GreedyParams{}.coldSweeps;
          const FluidSolveReport r = solver.sor(f1, v, fixedSweeps, SorVariant::ScratchTiled, true);
          const TimingStats ts = timeMedian(
              [&] {
                start();
                solver.sor(f1, v, fixedSweeps, SorVariant::ScratchTiled, false);
              },
              fence, warm, reps);
          md << "| SOR ScratchTiled, fixed sweeps | " << (warmStart ? "warm" : "cold") << " (residual at start "
             << std::scientific << std::setprecision(2) << r0 << std::fixed << ") | - | " << fixedSweeps << " | "
             << std::scientific << std::setprecision(2) << r.residual << std::fixed << " | " << fixedDecimals(ts.medianMs) << " |\n";
          rows.push_back({{"solver", "SOR ScratchTiled fixed"}, {"warm", warmStart}, {"start_residual", r0},
                          {"iterations", fixedSweeps}, {"residual", r.residual}, {"ms", ts.medianMs}});
          ++rep.measured;
        }
        for (MatvecVariant mv : {MatvecVariant::Implicit, MatvecVariant::Explicit}) {
          start();
          const FluidSolveReport r = solver.cg(f1, v, cap, tol, mv);
          const TimingStats ts = timeMedian(
              [&] {
                start();
                solver.cg(f1, v, cap, tol, mv);
              },
              fence, warm, reps);
          const std::string name = std::string("CG ") + toString(mv);
          md << "| " << name << " | " << (warmStart ? "warm" : "cold") << " | " << std::scientific
             << std::setprecision(0) << tol << std::fixed << " | " << r.iterations << " | " << std::scientific
             << std::setprecision(2) << r.residual << std::fixed << " | " << fixedDecimals(ts.medianMs) << " |\n";
          rows.push_back({{"solver", name}, {"warm", warmStart}, {"tolerance", tol}, {"iterations", r.iterations},
                          {"residual", r.residual}, {"ms", ts.medianMs}});
          ++rep.measured;
        }
      }
    }
    md << "\nCG times include its residual check per iteration (one host read-back per dot product); the "
          "paper: SOR 50-100 sweeps cold, 4-6 warm; hybrid CG \"exactly the same result as FFT, ~3x faster\".\n\n";
    j["solvers"] = rows;
  }

  // ---- Iteration ---------------------------------------------------------------------------------
  if (selected(opt.only, "Iteration")) {
    say("greedy iteration");
    auto [fixed, moving] = makePair(targetGrid, 3.0, 91);
    auto dFixed = Kokkos::create_mirror_view_and_copy(Mem(), fixed.data);
    auto dMoving = Kokkos::create_mirror_view_and_copy(Mem(), moving.data);
    gpu::Field<Mem> u("kortex::bench::u", 3, target.nz, target.ny, target.nx);
    double torchMs = NAN, torchFoldMs = NAN;
    if (peers.is_object() && peers.contains("results"))
      for (auto const& r : peers["results"]) {
        if (!r.value("median_ms", nlohmann::json()).is_number()) continue;
        const auto size = r.value("size", nlohmann::json::array());
        if (size != nlohmann::json::array({target.nz, target.ny, target.nx})) continue;
        if (r.value("algorithm", "") == "greedy-step") torchMs = r["median_ms"].get<double>();
        if (r.value("algorithm", "") == "greedy-step+fold-check") torchFoldMs = r["median_ms"].get<double>();
      }
    md << "## One greedy iteration at " << target.nx << "x" << target.ny << "x" << target.nz << "\n\n"
       << "Per iteration of GreedyRegistration::run at one scale (force, solve, max |v| read back, composition, "
          "min det read back, warp, RMSE read back), median of runs of "
       << (opt.tiny ? 4 : 50) << " iterations.\n\n"
       << "| solver | ms / iteration | GB/s (" << fixedDecimals(kIterationBytesPerVoxel, 0) << " B/voxel) | % of copy | PyTorch step ms "
          "| PyTorch step + fold check ms | speedup vs PyTorch (+ fold check) |\n|---|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    double bestMs = NAN;
    const std::pair<GreedySolver, GreedyStepVariant> runs[] = {{GreedySolver::Fft, GreedyStepVariant::ScratchTiled},
                                                                {GreedySolver::Fft, GreedyStepVariant::Naive},
                                                                {GreedySolver::HybridSor, GreedyStepVariant::ScratchTiled}};
    for (auto const& [s, step] : runs) {
      GreedyParams p;
      p.scales = {1};
      p.iterations = {opt.tiny ? 4 : 50};
      p.solver = s;
      p.stepVariant = step;
      gpu::GreedyRegistration<Exec> reg(exec, targetGrid, p);
      GreedyResult gr;
      const TimingStats ts = timeMedian([&] { gr = reg.run(dMoving, dFixed, u); }, fence, opt.tiny ? 0 : 1,
                                        opt.tiny ? 1 : 5);
      const double ms = ts.medianMs / std::max(1, gr.iterations);
      if (!(gr.scales.back().rmseEnd < gr.scales.back().rmseStart)) fail(std::string("iteration ") + toString(s) + ": RMSE did not drop");
      if (!(gr.minJacobian > 0.0f)) fail(std::string("iteration ") + toString(s) + ": folded");
      ++rep.measured;
      const double vox = double(target.voxels());
      const double gbs = kIterationBytesPerVoxel * vox / (ms * 1e-3) * 1e-9;
      if (!std::isfinite(bestMs) || ms < bestMs) bestMs = ms;
      md << "| " << toString(s) << ", step " << toString(step) << " | " << fixedDecimals(ms) << " | " << fixedDecimals(gbs, 0) << " | " << fixedDecimals(100 * gbs / copyGBs, 0)
         << " | " << fixedDecimals(torchMs) << " | " << fixedDecimals(torchFoldMs) << " | " << fixedDecimals(torchMs / ms, 1) << " ("
         << fixedDecimals(torchFoldMs / ms, 1) << ") |\n";
      rows.push_back({{"solver", toString(s)}, {"step", toString(step)}, {"ms_per_iteration", ms}, {"GBs", gbs}, {"iterations", gr.iterations},
                      {"rmse_start", gr.scales.back().rmseStart}, {"rmse_end", gr.scales.back().rmseEnd},
                      {"torch_ms", torchMs}, {"torch_fold_check_ms", torchFoldMs}});
    }
    j["iteration"] = rows;
    {
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
                                     gd::CheckFunctor<Mem>{cand, dMoving, dFixed, Wc, vmax2, nz, ny, nx}, cs);
           }},
          {"step in one pass, ScratchTiled (replaces force, composition, warp + check; read back)", 56,
           [&] { gd::stepTiled(exec, dMoving, dFixed, u, v, vmax2, 1.0f, cand, fc); }}};
      md << "\nKernel split (fft, each pass timed alone; the last row is the ScratchTiled step that replaces the "
            "force, composition and warp + check rows):\n\n| pass | ms | GB/s (minimum bytes) | % of copy |\n|---|---|---|---|\n";
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
        md << "| " << part.name << " | " << fixedDecimals(ms) << " | " << fixedDecimals(gb, 0) << " (" << fixedDecimals(part.bytes, 0) << " B) | "
           << fixedDecimals(100 * gb / copyGBs, 0) << " |\n";
        split.push_back({{"pass", part.name}, {"ms", ms}, {"GBs", gb}, {"bytes_per_voxel", part.bytes},
                         {"copy_share", gb / copyGBs}});
      }
      md << "| sum, Naive step | " << fixedDecimals(naiveSum) << " | | |\n| sum, ScratchTiled step | " << fixedDecimals(tiledSum) << " | | |\n";
      // The one-pass step's launch: slices per team (league size and apron overhead) x team size.
      md << "\nScratchTiled step launch sweep (ms; the registration uses " << gd::StepTiledFunctor<Exec>::kChunkZ
         << " slices per team and Kokkos::AUTO):\n\n| slices per team | AUTO | 128 | 256 |\n|---|---|---|---|\n";
      nlohmann::json sweep = nlohmann::json::array();
      const int maxTeam = Kokkos::TeamPolicy<Exec>(exec, 1, Kokkos::AUTO)
                              .team_size_max(gd::StepTiledFunctor<Exec>{}, Kokkos::ParallelReduceTag());
      for (int chunk : {2, 4, 8, 16}) {
        md << "| " << chunk;
        for (int team : {0, 128, 256}) {
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
    if (onDevice && !opt.tiny) {
      md << "\nTarget: <= " << kTargetIterationMs << " ms per iteration: " << (bestMs <= kTargetIterationMs ? "met" : "missed")
         << " (" << fixedDecimals(bestMs) << " ms)";
      if (std::isfinite(torchMs))
        md << "; >= " << kTargetTorchRatio << "x the PyTorch step: "
           << (torchMs / bestMs >= kTargetTorchRatio ? "met" : "missed") << " (" << fixedDecimals(torchMs / bestMs, 2) << "x)";
      md << ".\n\n";
      j["targets"]["iteration_ms"] = bestMs;
      j["targets"]["torch_ratio"] = torchMs / bestMs;
    }
  }

  // ---- Kernels -----------------------------------------------------------------------------------
  if (selected(opt.only, "Kernels")) {
    say("gradient, Gaussian and n-ary kernels");
    struct Size {
      int nx, ny, nz;
      double paperNaive, paperShared;  // the paper's gradient ms (simple, shared)
    };
    std::vector<Size> sizes = opt.tiny ? std::vector<Size>{{24, 32, 20, NAN, NAN}}
                                       : (onDevice ? std::vector<Size>{{160, 224, 160, 3.4, 1.6}, {256, 256, 256, 9.5, 5.2}}
                                                   : std::vector<Size>{{64, 80, 64, NAN, NAN}});
    md << "## Kernels\n\n### Gradient (clamped central differences, 3 components): ms and GB/s (16 B/voxel)\n\n"
       << "| size | Naive ms | Naive GB/s | ScratchTiled ms | ScratchTiled GB/s | % of copy (best) | paper simple / shared ms |\n"
       << "|---|---|---|---|---|---|---|\n";
    nlohmann::json grad = nlohmann::json::array(), gauss = nlohmann::json::array(), nary = nlohmann::json::array();
    for (auto const& sz : sizes) {
      const double vox = double(sz.nx) * sz.ny * sz.nz;
      ImageView<Mem> a("kortex::bench::a", sz.nz, sz.ny, sz.nx);
      Kokkos::deep_copy(a, 1.0f);
      gpu::Field<Mem> g("kortex::bench::grad", 3, sz.nz, sz.ny, sz.nx);
      double ms[2];
      int k = 0;
      for (GradientVariant v : {GradientVariant::Naive, GradientVariant::ScratchTiled})
        ms[k++] = timeMedian([&] { gpu::gradient(exec, a, g, v); }, fence, warm, reps).medianMs;
      rep.measured += 2;
      auto gbs = [&](double bytes, double t) { return bytes * vox / (t * 1e-3) * 1e-9; };
      const double best = std::min(ms[0], ms[1]);
      md << "| " << sz.nx << "x" << sz.ny << "x" << sz.nz << " | " << fixedDecimals(ms[0]) << " | " << fixedDecimals(gbs(16, ms[0]), 0) << " | "
         << fixedDecimals(ms[1]) << " | " << fixedDecimals(gbs(16, ms[1]), 0) << " | " << fixedDecimals(100 * gbs(16, best) / copyGBs, 0) << " | "
         << fixedDecimals(sz.paperNaive, 1) << " / " << fixedDecimals(sz.paperShared, 1) << " |\n";
      grad.push_back({{"size", {sz.nx, sz.ny, sz.nz}}, {"naive_ms", ms[0]}, {"scratch_tiled_ms", ms[1]},
                      {"naive_GBs", gbs(16, ms[0])}, {"scratch_tiled_GBs", gbs(16, ms[1])},
                      {"paper_simple_ms", sz.paperNaive}, {"paper_shared_ms", sz.paperShared}});
    }
    // Gaussian at the largest size, half kernel sizes 2 / 4 / 8 (sigma = r / 3, radius ceil(3 sigma) = r).
    const Size& big = sizes.back();
    const double bigVox = double(big.nx) * big.ny * big.nz;
    ImageView<Mem> in("kortex::bench::in", big.nz, big.ny, big.nx), out("kortex::bench::out", big.nz, big.ny, big.nx);
    Kokkos::deep_copy(in, 1.0f);
    md << "\n### 3D Gaussian at " << big.nx << "x" << big.ny << "x" << big.nz
       << " (ms; sigma = half size / 3; the separable one allocates its two temporaries per call, the FFT one its padded "
          "image, spectrum and FFT plan, as the library does)\n\n"
       << "| half size | Separable | Recursive | FFT | paper separable / recursive / FFT |\n|---|---|---|---|---|\n";
    const double paperSep[] = {14, 26, 49}, paperRec[] = {10, 10, 10}, paperFft[] = {85, 85, 80};
    int idx = 0;
    for (int half : {2, 4, 8}) {
      const double sigma = half / 3.0;
      double t[3];
      int k = 0;
      for (GaussianVariant v : {GaussianVariant::Separable, GaussianVariant::Recursive, GaussianVariant::Fft}) {
        if (v == GaussianVariant::Recursive && sigma < GaussianParams::kMinRecursiveSigma) {
          t[k++] = NAN;
          continue;
        }
        t[k++] = timeMedian([&] { gpu::gaussianBlur(exec, in, out, GaussianParams{sigma, v}); }, fence, warm, reps).medianMs;
        ++rep.measured;
      }
      const bool paper = onDevice && !opt.tiny;
      md << "| " << half << " | " << fixedDecimals(t[0]) << " | " << fixedDecimals(t[1]) << " | " << fixedDecimals(t[2]) << " | "
         << (paper ? fixedDecimals(paperSep[idx], 0) + " / " + fixedDecimals(paperRec[idx], 0) + " / " + fixedDecimals(paperFft[idx], 0) : "-") << " |\n";
      gauss.push_back({{"half_size", half}, {"sigma", sigma}, {"separable_ms", t[0]}, {"recursive_ms", t[1]}, {"fft_ms", t[2]}});
      ++idx;
    }
    md << "\nThe down-sampler uses the recursive filter; FFT computes the separable operator through a clamp-padded "
          "real FFT (core/Gaussian.hpp).\n";
    // n-ary vs binary at the largest size.
    std::vector<ImageView<Mem>> imgs;
    for (int k = 0; k < kMaxAverageInputs; ++k) {
      imgs.emplace_back("kortex::bench::img", big.nz, big.ny, big.nx);
      Kokkos::deep_copy(imgs.back(), float(k));
    }
    ImageView<Mem> t1("kortex::bench::t1", big.nz, big.ny, big.nx), t2("kortex::bench::t2", big.nz, big.ny, big.nx);
    auto fusedAxpby = [&] { gpu::axpby(exec, 0.5f, imgs[0], 2.0f, imgs[1], out); };
    auto binaryAxpby = [&] {
      gpu::scale(exec, 0.5f, imgs[0], t1);
      gpu::scale(exec, 2.0f, imgs[1], t2);
      gpu::add(exec, t1, t2, out);
    };
    std::vector<ConstImageView<Mem>> eight(imgs.begin(), imgs.end());
    auto fusedAvg = [&] { gpu::average(exec, eight, out); };
    auto binaryAvg = [&] {
      gpu::add(exec, imgs[0], imgs[1], t1);
      for (int k = 2; k < kMaxAverageInputs; ++k) gpu::add(exec, t1, imgs[k], t1);
      gpu::scale(exec, 1.0f / kMaxAverageInputs, t1, out);
    };
    const double fa = timeMedian(fusedAxpby, fence, warm, reps).medianMs, ba = timeMedian(binaryAxpby, fence, warm, reps).medianMs;
    const double fv = timeMedian(fusedAvg, fence, warm, reps).medianMs, bv = timeMedian(binaryAvg, fence, warm, reps).medianMs;
    rep.measured += 4;
    auto gbs = [&](double units, double t) { return units * 4.0 * bigVox / (t * 1e-3) * 1e-9; };
    md << "\n### n-ary fused vs binary operators at " << big.nx << "x" << big.ny << "x" << big.nz
       << " (Figs 2, 3; traffic in image units: axpby 3 fused / 7 binary, average of 8: 9 / 23)\n\n"
       << "| operator | fused ms | fused GB/s | % of copy | binary ms | binary / fused |\n|---|---|---|---|---|---|\n"
       << "| a y + b z | " << fixedDecimals(fa) << " | " << fixedDecimals(gbs(3, fa), 0) << " | " << fixedDecimals(100 * gbs(3, fa) / copyGBs, 0) << " | "
       << fixedDecimals(ba) << " | " << fixedDecimals(ba / fa, 2) << " |\n"
       << "| average of 8 | " << fixedDecimals(fv) << " | " << fixedDecimals(gbs(9, fv), 0) << " | " << fixedDecimals(100 * gbs(9, fv) / copyGBs, 0)
       << " | " << fixedDecimals(bv) << " | " << fixedDecimals(bv / fv, 2) << " |\n\nPaper: 2-3x.\n\n";
    nary = {{"axpby_fused_ms", fa}, {"axpby_binary_ms", ba}, {"average8_fused_ms", fv}, {"average8_binary_ms", bv},
            {"axpby_fused_GBs", gbs(3, fa)}, {"average8_fused_GBs", gbs(9, fv)}};
    j["gradient"] = grad;
    j["gaussian"] = gauss;
    j["nary"] = nary;
  }

  // ---- IXI ---------------------------------------------------------------------------------------
  const fs::path ixi = opt.dataDir.empty() ? fs::path() : fs::path(opt.dataDir) / "mri" / "ixi_2mm";
  if (!ixi.empty() && selected(opt.only, "IXI")) {
    const fs::path lab = fs::path(opt.dataDir) / "mri" / "ixi_2mm_labels";
    const std::string a = "IXI012-HH-1211-T1_ds", b = "IXI013-HH-1212-T1_ds";
    if (!fs::exists(ixi / (a + ".nii.gz")) || !fs::exists(ixi / (b + ".nii.gz"))) {
      md << "## IXI pair\n\nnot run: " << ixi.string() << " lacks the pair IXI013 -> IXI012\n\n";
    } else {
      say("IXI pair end to end");
      md << "## IXI pair (IXI013 -> IXI012, 120x120x90 at 2 mm)\n\n"
         << "| run | scales | iterations | solver | end to end s | greedy s | affine s | mean label Dice |\n"
         << "|---|---|---|---|---|---|---|---|\n";
      const bool labels = fs::exists(lab / (a + "_DLMUSE.nii.gz")) && fs::exists(lab / (b + "_DLMUSE.nii.gz"));
      HostImage fixedLabels, movingLabels;
      if (labels) {
        fixedLabels = io::readImage(lab / (a + "_DLMUSE.nii.gz"));
        movingLabels = io::readImage(lab / (b + "_DLMUSE.nii.gz"));
      }
      struct Run {
        std::string name;
        std::vector<int> scales, iterations;
      };
      std::vector<Run> runs = {{"multi-scale (paper)", {2, 1}, {25, 50}}, {"single scale", {1}, {200}}};
      if (opt.tiny) runs = {{"multi-scale", {2, 1}, {3, 3}}};
      nlohmann::json rows = nlohmann::json::array();
      for (auto const& run : runs) {
        std::vector<double> totals;
        pipeline::RegistrationPipelineResult last;
        HostImage fixed, moving;
        for (int rpt = 0; rpt < (opt.tiny || !onDevice ? 1 : 5); ++rpt) {
          auto t0 = Clock::now();
          fixed = io::readImage(ixi / (a + ".nii.gz"));
          moving = io::readImage(ixi / (b + ".nii.gz"));
          pipeline::RegistrationPipelineOptions po;
          po.backend = Backend::Kokkos;
          po.method = pipeline::RegistrationMethod::Greedy;
          po.greedy.scales = run.scales;
          po.greedy.iterations = run.iterations;
          last = pipeline::registerPair(moving, fixed, po);
          HostImage warped = pipeline::warpedMoving(last, moving);
          auto field = pipeline::worldDisplacement(last);
          totals.push_back(secondsSince(t0));
          ++rep.measured;
        }
        std::sort(totals.begin(), totals.end());
        const double med = totals[totals.size() / 2];
        double dice = NAN;
        if (labels) dice = validation::diceSummary(fixedLabels, pipeline::warpedLabels(last, movingLabels)).meanAllLabels;
        std::string sc, it;
        for (std::size_t k = 0; k < run.scales.size(); ++k) {
          sc += (k ? "," : "") + std::to_string(run.scales[k]);
          it += (k ? "," : "") + std::to_string(run.iterations[k]);
        }
        md << "| " << run.name << " | " << sc << " | " << it << " | " << toString(GreedyParams{}.solver) << " | "
           << fixedDecimals(med) << " | " << fixedDecimals(last.secondsFluid) << " | " << fixedDecimals(last.secondsAffine) << " | " << fixedDecimals(dice, 4)
           << " |\n";
        nlohmann::json x = pipeline::toJson(last);
        x["end_to_end_s_median"] = med;
        x["end_to_end_s"] = totals;
        x["mean_label_dice"] = dice;
        x["name"] = run.name;
        rows.push_back(x);
        if (&run == &runs.front() && onDevice && !opt.tiny) j["targets"]["ixi_pair_s"] = med;
      }
      j["ixi"] = rows;
      if (onDevice && !opt.tiny && j.contains("targets") && j["targets"].contains("ixi_pair_s")) {
        const double s = j["targets"]["ixi_pair_s"].get<double>();
        md << "\nTarget: IXI pair end to end (read, normalise, affine, 2 scales, warped image + field in memory) <= "
           << kTargetIxiPairS << " s: " << (s <= kTargetIxiPairS ? "met" : "missed") << " (" << fixedDecimals(s) << " s).\n\n";
      }
    }
  }
  md << "\nMemory-bound kernels are expected at >= " << fixedDecimals(100 * kTargetBandwidthShare, 0)
     << " % of the measured copy bandwidth (the GB/s columns above).\n";
  common::finishReport(rep, j, md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
