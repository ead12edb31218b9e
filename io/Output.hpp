// Output helpers shared by every product job, report and benchmark: early writability checks,
// atomic text writes, and the run's environment record (git hash, device, Kokkos version and
// configuration, thread counts, date) that reports carry.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace kortex::tuning {
class Database;  // core/Tuning.hpp
}

namespace kortex::io {

// Throws IoError with one message naming `what` ("output", "JSON report", ...) unless `path` can
// be written later: not empty, not a directory, an existing file writable, and its folder a
// writable directory (`createParent`: the folder may be missing; its nearest existing ancestor
// must then be a writable directory). Creates nothing: call it before a long run.
void requireWritableFile(std::filesystem::path const& path, std::string const& what = "output",
                         bool createParent = false);

// Temporaries: every temporary file or folder Kortex makes is named
//   <dir>/.kortex-tmp-<pid>-[<tag>-]<48 random bits in hex>
// beside its target, so that pipeline::removeStaleTemporaries finds what a killed run left (by its
// pid). This is the one place the name is spelled.
inline constexpr const char* kTemporaryPrefix = ".kortex-tmp-";
std::filesystem::path temporaryName(std::filesystem::path const& dir, std::string const& tag = "");

// Writes a temporary file in the target's folder, then renames it over the target: a failure
// never leaves a partial file. Throws IoError (missing folder, no permission, a directory,
// write failure).
void writeTextFileAtomic(std::filesystem::path const& path, std::string const& content);

// Writes a tuning database (core/Tuning.hpp) atomically, creating its folder if needed.
void saveTuningDatabase(tuning::Database const& db, std::filesystem::path const& path);

// {"kortex_version","git_hash","build_type","compiler","kokkos_version","execution_spaces",
//  "default_execution_space","device","cpu_model","host_threads","kokkos_host_concurrency",
//  "vtk_io","date_utc","hostname","boundary_rule"}; with `verboseKokkos` also
// "kokkos_configuration" (Kokkos::print_configuration, verbose). Needs Kokkos initialised.
nlohmann::json environmentJson(bool verboseKokkos = true);
// One Markdown paragraph with the same facts.
std::string environmentMarkdown();
// UTC time as "2025-01-31T12:34:56Z".
std::string utcTimestamp();

}  // namespace kortex::io
