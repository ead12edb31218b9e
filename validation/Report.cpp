#include "validation/Report.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/Boundary.hpp"
#include "core/Errors.hpp"

namespace kortex::validation {

namespace fs = std::filesystem;

std::string utcTimestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {
std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

nlohmann::json environmentJson(bool verboseKokkos) {
  const BuildInfo b = buildInfo();
  nlohmann::json j;
  j["kortex_version"] = b.kortexVersion;
  j["git_hash"] = b.gitHash;
  j["build_type"] = b.buildType;
  j["compiler"] = b.compiler;
  j["kokkos_version"] = b.kokkosVersion;
  j["execution_spaces"] = b.executionSpaces;
  j["default_execution_space"] = b.defaultExecutionSpace;
  j["device"] = b.device;
  j["cpu_model"] = cpuModel();
  j["host_threads"] = b.hostThreads;
  j["kokkos_host_concurrency"] = b.kokkosHostConcurrency;
  j["vtk_io"] = b.vtkIo;
  j["date_utc"] = utcTimestamp();
  j["hostname"] = hostName();
  j["boundary_rule"] = kBoundaryRuleName;
  if (verboseKokkos) j["kokkos_configuration"] = kokkosConfiguration();
  return j;
}

std::string environmentMarkdown() {
  const BuildInfo b = buildInfo();
  std::ostringstream os;
  std::string spaces;
  for (auto const& s : b.executionSpaces) spaces += (spaces.empty() ? "" : ", ") + s;
  os << "- Kortex " << b.kortexVersion << ", git `" << b.gitHash << "`, " << b.buildType << ", "
     << b.compiler << "\n"
     << "- Kokkos " << b.kokkosVersion << ", execution spaces: " << spaces
     << " (default: " << b.defaultExecutionSpace << ")\n"
     << "- Device: " << b.device << "; CPU: " << cpuModel() << "\n"
     << "- Threads: CPU reference (OpenMP) " << b.hostThreads << ", Kokkos host concurrency "
     << b.kokkosHostConcurrency << "\n"
     << "- Date (UTC): " << utcTimestamp() << ", host " << hostName() << "\n";
  return os.str();
}

void requireWritableFile(std::string const& path) {
  if (path.empty()) throw IoError("output path is empty");
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec))
    throw IoError("cannot write '" + path + "': it is a directory");
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw IoError("cannot write '" + path + "': folder '" + dir.string() + "' does not exist");
  if (access(dir.c_str(), W_OK) != 0)
    throw IoError("cannot write '" + path + "': folder '" + dir.string() + "' is not writable");
  if (fs::exists(p, ec) && access(p.c_str(), W_OK) != 0)
    throw IoError("cannot write '" + path + "': the file is not writable");
}

std::string fmt(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  const double a = std::abs(v);
  if (v == 0.0) {
    os << "0";
  } else if (a >= 1e-3 && a < 1e6) {
    // Fixed with `digits` significant digits.
    const int mag = static_cast<int>(std::floor(std::log10(a)));
    const int dec = std::max(0, digits - 1 - mag);
    os << std::fixed << std::setprecision(dec) << v;
  } else {
    os << std::scientific << std::setprecision(std::max(0, digits - 1)) << v;
  }
  return os.str();
}

std::string fmtMs(double ms) {
  if (!std::isfinite(ms)) return fmt(ms);
  std::ostringstream os;
  if (ms >= 100.0)
    os << std::fixed << std::setprecision(1) << ms;
  else if (ms >= 1.0)
    os << std::fixed << std::setprecision(3) << ms;
  else
    os << std::fixed << std::setprecision(4) << ms;
  return os.str();
}

std::string fmtSci(double v) {
  if (!std::isfinite(v)) return fmt(v);
  std::ostringstream os;
  os << std::scientific << std::setprecision(1) << v;
  return os.str();
}

std::string sanitizeForFileName(std::string const& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_';
    if (ok)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace kortex::validation
