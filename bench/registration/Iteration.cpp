// Registration benchmark, Fig 2a/2b: one accepted iteration's kernel sequence (force + smoothing,
// rate and max + update) and its split (default force variant and TwoPass), FluidRegistration::run for a fixed number of iterations, the
// CPU reference at 1 thread and all threads, speedups, GB/s, and the PyTorch peer.
#include "bench/registration/RegistrationBench.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/Timing.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::bench::registration {

using common::fixedDecimals;
using common::selected;

namespace {

// Fig 2a/2b at n^3 (`label`): a row of the table (Markdown, `fig2`) and of the split (`split`).
void fig2Size(Context& ctx, Index n, std::string const& label, int allThreads, nlohmann::json& fig2,
              std::ostringstream& split, nlohmann::json& splits, double& seq240) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  Exec& exec = ctx.exec;
  std::ostringstream& md = ctx.md;
  const int reps = ctx.reps, warm = ctx.warm;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fail = [&](std::string const& what) { ctx.fail(what); };
  nlohmann::json const& peers = ctx.peers;
  const bool onDevice = ctx.onDevice;
  const double copyGBs = ctx.copyGBs;
  say("iterations at " + std::to_string(n) + "^3");
  Volume h = makeVolume(n);
  DeviceVolume d = upload(h);
  const double vox = double(n) * n * n;
  RegistrationParams p;
  p.lambda = kLambda;
  p.sigma = kSigma;
  const ri::GaussianTaps taps = ri::gaussianTaps(p.sigma);
  using CF = gpu::ConstField<Mem>;
  auto fence = [&] { exec.fence(); };
  // One accepted iteration's kernel sequence, as FluidRegistration::run makes it: the force's smoothing,
  // rate and max (the rate into d.v), then the force at the candidate u + dt * rate, which the force
  // kernel forms while loading u where its variant fuses the update (ForceKernel::kFusesUpdate), else
  // after a separate update. With the default force variant, then with TwoPass (it trades 36 B per voxel
  // of memory for one stress evaluation per voxel).
  std::vector<RegistrationVariant> forces = {p.variant};
  if (p.variant != RegistrationVariant::TwoPass) forces.push_back(RegistrationVariant::TwoPass);
  TimingStats ts;
  for (RegistrationVariant fv : forces) {
    const ri::ForceLaunchInfo info = ri::forceLaunchInfo(exec, d.e, fv);
    const ri::ForceViews<Mem> views = forceViews(d, fv);
    ri::ForceViews<Mem> candidate = views;  // u + dt * d.v into d.u2, its force into d.f
    candidate.rate = d.v;
    candidate.uOut = d.u2;
    ri::computeForce(exec, views, d.e, p.lambda, info);  // a force to smooth in the first repetition
    auto seq = [&] {
      const double m = ri::smoothRate(exec, CF(d.f), CF(d.u), d.v, d.v, d.tmp, taps, d.e);
      candidate.dt = float(0.5 / m);
      ri::computeForce(exec, candidate, d.e, p.lambda, info);
    };
    const TimingStats tSeq = timeMedian(seq, fence, warm, reps);
    ++rep.measured;
    // The split: force at u; force at the candidate (with the update, fused or not); smoothing + rate + max
    // (x-y pass, then z pass and rate in one kernel); the update alone.
    const TimingStats tForce = timeMedian([&] { ri::computeForce(exec, views, d.e, p.lambda, info); }, fence, warm, reps);
    const TimingStats tForceUpdate =
        timeMedian([&] { ri::computeForce(exec, candidate, d.e, p.lambda, info); }, fence, warm, reps);
    const TimingStats tSmoothRate =
        timeMedian([&] { ri::smoothRate(exec, CF(d.f), CF(d.u), d.v, d.u2, d.tmp, taps, d.e); }, fence, warm, reps);
    // The fused z + rate kernel's run length: the shipped one and runs of 8 (ri::kSmoothRateRun's measurement).
    const TimingStats tSmoothRate8 = timeMedian(
        [&] { ri::smoothRate<Exec, 8>(exec, CF(d.f), CF(d.u), d.v, d.u2, d.tmp, taps, d.e); }, fence, warm, reps);
    const TimingStats tUpdate =
        timeMedian([&] { gpu::applyUpdate(exec, CF(d.u), CF(d.u2), 0.25f, d.tmp); }, fence, warm, reps);
    split << "| " << n << "^3 | " << toString(fv) << " | " << fixedDecimals(tForce.medianMs) << " | "
          << fixedDecimals(tForceUpdate.medianMs) << (ri::fusesUpdate<Exec>(fv) ? " (fused)" : " (separate)") << " | "
          << fixedDecimals(tSmoothRate.medianMs) << " (radius " << smoothingRadius(p.sigma) << ") | "
          << fixedDecimals(tSmoothRate8.medianMs) << " | " << fixedDecimals(tUpdate.medianMs) << " | " << fixedDecimals(tSeq.medianMs) << " |\n";
    splits.push_back({{"size", n}, {"variant", toString(fv)}, {"force_ms", tForce.medianMs},
                      {"force_candidate_ms", tForceUpdate.medianMs}, {"update_fused", ri::fusesUpdate<Exec>(fv)},
                      {"smooth_rate_ms", tSmoothRate.medianMs}, {"smooth_rate_run", ri::kSmoothRateRun},
                      {"smooth_rate_runs8_ms", tSmoothRate8.medianMs}, {"update_ms", tUpdate.medianMs},
                      {"sequence_ms", tSeq.medianMs}, {"sequence_reps", tSeq.repetitions}});
    if (fv == p.variant) ts = tSeq;
  }
  if (n == 240) seq240 = ts.medianMs;
  // Whole run.
  const int its = opt.tiny ? 5 : 50;
  RegistrationParams pr = p;
  pr.iterations = its;
  pr.tolerance = 0.0;
  gpu::FluidRegistration<Exec> reg(exec, h.fixed.geometry, pr);
  gpu::Field<Mem> u0("kortex::bench::u0", 3, n, n, n);
  exec.fence();
  auto t0 = Clock::now();
  RegistrationResult rr = reg.run(d.moving, d.fixed, u0);
  exec.fence();
  const double runMs = secondsSince(t0) * 1e3 / std::max(1, rr.iterations);
  if (!(rr.final.total < rr.initial.total)) fail(label + ": the Kokkos registration did not lower the energy");
  // CPU reference, 1 thread and all threads.
  auto cpuRun = [&](int threads) -> std::pair<double, int> {
    common::OmpThreads scope(threads);
    const double estPerVoxelS = 2e-7 * 16 / threads;  // rough: skip sizes that would take minutes
    int cits = std::max(1, std::min(its, int(20.0 / (estPerVoxelS * vox))));
    if (opt.tiny) cits = 2;
    RegistrationParams pc = p;
    pc.iterations = cits;
    pc.tolerance = 0.0;
    VectorField<Kokkos::HostSpace> uc("kortex::bench::uc", h.fixed.geometry, 3);
    auto c0 = Clock::now();
    RegistrationResult cr = ref::fluidRegister(h.moving, h.fixed, uc, pc);
    return {secondsSince(c0) * 1e3 / std::max(1, cr.iterations), cr.iterations};
  };
  std::pair<double, int> cpu1{NAN, 0}, cpuAll{NAN, 0};
  const bool cpuOk = opt.tiny || onDevice ? (n <= 256) : true;
  if (cpuOk && selected(opt.only, label)) {
    cpuAll = cpuRun(allThreads);
    // One thread: at 128^3 and 240^3 only on a GPU machine (tens of seconds per iteration above).
    if (opt.tiny || !onDevice || ((n == 128 || n == 240) && !opt.quick)) cpu1 = cpuRun(1);
  }
  double torchMs = NAN;
  if (peers.is_object() && peers.contains("results"))
    for (auto const& r : peers["results"])
      if (r.value("algorithm", "") == "registration-iteration" && r.value("size", 0) == n &&
          r.value("median_ms", nlohmann::json()).is_number())
        torchMs = r["median_ms"].get<double>();
  const double gbs = kIterationBytesPerVoxel * vox / (ts.medianMs * 1e-3) * 1e-9;
  md << "| " << n << "^3 | " << fixedDecimals(ts.medianMs) << " | " << fixedDecimals(gbs, 0) << " | " << fixedDecimals(100 * gbs / copyGBs, 0)
     << " | " << fixedDecimals(runMs) << " | " << rr.iterations << " | " << fixedDecimals(cpu1.first, 0) << " | "
     << fixedDecimals(cpuAll.first, 0) << " | " << fixedDecimals(cpu1.first / runMs, 0) << " | " << fixedDecimals(cpuAll.first / runMs, 1)
     << " | " << fixedDecimals(torchMs) << " |\n";
  fig2.push_back({{"size", n},
                  {"sequence_ms", ts.medianMs},
                  {"sequence_reps", ts.repetitions},
                  {"GBs", gbs},
                  {"run_ms_per_iteration", runMs},
                  {"run_iterations", rr.iterations},
                  {"run_accepted", rr.accepted},
                  {"cpu1_ms_per_iteration", cpu1.first},
                  {"cpu1_iterations", cpu1.second},
                  {"cpu_all_ms_per_iteration", cpuAll.first},
                  {"cpu_all_iterations", cpuAll.second},
                  {"cpu_all_threads", allThreads},
                  {"torch_ms_per_iteration", torchMs},
                  {"variant", toString(p.variant)}});
}

}  // namespace

double runIteration(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  std::ostringstream& md = ctx.md;
  std::vector<Index> const& iterSizes = ctx.iterSizes;
  md << "## Fig 2a/2b: one iteration, Kokkos vs the CPU reference\n\n"
     << "`sequence`: one accepted iteration's kernels (smoothing + rate/max, then the force at the candidate with the update), fenced, median. "
        "`run`: FluidRegistration::run for a fixed number of iterations (no early stop), wall time / "
        "iterations (includes rejected candidates and host decisions). CPU: ref::fluidRegister, wall time / "
        "iterations, at 1 thread and all threads.\n\n"
     << "| size | Kokkos sequence ms | GB/s (176 B/voxel) | % copy BW | Kokkos run ms/it | its | CPU 1 thr ms/it "
        "| CPU all ms/it | speedup vs 1 thr | speedup vs all | torch ms/it |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json fig2 = nlohmann::json::array();
  std::ostringstream split;
  nlohmann::json splits = nlohmann::json::array();
  split << "\nSplit of the sequence (each part timed alone, median ms), with the default force variant and with "
           "TwoPass: the force at u; the force at the candidate u + dt * rate, the update fused into its loads or run "
           "separately first (the sequence's force); the smoothing + rate, again with the fused z + rate kernel's runs "
           "of 8 voxels instead of "
        << ri::kSmoothRateRun << "; the update alone:\n\n| size | force variant | force | force at the candidate "
           "| smoothing + rate + max | the same, runs of 8 | update | sequence |\n|---|---|---|---|---|---|---|---|\n";
  const int allThreads = omp_get_max_threads();
  double seq240 = NAN;
  for (Index n : iterSizes) {
    const std::string label = "Fig2 " + std::to_string(n) + "^3";
    if (!selected(opt.only, label)) continue;
    fig2Size(ctx, n, label, allThreads, fig2, split, splits, seq240);
  }
  ctx.j["fig2"] = fig2;
  ctx.j["fig2_split"] = splits;
  md << split.str();
  return seq240;
}

}  // namespace kortex::bench::registration
