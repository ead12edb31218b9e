#include "core/Backend.hpp"

#include <Kokkos_Core.hpp>
#include <omp.h>

#include <fstream>
#include <sstream>

#include <kortex/Config.hpp>

#include "core/Errors.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace kortex {

const char* gitHash();  // generated at build time (cmake/GitHash.cmake)

Backend parseBackend(std::string const& s) {
  if (s == "auto") return Backend::Auto;
  if (s == "cpu") return Backend::Cpu;
  if (s == "kokkos") return Backend::Kokkos;
  throw InvalidArgument("unknown backend '" + s + "' (expected auto|cpu|kokkos)");
}

const char* toString(Backend b) {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Cpu: return "cpu";
    case Backend::Kokkos: return "kokkos";
  }
  return "?";
}

bool kokkosHasGpuBackend() {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL)
  return true;
#else
  return false;
#endif
}

Backend resolve(Backend b) {
  if (b != Backend::Auto) return b;
  if (kokkosHasGpuBackend()) return Backend::Kokkos;
  // On a CPU the Kokkos kernels are the faster path wherever their space runs at least the
  // reference's threads (greedy LNCC pair on a Kokkos OpenMP build: 106 s against 159 s, issue 39);
  // a Serial Kokkos (one thread) leaves the multi-threaded reference.
  if (!Kokkos::is_initialized()) return Backend::Cpu;
  const int kokkosThreads = Kokkos::DefaultExecutionSpace().concurrency();
  return kokkosThreads > 1 && kokkosThreads >= omp_get_max_threads() ? Backend::Kokkos : Backend::Cpu;
}

std::string versionText() {
  const int v = KOKKOS_VERSION;
  return std::string("kortex ") + KORTEX_VERSION_STRING + " (git " + gitHash() + ", " + KORTEX_BUILD_TYPE + "; Kokkos " +
         std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         ", default execution space " + Kokkos::DefaultExecutionSpace::name() + ")";
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}

std::int64_t hostAvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string deviceName() {
#ifdef KOKKOS_ENABLE_CUDA
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    return prop.name;
#endif
  return cpuModel();
}

std::string kokkosConfiguration() {
  std::ostringstream os;
  Kokkos::print_configuration(os, true);
  return os.str();
}

BuildInfo buildInfo() {
  BuildInfo b;
  b.kortexVersion = KORTEX_VERSION_STRING;
  b.gitHash = gitHash();
  b.buildType = KORTEX_BUILD_TYPE;
  b.compiler = KORTEX_CXX_COMPILER;
  b.kokkosVersion = std::to_string(KOKKOS_VERSION / 10000) + "." +
                    std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
                    std::to_string(KOKKOS_VERSION % 100);
#ifdef KOKKOS_ENABLE_SERIAL
  b.executionSpaces.push_back("Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  b.executionSpaces.push_back("OpenMP");
#endif
#ifdef KOKKOS_ENABLE_THREADS
  b.executionSpaces.push_back("Threads");
#endif
#ifdef KOKKOS_ENABLE_CUDA
  b.executionSpaces.push_back("Cuda");
#endif
  b.defaultExecutionSpace = Kokkos::DefaultExecutionSpace::name();
  b.device = deviceName();
  b.hostThreads = omp_get_max_threads();
  b.kokkosHostConcurrency = static_cast<int>(Kokkos::DefaultHostExecutionSpace().concurrency());
  b.vtkIo = KORTEX_HAVE_VTK;
  return b;
}

}  // namespace kortex
