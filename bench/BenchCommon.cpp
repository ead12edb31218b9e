#include "bench/BenchCommon.hpp"

#include <omp.h>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "validation/Report.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace kortex::bench::common {

std::string fixedDecimals(double v, int prec) {
  if (!std::isfinite(v)) return "-";
  std::ostringstream s;
  s << std::setprecision(prec) << std::fixed << v;
  return s.str();
}

bool selected(std::string const& only, std::string const& label) {
  if (only.empty()) return true;
  for (std::size_t b = 0;;) {  // alternatives separated by '|'
    const std::size_t e = only.find('|', b);
    const std::string part = only.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!part.empty() && label.find(part) != std::string::npos) return true;
    if (e == std::string::npos) return false;
    b = e + 1;
  }
}

using validation::fmt;
using validation::fmtMs;

std::string repsText(Measurement const& m) {
  if (m.status == "single") return "1 run, no warm-up";
  return std::to_string(m.timing.repetitions) + " reps, " + std::to_string(m.timing.warmup) + " warm-up";
}

std::string cell(Measurement const& m) {
  if (m.status == "ok") return fmtMs(m.timing.medianMs);
  if (m.status == "single") return fmtMs(m.timing.medianMs) + " (1 run)";
  if (m.status == "skipped") return "skipped";
  if (m.status == "check failed") return "**check failed**";
  if (m.status == "error") return "**error**";
  if (m.status == "not applicable") return "n/a";
  return "-";
}

std::string ratio(double paperMs, Measurement const& m) {
  if (!m.measured() || !(paperMs > 0)) return "-";
  return fmt(paperMs / m.timing.medianMs, 3);
}

nlohmann::json timingJson(Measurement const& m) {
  nlohmann::json j;
  j["implementation"] = m.impl;
  j["status"] = m.status;
  if (!m.note.empty()) j["note"] = m.note;
  j["threads"] = m.threads;
  if (m.estimateS >= 0.0) j["estimated_s_per_run"] = m.estimateS;
  if (m.measured()) {
    j["median_ms"] = m.timing.medianMs;
    j["min_ms"] = m.timing.minMs;
    j["max_ms"] = m.timing.maxMs;
    j["warmup"] = m.timing.warmup;
    j["repetitions"] = m.timing.repetitions;
    j["samples_ms"] = m.timing.samplesMs;
  }
  return j;
}

OmpThreads::OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
OmpThreads::~OmpThreads() { omp_set_num_threads(saved_); }
int maxOmpThreads() { return omp_get_max_threads(); }

std::size_t cacheBytes() {
#ifdef KOKKOS_ENABLE_CUDA
  if (std::is_same<DeviceExec, Kokkos::Cuda>::value) {
    int dev = 0, l2 = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) == cudaSuccess && l2 > 0)
      return static_cast<std::size_t>(l2);
  }
#endif
  return std::size_t(32) << 20;
}

int rotationSlots(double setBytes, std::size_t cache, int maxSlots) {
  const int k = static_cast<int>(std::ceil(2.0 * static_cast<double>(cache) / setBytes));
  return std::max(1, std::min(maxSlots, k));
}

double measureCopyBandwidth(DeviceExec const& exec, bool tiny) {
  const std::size_t bytes = kDeviceIsHostMemory ? (std::size_t(tiny ? 16 : 128) << 20)
                                                : (std::size_t(tiny ? 64 : 512) << 20);
  const std::size_t n = bytes / sizeof(float);
  Kokkos::View<float*, DeviceMem> a("kortex::bench::copy_src", n), b("kortex::bench::copy_dst", n);
  Kokkos::deep_copy(a, 1.0f);
  auto t = timeMedian([&] { Kokkos::deep_copy(exec, b, a); }, [&] { exec.fence(); }, 2, tiny ? 3 : 10);
  return 2.0 * static_cast<double>(bytes) / (t.medianMs * 1e6);  // read + write, GB/s
}

nlohmann::json readPeersJson(std::string const& path) {
  std::ifstream f(path);
  if (!f) throw IoError("cannot read peers JSON '" + path + "'");
  nlohmann::json peers;
  try {
    f >> peers;
  } catch (std::exception const& e) {
    throw IoError("peers JSON '" + path + "' is not valid JSON: " + e.what());
  }
  return peers;
}

double Budget::phaseCapS(bool device) const {
  const double share = mode_.total * (device ? mode_.deviceShare : 1.0 - mode_.deviceShare);
  const double limit = device ? limitDeviceS_ : limitCpuS_;
  return limit > 0.0 ? std::min(share, limit) : share;
}

double Budget::phaseLeftMs(bool device) const {
  return (phaseCapS(device) - (device ? spentDeviceS_ : spentCpuS_)) * 1e3;
}

bool Budget::plan(Measurement& m, double estMs, bool device) const {
  const double single = (device ? mode_.devSingle : mode_.cpuSingle) * 1e3;
  const double left = phaseLeftMs(device);
  m.estimateS = estMs >= 0.0 ? estMs * 1e-3 : -1.0;
  if (left <= 0.0) {
    m.status = "skipped";
    m.note = std::string(device ? "device" : "CPU") + " time cap of " + fmt(phaseCapS(device), 3) +
             " s reached";
    return false;
  }
  if (estMs < 0.0 || estMs <= std::min(single, left)) return true;
  m.status = "skipped";
  m.note = estMs > single ? "est. " + fmt(estMs * 1e-3, 2) + " s per run > " + fmt(single * 1e-3, 2) +
                                " s budget"
                          : std::string(device ? "device" : "CPU") + " time cap of " +
                                fmt(phaseCapS(device), 3) + " s reached";
  return false;
}

nlohmann::json checkOptions(BenchOptions const& opt, const char* bench) {
  if (opt.quick && opt.tiny) throw InvalidArgument(std::string("bench ") + bench + ": --quick and --tiny are exclusive");
  if (!opt.jsonPath.empty()) io::requireWritableFile(opt.jsonPath, "JSON report");
  if (!opt.markdownPath.empty()) io::requireWritableFile(opt.markdownPath, "Markdown report");
  return opt.peersJsonPath.empty() ? nlohmann::json() : readPeersJson(opt.peersJsonPath);
}

void requireOnlyMatches(BenchOptions const& opt, std::vector<std::string> const& labels, const char* bench,
                        const char* example) {
  if (opt.only.empty()) return;
  for (auto const& l : labels)
    if (selected(opt.only, l)) return;
  throw InvalidArgument(std::string("bench ") + bench + ": --only '" + opt.only +
                        "' matches no case (cases are labelled like " + example + ")");
}

void finishReport(BenchReport& rep, nlohmann::json& j, std::string markdown, Clock::time_point tStart,
                  BenchOptions const& opt) {
  rep.wallSeconds = secondsSince(tStart);
  j["wall_seconds"] = rep.wallSeconds;
  rep.ok = rep.failed == 0 && rep.measured > 0;
  j["ok"] = rep.ok;
  rep.json = j;
  rep.markdown = std::move(markdown);
  writeReport(rep, opt);
}

void writeReport(BenchReport const& rep, BenchOptions const& opt) {
  if (!opt.jsonPath.empty()) io::writeTextFileAtomic(opt.jsonPath, rep.json.dump(2) + "\n");
  if (!opt.markdownPath.empty()) io::writeTextFileAtomic(opt.markdownPath, rep.markdown);
}

}  // namespace kortex::bench::common
