// Report helpers shared by the validation harness and the benchmarks: the run's environment
// (git hash, device, Kokkos version/configuration, thread counts, date) as JSON, number
// formatting for Markdown tables, and an early writability check for report paths (the
// atomic write itself is core/TextFile.hpp's writeTextFileAtomic).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/Backend.hpp"

namespace kortex::validation {

// {"kortex_version","git_hash","build_type","compiler","kokkos_version","execution_spaces",
//  "default_execution_space","device","cpu_model","host_threads","kokkos_host_concurrency",
//  "vtk_io","date_utc","hostname","boundary_rule"}; with `verboseKokkos` also
// "kokkos_configuration" (Kokkos::print_configuration, verbose). Needs Kokkos initialised.
nlohmann::json environmentJson(bool verboseKokkos = true);
// One Markdown paragraph with the same facts.
std::string environmentMarkdown();

// UTC time as "2025-01-31T12:34:56Z".
std::string utcTimestamp();

// Throws IoError with one clear message unless `path` can be written: its folder exists and is a
// writable directory and `path` itself is not a directory. Creates nothing. Call this before
// a long run so a bad --json path fails at once.
void requireWritableFile(std::string const& path);
// Atomic writes: use kortex::writeTextFileAtomic (core/TextFile.hpp).

// Number formatting for tables: fixed/scientific with `digits` significant digits;
// non-finite values print as "inf"/"-inf"/"nan".
std::string fmt(double v, int digits = 4);
std::string fmtMs(double ms);        // "0.0123", "12.3", "1234"
std::string fmtSci(double v);        // "1.2e-07"

// File-name friendly version of a device name: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3".
std::string sanitizeForFileName(std::string const& s);

}  // namespace kortex::validation
