// kortex: one executable, subcommands parsed with CLI11. `kortex <cmd> --help` documents each.
// Errors: one message on stderr ("kortex: error: ..."), non-zero exit, no output file left behind.
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <unistd.h>

#include <kortex/Config.hpp>

#include "apps/Commands.hpp"
#include "apps/Register.hpp"
#include "apps/Surface.hpp"
#include "pipeline/Tune.hpp"
#include "core/Errors.hpp"
#include "core/Multires.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/Denoise.hpp"

namespace fs = std::filesystem;
using namespace kortex;

namespace {

struct KokkosSession {
  KokkosSession() {
    // Kokkos' OpenMP backend warns when OMP_PROC_BIND is unset; binding is the user's choice.
    setenv("OMP_PROC_BIND", "false", 0);
    Kokkos::initialize();
  }
  ~KokkosSession() { Kokkos::finalize(); }
};

// Fail before reading or computing: the input exists and is a file, the output can be written
// with a supported extension (or one that needs VTK in a build without it).
void checkPaths(std::string const& in, std::string const& out) {
  if (fs::is_directory(in)) throw IoError("input '" + in + "' is a directory, not an image file");
  if (!fs::exists(in)) throw IoError("input '" + in + "' does not exist");
  io::requireWritableFile(out);
  io::requireSupportedExtension(out, io::Access::Write);
}

void printRun(const char* what, HostImage const& in, pipeline::RunReport const& r,
              std::string const& out) {
  std::cout << what << ": " << describe(in.geometry) << " on " << r.executionSpace << ": "
            << r.computeMs << " ms";
  if (r.backend == Backend::Kokkos) std::cout << " (+ " << r.transferMs << " ms transfers)";
  std::cout << " -> " << out << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kortex: GPU neuroimaging filters (Kokkos) with an Eigen/OpenMP CPU reference"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "OpenMP threads for the CPU reference (default: all cores)")
      ->check(CLI::PositiveNumber);

  // info
  auto* info = app.add_subcommand("info", "Backends, devices and the Kokkos configuration");
  std::string infoJson;
  info->add_option("--json", infoJson, "Also write the description as JSON");

  // denoise
  auto* denoise = app.add_subcommand("denoise", "Denoise an image (2D or 3D)");
  denoise->require_subcommand(1);
  std::string in, out, backendName = "auto", variantName;
  BilateralParams bp;
  NlmParams np;
  auto* bil = denoise->add_subcommand("bilateral", "Bilateral filter: exp(-|d|^2/2ss^2) exp(-dI^2/2sr^2) over a (2r+1)^d window");
  bil->add_option("IN", in, "Input image (.nii .nii.gz .mha .mhd .vti .png .jpg .dcm)")->required();
  bil->add_option("OUT", out, "Output image (written atomically)")->required();
  bil->add_option("--radius", bp.radius, "Window radius r (window 2r+1)")->capture_default_str();
  bil->add_option("--sigma-spatial", bp.sigmaSpatial, "Spatial sigma in voxels")->capture_default_str();
  bil->add_option("--sigma-range", bp.sigmaRange, "Range sigma in intensity units (inf allowed)")->capture_default_str();
  bil->add_option("--backend", backendName, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")->capture_default_str();
  bil->add_option("--variant", variantName, "Kokkos variant: naive|scratch (default scratch)");

  auto* nlm = denoise->add_subcommand("nlm", "Non-local means: exp(-||P(x)-P(y)||^2/(|P| h^2)) over the search window");
  nlm->add_option("IN", in, "Input image (.nii .nii.gz .mha .mhd .vti .png .jpg .dcm)")->required();
  nlm->add_option("OUT", out, "Output image (written atomically)")->required();
  nlm->add_option("--patch-radius", np.patchRadius, "Patch radius r (patch 2r+1)")->capture_default_str();
  nlm->add_option("--search-radius", np.searchRadius, "Search radius R (window 2R+1)")->capture_default_str();
  nlm->add_option("--h", np.h, "Filtering parameter h in intensity units")->capture_default_str();
  nlm->add_option("--backend", backendName, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")->capture_default_str();
  nlm->add_option("--variant", variantName, "Kokkos variant: naive|scratch|boxsum (default boxsum)");

  MultiresParams mp;
  std::string sigmaRangeText = "auto", pyramidName, integerName = "auto";
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
  mres->add_option("--backend", backendName, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")->capture_default_str();
  mres->add_option("--variant", variantName,
                   "Kokkos layer bilateral: naive|closeness-lut|fastmath (float) or lut (integer); default per pipeline");
  mres->add_option("--pyramid", pyramidName, "Kokkos pyramid kernels: unfused|fused|fused-expand|packed16 (default fused)");

  // validate
  auto* validate = app.add_subcommand("validate", "Run the validation harness: CPU reference vs every Kokkos variant; non-zero exit if any bound fails");
  app::ValidateOptions vo;
  validate->add_flag("--quick", vo.quick, "Small sizes (seconds)");
  validate->add_option("--data", vo.dataDir, "Real data folder (e.g. ../shared/data)")->check(CLI::ExistingDirectory);
  validate->add_option("--json", vo.jsonPath, "Write the report as JSON");
  validate->add_option("--markdown", vo.markdownPath, "Write the report as Markdown");
  validate->add_flag("--registration-only", vo.registrationOnly,
                     "Only the registration study (IXI pairs: Dice, CPU vs Kokkos, inverse consistency); needs --data");
  validate->add_flag("--surface-only", vo.surfaceOnly,
                     "Only the surface study (ICBM152 and IXI white matter: distance to the clean surface, CPU vs "
                     "Kokkos); needs --data");
  validate->add_option("--lambda", vo.registration.lambda, "Registration study: regulariser weight")
      ->capture_default_str();
  validate->add_option("--sigma", vo.registration.sigma, "Registration study: force smoothing sigma, voxels")
      ->capture_default_str();
  validate->add_option("--iterations", vo.registration.iterations,
                       "Registration study: iteration cap (--quick caps it further)")
      ->capture_default_str();
  validate->add_option("--pairs", vo.pairs, "Registration study: number of subject pairs")
      ->check(CLI::Range(1, vo.pairs))
      ->capture_default_str();

  // bench
  auto* bench = app.add_subcommand("bench", "Benchmarks that reproduce the papers' tables");
  bench->require_subcommand(1);
  auto* benchCt = bench->add_subcommand("ct", "CT neighbourhood filters: Tables I and II (bilateral, NLM), 2D and 3D");
  bench::BenchOptions bo;
  benchCt->add_flag("--quick", bo.quick, "Fewer sizes and repetitions");
  benchCt->add_flag("--tiny", bo.tiny, "Tiny sizes (smoke test)");
  benchCt->add_option("--json", bo.jsonPath, "Write results as JSON");
  benchCt->add_option("--markdown", bo.markdownPath, "Write results as Markdown");
  benchCt->add_option("--only", bo.only,
                      "Only rows whose label contains this text, e.g. \"NLM 2D 1024^2 patch 7 window 17\"");
  benchCt->add_option("--peers", bo.peersJsonPath, "Merge peer timings from bench/peers/run_peers.py (JSON)")
      ->check(CLI::ExistingFile);
  auto* benchMr = bench->add_subcommand(
      "multires", "Multiresolution filter: Figs 4-6 (bilateral variants, pyramid kernels, tile space) and Table 2 (FPS)");
  bench::BenchOptions mbo;
  benchMr->add_flag("--quick", mbo.quick, "Smaller budgets (minutes on a CPU-only machine)");
  benchMr->add_flag("--tiny", mbo.tiny, "Sizes 64^2 and 128^2 (smoke test)");
  benchMr->add_option("--json", mbo.jsonPath, "Write results as JSON");
  benchMr->add_option("--markdown", mbo.markdownPath, "Write results as Markdown");
  benchMr->add_option("--only", mbo.only,
                      "Only cases whose label contains this text, e.g. \"Table2 4096^2\", \"Fig6\", \"Fig5 512^2 float\"");
  benchMr->add_option("--peers", mbo.peersJsonPath, "Merge peer timings from bench/peers/multires_opencv.py (JSON)")
      ->check(CLI::ExistingFile);

  auto* benchReg = bench->add_subcommand(
      "register", "Unbiased fluid registration: Table 1 (resources, occupancy), Fig 1 (force kernels), "
                  "Fig 2a/2b (iteration time, speedups, GFLOP/s, GB/s) and the targets");
  bench::BenchOptions rbo;
  benchReg->add_flag("--quick", rbo.quick, "Fewer sizes");
  benchReg->add_flag("--tiny", rbo.tiny, "24^3 and 32^3 (smoke test)");
  benchReg->add_option("--json", rbo.jsonPath, "Write results as JSON");
  benchReg->add_option("--markdown", rbo.markdownPath, "Write results as Markdown");
  benchReg->add_option("--only", rbo.only, "Only cases whose label contains this text, e.g. \"Fig1\", \"Fig2 240^3\", \"IXI\"");
  benchReg->add_option("--peers", rbo.peersJsonPath, "Merge peer timings from bench/peers/registration_torch.py (JSON)")
      ->check(CLI::ExistingFile);
  benchReg->add_option("--data", rbo.dataDir, "Real data folder (../shared/data): adds the IXI pair target")
      ->check(CLI::ExistingDirectory);

  auto* benchSurf = bench->add_subcommand(
      "surface", "Level-set NLM surface denoising: Fig 4 (time vs band size per storage variant), Fig 5 (speedup "
                 "vs the CPU reference at 2 and all threads, GB/s), CPU check and the 175k target");
  bench::BenchOptions sbo;
  benchSurf->add_flag("--quick", sbo.quick, "Bands of 17.5k and 35k only");
  benchSurf->add_flag("--tiny", sbo.tiny, "Bands of ~1.5k and ~3k (smoke test)");
  benchSurf->add_option("--json", sbo.jsonPath, "Write results as JSON");
  benchSurf->add_option("--markdown", sbo.markdownPath, "Write results as Markdown");
  benchSurf->add_option("--only", sbo.only, "Only variants / sizes whose label contains this text, e.g. \"Scratch\"");
  benchSurf->add_option("--peers", sbo.peersJsonPath, "Merge the PyTorch kNN peer (bench/peers/surface_torch.py JSON)")
      ->check(CLI::ExistingFile);
  benchSurf->add_option("--dump", sbo.dumpDir, "Write the largest case's records and exact neighbours here (for the peer)")
      ->check(CLI::ExistingDirectory);

  // surface
  auto* surface = app.add_subcommand("surface", "Level-set surface processing");
  surface->require_subcommand(1);
  app::SurfaceOptions so;
  auto* surfDenoise = surface->add_subcommand(
      "denoise", "Level-set non-local-means surface denoising (Dong et al.; exact all-pairs patch search) of a "
                 "mask, a signed distance or a closed triangle mesh");
  surfDenoise->add_option("IN", so.input, "Binary mask / label / probability volume, signed distance (--input phi), "
                                          "or closed mesh (.vtp .stl .obj)")->required();
  surfDenoise->add_option("OUT", so.output, "Denoised signed distance phi (image, same grid)")->required();
  surfDenoise->add_option("--band", so.params.band, "Narrow band |phi| <= band, voxels")->capture_default_str();
  surfDenoise->add_option("--patch", so.params.patch, "Patch edge n (n^3 patches, odd, <= 7)")->capture_default_str();
  surfDenoise->add_option("--neighbors", so.params.neighbors, "Most similar patches kept per element (m < band size)")
      ->capture_default_str();
  surfDenoise->add_option("--c1", so.params.c1, "Spatial scale of the weights, voxels^2")->capture_default_str();
  surfDenoise->add_option("--c2", so.params.c2, "Patch-distance scale of the weights")->capture_default_str();
  surfDenoise->add_option("--iterations", so.params.iterations, "Heat iterations K")->capture_default_str();
  surfDenoise->add_option("--out-mesh", so.outMesh, "Also write the zero level set as a mesh (.vtp .stl .obj)");
  surfDenoise->add_option("--input", so.inputKind, "Image input: mask (binary, or see --label/--threshold) | phi")
      ->capture_default_str();
  auto* surfLabel = surfDenoise->add_option("--label", so.label, "Inside = voxels equal to this label");
  auto* surfThr = surfDenoise->add_option("--threshold", so.threshold, "Inside = voxels >= this value");
  surfDenoise->add_option("--spacing", so.spacing, "Mesh input: voxel size of the grid, world units")
      ->capture_default_str();
  surfDenoise->add_option("--backend", so.backend, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")
      ->capture_default_str();
  surfDenoise->add_option("--variant", so.variant, "Kokkos search: global|randomaccess|scratch (brute force, by candidate storage) or pruned (default: patch-sum bound, same neighbours)");
  surfDenoise->add_option("--max-memory", so.maxMemoryMiB,
                          "Memory the search may use, MiB (default: what the device / host reports free)");
  surfDenoise->add_flag("--quiet", so.quiet, "No progress bar");

  // register
  auto* reg = app.add_subcommand("register", "Register two images");
  reg->require_subcommand(1);
  app::RegisterOptions rgo;
  auto* unb = reg->add_subcommand(
      "unbiased",
      "Affine (NCC) + unbiased fluid registration (symmetric-KL prior, Yanovsky et al. 2007) of two 3D images");
  unb->add_option("--fixed", rgo.fixed, "Fixed (reference) 3D image")->required();
  unb->add_option("--moving", rgo.moving, "Moving (template) 3D image")->required();
  unb->add_option("--out-warped", rgo.outWarped, "Moving image resampled on the fixed grid (written atomically)")
      ->required();
  unb->add_option("--out-field", rgo.outField,
                  "Displacement field, NIfTI vector image in the ITK/ANTs convention (world mm, LPS; fixed point x "
                  "maps to moving point x + d(x))");
  unb->add_option("--out-jacobian", rgo.outJacobian, "det(I - grad u) of the fluid part");
  unb->add_option("--out-affine", rgo.outAffine, "Affine part as an ITK transform file (.txt)");
  unb->add_option("--lambda", rgo.fluid.lambda, "Weight of the symmetric-KL regulariser (> 0)")->capture_default_str();
  unb->add_option("--sigma", rgo.fluid.sigma, "Gaussian smoothing of the force, voxels")->capture_default_str();
  unb->add_option("--iterations", rgo.fluid.iterations, "Cap on fluid iterations")->capture_default_str();
  unb->add_flag("--no-affine", rgo.noAffine, "Skip the affine stage (header alignment only)");
  unb->add_option("--backend", rgo.backend, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")
      ->capture_default_str();
  unb->add_option("--variant", rgo.variant, "Kokkos force kernel: naive|recompute|reuse (default " + std::string(toString(RegistrationParams{}.variant)) + ")");
  unb->add_flag("--quiet", rgo.quiet, "No progress bar");

  // reproduce
  auto* reproduce = app.add_subcommand("reproduce", "Main job: validation + every available paper table; readable report + JSON");
  app::ReproduceOptions ro;
  reproduce->add_flag("--quick", ro.quick, "Small sizes (minutes on a laptop)");
  reproduce->add_option("--data", ro.dataDir, "Real data folder (e.g. ../shared/data)")->check(CLI::ExistingDirectory);
  reproduce->add_option("--out", ro.outDir, "Folder for the report, JSON and montages")->capture_default_str();

  // tune
  auto* tune = app.add_subcommand("tune", "Find the fastest tile/team shapes of the tuned kernels on this device "
                                          "and store them in the tuning database (read at run time)");
  app::TuneOptions to;
  std::string tunerNames;
  for (auto const& t : pipeline::tune::tuners()) tunerNames += (tunerNames.empty() ? "" : ", ") + t.name;
  tune->add_option("--kernel", to.kernels, "Tuned kernel, repeatable (default: every one: " + tunerNames + ")");
  tune->add_option("--db", to.dbPath, "Tuning database to update or show (default: $KORTEX_TUNING_DB, else "
                                      "$XDG_CACHE_HOME/kortex/tuning.json, else ~/.cache/kortex/tuning.json)");
  auto* tuneShow = tune->add_flag("--show", to.show, "Print the merged database (user + shipped defaults); time nothing");
  tune->add_flag("--quick", to.quick, "Fewer repetitions per candidate (a smoke run, noisier choice)")
      ->excludes(tuneShow);
  tune->add_option("--size", to.size, "Image edge of the timed problem (default: each kernel's, 1024 for the CT ones)")
      ->check(CLI::Range(1, 16384))
      ->excludes(tuneShow);
  tune->add_option("--json", to.jsonPath, "Write every timed candidate as JSON")->excludes(tuneShow);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, same shape as every other error.
    std::cerr << "kortex: error: " << e.what() << " (see --help)" << std::endl;
    return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
  }

  if (threads > 0) omp_set_num_threads(threads);

  try {
    KokkosSession session;
    if (*info) return app::cmdInfo(infoJson);
    if (*validate) return app::cmdValidate(vo);
    if (*benchCt) return app::cmdBenchCt(bo);
    if (*benchMr) return app::cmdBenchMultires(mbo);
    if (*reproduce) return app::cmdReproduce(ro);
    if (*tune) return app::cmdTune(to);
    if (*benchReg) return app::cmdBenchRegister(rbo);
    if (*unb) return app::cmdRegisterUnbiased(rgo);
    if (*benchSurf) return app::cmdBenchSurface(sbo);
    if (*surfDenoise) {
      so.labelGiven = surfLabel->count() > 0;
      so.thresholdGiven = surfThr->count() > 0;
      return app::cmdSurfaceDenoise(so);
    }
    if (*mres) {
      pipeline::MultiresJob job;
      job.backend = parseBackend(backendName);
      job.integer = pipeline::parseIntegerMode(integerName);
      job.bilateralGiven = !variantName.empty();
      if (!variantName.empty()) mp.bilateral = parseMultiresBilateralVariant(variantName);
      if (!pyramidName.empty()) mp.pyramid = parsePyramidVariant(pyramidName);
      if ((!variantName.empty() || !pyramidName.empty()) && resolve(job.backend) == Backend::Cpu)
        throw InvalidArgument("--variant and --pyramid select Kokkos variants; they have no meaning with the CPU backend");
      job.autoSigmaRange = sigmaRangeText == "auto";
      if (!job.autoSigmaRange) {
        std::size_t used = 0;
        float v = 0.0f;
        try {
          v = std::stof(sigmaRangeText, &used);
        } catch (std::exception const&) {
          used = 0;
        }
        if (used != sigmaRangeText.size())
          throw InvalidArgument("--sigma-range must be a number, inf or auto; got '" + sigmaRangeText + "'");
        mp.sigmaRange = v;
      }
      checkPaths(in, out);
      const HostImage img = io::readImage(in);
      job.params = mp;
      pipeline::MultiresRun run;
      const HostImage result = pipeline::denoiseMultires(img, job, &run);
      io::writeImage(result, out);
      printRun("multires", img, run.report, out);
      std::cout << "  " << (run.integer ? "integer (16-bit, exact) pipeline" : "float pipeline") << ", levels "
                << run.params.levels << ", r " << run.params.radius << ", sigma_d " << run.params.sigmaSpatial
                << ", sigma_r " << run.params.sigmaRange << (job.autoSigmaRange ? " (auto)" : "");
      if (run.report.backend == Backend::Kokkos)
        std::cout << ", " << toString(run.params.pyramid) << " + " << toString(run.params.bilateral);
      std::cout << "\n";
      return 0;
    }
    if (*bil || *nlm) {
      const Backend backend = parseBackend(backendName);
      if (*bil && !variantName.empty()) bp.variant = parseBilateralVariant(variantName);
      if (*nlm && !variantName.empty()) np.variant = parseNlmVariant(variantName);
      if (!variantName.empty() && resolve(backend) == Backend::Cpu)
        throw InvalidArgument("--variant selects a Kokkos variant; it has no meaning with the CPU backend");
      checkPaths(in, out);
      const HostImage img = io::readImage(in);
      pipeline::RunReport report;
      const HostImage result = *bil ? pipeline::denoiseBilateral(img, bp, backend, &report)
                                    : pipeline::denoiseNlm(img, np, backend, &report);
      io::writeImage(result, out);
      printRun(*bil ? "bilateral" : "nlm", img, report, out);
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "kortex: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
