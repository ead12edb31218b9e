#include "io/Output.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "io/ImageIO.hpp"

#include "core/Backend.hpp"
#include "core/Boundary.hpp"
#include "core/Errors.hpp"
#include "core/Tuning.hpp"

namespace kortex::io {

namespace fs = std::filesystem;


fs::path temporaryName(fs::path const& dir, std::string const& tag) {
  static std::mt19937_64 rng{std::random_device{}() ^ (static_cast<std::uint64_t>(::getpid()) << 32)};
  static std::mutex m;
  std::uint64_t bits = 0;
  {
    std::lock_guard<std::mutex> lock(m);
    bits = rng() & 0xffffffffffffULL;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%012llx", static_cast<unsigned long long>(bits));
  return dir / (std::string(kTemporaryPrefix) + std::to_string(::getpid()) + "-" + (tag.empty() ? "" : tag + "-") + hex);
}

void requireWritableFile(fs::path const& path, std::string const& what, bool createParent) {
  const std::string name = path.string();
  if (path.empty()) throw IoError(what + " path is empty");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw IoError(what + " '" + name + "' is a directory, not a file");
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (createParent) {
    dir = fs::absolute(dir, ec);
    while (!fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  }
  if (!fs::is_directory(dir, ec))
    throw IoError("cannot write " + what + " '" + name + "': directory '" + dir.string() +
                  "' does not exist");
  if (access(dir.c_str(), W_OK) != 0)
    throw IoError("cannot write " + what + " '" + name + "': directory '" + dir.string() +
                  "' is not writable");
  if (fs::exists(path, ec) && access(path.c_str(), W_OK) != 0)
    throw IoError("cannot write " + what + " '" + name + "': the file is not writable");
}

void writeTextFileAtomic(std::filesystem::path const& path, std::string const& content) {
  if (path.empty()) throw IoError("output path is empty");
  if (fs::is_directory(path)) throw IoError("cannot write '" + path.string() + "': it is a directory");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir))
    throw IoError("cannot write '" + path.string() + "': directory '" + dir.string() +
                  "' does not exist");
  const fs::path tmp = temporaryName(dir, path.filename().string());
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os)
      throw IoError("cannot write '" + path.string() + "': " + std::strerror(errno));
    os << content;
    os.flush();
    if (!os) {
      os.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw IoError("failed writing '" + path.string() + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    throw IoError("cannot write '" + path.string() + "': " + ec.message());
  }
}

std::string utcTimestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void saveTuningDatabase(tuning::Database const& db, fs::path const& path) {
  const std::string name = path.string();
  if (path.empty()) throw IoError("tuning database path is empty");
  if (path.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec)
      throw IoError("cannot write tuning database '" + name + "': cannot create directory '" +
                    path.parent_path().string() + "': " + ec.message());
  }
  writeTextFileAtomic(path, db.dump());
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
  j["dicom_decoder"] = dicomDecoder();
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

}  // namespace kortex::io
