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

// Fail before reading or computing: the input exists (a file, or a folder of DICOM slices), the output can be written
// with a supported extension (or one that needs VTK in a build without it).
void checkPaths(std::string const& in, std::string const& out) {
  // A folder is read as one DICOM series (io::readImage says why it is not one).
  if (!fs::exists(in)) throw IoError("input '" + in + "' does not exist");
  io::requireWritableFile(out);
  io::requireSupportedExtension(out, io::Access::Write);
  pipeline::requireDistinctFiles({{"image", in}}, {{"output image", out}});
}

void printRun(const char* what, HostImage const& in, pipeline::RunReport const& r, std::string const& out) {
  std::cout << what << ": " << describe(in.geometry) << " on " << r.executionSpace << ": " << r.computeMs << " ms";
  if (r.backend == Backend::Kokkos) std::cout << " (+ " << r.transferMs << " ms transfers)";
  std::cout << " -> " << out << "\n";
}

int runMultires(DenoiseOptions& o) {
  MultiresParams& mp = o.multires;

  pipeline::MultiresJob job;
  job.backend = parseBackend(o.backend);
  job.integer = pipeline::parseIntegerMode(o.integer);
  job.bilateralGiven = !o.variant.empty();
  if (!o.variant.empty()) mp.bilateral = parseMultiresBilateralVariant(o.variant);
  if (!o.pyramid.empty()) mp.pyramid = parsePyramidVariant(o.pyramid);
  if ((!o.variant.empty() || !o.pyramid.empty()) && resolve(job.backend) == Backend::Cpu)
    throw InvalidArgument("--variant and --pyramid select Kokkos variants; they have no meaning with the CPU backend");
  job.autoSigmaRange = o.sigmaRange == "auto";
  if (!job.autoSigmaRange) {
    std::size_t used = 0;
    float v = 0.0f;
    try {
      v = std::stof(o.sigmaRange, &used);
    } catch (std::exception const&) {
      used = 0;
    }
    if (used != o.sigmaRange.size())
      throw InvalidArgument("--sigma-range must be a number, inf or auto; got '" + o.sigmaRange + "'");
    mp.sigmaRange = v;
  }
  checkPaths(o.in, o.out);
  const HostImage img = io::readImage(o.in);
  job.params = mp;
  pipeline::MultiresRun run;
  const HostImage result = pipeline::denoiseMultires(img, job, &run);
  io::writeImage(result, o.out);
  printRun("multires", img, run.report, o.out);
  std::cout << "  " << (run.integer ? "integer (16-bit, exact) pipeline" : "float pipeline") << ", levels "
            << run.params.levels << ", r " << run.params.radius << ", sigma_d " << run.params.sigmaSpatial
            << ", sigma_r " << run.params.sigmaRange << (job.autoSigmaRange ? " (auto)" : "");
  if (run.report.backend == Backend::Kokkos)
    std::cout << ", " << toString(run.params.pyramid) << " + " << toString(run.params.bilateral);
  std::cout << "\n";
  return 0;
}

int runBilateralOrNlm(DenoiseOptions& o, bool isBil) {

  const Backend backend = parseBackend(o.backend);
  if (isBil && !o.variant.empty()) o.bilateral.variant = parseBilateralVariant(o.variant);
  if (!isBil && !o.variant.empty()) o.nlm.variant = parseNlmVariant(o.variant);
  if (!o.variant.empty() && resolve(backend) == Backend::Cpu)
    throw InvalidArgument("--variant selects a Kokkos variant; it has no meaning with the CPU backend");
  checkPaths(o.in, o.out);
  const HostImage img = io::readImage(o.in);
  pipeline::RunReport report;
  const HostImage result = isBil ? pipeline::denoiseBilateral(img, o.bilateral, backend, &report)
                                : pipeline::denoiseNlm(img, o.nlm, backend, &report);
  io::writeImage(result, o.out);
  printRun(isBil ? "bilateral" : "nlm", img, report, o.out);
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
                   "Kokkos layer bilateral: naive|closeness-lut|fastmath (float) or lut (integer); default per pipeline");
  mres->add_option("--pyramid", pyramidName, "Kokkos pyramid kernels: unfused|fused|fused-expand|packed16 (default: " + std::string(toString(MultiresParams{}.pyramid)) + ")");

  bil->callback([o, &action] { action = [o] { return runBilateralOrNlm(*o, true); }; });
  nlm->callback([o, &action] { action = [o] { return runBilateralOrNlm(*o, false); }; });
  mres->callback([o, &action] { action = [o] { return runMultires(*o); }; });
}

}  // namespace kortex::app
