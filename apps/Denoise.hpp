// Image-level filter drivers used by the CLI: pick the backend, move data, run, time.
#pragma once

#include "core/Backend.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Multires.hpp"
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

// Multiresolution filter. Pipeline: integer (16-bit, exact) when `integer` is Yes, or Auto and
// every voxel is an integer in [0, 2^15 - 1] (8 to 15-bit scans and PNGs); else float. When
// `bilateralGiven` is false the layer bilateral is the pipeline's default (integer:
// ClosenessSimilarityLut, float: ClosenessLut). The output is float either way.
enum class IntegerMode { Auto, Yes, No };
IntegerMode parseIntegerMode(std::string const& s);  // "auto" | "yes" | "no"
struct MultiresRun {
  bool integer = false;         // the pipeline that ran
  MultiresParams params;        // as run (variants resolved)
};
HostImage runMultires(HostImage const& in, MultiresParams p, bool bilateralGiven, IntegerMode integer,
                      Backend b, RunReport* report, MultiresRun* run);

}  // namespace kortex::app
