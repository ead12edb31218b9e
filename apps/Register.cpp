// `kortex register unbiased` / `kortex register greedy`: affine + unbiased fluid or greedy
// diffeomorphic registration of two 3D images (pipeline/Register.hpp registerPair), with a
// progress bar and the outputs of the ITK/ANTs conventions (io/ImageIO.hpp).

#include "apps/Register.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "apps/Commands.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/Inverse.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/Register.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

void checkInput(std::string const& path, const char* what) {
  if (path.empty()) throw InvalidArgument(std::string("--") + what + " is required");
  if (fs::is_directory(path)) throw IoError(std::string(what) + " image '" + path + "' is a directory, not a file");
  if (!fs::exists(path)) throw IoError(std::string(what) + " image '" + path + "' does not exist");
  io::requireSupportedExtension(path, io::Access::Read);
}

void checkOutput(std::string const& path, const char* option, bool niftiOnly) {
  io::requireWritableFile(path, option);
  if (niftiOnly) {
    const std::string s = fs::path(path).filename().string();
    auto ends = [&](std::string const& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; };
    if (!ends(".nii") && !ends(".nii.gz"))
      throw IoError(std::string(option) + " '" + path + "': a displacement field is written as NIfTI (.nii or .nii.gz)");
  } else {
    io::requireSupportedExtension(path, io::Access::Write);
  }
}

// One line, rewritten in place on a terminal; every 25th iteration as its own line otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(int cap, bool quiet) : cap_(cap), quiet_(quiet), tty_(isatty(fileno(stderr)) != 0) {}
  void fluid(RegistrationIteration const& it) {
    if (quiet_) return;
    if (!tty_ && it.iteration % 25 != 0 && it.iteration != 1) return;
    const int width = 24;
    const int filled = cap_ > 0 ? std::min(width, it.iteration * width / cap_) : width;
    std::ostringstream s;
    s << "  fluid [" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << std::setw(4)
      << it.iteration << "/" << cap_ << "  E " << std::scientific << std::setprecision(4) << it.energy.total
      << "  min det J " << std::fixed << std::setprecision(3) << it.energy.minJacobian << "  step "
      << std::setprecision(3) << it.step << " vx  " << std::setprecision(2) << it.seconds << " s";
    std::cerr << (tty_ ? "\r" : "") << s.str() << (tty_ ? "" : "\n") << std::flush;
    dirty_ = tty_;
  }
  void greedy(GreedyIteration const& it, GreedyParams const& p) {
    if (quiet_) return;
    const int cap = p.iterations[std::size_t(it.scale)];
    if (!tty_ && it.iteration % 25 != 0 && it.iteration != 1 && it.iteration != cap) return;
    const int width = 24;
    const int filled = cap > 0 ? std::min(width, it.iteration * width / cap) : width;
    std::ostringstream s;
    s << "  greedy scale " << it.scale + 1 << "/" << p.scales.size() << " (x" << it.factor << ") ["
      << std::string(filled, '#') << std::string(width - filled, '.') << "] " << std::setw(4) << it.iteration << "/"
      << cap << "  RMSE " << std::fixed << std::setprecision(4) << it.rmse << "  min det " << std::setprecision(3)
      << it.minJacobian << "  step " << it.step << " vx" << (it.refused ? "  (fold refused)" : "") << "  "
      << std::setprecision(2) << it.seconds << " s";
    std::cerr << (tty_ ? "\r" : "") << s.str() << (tty_ ? "" : "\n") << std::flush;
    dirty_ = tty_;
    if (tty_ && it.iteration == cap) end();
  }
  void affine(AffineIteration const& it) {
    if (quiet_) return;
    if (it.level != level_) {
      end();
      level_ = it.level;
    }
    if (!tty_) return;
    std::cerr << "\r  affine level " << it.level << " (shrink " << (1 << it.level) << "): eval " << std::setw(4)
              << it.evaluation << "  NCC " << std::fixed << std::setprecision(5) << it.ncc << "  step "
              << std::setprecision(3) << it.step << std::flush;
    dirty_ = true;
  }
  void end() {
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
  }

 private:
  int cap_;
  bool quiet_, tty_;
  bool dirty_ = false;
  int level_ = -1;
};

// Writes all outputs or none: each file is written atomically, and files already written are
// removed when a later one fails.
class OutputSet {
 public:
  ~OutputSet() {
    if (!committed_)
      for (auto const& p : written_) {
        std::error_code ec;
        fs::remove(p, ec);
      }
  }
  template <class Write>
  void write(std::string const& path, Write&& w) {
    if (path.empty()) return;
    w(path);
    written_.push_back(path);
  }
  void commit() { committed_ = true; }

 private:
  std::vector<std::string> written_;
  bool committed_ = false;
};

}  // namespace

namespace {

// The inverse of r's map and what it achieved: Newton residuals, and |p - Phi^-1(Phi(p))| inside the head.
pipeline::InverseMap reportInverse(pipeline::RegistrationPipelineResult const& r) {
  pipeline::InverseMap inv = pipeline::invertRegistration(r);
  const HostImage head = pipeline::headMask(r);
  const pipeline::InverseConsistency ic = pipeline::inverseConsistency(r, inv, &head);
  std::cout << "inverse: " << inv.stats.points - inv.stats.unconverged << " of " << inv.stats.points
            << " moving voxels converged (max residual " << std::setprecision(2) << std::scientific
            << inv.stats.maxResidual << " voxel), " << std::fixed << std::setprecision(3) << inv.seconds << " s\n"
            << "  inverse consistency |p - inv(phi(p))| inside the head (" << ic.voxels << " voxels): mean "
            << ic.mean << ", p99 " << ic.p99 << ", max " << ic.max << " voxel\n";
  return inv;
}

int runRegistration(RegisterOptions const& o, pipeline::RegistrationPipelineOptions& opt) {
  const bool greedy = opt.method == pipeline::RegistrationMethod::Greedy;
  opt.useAffine = !o.noAffine;
  checkInput(o.fixed, "fixed");
  checkInput(o.moving, "moving");
  if (o.outWarped.empty()) throw InvalidArgument("--out-warped is required");
  checkOutput(o.outWarped, "--out-warped", false);
  if (!o.outField.empty()) checkOutput(o.outField, "--out-field", true);
  if (!o.outJacobian.empty()) checkOutput(o.outJacobian, "--out-jacobian", false);
  if (!o.outInverseField.empty()) checkOutput(o.outInverseField, "--out-inverse-field", true);
  if (!o.outAffine.empty()) io::requireWritableFile(o.outAffine, "--out-affine");
  pipeline::requireDistinctFiles({{"fixed image", o.fixed}, {"moving image", o.moving}},
                                 {{"warped image", o.outWarped}, {"field", o.outField}, {"Jacobian map", o.outJacobian},
                                  {"affine transform", o.outAffine},
                                  {"inverse field", o.outInverseField}});

  HostImage fixed, moving;
  {
    kx::ScopedRegion region("kortex::register::read");
    fixed = io::readImage(o.fixed);
    moving = io::readImage(o.moving);
  }
  std::cout << "fixed:  " << o.fixed << " (" << describe(fixed.geometry) << ")\n"
            << "moving: " << o.moving << " (" << describe(moving.geometry) << ")\n";
  if (!fixed.geometry.sameGrid(moving.geometry))
    std::cout << "  the grids differ: the moving image is resampled onto the fixed grid through the headers"
              << (opt.useAffine ? " and the affine alignment" : "") << "\n";

  ProgressBar bar(o.fluid.iterations, o.quiet);
  opt.progress = [&](RegistrationIteration const& it) { bar.fluid(it); };
  opt.greedyProgress = [&](GreedyIteration const& it) { bar.greedy(it, opt.greedy); };
  opt.affineProgress = [&](AffineIteration const& it) { bar.affine(it); };
  pipeline::RegistrationPipelineResult r = pipeline::registerPair(moving, fixed, opt);
  bar.end();

  std::cout << "backend: " << r.executionSpace;
  if (r.backend == Backend::Kokkos && !greedy) std::cout << ", force kernel " << toString(opt.fluid.variant);
  std::cout << "\n";
  if (r.affineRan)
    std::cout << "affine: NCC " << std::fixed << std::setprecision(4) << r.affineResult.nccInitial << " -> "
              << r.affineResult.nccFinal << " (" << r.affineResult.evaluations << " evaluations, "
              << r.affineResult.levelsUsed << " levels, overlap " << std::setprecision(1)
              << 100.0 * r.affineResult.overlap << " %), " << std::setprecision(3) << r.secondsAffine << " s\n";
  else
    std::cout << "affine: skipped (--no-affine); header alignment, overlap " << std::setprecision(1)
              << 100.0 * r.overlapStart << " %\n";
  if (greedy) {
    std::cout << "greedy: metric " << toString(opt.greedy.metric);
    if (opt.greedy.metric == GreedyMetric::Lncc) std::cout << " (window radius " << opt.greedy.lnccRadius << ")";
    std::cout << ", solver " << toString(opt.greedy.solver) << ", grid padded to " << describe(r.greedyGrid) << "\n";
    for (auto const& sc : r.greedy.scales)
      std::cout << "  scale x" << sc.factor << ": " << sc.iterations << " iterations, RMSE " << std::fixed
                << std::setprecision(4) << sc.rmseStart << " -> " << sc.rmseEnd << ", " << std::setprecision(3)
                << sc.seconds << " s; " << explain(sc.stop) << "\n";
    std::cout << "  " << r.greedy.refused << " fold-refused steps, min det Dh " << std::setprecision(3)
              << r.greedy.minJacobian << ", " << r.secondsFluid << " s\n";
  } else {
    std::cout << "fluid: " << r.fluid.iterations << " iterations (" << r.fluid.accepted << " accepted, "
              << r.fluid.rejected << " rejected steps), energy " << std::scientific << std::setprecision(4)
              << r.fluid.initial.total << " -> " << r.fluid.final.total << ", min det J " << std::fixed
              << std::setprecision(3) << r.fluid.final.minJacobian << ", " << r.secondsFluid << " s\n"
              << "  " << explain(r.fluid.stop) << (r.fluid.stop == StopReason::IterationCap ? " (--iterations)" : "")
              << "\n";
  }
  std::cout << "total " << std::setprecision(3) << r.secondsTotal << " s (normalise " << r.secondsNormalise
            << ", affine " << r.secondsAffine << ", resample " << r.secondsResample << ", "
            << (greedy ? "greedy " : "fluid ") << r.secondsFluid << ")\n";

  std::optional<pipeline::InverseMap> inverse;
  if (!o.outInverseField.empty()) inverse = reportInverse(r);

  kx::ScopedRegion writeRegion("kortex::register::write");
  OutputSet outputs;
  outputs.write(o.outWarped, [&](std::string const& p) { io::writeImage(pipeline::warpedMoving(r, moving), p); });
  outputs.write(o.outField, [&](std::string const& p) { io::writeDisplacementField(pipeline::worldDisplacement(r), p); });
  outputs.write(o.outJacobian, [&](std::string const& p) { io::writeImage(pipeline::jacobianMap(r), p); });
  outputs.write(o.outInverseField, [&](std::string const& p) {
    io::writeDisplacementField(pipeline::inverseWorldDisplacement(r, *inverse), p);
  });
  outputs.write(o.outAffine, [&](std::string const& p) {
    io::writeTextFileAtomic(p, itkTransformText(toWorldMatrix(r.affine, r.fixedGrid, r.movingGrid)));
  });
  outputs.commit();
  std::cout << "wrote " << o.outWarped << " (moving resampled on the fixed grid, original intensities)\n";
  if (!o.outField.empty())
    std::cout << "wrote " << o.outField
              << " (displacement field, ITK/ANTs convention: world mm, LPS; fixed point x -> moving point "
                 "x + d(x); apply with antsApplyTransforms -i moving -r fixed -t field)\n";
  if (!o.outInverseField.empty())
    std::cout << "wrote " << o.outInverseField
              << " (inverse displacement field on the moving grid, ITK/ANTs convention: moving point y -> fixed point "
                 "y + e(y))\n";
  if (!o.outJacobian.empty())
    std::cout << "wrote " << o.outJacobian << " (det(I - grad u) of the " << (greedy ? "greedy" : "fluid") << " part)\n";
  if (!o.outAffine.empty()) std::cout << "wrote " << o.outAffine << " (affine part, ITK transform file)\n";
  return 0;
}

}  // namespace

int cmdRegisterUnbiased(RegisterOptions const& o) {
  // The command's policy (registerPair itself accepts lambda = 0: the validation study uses it).
  if (!(o.fluid.lambda > 0.0) || !std::isfinite(o.fluid.lambda))
    throw InvalidArgument("--lambda must be a finite number > 0 (the symmetric-KL prior is what makes the "
                          "registration unbiased), got " + std::to_string(o.fluid.lambda));
  pipeline::RegistrationPipelineOptions opt;
  opt.backend = parseBackend(o.backend);
  opt.fluid = o.fluid;
  if (!o.variant.empty()) {
    if (resolve(opt.backend) == Backend::Cpu)
      throw InvalidArgument("--variant selects a Kokkos force kernel; it has no meaning with the CPU backend");
    opt.fluid.variant = parseRegistrationVariant(o.variant);
  }
  return runRegistration(o, opt);
}

int cmdRegisterGreedy(RegisterOptions const& o) {
  pipeline::RegistrationPipelineOptions opt;
  opt.backend = parseBackend(o.backend);
  opt.method = pipeline::RegistrationMethod::Greedy;
  opt.greedy = o.greedy.toParams();
  opt.greedy.validate();  // the flags' values, before any file is read
  return runRegistration(o, opt);
}

namespace {
// The inputs and outputs both registration commands take; `part` names what the Jacobian map is of.
void addRegisterFiles(CLI::App& cmd, RegisterOptions& o, std::string const& part) {
  cmd.add_option("--fixed", o.fixed, "Fixed (reference) 3D image")->required();
  cmd.add_option("--moving", o.moving, "Moving (template) 3D image")->required();
  cmd.add_option("--out-warped", o.outWarped, "Moving image resampled on the fixed grid (written atomically)")->required();
  cmd.add_option("--out-field", o.outField,
                 "Displacement field, NIfTI vector image in the ITK/ANTs convention (world mm, LPS; fixed point x "
                 "maps to moving point x + d(x))");
  cmd.add_option("--out-jacobian", o.outJacobian, "det(I - grad u) of the " + part + " part");
  cmd.add_option("--out-affine", o.outAffine, "Affine part as an ITK transform file (.txt)");
  cmd.add_option("--out-inverse-field", o.outInverseField,
                 "Inverse displacement field on the moving grid (ITK/ANTs convention: moving point y maps to fixed "
                 "point y + e(y)); the map inverted point by point at the end (Newton), its inverse consistency "
                 "printed");
}
}  // namespace

void addRegisterCommands(CLI::App& app, Action& action) {
  auto* reg = app.add_subcommand("register", "Register two images");
  reg->require_subcommand(1);
  auto rgop = std::make_shared<RegisterOptions>();
  RegisterOptions& rgo = *rgop;
  auto* unb = reg->add_subcommand(
      "unbiased",
      "Affine (NCC) + unbiased fluid registration (symmetric-KL prior, Yanovsky et al. 2007) of two 3D images");
  addRegisterFiles(*unb, rgo, "fluid");
  unb->add_option("--lambda", rgo.fluid.lambda, "Weight of the symmetric-KL regulariser (> 0)")->capture_default_str();
  unb->add_option("--sigma", rgo.fluid.sigma, "Gaussian smoothing of the force, voxels")->capture_default_str();
  unb->add_option("--iterations", rgo.fluid.iterations, "Cap on fluid iterations")->capture_default_str();
  addNoAffineFlag(*unb, rgo.noAffine);
  addBackendOption(*unb, rgo.backend);
  unb->add_option("--variant", rgo.variant, "Kokkos force kernel: naive|recompute|reuse (default: " + std::string(toString(RegistrationParams{}.variant)) + ")");
  unb->add_flag("--quiet", rgo.quiet, "No progress bar");
  unb->callback([rgop, &action] { action = [rgop] { return cmdRegisterUnbiased(*rgop); }; });

  auto* gr = reg->add_subcommand(
      "greedy",
      "Affine (NCC) + greedy diffeomorphic registration (fluid operator, multi-scale; Ha et al. 2010) of two 3D images");
  addRegisterFiles(*gr, rgo, "greedy");
  addGreedyOptions(*gr, rgo.greedy);
  addNoAffineFlag(*gr, rgo.noAffine);
  addBackendOption(*gr, rgo.backend);
  gr->add_flag("--quiet", rgo.quiet, "No progress bar");
  gr->callback([rgop, &action] { action = [rgop] { return cmdRegisterGreedy(*rgop); }; });
}

}  // namespace kortex::app
