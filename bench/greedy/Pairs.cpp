// Greedy benchmark, pairs and cohorts (--data; issue 40):
//   Pair    2-mm IXI pairs end to end in-process (normalise, affine, the three greedy scales, the
//           warped image in memory), LNCC and SSD with the registration's defaults: stage medians;
//   Cohort  the IXI T1 volumes registered to IXI012 by the cohort job (pipeline/RegisterCohort.hpp;
//           images in memory, the job's report its only output), >= 100 registrations on a device:
//           pairs per second one pair at a time and with the planned concurrent pairs.
#include "bench/greedy/GreedyBench.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/Timing.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Register.hpp"
#include "pipeline/RegisterCohort.hpp"

namespace kortex::bench::greedy {

namespace fs = std::filesystem;
using common::fixedDecimals;

namespace {

// Issue 40's goals (H100 / H200): a pair end to end, and a cohort's pairs per second.
constexpr double kGoalPairLnccS = 0.05, kGoalPairSsdS = 0.03, kGoalCohortPairsPerS = 50.0;
const char* kFixed = "IXI012-HH-1211-T1_ds";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

// The IXI T1 volumes of the data folder other than the fixed one (ixi_2mm, then ixi_2mm_more/t1).
std::vector<fs::path> ixiMoving(fs::path const& data) {
  std::vector<fs::path> out;
  for (fs::path dir : {data / "mri" / "ixi_2mm", data / "mri" / "ixi_2mm_more" / "t1"}) {
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> here;
    for (auto const& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.find("-T1") != std::string::npos && n.find(".nii") != std::string::npos && n.find(kFixed) == std::string::npos)
        here.push_back(e.path());
    }
    std::sort(here.begin(), here.end());
    out.insert(out.end(), here.begin(), here.end());
  }
  return out;
}

std::string goal(double got, double want) { return got <= want ? "met" : "missed"; }

}  // namespace

void runPairs(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  std::ostringstream& md = ctx.md;
  const fs::path data = opt.dataDir, fixedPath = data / "mri" / "ixi_2mm" / (std::string(kFixed) + ".nii.gz");
  const auto moving = ixiMoving(data);
  if (!fs::exists(fixedPath) || moving.size() < 2) {
    md << "## IXI pairs end to end\n\nnot run: " << data.string() << " lacks the IXI volumes\n\n";
    return;
  }
  ctx.say("IXI pairs end to end");
  const HostImage fixed = io::readImage(fixedPath);
  const int reps = opt.tiny || !ctx.onDevice ? 1 : 5;
  md << "## IXI pairs end to end (issue 40)\n\n"
     << "Two pairs (" << moving[0].filename().string() << ", " << moving[1].filename().string() << " -> " << kFixed
     << "), 2 mm, the registration's defaults (scales 4,2,1; iterations 50,50,100; fft), in-process: normalise, "
        "affine, greedy, the warped image in memory; file reading excluded. "
     << reps << " runs per pair after one warm-up, medians; registerPair keeps the greedy stage's workspace "
        "(device images, fields, FFT plans) for the next pair on the same grid, so the runs after the warm-up reuse "
        "it, and the warm-up (first call s: the first pair's, the workspace made) is the time of a pair in a fresh "
        "process, less the CUDA context and module loading.\n\n"
     << "Affine split: its levels' optimisation (the metric evaluations and the optimiser) and the rest (the "
        "pyramid and the level images' upload). Greedy split: the registration's own run (its scales; the rest of the stage is the padding, the workspace with its FFT plans, the copies and the field's crop) and its seconds per scale (coarse to fine). Read-backs: the "
        "greedy stage's iterations per read-back (its speculative blocks, gpu/greedy/Greedy.hpp; 1, every "
        "iteration, is the default; the same result), \"recorded\": the blocks recorded once per scale and launched "
        "again (a CUDA graph; the same result), with the blocks per run actually launched from a recording (0: the "
        "back end did not record).\n\n"
     << "| metric | read-backs | first call s | total s | normalise s | affine s | affine levels s | resample s | greedy s | greedy run s | greedy per "
        "scale s | goal |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  // The defaults of both metrics, then LNCC's greedy stage with other read-back blocks.
  struct Run {
    GreedyMetric metric;
    int speculation;
    bool recording;
  };
  const std::vector<Run> runs = {{GreedyMetric::Lncc, 0, false}, {GreedyMetric::Ssd, 0, false},
                                 {GreedyMetric::Lncc, 8, false},  {GreedyMetric::Lncc, 16, false},
                                 {GreedyMetric::Lncc, 8, true},   {GreedyMetric::Lncc, 16, true},
                                 {GreedyMetric::Ssd, 8, true}};
  for (auto const& [metric, speculation, recording] : runs) {
    if (speculation > 0 && !ctx.onDevice) continue;  // the blocks are for a device's queue
    pipeline::RegistrationPipelineOptions po;
    po.backend = Backend::Kokkos;
    po.method = pipeline::RegistrationMethod::Greedy;
    po.greedy = greedyRegistrationDefaults();
    po.greedy.metric = metric;
    po.greedySpeculation = speculation;
    po.greedyRecording = recording;
    const int block = speculation;
    if (opt.tiny) po.greedy.iterations.assign(po.greedy.scales.size(), 2);
    std::vector<double> total, norm, aff, affLevels, res, flu, run, first;
    int recordedBlocks = 0;  // over the timed runs: blocks launched from a recording
    std::vector<std::vector<double>> perScale(po.greedy.scales.size());
    for (int m = 0; m < 2; ++m) {
      const HostImage mv = io::readImage(moving[std::size_t(m)]);
      for (int r = -1; r < reps; ++r) {
        const auto t0 = Clock::now();
        const auto p = pipeline::registerPair(mv, fixed, po);
        const HostImage warped = pipeline::warpedMoving(p, mv);
        const double s = secondsSince(t0);
        if (r < 0) {  // warm-up: the first pair of a row makes the greedy workspace that registerPair keeps
          first.push_back(s);
          continue;
        }
        total.push_back(s), norm.push_back(p.secondsNormalise), aff.push_back(p.secondsAffine);
        res.push_back(p.secondsResample), flu.push_back(p.secondsFluid);
        double levels = 0.0;
        for (auto const& l : p.affineResult.perLevel) levels += l.seconds;
        affLevels.push_back(levels);
        run.push_back(p.greedy.seconds);
        recordedBlocks += p.greedy.recordedBlocks;
        for (std::size_t s = 0; s < p.greedy.scales.size() && s < perScale.size(); ++s)
          perScale[s].push_back(p.greedy.scales[s].seconds);
        ++ctx.rep.measured;
      }
    }
    const double want = metric == GreedyMetric::Lncc ? kGoalPairLnccS : kGoalPairSsdS;
    const double recordedPerRun = double(recordedBlocks) / double(std::max<std::size_t>(run.size(), 1));
    md << "| " << toString(metric) << " | " << std::max(block, 1)
       << (recording ? ", recorded (" + std::to_string(int(recordedPerRun)) + " per run)" : std::string())
       << " | " << fixedDecimals(first.front(), 4) << " | "
       << fixedDecimals(median(total), 4) << " | " << fixedDecimals(median(norm), 4)
       << " | " << fixedDecimals(median(aff), 4) << " | " << fixedDecimals(median(affLevels), 4) << " | "
       << fixedDecimals(median(res), 4) << " | " << fixedDecimals(median(flu), 4) << " | " << fixedDecimals(median(run), 4)
       << " | ";
    std::vector<double> scaleMedians;
    for (std::size_t s = 0; s < perScale.size(); ++s) {
      scaleMedians.push_back(median(perScale[s]));
      md << (s ? ", " : "") << fixedDecimals(scaleMedians.back(), 4);
    }
    md << " | <= " << want << " s: " << goal(median(total), want) << " |\n";
    rows.push_back({{"metric", toString(metric)}, {"iterations_per_read_back", std::max(block, 1)}, {"recorded_blocks", recording}, {"recorded_blocks_per_run", recordedPerRun}, {"first_call_s", first}, {"total_s", total}, {"median_s", median(total)},
                    {"normalise_median_s", median(norm)}, {"affine_median_s", median(aff)},
                    {"affine_levels_median_s", median(affLevels)}, {"greedy_run_median_s", median(run)}, {"greedy_scale_median_s", scaleMedians},
                    {"resample_median_s", median(res)}, {"greedy_median_s", median(flu)}});
    if (ctx.onDevice && !opt.tiny && speculation == 0)
      ctx.j["targets"][metric == GreedyMetric::Lncc ? "pair_lncc_median_s" : "pair_ssd_median_s"] = median(total);
  }
  ctx.j["pair"] = rows;
  md << "\n";
}

void runCohort(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  std::ostringstream& md = ctx.md;
  const fs::path data = opt.dataDir, fixedPath = data / "mri" / "ixi_2mm" / (std::string(kFixed) + ".nii.gz");
  const auto files = ixiMoving(data);
  if (!fs::exists(fixedPath) || files.empty()) {
    md << "## Cohort\n\nnot run: " << data.string() << " lacks the IXI volumes\n\n";
    return;
  }
  ctx.say("cohort");
  const bool full = ctx.onDevice && !opt.tiny;
  const int registrations = full ? std::max<int>(100, int(files.size())) : 2;
  pipeline::RegisterCohortJob job;
  job.fixed.path = fixedPath;
  for (int i = 0; i < registrations; ++i) job.moving.push_back({files[std::size_t(i) % files.size()], {}});
  job.backend = Backend::Kokkos;
  if (opt.tiny || !ctx.onDevice) job.greedy.iterations.assign(job.greedy.scales.size(), 2);
  const fs::path dir = fs::temp_directory_path() / ("kortex-bench-cohort-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  job.report = dir / "cohort.json";
  md << "## Cohort (issue 40)\n\n" << registrations << " registrations (the " << files.size()
     << " IXI T1 volumes other than " << kFixed << ", in turn) to " << kFixed
     << ", LNCC with the defaults, by the cohort job (its JSON report the only file written): pairs per second of "
        "its register stage (the pairs and their reports; reading the files is the read stage, before it).\n\n"
     << "| schedule | pairs at once | pair MiB | register s | pairs/s | goal |\n|---|---|---|---|---|---|\n";
  nlohmann::json rows = nlohmann::json::array();
  const Geometry grid = io::readImage(fixedPath).geometry;
  const std::int64_t pairBytes = pipeline::greedyPairDeviceBytes(grid, grid, job.greedy);
  for (bool concurrent : {false, true}) {
    // One pair at a time: a memory cap of one pair (the planner's own rule).
    job.maxMemoryMiB = concurrent ? 0.0 : double(pairBytes) / 1048576.0 * 1.5;
    const auto r = pipeline::runRegisterCohort(job);
    ctx.rep.measured += r.registered();
    if (r.failed() > 0) ctx.fail("cohort: " + std::to_string(r.failed()) + " registrations failed");
    const double pps = r.pairsPerSecond();
    md << "| " << (concurrent ? "planned (device memory)" : "one after another") << " | " << r.concurrentPairs << " | "
       << fixedDecimals(double(r.pairBytes) / 1048576.0, 0) << " | " << fixedDecimals(r.secondsRegister, 3) << " | "
       << fixedDecimals(pps, 2) << " | " << (concurrent ? ">= 50 pairs/s: " + goal(-pps, -kGoalCohortPairsPerS) : "-")
       << " |\n";
    rows.push_back({{"concurrent_pairs", r.concurrentPairs}, {"pair_device_bytes", r.pairBytes},
                    {"register_s", r.secondsRegister}, {"pairs_per_second", pps}, {"registrations", registrations}});
    if (concurrent && full) ctx.j["targets"]["cohort_lncc_pairs_per_s"] = pps;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  ctx.j["cohort"] = rows;
  md << "\n";
}

}  // namespace kortex::bench::greedy
