// Backend selection and a description of what this build can run on (`kortex info`).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kortex {

// auto = Kokkos when Kokkos has a GPU backend, or a parallel host space running at least the
// reference's OpenMP threads (the faster CPU path); otherwise (Serial Kokkos) the OpenMP CPU reference.
enum class Backend { Auto, Cpu, Kokkos };

Backend parseBackend(std::string const& s);  // "auto" | "cpu" | "kokkos", throws InvalidArgument
const char* toString(Backend b);
inline std::ostream& operator<<(std::ostream& os, Backend v) { return os << toString(v); }
bool kokkosHasGpuBackend();
Backend resolve(Backend b);  // Auto -> Cpu or Kokkos

struct BuildInfo {
  std::string kortexVersion;
  std::string gitHash;
  std::string buildType;
  std::string compiler;
  std::string kokkosVersion;                // "4.6.99"
  std::vector<std::string> executionSpaces; // enabled Kokkos execution spaces
  std::string defaultExecutionSpace;
  std::string device;                       // GPU name or CPU model
  int hostThreads = 1;                      // OpenMP threads of the CPU reference
  int kokkosHostConcurrency = 1;            // DefaultHostExecutionSpace concurrency
  bool vtkIo = false;
};

// Needs Kokkos initialised.
BuildInfo buildInfo();
// "kortex 0.1.0 (git <hash>, Release; Kokkos 4.6.99, default execution space Cuda)": what the
// build is, without starting Kokkos (`kortex --version`).
std::string versionText();
std::string kokkosConfiguration();  // Kokkos::print_configuration, verbose
std::string cpuModel();
// BuildInfo::device without the rest (no Kokkos initialisation needed): the name of the current
// CUDA device in a CUDA build (device 0 before Kokkos picks one), otherwise cpuModel().
std::string deviceName();
// Host memory the system reports available (MemAvailable of /proc/meminfo), bytes; 0 when unknown.
std::int64_t hostAvailableMemoryBytes();

}  // namespace kortex
