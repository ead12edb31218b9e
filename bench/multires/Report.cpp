// `kortex bench multires`: the JSON and Markdown reports of one run, built from the sections'
// rows (bench/multires/MultiresSections.hpp) and the run's Context; derived rates (Gtaps/s,
// GB/s, FPS, speedups, the targets' verdicts) are computed here from the measured medians.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/PaperMultires.hpp"
#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Compat.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "io/Output.hpp"
#include "pipeline/MultiresTileSpace.hpp"
#include "validation/Report.hpp"

namespace kortex::bench::multires {

namespace {

using common::cell;
using common::Measurement;
using validation::fmt;
using validation::fmtMs;
namespace paper = paper_multires;
namespace md = gpu::multires_detail;
using nlohmann::json;

// Best measured Kokkos end-to-end configuration of a row; -1 when none.
// A configuration whose output failed its check at any size (Table 2 checks every configuration at the
// smallest size only) is never the best at any size: a fast wrong result is no result.
bool failedCheckAnywhere(std::vector<Table2Row> const& rows, int c) {
  for (auto const& r : rows)
    if (r.e2e[c].status == "check failed") return true;
  return false;
}
int bestE2e(std::vector<Table2Row> const& rows, Table2Row const& r) {
  int b = -1;
  for (int c = 0; c < kNumE2e; ++c)
    if (r.e2e[c].measured() && !failedCheckAnywhere(rows, c) &&
        (b < 0 || r.e2e[c].timing.medianMs < r.e2e[b].timing.medianMs))
      b = c;
  return b;
}

double fps(Measurement const& m) { return m.measured() ? 1e3 / m.timing.medianMs : -1.0; }
std::string fpsCell(Measurement const& m) {
  if (!m.measured()) return cell(m);
  return fmt(fps(m), 4) + (m.status == "single" ? " (1 run)" : "");
}

// Kokkos's best end-to-end ms at `n` (any configuration that passed its checks), or -1.
double bestE2eMs(std::vector<Table2Row> const& rows, Index n, std::string* config) {
  for (auto const& r : rows)
    if (r.n == n) {
      const int b = bestE2e(rows, r);
      if (b < 0) return -1.0;
      if (config) *config = kE2e[b].name;
      return r.e2e[b].timing.medianMs;
    }
  return -1.0;
}

// Peer entries of the multires pipeline.
std::vector<json const*> peerEntries(json const& peers) {
  std::vector<json const*> out;
  if (peers.is_null() || !peers.contains("results") || !peers["results"].is_array()) return out;
  for (auto const& e : peers["results"])
    if (e.is_object() && e.value("algorithm", std::string()) == "multires") out.push_back(&e);
  return out;
}

// Pixels x window taps per second of a layer-bilateral run, in G.
double gtapsPerS(Index n, Measurement const& m) {
  return double(n) * double(n) * kWindowTaps / (m.timing.medianMs * 1e-3) * 1e-9;
}

// The fastest and the slowest measured candidate tiles of Fig 6 (the first on ties) and how many
// candidates were measured.
struct Fig6Extremes {
  Fig6Row const* best = nullptr;
  Fig6Row const* worst = nullptr;
  int measured = 0;
};
Fig6Extremes fig6Extremes(std::vector<Fig6Row> const& rows) {
  Fig6Extremes x;
  for (auto const& r : rows)
    if (r.candidate && r.m.measured()) {
      ++x.measured;
      if (!x.best || r.m.timing.medianMs < x.best->m.timing.medianMs) x.best = &r;
      if (!x.worst || r.m.timing.medianMs > x.worst->m.timing.medianMs) x.worst = &r;
    }
  return x;
}

// ---- JSON -----------------------------------------------------------------------------------

json runJson(Context const& ctx) {
  common::Mode const& mode = ctx.mode();
  json j;
  j["kind"] = "kortex-bench-multires";
  j["mode"] = mode.name;
  j["environment"] = io::environmentJson(true);
  j["device_execution_space"] = Exec::name();
  j["device_concurrency"] = kx::concurrency(ctx.exec());
  j["concurrent_level_instances"] = kx::hasConcurrentInstances<Exec>;
  j["cpu_reference_threads"] = {paper::kTable2CpuThreads, ctx.cpuThreads()};
  j["device_copy_bandwidth_gb_per_s"] = ctx.copyGBs();
  j["cache_bytes_for_rotation"] = ctx.cacheBytes();
  j["max_rotation_slots"] = ctx.slotsUsedMax();
  j["budgets_s"] = {{"device_case", mode.devBudget}, {"device_single", mode.devSingle},
                    {"cpu_case", mode.cpuBudget},    {"cpu_single", mode.cpuSingle},
                    {"total", mode.total},           {"device_share", mode.deviceShare},
                    {"device_section_shares", {{"fig4", kSectionShare[0]}, {"fig5", kSectionShare[1]},
                                               {"fig6", kSectionShare[2]}, {"table2", kSectionShare[3]}}}};
  j["input"] = "Shepp-Logan phantom scaled to 10 bits (0..1023) + Gaussian noise at SNR 25 (sigma_n = mean / 25), "
               "rounded and clamped to 0..1023; float and uint16 copies of the same values";
  j["params"] = {{"levels", kLevels},
                 {"radius", kRadius},
                 {"window", 2 * kRadius + 1},
                 {"sigma_spatial", kSigmaSpatial},
                 {"sigma_range_rule", "2 x sigma_n (grey levels)"},
                 {"bits", kBits},
                 {"float_pipeline", std::string(toString(MultiresParams{}.pyramid)) + " + " + toString(MultiresParams{}.bilateral)},
                 {"integer_pipeline", std::string(toString(MultiresParams{}.pyramid)) + " + ClosenessSimilarityLut"}};
  json noise = json::array();
  for (auto const& kv : ctx.noise())
    noise.push_back({{"size", kv.first}, {"sigma_n", kv.second.first},
                     {"sigma_range", kSigmaRangePerNoise * kv.second.first}, {"psnr_noisy_db", kv.second.second}});
  j["inputs"] = noise;
  j["paper"] = {{"device", paper::kDevice}, {"cpu", paper::kCpu}, {"source", paper::kCitation}};
  j["definitions"] = {
      {"gtaps_per_s", "pixels x 25 window taps / median time"},
      {"gflop_per_s", "gtaps_per_s x the variant's operations per tap (ops_per_tap; an exp counts as 1)"},
      {"pyramid_min_traffic",
       "every kernel reads its inputs once and writes its outputs once; level sizes s_k, b bytes per pixel (4 "
       "float, 2 int16/uint16): level-0 expand operator 2 s_0 + s_1; decompose sum_{k<5} (3 s_k + 2 s_{k+1}) "
       "(reduce s_k + s_{k+1}, laplacian 2 s_k + s_{k+1}); reconstruct sum_{k<5} (2 s_k + s_{k+1}); the same "
       "count for every variant (Unfused moves more through its temporaries)"},
      {"gb_per_s", "minimum traffic / median time"},
      {"fraction_of_copy_bandwidth", "gb_per_s / device_copy_bandwidth_gb_per_s"},
      {"fps", "1000 / median ms"}};
  return j;
}

json fig4Json(std::vector<Fig4Row> const& rows) {
  json f4 = json::array();
  for (auto const& r : rows) {
    json e = common::timingJson(r.m);
    const TapOps ops = tapOps(r.variant);
    e["variant"] = toString(r.variant);
    e["layer"] = r.integer() ? "int16 (10-bit data)" : "float";
    e["size"] = r.n;
    e["ops_per_tap"] = ops.ops;
    e["op_unit"] = ops.unit;
    e["ops_counted"] = ops.counted;
    if (r.tiles.bilateralX > 0) e["tile"] = {{"x", r.tiles.bilateralX}, {"y", r.tiles.bilateralY}, {"source", r.tiles.bilateralSource}};
    if (r.m.measured()) {
      const double s = r.m.timing.medianMs * 1e-3;
      const double gtaps = double(r.n) * double(r.n) * kWindowTaps / s * 1e-9;
      e["gtaps_per_s"] = gtaps;
      e["gops_per_s"] = gtaps * ops.ops;
    }
    if (r.variant == MultiresBilateralVariant::FastMath)
      e["paper_gflops"] = {{"value", paper::kFig4NaiveIntrinsicsGflops}, {"what", "naive + intrinsics"}};
    if (r.variant == MultiresBilateralVariant::ClosenessLut)
      e["paper_gflops"] = {{"value", paper::kFig4LutIntrinsicsGflops},
                           {"what", "LUT + intrinsics (ours: LUT with the standard exp)"}};
    f4.push_back(e);
  }
  return f4;
}

json fig5Json(std::vector<Fig5Row> const& rows, double copyGBs) {
  json f5 = json::array();
  for (auto const& r : rows)
    for (int o = 0; o < 4; ++o) {
      if (!r.selected[o]) continue;
      json e = common::timingJson(r.ops[o]);
      e["size"] = r.n;
      e["pipeline"] = r.integer ? "int16" : "float";
      e["variant"] = toString(r.variant);
      e["operator"] = opName(kPyrOps[o]);
      e["tile"] = r.tile;
      e["min_traffic_bytes"] = r.traffic(kPyrOps[o]);
      if (r.ops[o].measured()) {
        const double gbs = r.traffic(kPyrOps[o]) / (r.ops[o].timing.medianMs * 1e-3) * 1e-9;
        e["gb_per_s"] = gbs;
        if (copyGBs > 0) e["fraction_of_copy_bandwidth"] = gbs / copyGBs;
      }
      const double p = paperFig5(r.n, r.variant, kPyrOps[o]);
      if (p > 0) e["paper_ms"] = p;
      f5.push_back(e);
    }
  return f5;
}

json fig6Json(Fig6Result const& f, Index n) {
  json f6;
  const auto counts = pipeline::tune::multiresBilateralCounts(f.set);
  f6["size"] = n;
  f6["kernel"] = std::string(kBilateralKernel) + " (float layer, ClosenessLut)";
  f6["rule"] = pipeline::tune::multiresBilateralPruningRule();
  f6["grid"] = counts.grid;
  f6["space_before_pruning"] = counts.inSpace;
  f6["candidates_after_pruning"] = counts.candidates;
  json pr = json::array();
  for (auto const& p : f.set.pruned) pr.push_back({{"rule", p.first}, {"removed", p.second}});
  f6["pruned"] = pr;
  f6["chosen"] = {{"tile", f.chosen.bilateral()}, {"source", f.chosen.bilateralSource}};
  f6["default"] = std::to_string(md::kDefaultBilateralTile.x) + "x" + std::to_string(md::kDefaultBilateralTile.y);
  f6["paper"] = {{"configurations", paper::kFig6Configurations}, {"relevant", paper::kFig6Relevant},
                 {"best_c870", paper::kFig6BestC870}, {"best_geforce_8400", paper::kFig6Best8400},
                 {"best_vs_16x16_percent", paper::kFig6BestVs16x16Percent},
                 {"best_vs_worst_percent_at_least", paper::kFig6BestVsWorstPercent}};
  json table = json::array();
  Fig6Row const *ref16 = nullptr, *chosen = nullptr, *def = nullptr;
  for (auto const& r : f.rows) {
    json e = common::timingJson(r.m);
    e["x"] = r.x;
    e["y"] = r.y;
    e["in_candidate_space"] = r.candidate;
    if (r.m.measured()) e["gtaps_per_s"] = gtapsPerS(n, r.m);
    table.push_back(e);
    if (!r.m.measured()) continue;
    if (r.x == 16 && r.y == 16) ref16 = &r;
    if (r.x == f.chosen.bilateralX && r.y == f.chosen.bilateralY) chosen = &r;
    if (r.x == md::kDefaultBilateralTile.x && r.y == md::kDefaultBilateralTile.y) def = &r;
  }
  const Fig6Extremes x = fig6Extremes(f.rows);
  Fig6Row const *best = x.best, *worst = x.worst;
  f6["table"] = table;
  auto pick = [](Fig6Row const* r) -> json {
    if (!r) return nullptr;
    return {{"tile", r->tile()}, {"median_ms", r->m.timing.medianMs}};
  };
  f6["best"] = pick(best);
  f6["worst"] = pick(worst);
  f6["tile_16x16"] = pick(ref16);
  f6["chosen_measured"] = pick(chosen);
  f6["default_measured"] = pick(def);
  f6["percent_definition"] = "(t_other - t_best) / t_other x 100: time the best tile saves";
  if (best && ref16)
    f6["best_vs_16x16_percent"] = 100.0 * (ref16->m.timing.medianMs - best->m.timing.medianMs) / ref16->m.timing.medianMs;
  if (best && worst)
    f6["best_vs_worst_percent"] = 100.0 * (worst->m.timing.medianMs - best->m.timing.medianMs) / worst->m.timing.medianMs;
  if (best && chosen)
    f6["chosen_vs_best_slower_percent"] =
        100.0 * (chosen->m.timing.medianMs - best->m.timing.medianMs) / best->m.timing.medianMs;
  return f6;
}

json table2Json(std::vector<Table2Row> const& rows) {
  json t2 = json::array();
  for (auto const& r : rows) {
    json e;
    e["size"] = r.n;
    if (r.inputMade) {
      e["sigma_n"] = r.sigma;
      e["sigma_range"] = kSigmaRangePerNoise * r.sigma;
      e["psnr_noisy_db"] = r.psnrNoisy;
    }
    json k = json::object();
    for (int c = 0; c < kNumE2e; ++c) {
      if (!r.e2eSelected[c]) continue;
      json m = common::timingJson(r.e2e[c]);
      const MultiresParams cp = e2eParams(MultiresParams{}, c);
      m["pipeline"] = std::string(kE2e[c].integer ? "uint16 (" : "float (") + toString(cp.pyramid) +
                      (kE2e[c].integer ? std::string(" + ClosenessSimilarityLut)")
                                       : std::string(" + ") + toString(cp.bilateral) + ")");
      m["concurrent_levels"] = kE2e[c].concurrent;
      m["filter_separate"] = kE2e[c].separateFilter;
      if (r.e2e[c].measured()) {
        m["fps"] = fps(r.e2e[c]);
        m["psnr_db"] = r.psnr[c];
      }
      if (!r.referenceCheck[c].empty()) m["reference_check"] = r.referenceCheck[c];
      if (r.tiles[c].bilateralX > 0)
        m["tiles"] = {{"bilateral", r.tiles[c].bilateral()}, {"bilateral_source", r.tiles[c].bilateralSource},
                      {"pyramid", r.tiles[c].pyramid()}, {"pyramid_source", r.tiles[c].pyramidSource}};
      k[kE2e[c].name] = m;
    }
    e["kokkos"] = k;
    json ph = json::object();
    for (int p = 0; p < 2; ++p) {
      if (!r.phasesSelected[p]) continue;
      json q = json::object();
      for (int s = 0; s < 3; ++s) q[phaseName(s)] = common::timingJson(r.phases[p][s]);
      ph[p == 0 ? "float" : "uint16"] = q;
    }
    e["phases"] = ph;
    auto cpuJson = [&](Measurement const& m) {
      json c = common::timingJson(m);
      if (m.measured()) c["fps"] = fps(m);
      return c;
    };
    if (r.cpuSelected[0]) e["cpu_4_threads"] = cpuJson(r.cpu4);
    if (r.cpuSelected[1]) e["cpu_all_threads"] = cpuJson(r.cpuAll);
    const int b = bestE2e(rows, r);
    if (b >= 0) {
      e["best_kokkos"] = kE2e[b].name;
      e["best_kokkos_fps"] = fps(r.e2e[b]);
      if (r.cpu4.measured()) e["speedup_best_vs_cpu_4"] = r.cpu4.timing.medianMs / r.e2e[b].timing.medianMs;
      if (r.cpuAll.measured()) e["speedup_best_vs_cpu_all"] = r.cpuAll.timing.medianMs / r.e2e[b].timing.medianMs;
      if (r.e2e[0].measured() && r.cpu4.measured())
        e["speedup_float_vs_cpu_4"] = r.cpu4.timing.medianMs / r.e2e[0].timing.medianMs;
    }
    if (auto const* p = paper::findTable2(static_cast<int>(r.n)))
      e["paper"] = {{"cpu_fps", p->cpuFps}, {"gpu_fps", p->gpuFps}, {"speedup", p->speedup}};
    t2.push_back(e);
  }
  return t2;
}

json targetsJson(std::vector<Table2Row> const& rows) {
  json tg = json::array();
  for (auto const& t : paper::kTargets) {
    json e{{"name", t.name}, {"size", t.size}, {"limit_ms", t.maxMs}, {"min_fps", 1e3 / t.maxMs}};
    std::string cfg;
    const double ms = bestE2eMs(rows, t.size, &cfg);
    if (ms > 0) {
      e.update({{"best_ms", ms}, {"fps", 1e3 / ms}, {"configuration", cfg}, {"met", ms <= t.maxMs},
                {"factor_over_limit", ms / t.maxMs}});
    } else {
      e["status"] = "not measured in this run";
    }
    tg.push_back(e);
  }
  return tg;
}

// ---- Markdown -------------------------------------------------------------------------------

void runMarkdown(std::ostream& os, Context const& ctx) {
  common::Mode const& mode = ctx.mode();
  os << "# Kortex multiresolution benchmark (" << mode.name << ")\n\n"
     << io::environmentMarkdown()
     << "- Kokkos runs on `" << Exec::name() << "` (concurrency " << kx::concurrency(ctx.exec())
     << "); concurrent level filtering on separate execution-space instances: "
     << (kx::hasConcurrentInstances<Exec> ? "available" : "not available here (levels run in order)")
     << "; measured device copy bandwidth (read + write) " << fmt(ctx.copyGBs(), 4) << " GB/s.\n"
     << "- Input: Shepp-Logan phantom scaled to 10 bits (0..1023) + Gaussian noise at SNR 25 (sigma_n = mean / 25), "
        "rounded and clamped to 0..1023 (float and uint16 copies of the same values). Filter: 5 levels, 5x5 window, "
        "sigma_d = 2, sigma_r = 2 sigma_n; float pipeline "
     << toString(MultiresParams{}.pyramid) << " + " << toString(MultiresParams{}.bilateral) << ", 16-bit pipeline " << toString(MultiresParams{}.pyramid)
     << " + ClosenessSimilarityLut (10-bit); the pyramid variant is the library's default.\n"
     << "- Times in ms: median after warm-up, fenced, data resident on the device; inputs/outputs rotate over up "
        "to "
     << ctx.slotsUsedMax() << " buffer sets (> 2x the " << (ctx.cacheBytes() >> 20)
     << " MiB cache; a plan's own pyramid is reused across frames). CPU = reference_cpu (Eigen + OpenMP, float "
        "pipeline in double) at "
     << paper::kTable2CpuThreads << " threads (the paper's setup) and " << ctx.cpuThreads() << " threads (all).\n"
     << "- Paper columns: " << paper::kCitation
     << " (not measured here). Time ratios are paper / ours and rate ratios ours / paper (> 1: ours faster).\n"
     << "- 'skipped': the cost estimated from this run's measured rates exceeded the " << mode.name
     << " budget or the section's time share (details in the JSON); '(1 run)': measured once without warm-up; "
        "'n/a': not applicable on this backend.\n"
     << "- Checks: layer filters inside the input range; pyramid round trips return the input (float <= 1e-5 "
        "relative, integer exact); end to end: finite, every configuration against the CPU reference at the "
        "smallest Table 2 size (float <= 1e-5 relative, integer exact) and the default float configuration "
        "against the CPU reference's output wherever both were timed; Fig 6 tiles agree with the default tile. "
        "PSNR is reported, not checked.\n\n";
}

void fig4Markdown(std::ostream& os, std::vector<Fig4Row> const& rows) {
  const Index n = rows.front().n;
  os << "## Fig 4: layer bilateral variants, one " << sqU(n) << " layer, 5x5, sigma_d = 2\n\n"
     << "| variant | layer | tile (source) | ms | Gtaps/s | ops/tap | G ops/s | paper GFLOPS (C870) | ours / paper |\n"
     << "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (auto const& r : rows) {
    const TapOps ops = tapOps(r.variant);
    os << "| " << toString(r.variant) << " | " << (r.integer() ? "int16 (10-bit)" : "float") << " | "
       << (r.tiles.bilateralX > 0 ? r.tiles.bilateral() + " (" + r.tiles.bilateralSource + ")" : std::string("-"))
       << " | " << cell(r.m) << " | ";
    double gops = -1.0;
    if (r.m.measured()) {
      const double gtaps = gtapsPerS(r.n, r.m);
      gops = gtaps * ops.ops;
      os << fmt(gtaps, 4) << " | " << fmt(ops.ops, 3) << " " << ops.unit << " | " << fmt(gops, 4) << " | ";
    } else {
      os << "- | " << fmt(ops.ops, 3) << " " << ops.unit << " | - | ";
    }
    double p = -1.0;
    std::string what;
    if (r.variant == MultiresBilateralVariant::FastMath) {
      p = paper::kFig4NaiveIntrinsicsGflops;
      what = " (naive + intrinsics)";
    } else if (r.variant == MultiresBilateralVariant::ClosenessLut) {
      p = paper::kFig4LutIntrinsicsGflops;
      what = " (LUT + intrinsics)";
    }
    os << (p > 0 ? fmt(p, 3) + what : std::string("-")) << " | "
       << (p > 0 && gops > 0 ? fmt(gops / p, 3) : std::string("-")) << " |\n";
  }
  os << "\nOperations per tap (an exp counts as 1; loads, table reads, per-row sums and the final division are "
        "not counted):\n";
  for (auto v : kFig4Variants) os << "- " << toString(v) << ": " << tapOps(v).ops << " " << tapOps(v).unit << "s: " << tapOps(v).counted << ".\n";
  os << "\n";
}

void fig5Markdown(std::ostream& os, std::vector<Fig5Row> const& rows, double copyGBs) {
  os << "## Fig 5: pyramid kernels per variant\n\n"
     << "Operators: the level-0 expand of decompose (l_0 = g_0 - expand(g_1)) and of reconstruct (g'_0 = l'_0 + "
        "expand(g'_1)), and the whole decompose / reconstruct phases (5 levels, no filter). Each cell: ms · GB/s "
        "of the minimum traffic · % of the measured copy bandwidth ("
     << fmt(copyGBs, 4)
     << " GB/s). Minimum traffic (every kernel reads its inputs and writes its outputs once; s_k pixels of level "
        "k; 4 B float, 2 B int16): expand operator 2 s_0 + s_1; decompose sum (3 s_k + 2 s_{k+1}); reconstruct "
        "sum (2 s_k + s_{k+1}); the same count for every variant. Paper (C870, 512²): expand 0.38 -> 0.19 -> "
        "0.09 ms (unfused -> fused -> fused + shared memory), decompose 4.36 -> 0.20 ms, reconstruct 2.29 -> "
        "0.10 ms. FusedReduce differs from FusedDirect in the decompose phase only (each level's reduce and "
        "expand in one kernel); its expand operators are FusedDirect's kernels.\n\n"
     << "| image | pipeline | variant | tile | expand l_0 | expand g'_0 | decompose | reconstruct | paper ms "
        "(expand / decompose / reconstruct) | paper / ours (expand l_0 / decompose / reconstruct) |\n"
     << "|---|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (auto const& r : rows) {
    os << "| " << sqU(r.n) << " | " << (r.integer ? "int16" : "float") << " | " << toString(r.variant) << " | "
       << r.tile << " |";
    for (int o = 0; o < 4; ++o) {
      Measurement const& m = r.ops[o];
      if (!r.selected[o]) {
        os << " - |";
      } else if (m.measured()) {
        const double gbs = r.traffic(kPyrOps[o]) / (m.timing.medianMs * 1e-3) * 1e-9;
        os << " " << cell(m) << " · " << fmt(gbs, 3) << " · " << fmt(100.0 * gbs / copyGBs, 3) << "% |";
      } else {
        os << " " << cell(m) << " |";
      }
    }
    auto pv = [&](PyrOp o) {
      const double p = paperFig5(r.n, r.variant, o);
      return p > 0 ? fmt(p, 3) : std::string("-");
    };
    os << " " << pv(PyrOp::ExpandDecompose) << " / " << pv(PyrOp::Decompose) << " / " << pv(PyrOp::Reconstruct)
       << " | " << common::ratio(paperFig5(r.n, r.variant, PyrOp::ExpandDecompose), r.ops[0]) << " / "
       << common::ratio(paperFig5(r.n, r.variant, PyrOp::Decompose), r.ops[2]) << " / "
       << common::ratio(paperFig5(r.n, r.variant, PyrOp::Reconstruct), r.ops[3]) << " |\n";
  }
  os << "\n";
}

void fig6Markdown(std::ostream& os, Fig6Result const& f, Index n) {
  const auto counts = pipeline::tune::multiresBilateralCounts(f.set);
  os << "## Fig 6: configuration space of the layer bilateral (" << sqU(n) << ", float, ClosenessLut)\n\n"
     << "Space: " << pipeline::tune::multiresBilateralPruningRule() << ". Counts: " << counts.grid << " shapes in the grid, "
     << counts.inSpace << " in the space (before pruning), " << counts.candidates << " candidates after pruning (";
  bool first = true;
  for (auto const& p : f.set.pruned) {
    os << (first ? "" : "; ") << p.first << ": " << p.second;
    first = false;
  }
  os << "). Paper: " << paper::kFig6Configurations << " configurations, " << paper::kFig6Relevant
     << " relevant; best " << paper::kFig6BestC870 << " on the C870 (" << paper::kFig6Best8400
     << " on a GeForce 8400), " << paper::kFig6BestVs16x16Percent << "% faster than 16x16 and > "
     << paper::kFig6BestVsWorstPercent << "% faster than the worst coalesced one. Every tile's time: JSON "
     << "`fig6.table`.\n\n";
  const Fig6Extremes x = fig6Extremes(f.rows);
  Fig6Row const* best = x.best;
  auto find = [&](int tx, int ty) -> Fig6Row const* {
    for (auto const& r : f.rows)
      if (r.x == tx && r.y == ty) return &r;
    return nullptr;
  };
  os << "| role | tile | ms | Gtaps/s | time saved by the best (%) |\n|---|---|---:|---:|---:|\n";
  auto line = [&](std::string const& role, Fig6Row const* r) {
    os << "| " << role << " | " << (r ? r->tile() : std::string("-")) << " | " << (r ? cell(r->m) : std::string("-"))
       << " | ";
    if (r && r->m.measured()) {
      os << fmt(gtapsPerS(n, r->m), 4) << " | ";
      os << (best ? fmt(100.0 * (r->m.timing.medianMs - best->m.timing.medianMs) / r->m.timing.medianMs, 3)
                  : std::string("-"))
         << " |\n";
    } else {
      os << "- | - |\n";
    }
  };
  line("best of " + std::to_string(x.measured) + " measured", best);
  line("worst", x.worst);
  line("16x16 (paper's assumed optimum)", find(16, 16));
  line("default (no tuning entry)", find(md::kDefaultBilateralTile.x, md::kDefaultBilateralTile.y));
  line("chosen by gpu::multires (" + f.chosen.bilateralSource + ")", find(f.chosen.bilateralX, f.chosen.bilateralY));
  // Compact grid: rows x, columns y.
  std::vector<int> xs, ys;
  for (auto const& r : f.rows)
    if (r.candidate) {
      if (std::find(xs.begin(), xs.end(), r.x) == xs.end()) xs.push_back(r.x);
      if (std::find(ys.begin(), ys.end(), r.y) == ys.end()) ys.push_back(r.y);
    }
  std::sort(xs.begin(), xs.end());
  std::sort(ys.begin(), ys.end());
  if (!xs.empty()) {
    os << "\nms by tile (rows x, columns y):\n\n| x \\ y |";
    for (int y : ys) os << " " << y << " |";
    os << "\n|---|";
    for (std::size_t i = 0; i < ys.size(); ++i) os << "---:|";
    os << "\n";
    for (int tx : xs) {
      os << "| " << tx << " |";
      for (int y : ys) {
        Fig6Row const* r = find(tx, y);
        os << " " << (r && r->candidate ? cell(r->m) : std::string("")) << " |";
      }
      os << "\n";
    }
  }
  os << "\n";
}

void table2Markdown(std::ostream& os, std::vector<Table2Row> const& rows, int cpuThreads) {
  const std::string cpuN = "CPU " + std::to_string(cpuThreads) + " thr";
  os << "## Table 2: frames per second (sigma_d = 2), end to end, image on the device\n\n"
     << "| image | CPU 4 thr | paper CPU (4 thr) | " << cpuN
     << " | Kokkos float | float, concurrent levels | Kokkos uint16 | uint16, concurrent levels | float, ClosenessLut bilateral | "
        "float, FusedReduce pyramid | float, layers filtered before reconstruct | paper GPU (C870) | best / paper GPU | "
        "best vs CPU 4 thr | best vs "
     << cpuN << " | paper speedup |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (auto const& r : rows) {
    auto const* p = paper::findTable2(static_cast<int>(r.n));
    const int b = bestE2e(rows, r);
    os << "| " << sqU(r.n) << " | " << (r.cpuSelected[0] ? fpsCell(r.cpu4) : "-") << " | "
       << (p ? fmt(p->cpuFps, 4) : "-") << " | " << (r.cpuSelected[1] ? fpsCell(r.cpuAll) : "-") << " |";
    for (int c = 0; c < kNumE2e; ++c) os << " " << (r.e2eSelected[c] ? fpsCell(r.e2e[c]) : "-") << " |";
    os << " " << (p ? fmt(p->gpuFps, 5) : "-") << " | "
       << (p && b >= 0 ? fmt(fps(r.e2e[b]) / p->gpuFps, 4) + " (" + kE2e[b].name + ")" : std::string("-")) << " | "
       << (b >= 0 && r.cpu4.measured() ? fmt(r.cpu4.timing.medianMs / r.e2e[b].timing.medianMs, 4) + "x" : "-")
       << " | "
       << (b >= 0 && r.cpuAll.measured() ? fmt(r.cpuAll.timing.medianMs / r.e2e[b].timing.medianMs, 4) + "x"
                                         : "-")
       << " | " << (p ? fmt(p->speedup, 4) + "x" : "-") << " |\n";
  }
  os << "\nTime split (ms, one phase at a time, each fenced; levels filtered as in the default "
        "plan: for float layers the default filters l_0 .. l_{L-1} in reconstruct, so `filter` is g_L's alone) "
        "and the tiles in use:\n\n"
     << "| image | pipeline | decompose | filter | reconstruct | sum | end to end | tiles: bilateral, pyramid "
        "(source) | check vs CPU reference |\n|---|---|---:|---:|---:|---:|---:|---|---|\n";
  for (auto const& r : rows)
    for (int p = 0; p < 2; ++p) {
      const int cfg = p == 0 ? 0 : 2;
      if (!r.phasesSelected[p] && !r.e2eSelected[cfg]) continue;
      os << "| " << sqU(r.n) << " | " << (p == 0 ? "float" : "uint16") << " |";
      double sum = 0.0;
      bool all = r.phasesSelected[p];
      for (int s = 0; s < 3; ++s) {
        Measurement const& m = r.phases[p][s];
        os << " " << (r.phasesSelected[p] ? cell(m) : "-") << " |";
        if (m.measured())
          sum += m.timing.medianMs;
        else
          all = false;
      }
      os << " " << (all ? fmtMs(sum) : "-") << " | " << (r.e2eSelected[cfg] ? cell(r.e2e[cfg]) : "-") << " | ";
      TileInfo const& t = r.tiles[cfg];
      if (t.bilateralX > 0)
        os << t.bilateral() << " (" << t.bilateralSource << "), "
           << (t.pyramidX > 0 ? t.pyramid() + " (" + t.pyramidSource + ")"
                              : std::string(toString(MultiresParams{}.pyramid)) + ": untiled");
      else
        os << "-";
      os << " | " << (r.referenceCheck[cfg].empty() ? "-" : r.referenceCheck[cfg]) << " |\n";
    }
  os << "\nPSNR (dB) vs the clean phantom, noisy input -> Kokkos float output:";
  for (auto const& r : rows)
    if (r.inputMade && r.e2e[0].measured())
      os << " " << sqU(r.n) << " " << fmt(r.psnrNoisy, 4) << " -> " << fmt(r.psnr[0], 4) << ";";
  os << " (sigma_n of the inputs:";
  for (auto const& r : rows)
    if (r.inputMade) os << " " << sqU(r.n) << " " << fmt(r.sigma, 4) << ";";
  os << " sigma_r = 2 sigma_n).\n\n";
}

void targetsMarkdown(std::ostream& os, std::vector<Table2Row> const& rows) {
  os << "## Targets (issue 3, for an H100/H200; best Kokkos end-to-end configuration)\n\n"
     << "| target | limit ms (FPS) | measured ms (FPS) | configuration | verdict |\n|---|---:|---:|---|---|\n";
  for (auto const& t : paper::kTargets) {
    std::string cfg;
    const double ms = bestE2eMs(rows, t.size, &cfg);
    os << "| " << t.name << " | " << fmt(t.maxMs, 3) << " (" << fmt(1e3 / t.maxMs, 4) << ") | ";
    if (ms > 0) {
      const double f = ms / t.maxMs;
      os << fmtMs(ms) << " (" << fmt(1e3 / ms, 4) << ") | " << cfg << " | "
         << (f <= 1.0 ? "met" : "missed by " + fmt(f, 3) + "x") << " |\n";
    } else {
      os << "- | - | not measured in this run |\n";
    }
  }
  os << "\n";
}

void peersMarkdown(std::ostream& os, json const& peers, std::vector<Table2Row> const& rows) {
  const auto entries = peerEntries(peers);
  auto str = [](json const& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  os << "## Peers (bench/peers/multires_opencv.py, same input and parameters)\n\n";
  if (peers.contains("cpu")) os << "- CPU: " << str(peers["cpu"]) << "\n";
  if (peers.contains("versions")) os << "- Versions: " << peers["versions"].dump() << "\n";
  if (peers.contains("pipeline")) os << "- Pipeline: " << str(peers["pipeline"]) << "\n";
  os << "- Peer times are medians measured by the peer script (wall clock); Kortex speedup = peer ms / Kortex "
        "best end-to-end ms (this run).\n\n";
  if (entries.empty()) {
    os << "The peers JSON holds no multires entries (algorithm \"multires\").\n\n";
    return;
  }
  os << "| peer | threads | image | peer ms | peer FPS | Kortex best ms | Kortex speedup |\n"
        "|---|---:|---|---:|---:|---:|---:|\n";
  for (auto const* e : entries) {
    const Index n = e->value("size", Index(0));
    const bool has = e->contains("median_ms") && (*e)["median_ms"].is_number();
    const double pms = has ? (*e)["median_ms"].get<double>() : -1.0;
    const double ms = bestE2eMs(rows, n, nullptr);
    os << "| " << e->value("peer", std::string("?")) << " | "
       << (e->contains("threads") && (*e)["threads"].is_number() ? (*e)["threads"].dump() : std::string("-"))
       << " | " << sqU(n) << " | " << (has ? fmtMs(pms) : e->value("status", std::string("-"))) << " | "
       << (has ? fmt(1e3 / pms, 4) : std::string("-")) << " | " << (ms > 0 ? fmtMs(ms) : std::string("-")) << " | "
       << (has && ms > 0 ? fmt(pms / ms, 4) + "x" : std::string("-")) << " |\n";
  }
  os << "\n";
}

}  // namespace

json toJson(Context const& ctx, Results const& r) {
  json j = runJson(ctx);
  j["fig4"] = fig4Json(r.fig4);
  j["fig5"] = fig5Json(r.fig5, ctx.copyGBs());
  if (r.fig6.run) j["fig6"] = fig6Json(r.fig6, fig6Size(ctx.tiny()));
  j["table2"] = table2Json(r.table2);
  j["targets"] = targetsJson(r.table2);
  if (!ctx.peers().is_null()) j["peers"] = ctx.peers();
  return j;
}

std::string toMarkdown(Context const& ctx, Results const& r) {
  std::ostringstream os;
  runMarkdown(os, ctx);
  if (!r.fig4.empty()) fig4Markdown(os, r.fig4);
  if (!r.fig5.empty()) fig5Markdown(os, r.fig5, ctx.copyGBs());
  if (r.fig6.run) fig6Markdown(os, r.fig6, fig6Size(ctx.tiny()));
  if (!r.table2.empty()) table2Markdown(os, r.table2, ctx.cpuThreads());
  targetsMarkdown(os, r.table2);
  if (!ctx.peers().is_null()) peersMarkdown(os, ctx.peers(), r.table2);
  os << "Measured " << ctx.measured() << ", skipped " << ctx.skipped() << ", failed " << ctx.failed()
     << "; wall time " << fmt(secondsSince(ctx.start()), 3) << " s.\n";
  return os.str();
}

}  // namespace kortex::bench::multires
