// Image-level filter drivers used by the CLI: pick the backend, move data, run, time.
#pragma once

#include "core/Backend.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"

namespace kortex::app {

struct RunReport {
  Backend backend = Backend::Cpu;
  std::string executionSpace;  // "OpenMP reference" or the Kokkos space name
  double computeMs = 0.0;      // filter only
  double transferMs = 0.0;     // host<->device copies (Kokkos backend)
};

// Throws InvalidArgument for NaN/Inf voxels (the filters are undefined for them). The run*
// drivers call it before the Kokkos backend; the CPU reference checks on its own.
void requireFinite(HostImage const& img);

HostImage runBilateral(HostImage const& in, BilateralParams const& p, Backend b, RunReport* report);
HostImage runNlm(HostImage const& in, NlmParams const& p, Backend b, RunReport* report);

}  // namespace kortex::app
