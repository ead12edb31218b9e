// Denoise jobs (bilateral, NLM, multiresolution) on host images: the entry the CLI, the Python
// bindings and the benchmarks' end-to-end rows call. Each job validates its parameters against the
// image and scans the image for NaN/Inf once, then runs the CPU reference or the Kokkos back end
// (default execution space: upload, filter, download), which only check extents.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/Backend.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Multires.hpp"
#include "core/Nlm.hpp"
#include "pipeline/JobFiles.hpp"

namespace kortex::pipeline {

struct RunReport {
  Backend backend = Backend::Cpu;  // resolved
  std::string executionSpace;      // "OpenMP reference" or the Kokkos space name
  double computeMs = 0.0;          // filter only
  double transferMs = 0.0;         // host <-> device copies (Kokkos back end)
};

HostImage denoiseBilateral(HostImage const& in, BilateralParams const& p, Backend b,
                           RunReport* report = nullptr);
HostImage denoiseNlm(HostImage const& in, NlmParams const& p, Backend b, RunReport* report = nullptr);

// Multiresolution filter (2D). Pipeline: integer (16-bit, exact) when `integer` is Yes, or Auto
// and every voxel is an integer in [0, 2^15 - 1] (8 to 15-bit scans and PNGs); else float.
// Unless `bilateralGiven`, the layer bilateral is the pipeline's default (integer:
// ClosenessSimilarityLut, float: MultiresParams' default, Reuse). With `autoSigmaRange`, sigma_r = 2 x the noise
// sigma estimated from the image (estimateNoiseSigma). The output is float either way.
enum class IntegerMode { Auto, Yes, No };
IntegerMode parseIntegerMode(std::string const& s);  // "auto" | "yes" | "no"

struct MultiresJob {
  MultiresParams params;
  bool bilateralGiven = false;
  bool autoSigmaRange = false;
  IntegerMode integer = IntegerMode::Auto;
  Backend backend = Backend::Auto;
};
struct MultiresRun {
  bool integer = false;     // the pipeline that ran
  MultiresParams params;    // as run (variants and sigma_r resolved)
  double noiseSigma = 0.0;  // the estimate, when sigma_r was automatic
  RunReport report;
};
HostImage denoiseMultires(HostImage const& in, MultiresJob const& job, MultiresRun* run = nullptr);

// ---- the denoise job (`kortex denoise bilateral|nlm|multires`, Python denoise_*) -----------------
// One description: the method, the input (a file, a DICOM folder, or an image in memory), the
// output file (optional where the caller keeps the result), the method's parameters and back end.
// validate() once (files, and the policy that a Kokkos variant needs the Kokkos back end; the
// parameters against the image when it is read), then read, denoise, write (writeAllOrNone).
enum class DenoiseMethod { Bilateral, Nlm, Multires };
const char* toString(DenoiseMethod m);          // "bilateral" | "nlm" | "multires"
DenoiseMethod parseDenoiseMethod(std::string const& s);

struct DenoiseJob {
  DenoiseMethod method = DenoiseMethod::Nlm;
  ImageInput input;
  std::filesystem::path output;  // empty: nothing written (keepResult)
  BilateralParams bilateral;     // method Bilateral
  NlmParams nlm;                 // method Nlm
  MultiresJob multires;          // method Multires (its backend is the job's)
  Backend backend = Backend::Auto;
  bool variantGiven = false;     // a Kokkos variant (or pyramid) was chosen: refused with the CPU back end
  bool keepResult = false;       // the caller takes the image (Python): no output file is needed

  void validate() const;
};
nlohmann::json toJson(DenoiseJob const& job);
DenoiseJob denoiseJobFromJson(nlohmann::json const& j);

struct DenoiseJobResult {
  HostImage input, image;  // the image read, the result
  RunReport report;
  MultiresRun multires;    // method Multires
  std::vector<std::filesystem::path> written;
};
DenoiseJobResult runDenoiseJob(DenoiseJob const& job);

// Standard deviation of additive white Gaussian noise estimated from the image alone
// (Immerkaer, "Fast noise variance estimation", CVIU 1996): sigma = sqrt(pi/2) / (6 (W-2)(H-2))
// * sum |I * N| over the interior, N = [1 -2 1; -2 4 -2; 1 -2 1], per xy plane, averaged over
// the planes. Images smaller than 3x3 give 0.
double estimateNoiseSigma(HostImage const& img);

}  // namespace kortex::pipeline
