// Per-device tuning database: the best measured configuration (tile / team shape) of each tuned
// kernel, per (kernel, device name, image size class), found offline by `kortex tune` and looked
// up at run time.
//
// File: JSON, schema version kTuningSchemaVersion:
//   { "schema": "kortex-tuning", "schema_version": 1,
//     "entries": [ { "kernel": "multires.bilateral", "device": "NVIDIA H200",
//                    "size_class": "2d-1024", "config": {"x": 32, "y": 4},
//                    "median_ms": 0.041, "candidates": 119, "worst_ms": 0.09,
//                    "kokkos": "...", "git": "...", "date": "2026-11-22" } ] }
// Lookup order: the user database (env KORTEX_TUNING_DB, else $XDG_CACHE_HOME/kortex/tuning.json,
// else $HOME/.cache/kortex/tuning.json), then the defaults measured on our GPUs and shipped in
// the repository (core/tuning_defaults.json, compiled in), then the caller's documented default
// with a one-line notice on stderr (once per kernel and size class per process). A missing user
// file is silent; an unreadable or corrupt one gives a one-line warning and is ignored (never a
// crash). Writes are atomic (io/Output.hpp saveTuningDatabase). The user file is read once per process, on the
// first lookup (resetCache() forgets it); lookups are thread-safe. KORTEX_TUNING_QUIET=1 (any
// value but "0") silences the notices, not the warnings. Notices and warnings never contain the
// word "error" (CLI error lines carry it exactly once).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "core/Image.hpp"

namespace kortex::tuning {

inline constexpr int kTuningSchemaVersion = 1;

using Config = std::map<std::string, int>;  // e.g. {"x": 32, "y": 8}

struct Entry {
  std::string kernel;     // "multires.bilateral", "ct.bilateral.scratch", ...
  std::string device;     // buildInfo().device of the space the kernel ran on
  std::string sizeClass;  // sizeClass()
  Config config;
  double medianMs = 0.0;  // of the best configuration
  double worstMs = 0.0;   // of the slowest candidate (context for the report)
  int candidates = 0;     // configurations timed
  std::string kokkos, git, date;
};

// Size class of an image: "<d>d-<N>", N = the smallest power of two >= the largest extent,
// clamped to [256, 8192] (e.g. 1000x1000 -> "2d-1024", 64^3 -> "3d-256").
std::string sizeClass(Index nx, Index ny, Index nz = 1);

// Device name used as the key: buildInfo().device for the default execution space (cached;
// needs no Kokkos initialisation).
std::string currentDevice();
// Key of kernels that run on a host execution space (Serial, OpenMP, Threads): the CPU model.
// Equal to currentDevice() in a build without a GPU backend.
std::string hostDevice();
// The key for kernels launched on ExecSpace: hostDevice() for host spaces, currentDevice()
// for the GPU one, so that a CPU run in a CUDA build never picks a GPU's tile.
template <class ExecSpace>
std::string deviceFor() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible ? hostDevice()
                                                                               : currentDevice();
}

class Database {
 public:
  // Parses JSON text; throws IoError with a reason for anything malformed (bad JSON, wrong
  // schema or version, an entry missing a field or with a non-positive config value).
  // Required per entry: kernel, device (non-empty strings), size_class (as sizeClass() makes
  // them), config (non-empty object of positive int values), median_ms > 0, worst_ms >=
  // median_ms, candidates >= 1; kokkos, git, date are optional strings. Unknown fields and two
  // entries with the same key are rejected too (a typo must not pass silently).
  static Database parse(std::string const& text, std::string const& origin);
  // Reads a file: std::nullopt if it does not exist; throws IoError if unreadable or corrupt.
  static std::optional<Database> load(std::string const& path);
  std::string dump() const;                 // JSON text (schema above)

  // Inserts or replaces the entry with the same (kernel, device, sizeClass).
  void put(Entry const& e);
  const Entry* find(std::string const& kernel, std::string const& device,
                    std::string const& sizeClass) const;
  std::vector<Entry> const& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// Path of the user database (see the lookup order above; a relative XDG_CACHE_HOME is ignored as
// the XDG spec says); empty when none of the variables is set.
std::string userDatabasePath();
// The compiled-in defaults (core/tuning_defaults.json).
Database const& shippedDefaults();

// Run-time lookup for the current device (see the lookup order above). `fallback` is the
// kernel's documented default; the notice names the kernel, the size class and the fallback.
Config lookup(std::string const& kernel, std::string const& sizeClass, Config const& fallback);
// As lookup, with where the answer came from: "user", "shipped" or "default".
Config lookup(std::string const& kernel, std::string const& sizeClass, Config const& fallback,
              std::string* source);

// As lookup, for an explicit device key (deviceFor<ExecSpace>()).
Config lookupOn(std::string const& device, std::string const& kernel,
                std::string const& sizeClass, Config const& fallback,
                std::string* source = nullptr);

// "k=v,k=v" (keys in order), as the notices and `kortex tune` print configurations.
std::string toString(Config const& c);

// One line "kortex: warning: <message>" on stderr, at most once per distinct message per
// process: for callers that find a looked-up configuration unusable and use their default.
void warnOnce(std::string const& message);

// Drops the process-wide cache, including which notices and warnings were already printed
// (tests change KORTEX_TUNING_DB between cases).
void resetCache();

}  // namespace kortex::tuning
