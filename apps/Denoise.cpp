// `kortex denoise bilateral | nlm | multires IN OUT`: options, then the denoise jobs of
// pipeline/Denoise.hpp.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "apps/Commands.hpp"
#include "apps/Options.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/Denoise.hpp"
#include "pipeline/JobFiles.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

struct DenoiseOptions {
  std::string in, out, backend = "auto", variant;
  BilateralParams bilateral;
  NlmParams nlm;
  MultiresParams multires;
  std::string sigmaRange = "auto", pyramid, integer = "auto";
};

void printRun(const char* what, HostImage const& in, pipeline::RunReport const& r, std::string const& out) {
  std::cout << what << ": " << describe(in.geometry) << " on " << r.executionSpace << ": " << r.computeMs << " ms";
  if (r.backend == Backend::Kokkos) std::cout << " (+ " << r.transferMs << " ms transfers)";
  std::cout << " -> " << out << "\n";
}

// The flags as a job description (the job checks every policy).
pipeline::DenoiseJob jobOf(DenoiseOptions const& o, pipeline::DenoiseMethod method) {
  pipeline::DenoiseJob job;
  job.method = method;
  job.input.path = o.in;
  job.output = o.out;
  job.backend = parseBackend(o.backend);
  job.bilateral = o.bilateral;
  job.nlm = o.nlm;
  job.variantGiven = !o.variant.empty() || !o.pyramid.empty();
  if (method == pipeline::DenoiseMethod::Bilateral && !o.variant.empty()) job.bilateral.variant = parseBilateralVariant(o.variant);
  if (method == pipeline::DenoiseMethod::Nlm && !o.variant.empty()) job.nlm.variant = parseNlmVariant(o.variant);
  if (method == pipeline::DenoiseMethod::Multires) {
    pipeline::MultiresJob& m = job.multires;
    m.params = o.multires;
    m.integer = pipeline::parseIntegerMode(o.integer);
    m.bilateralGiven = !o.variant.empty();
    if (!o.variant.empty()) m.params.bilateral = parseMultiresBilateralVariant(o.variant);
    if (!o.pyramid.empty()) m.params.pyramid = parsePyramidVariant(o.pyramid);
    m.autoSigmaRange = o.sigmaRange == "auto";
    if (!m.autoSigmaRange) {
      std::size_t used = 0;
      float v = 0.0f;
      try {
        v = std::stof(o.sigmaRange, &used);
      } catch (std::exception const&) {
        used = 0;
      }
      if (used != o.sigmaRange.size())
        throw InvalidArgument("--sigma-range must be a number, inf or auto; got '" + o.sigmaRange + "'");
      m.params.sigmaRange = v;
    }
  }
  return job;
}

int runDenoise(DenoiseOptions const& o, pipeline::DenoiseMethod method) {
  const pipeline::DenoiseJobResult r = pipeline::runDenoiseJob(jobOf(o, method));
  printRun(pipeline::toString(method), r.input, r.report, o.out);
  if (method == pipeline::DenoiseMethod::Multires) {
    auto const& run = r.multires;
    std::cout << "  " << (run.integer ? "integer (16-bit, exact) pipeline" : "float pipeline") << ", levels "
              << run.params.levels << ", r " << run.params.radius << ", sigma_d " << run.params.sigmaSpatial
              << ", sigma_r " << run.params.sigmaRange << (o.sigmaRange == "auto" ? " (auto)" : "");
    if (run.report.backend == Backend::Kokkos)
      std::cout << ", " << toString(run.params.pyramid) << " + " << toString(run.params.bilateral);
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

void addDenoiseCommands(CLI::App& app, Action& action) {
  auto* denoise = app.add_subcommand("denoise", "Denoise an image (2D or 3D)");
  denoise->require_subcommand(1);
  auto o = std::make_shared<DenoiseOptions>();
  std::string& in = o->in;
  std::string& out = o->out;
  std::string& backendName = o->backend;
  std::string& variantName = o->variant;
  BilateralParams& bp = o->bilateral;
  NlmParams& np = o->nlm;
  auto* bil = denoise->add_subcommand("bilateral", "Bilateral filter: exp(-|d|^2/2ss^2) exp(-dI^2/2sr^2) over a (2r+1)^d window");
  bil->add_option("IN", in, "Input image (.nii .nii.gz .mha .mhd .vti .png .jpg .dcm, or a folder of DICOM slices: one series)")->required();
  bil->add_option("OUT", out, "Output image (written atomically)")->required();
  bil->add_option("--radius", bp.radius, "Window radius r (window 2r+1)")->capture_default_str();
  bil->add_option("--sigma-spatial", bp.sigmaSpatial, "Spatial sigma in voxels")->capture_default_str();
  bil->add_option("--sigma-range", bp.sigmaRange, "Range sigma in intensity units (inf allowed)")->capture_default_str();
  addBackendOption(*bil, backendName);
  bil->add_option("--variant", variantName, "Kokkos variant: naive|scratch (default: " + std::string(toString(BilateralParams{}.variant)) + ")");

  auto* nlm = denoise->add_subcommand("nlm", "Non-local means: exp(-||P(x)-P(y)||^2/(|P| h^2)) over the search window");
  nlm->add_option("IN", in, "Input image (.nii .nii.gz .mha .mhd .vti .png .jpg .dcm, or a folder of DICOM slices: one series)")->required();
  nlm->add_option("OUT", out, "Output image (written atomically)")->required();
  nlm->add_option("--patch-radius", np.patchRadius, "Patch radius r (patch 2r+1)")->capture_default_str();
  nlm->add_option("--search-radius", np.searchRadius, "Search radius R (window 2R+1)")->capture_default_str();
  nlm->add_option("--h", np.h, "Filtering parameter h in intensity units")->capture_default_str();
  addBackendOption(*nlm, backendName);
  nlm->add_option("--variant", variantName, "Kokkos variant: naive|scratch|boxsum (default: " + std::string(toString(NlmParams{}.variant)) + ")");

  MultiresParams& mp = o->multires;
  std::string& sigmaRangeText = o->sigmaRange;
  std::string& pyramidName = o->pyramid;
  std::string& integerName = o->integer;
  auto* mres = denoise->add_subcommand(
      "multires", "Multiresolution filter (2D): Laplacian pyramid, bilateral on every layer, reconstruction");
  mres->add_option("IN", in, "Input 2D image (.png .jpg .dcm .nii .nii.gz .mha .mhd .vti)")->required();
  mres->add_option("OUT", out, "Output image (written atomically)")->required();
  mres->add_option("--levels", mp.levels, "Pyramid levels L (layers l_0..l_{L-1} and g_L)")->capture_default_str();
  mres->add_option("--radius", mp.radius, "Bilateral window radius r on every layer (window 2r+1)")->capture_default_str();
  mres->add_option("--sigma-spatial", mp.sigmaSpatial, "Closeness sigma (sigma_d) in pixels")->capture_default_str();
  mres->add_option("--sigma-range", sigmaRangeText,
                   "Similarity sigma in intensity units (inf allowed); auto = 2 x the noise sigma "
                   "estimated from the image (Immerkaer 1996)")
      ->capture_default_str();
  mres->add_option("--bits", mp.bits, "Integer pipeline: data bit depth 1-15 (0 = smallest that holds the maximum)")
      ->capture_default_str();
  mres->add_option("--integer", integerName,
                   "auto|yes|no: the exact 16-bit integer pipeline (auto: when every voxel is an integer in [0, 32767])")
      ->capture_default_str();
  addBackendOption(*mres, backendName);
  mres->add_option("--variant", variantName,
                   "Kokkos layer bilateral: naive|closeness-lut|fastmath|reuse (float) or lut (integer); default per pipeline");
  mres->add_option("--pyramid", pyramidName, "Kokkos pyramid kernels: unfused|fused|fused-expand|packed16|fused-reduce (default: " + std::string(toString(MultiresParams{}.pyramid)) + ")");

  bil->callback([o, &action] { action = [o] { return runDenoise(*o, pipeline::DenoiseMethod::Bilateral); }; });
  nlm->callback([o, &action] { action = [o] { return runDenoise(*o, pipeline::DenoiseMethod::Nlm); }; });
  mres->callback([o, &action] { action = [o] { return runDenoise(*o, pipeline::DenoiseMethod::Multires); }; });
}

}  // namespace kortex::app
