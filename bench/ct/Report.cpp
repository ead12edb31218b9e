// Report of the CT benchmark: the JSON (every measurement, throughputs, transfers, targets,
// peers) and the Markdown tables (Tables I and II and their 3D counterparts beside the paper's
// numbers, transfers, targets, peers).
#include <sstream>

#include "bench/PaperCt.hpp"
#include "bench/ct/CtBench.hpp"
#include "io/Output.hpp"
#include "validation/Report.hpp"

namespace kortex::bench::ct {

using common::cell;
using common::kDeviceIsHostMemory;
using common::Measurement;
using common::ratio;
using validation::fmt;
using validation::fmtMs;

namespace {

// Best (fastest) measured device variant of a row; nullptr when none.
Measurement const* best(Row const& r) {
  Measurement const* b = nullptr;
  for (auto const& m : r.device)
    if (m.measured() && (!b || m.timing.medianMs < b->timing.medianMs)) b = &m;
  return b;
}

std::string peerAlgoName(RowSpec const& r) { return r.algo == Algo::Bilateral ? "bilateral" : "nlm"; }

Row const* findRow(std::vector<Row> const& rows, std::string const& algo, int dim, Index n, int window,
                   int patch) {
  for (auto const& r : rows) {
    if (peerAlgoName(r.spec) != algo || r.spec.dim != dim || r.spec.n != n || r.spec.window != window)
      continue;
    if (r.spec.algo == Algo::Nlm && patch >= 0 && r.spec.patchRadius != patch) continue;
    return &r;
  }
  return nullptr;
}

// Best device variant of the row of a case (as the peers name it); nullptr when none.
Measurement const* bestFor(std::vector<Row> const& rows, std::string const& algo, int dim, Index n,
                           int window, int patch) {
  Row const* r = findRow(rows, algo, dim, n, window, patch);
  return r ? best(*r) : nullptr;
}

// Median ms of the OpenCV peer (bilateralFilter / fastNlMeansDenoising) for a case, at the
// largest thread count measured; -1 when absent.
double openCvMs(nlohmann::json const& peers, std::string const& algo, int dim, Index n, int window,
                int patch, int* threads) {
  double ms = -1.0;
  *threads = 0;
  if (peers.is_null() || !peers.contains("results") || !peers["results"].is_array()) return ms;
  for (auto const& e : peers["results"]) {
    if (!e.is_object() || !e.contains("median_ms") || !e["median_ms"].is_number()) continue;
    if (e.value("peer", std::string()).rfind("opencv.", 0) != 0) continue;
    if (e.value("algorithm", std::string()) != algo || e.value("dim", 0) != dim ||
        e.value("size", Index(0)) != n || e.value("window", 0) != window)
      continue;
    if (algo == "nlm" && e.contains("patch_radius") && e["patch_radius"].is_number() &&
        e["patch_radius"].get<int>() != patch)
      continue;
    const int t = e.contains("threads") && e["threads"].is_number() ? e["threads"].get<int>() : 0;
    if (t > *threads) {
      *threads = t;
      ms = e["median_ms"].get<double>();
    }
  }
  return ms;
}

// One issue target in this run: the best device variant (nullptr: not measured) and the OpenCV
// peer at its most threads (ms <= 0: none).
struct TargetResult {
  Measurement const* best = nullptr;
  double openCvMs = -1.0;
  int openCvThreads = 0;
};

TargetResult targetResult(std::vector<Row> const& rows, nlohmann::json const& peers, paper::Target const& t) {
  TargetResult tr;
  const std::string algo = t.nlm ? "nlm" : "bilateral";
  tr.best = bestFor(rows, algo, t.dim, t.size, t.window, t.patchRadius);
  tr.openCvMs = openCvMs(peers, algo, t.dim, t.size, t.window, t.patchRadius, &tr.openCvThreads);
  return tr;
}

// Throughput of one run of a row: GB/s = 8 bytes per voxel (input + output) / time; Gtaps/s =
// voxels x taps / time.
struct Throughput {
  double gbs, gtaps;
};

Throughput throughput(RowSpec const& r, double medianMs) {
  const double s = medianMs * 1e-3;
  return {8.0 * static_cast<double>(r.voxels()) / s * 1e-9,
          static_cast<double>(r.voxels()) * static_cast<double>(r.taps()) / s * 1e-9};
}

nlohmann::json measurementJson(Measurement const& m, RowSpec const& r, double copyGBs, double expRate) {
  nlohmann::json j = common::timingJson(m);
  if (m.measured()) {
    const Throughput t = throughput(r, m.timing.medianMs);
    j["gb_per_s"] = t.gbs;
    j["gtaps_per_s"] = t.gtaps;
    if (m.impl != "cpu-1" && m.impl != "cpu-all") {
      if (copyGBs > 0) j["fraction_of_copy_bandwidth"] = t.gbs / copyGBs;
      if (expRate > 0) j["fraction_of_exp_rate"] = t.gtaps / expRate;
    }
  }
  return j;
}

nlohmann::json rowJson(Row const& r, Results const& res) {
  nlohmann::json jr;
  jr["algorithm"] = r.spec.algo == Algo::Bilateral ? "bilateral" : "nlm";
  jr["dim"] = r.spec.dim;
  jr["size"] = r.spec.n;
  jr["window"] = r.spec.window;
  jr["label"] = r.spec.label();
  // The sigmas follow from the input's noise level, known once the input was built (i.e.
  // when anything of the row was measured).
  const bool made = r.inputMade;
  if (made) jr["noise_sigma"] = r.spec.noiseSigma;
  if (r.spec.algo == Algo::Bilateral) {
    jr["params"] = {{"radius", r.spec.bilateral.radius}};
    if (made)
      jr["params"].update({{"sigma_spatial", r.spec.bilateral.sigmaSpatial},
                           {"sigma_range", r.spec.bilateral.sigmaRange}});
  } else {
    jr["patch_radius"] = r.spec.patchRadius;
    jr["params"] = {{"patch_radius", r.spec.nlm.patchRadius}, {"search_radius", r.spec.nlm.searchRadius}};
    if (made) jr["params"]["h"] = r.spec.nlm.h;
  }
  if (r.spec.dim == 2) {
    if (auto const* p = paper::findRow(r.spec.algo == Algo::Nlm, static_cast<int>(r.spec.n), r.spec.window))
      jr["paper"] = {{"straightforward_ms", p->straightforwardMs}, {"optimized_ms", p->optimizedMs}};
  }
  jr["device"] = nlohmann::json::object();
  for (auto const& m : r.device) jr["device"][m.impl] = measurementJson(m, r.spec, res.copyGBs, res.expRate);
  jr["cpu_all_threads"] = measurementJson(r.cpuAll, r.spec, 0, 0);
  jr["cpu_1_thread"] = measurementJson(r.cpu1, r.spec, 0, 0);
  if (auto const* b = best(r)) {
    jr["best_device_variant"] = b->impl;
    if (r.cpuAll.measured()) jr["speedup_best_vs_cpu_all"] = r.cpuAll.timing.medianMs / b->timing.medianMs;
    if (r.cpu1.measured()) jr["speedup_best_vs_cpu_1"] = r.cpu1.timing.medianMs / b->timing.medianMs;
  }
  return jr;
}

// ---- Markdown sections ----

void headerMarkdown(std::ostream& os, Results const& res) {
  os << "# Kortex CT benchmark (" << res.mode.name << ")\n\n"
     << io::environmentMarkdown()
     << "- Kokkos variants run on `" << DeviceExec::name() << "` (concurrency " << res.deviceConcurrency
     << "); measured device peaks: copy bandwidth (read + write) " << fmt(res.copyGBs, 4)
     << " GB/s, float exp() rate " << fmt(res.expRate, 4) << " G/s\n"
     << "- Input: Shepp-Logan phantom + Gaussian noise at SNR 25; BF sigma_s = r/2, sigma_r = 2 "
        "sigma_n; NLM h = sigma_n.\n"
     << "- Times in ms: median after warm-up, fenced, kernel only (data resident on the device); "
        "successive runs rotate over up to "
     << res.slotsUsedMax << " buffer pairs (> 2x the " << (res.cache >> 20)
     << " MiB cache). CPU = reference_cpu (Eigen + OpenMP) at 1 and " << res.cpuThreads << " threads.\n"
     << "- Paper columns: " << paper::kCitation
     << " (not measured here). Ratio = paper / ours (> 1: ours faster).\n"
     << "- 'skipped': the cost estimated from this run's measured rates exceeded the " << res.mode.name
     << " budget (details in the JSON); '(1 run)': measured once without warm-up.\n"
     << "- GB/s = 8 bytes per voxel (input + output) / time, with % of the measured copy bandwidth; "
        "Gtaps/s = voxels x window^d / time (BF taps; NLM weights), with % of the measured exp() rate "
        "(each tap / weight needs one exp).\n\n";
}

// One table: the rows of (algo, dim, patch), beside the paper's numbers in 2D; nothing when the
// run has no such row.
void tableMarkdown(std::ostream& os, Results const& res, std::string const& title, Algo algo, int dim,
                   int patch) {
  std::vector<Row const*> sel;
  for (auto const& r : res.rows)
    if (r.spec.algo == algo && r.spec.dim == dim && (algo == Algo::Bilateral || r.spec.patchRadius == patch))
      sel.push_back(&r);
  if (sel.empty()) return;
  const std::string cpuN = "CPU " + std::to_string(res.cpuThreads) + " thr";
  const bool withPaper = dim == 2;
  std::vector<std::string> names;
  for (auto const& variant : variants(algo)) names.push_back(variant.name);
  os << "## " << title << "\n\n| image | window |";
  if (withPaper) os << " paper SF | paper opt. |";
  for (auto const& n : names) os << " " << n << " |";
  if (withPaper) {
    os << " SF / Naive |";
    for (std::size_t v = 1; v < names.size(); ++v) os << " opt. / " << names[v] << " |";
  }
  os << " CPU 1 thr | " << cpuN << " | best vs " << cpuN << " | GB/s (best) | Gtaps/s (best) |\n|---|---|";
  const std::size_t ncol = (withPaper ? 2 : 0) + names.size() + (withPaper ? names.size() : 0) + 5;
  for (std::size_t c = 0; c < ncol; ++c) os << "---:|";
  os << "\n";
  for (auto const* r : sel) {
    os << "| " << r->spec.n << (dim == 2 ? "²" : "³") << " | " << r->spec.window << (dim == 2 ? "²" : "³")
       << " |";
    paper::CtRow const* p = withPaper ? paper::findRow(algo == Algo::Nlm, static_cast<int>(r->spec.n), r->spec.window)
                                      : nullptr;
    if (withPaper) os << " " << (p ? fmt(p->straightforwardMs, 4) : "-") << " | " << (p ? fmt(p->optimizedMs, 4) : "-") << " |";
    for (auto const& m : r->device) os << " " << cell(m) << " |";
    if (withPaper) {
      os << " " << (p ? ratio(p->straightforwardMs, r->device[0]) : "-") << " |";
      for (std::size_t v = 1; v < r->device.size(); ++v)
        os << " " << (p ? ratio(p->optimizedMs, r->device[v]) : "-") << " |";
    }
    os << " " << cell(r->cpu1) << " | " << cell(r->cpuAll) << " |";
    Measurement const* b = best(*r);
    if (b && r->cpuAll.measured())
      os << " " << fmt(r->cpuAll.timing.medianMs / b->timing.medianMs, 3) << "x |";
    else
      os << " - |";
    if (b) {
      const Throughput t = throughput(r->spec, b->timing.medianMs);
      os << " " << fmt(t.gbs, 3) << " (" << fmt(100.0 * t.gbs / res.copyGBs, 2) << "%, " << b->impl << ") | "
         << fmt(t.gtaps, 3) << " (" << fmt(100.0 * t.gtaps / res.expRate, 2) << "%) |";
    } else {
      os << " - | - |";
    }
    os << "\n";
  }
  os << "\n";
}

void transfersMarkdown(std::ostream& os, Results const& res) {
  os << "## Host <-> device transfers (one image)\n\n";
  if (kDeviceIsHostMemory) {
    os << "The default execution space `" << DeviceExec::name()
       << "` uses host memory: no transfer is needed (none measured).\n\n";
  } else {
    os << "| image | upload ms | download ms | total ms | paper (GTX 480) ms |\n|---|---:|---:|---:|---:|\n";
    for (auto const& t : res.transfers) {
      const double p = t.dim == 2 ? paper::transferMs(static_cast<int>(t.n)) : -1.0;
      os << "| " << t.n << (t.dim == 2 ? "²" : "³") << " | " << fmtMs(t.uploadMs) << " | " << fmtMs(t.downloadMs)
         << " | " << fmtMs(t.uploadMs + t.downloadMs) << " | " << (p > 0 ? fmt(p, 2) : "-") << " |\n";
    }
    os << "\n";
  }
}

void targetsMarkdown(std::ostream& os, std::vector<Row> const& rows, nlohmann::json const& peers) {
  os << "## Targets (issue 2, for an H100/H200; best Kokkos variant)\n\n"
     << "| target | limit ms | measured ms | variant | verdict | OpenCV ms (most threads) | "
        "speedup vs OpenCV (target >= "
     << fmt(paper::kTargetSpeedupOverOpenCv, 2) << "x) |\n|---|---:|---:|---|---|---:|---:|\n";
  for (auto const& t : paper::kTargets) {
    const TargetResult tr = targetResult(rows, peers, t);
    Measurement const* b = tr.best;
    os << "| " << t.name << " | " << fmt(t.maxMs, 3) << " | ";
    if (b) {
      const double f = b->timing.medianMs / t.maxMs;
      os << fmtMs(b->timing.medianMs) << " | " << b->impl << " | "
         << (f <= 1.0 ? "met" : "missed by " + fmt(f, 3) + "x") << " | ";
    } else {
      os << "- | - | not measured in this run | ";
    }
    if (tr.openCvMs > 0.0) {
      os << fmtMs(tr.openCvMs) << " (" << tr.openCvThreads << " thr) | ";
      if (b) {
        const double sp = tr.openCvMs / b->timing.medianMs;
        os << fmt(sp, 3) << "x " << (sp >= paper::kTargetSpeedupOverOpenCv ? "(met)" : "(missed)") << " |\n";
      } else {
        os << "- |\n";
      }
    } else {
      os << (peers.is_null() ? "no peers JSON given" : (t.dim == 3 ? "OpenCV has no 3D filter" : "not measured"))
         << " | - |\n";
    }
  }
  os << "\n";
}

void peersMarkdown(std::ostream& os, std::vector<Row> const& rows, nlohmann::json const& peers) {
  if (peers.is_null() || !peers.contains("results") || !peers["results"].is_array()) return;
  auto str = [](nlohmann::json const& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  os << "## Peers (bench/peers/run_peers.py, same inputs and parameters)\n\n";
  if (peers.contains("device")) os << "- GPU: " << str(peers["device"]) << "\n";
  if (peers.contains("cpu")) os << "- CPU: " << str(peers["cpu"]) << "\n";
  if (peers.contains("versions")) os << "- Versions: " << peers["versions"].dump() << "\n";
  os << "- Peer times are medians measured by the peer script (CPU: wall clock; GPU: CUDA events, "
        "data resident); Kortex speedup = peer ms / Kortex best ms (this run).\n\n"
     << "| peer | threads | case | peer ms | Kortex best ms | Kortex speedup |\n|---|---:|---|---:|---:|---:|\n";
  for (auto const& e : peers["results"]) {
    if (!e.is_object() || !e.contains("median_ms") || !e["median_ms"].is_number()) continue;
    const std::string algo = e.value("algorithm", "");
    const int dim = e.value("dim", 2);
    const Index n = e.value("size", 0);
    const int window = e.value("window", 0);
    const int patch = e.contains("patch_radius") && e["patch_radius"].is_number() ? e["patch_radius"].get<int>() : -1;
    const double pms = e["median_ms"].get<double>();
    Measurement const* b = bestFor(rows, algo, dim, n, window, patch);
    os << "| " << e.value("peer", std::string("?")) << " | "
       << (e.contains("threads") && e["threads"].is_number() ? e["threads"].dump() : std::string("GPU")) << " | " << algo << " " << dim
       << "D " << n << " w" << window << (patch >= 0 ? " p" + std::to_string(2 * patch + 1) : std::string())
       << " | " << fmtMs(pms) << " | " << (b ? fmtMs(b->timing.medianMs) : "-") << " | "
       << (b ? fmt(pms / b->timing.medianMs, 3) + "x" : "-") << " |\n";
  }
  os << "\n";
}

}  // namespace

nlohmann::json toJson(Results const& res, nlohmann::json const& peers) {
  nlohmann::json j;
  j["kind"] = "kortex-bench-ct";
  j["mode"] = res.mode.name;
  j["environment"] = io::environmentJson(true);
  j["device_execution_space"] = DeviceExec::name();
  j["device_concurrency"] = res.deviceConcurrency;
  j["cpu_reference_threads"] = {1, res.cpuThreads};
  j["device_copy_bandwidth_gb_per_s"] = res.copyGBs;
  j["device_exp_rate_g_per_s"] = res.expRate;
  j["cache_bytes_for_rotation"] = res.cache;
  j["max_rotation_slots"] = res.slotsUsedMax;
  j["budgets_s"] = {{"device_case", res.mode.devBudget}, {"device_single", res.mode.devSingle},
                    {"cpu_case", res.mode.cpuBudget},    {"cpu_single", res.mode.cpuSingle},
                    {"total", res.mode.total}, {"device_share", res.mode.deviceShare}};
  j["input"] = "Shepp-Logan phantom + Gaussian noise, SNR 25 (sigma = mean / 25)";
  j["params_rule"] = "BF sigma_s = r/2, sigma_r = 2 sigma_n; NLM h = sigma_n";
  j["throughput_definitions"] = {
      {"gb_per_s", "(input + output bytes) / median time: 8 bytes per voxel"},
      {"gtaps_per_s", "voxels x window^dim / median time (BF taps; NLM weights, one exp each)"},
      {"fraction_of_copy_bandwidth", "gb_per_s / device_copy_bandwidth_gb_per_s"},
      {"fraction_of_exp_rate", "gtaps_per_s / device_exp_rate_g_per_s"}};
  j["paper"] = {{"device", paper::kDevice}, {"source", paper::kCitation}};
  j["rows"] = nlohmann::json::array();
  for (auto const& r : res.rows) j["rows"].push_back(rowJson(r, res));
  j["transfers"] = nlohmann::json::array();
  for (auto const& t : res.transfers) {
    nlohmann::json jt{{"dim", t.dim}, {"size", t.n}, {"host_memory", t.hostMemory}};
    if (!t.hostMemory)
      jt.update({{"upload_ms", t.uploadMs}, {"download_ms", t.downloadMs}, {"total_ms", t.uploadMs + t.downloadMs}});
    if (t.dim == 2 && paper::transferMs(static_cast<int>(t.n)) > 0) jt["paper_ms"] = paper::transferMs(static_cast<int>(t.n));
    j["transfers"].push_back(jt);
  }
  j["targets"] = nlohmann::json::array();
  for (auto const& t : paper::kTargets) {
    nlohmann::json jt{{"name", t.name}, {"limit_ms", t.maxMs}};
    const TargetResult tr = targetResult(res.rows, peers, t);
    Measurement const* b = tr.best;
    if (b) {
      jt.update({{"best_ms", b->timing.medianMs}, {"variant", b->impl}, {"met", b->timing.medianMs <= t.maxMs},
                 {"factor_over_limit", b->timing.medianMs / t.maxMs}});
    } else {
      jt["status"] = "not measured in this run";
    }
    if (tr.openCvMs > 0.0) {
      jt["opencv_ms"] = tr.openCvMs;
      jt["opencv_threads"] = tr.openCvThreads;
      if (b) jt["speedup_vs_opencv"] = tr.openCvMs / b->timing.medianMs;
      jt["speedup_vs_opencv_target"] = paper::kTargetSpeedupOverOpenCv;
    }
    j["targets"].push_back(jt);
  }
  if (!peers.is_null()) j["peers"] = peers;
  return j;
}

std::string toMarkdown(Results const& res, nlohmann::json const& peers) {
  std::ostringstream os;
  headerMarkdown(os, res);
  tableMarkdown(os, res, "Table I: bilateral filter, 2D", Algo::Bilateral, 2, -1);
  tableMarkdown(os, res, "Table II: non-local means, 2D, patch 7x7", Algo::Nlm, 2, 3);
  tableMarkdown(os, res, "Bilateral filter, 3D", Algo::Bilateral, 3, -1);
  tableMarkdown(os, res, "Non-local means, 3D, patch 5x5x5", Algo::Nlm, 3, 2);
  tableMarkdown(os, res, "Non-local means, 3D, patch 7x7x7", Algo::Nlm, 3, 3);
  transfersMarkdown(os, res);
  targetsMarkdown(os, res.rows, peers);
  peersMarkdown(os, res.rows, peers);
  os << "Measured " << res.tally.measured << ", skipped " << res.tally.skipped << ", failed " << res.tally.failed
     << "; wall time " << fmt(secondsSince(res.t0), 3) << " s.\n";
  return os.str();
}

}  // namespace kortex::bench::ct
