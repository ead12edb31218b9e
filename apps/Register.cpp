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
#include "pipeline/RegisterCohort.hpp"
#include "pipeline/RegisterJob.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

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
              << it.evaluation << "  metric " << std::fixed << std::setprecision(5) << it.value << "  step "
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

}  // namespace

namespace {

void printPair(pipeline::RegistrationPipelineResult const& r, pipeline::RegisterJob const& job) {
  const bool greedy = job.method == pipeline::RegistrationMethod::Greedy;
  std::cout << "backend: " << r.executionSpace;
  if (r.backend == Backend::Kokkos && !greedy) std::cout << ", force kernel " << toString(job.fluid.variant);
  std::cout << "\n";
  if (job.biasSigmaMm > 0.0)
    std::cout << "intensities: both images bias-corrected (each head divided by its local mean over " << job.biasSigmaMm
              << " mm), then normalised\n";
  if (r.affineRan)
    std::cout << "affine: " << (job.affineMetric == AffineMetricKind::Mi ? "MI " : "NCC ") << std::fixed
              << std::setprecision(4) << r.affineResult.valueInitial << " -> "
              << r.affineResult.valueFinal << " (" << r.affineResult.evaluations << " evaluations in "
              << r.affineResult.batches << " batches, "
              << r.affineResult.levelsUsed << " levels, overlap " << std::setprecision(1)
              << 100.0 * r.affineResult.overlap << " %), " << std::setprecision(3) << r.secondsAffine << " s\n";
  else
    std::cout << "affine: skipped (--no-affine); header alignment, overlap " << std::setprecision(1)
              << 100.0 * r.overlapStart << " %\n";
  if (greedy && job.transform != pipeline::RegistrationTransform::Deformable) {
    std::cout << "transform: " << toString(job.transform) << " (the affine stage alone, "
              << parameterCount(pipeline::pairOptions(job).affine.dof) << " parameters)\n";
  } else if (greedy) {
    std::cout << "greedy: metric " << toString(job.greedy.metric);
    if (job.greedy.metric == GreedyMetric::Lncc) std::cout << " (window radius " << job.greedy.lnccRadius << ")";
    if (job.greedy.metric == GreedyMetric::Mi) std::cout << " (" << job.greedy.miBins << " bins)";
    std::cout << ", solver " << toString(job.greedy.solver) << ", grid padded to " << describe(r.greedyGrid) << "\n";
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
}

void printInverse(pipeline::RegisterJobResult const& r) {
  if (!r.inverse) return;
  auto const& s = r.inverse->stats;
  std::cout << "inverse: " << s.points - s.unconverged << " of " << s.points << " moving voxels converged (max residual "
            << std::setprecision(2) << std::scientific << s.maxResidual << " voxel), " << std::fixed
            << std::setprecision(3) << r.inverse->seconds << " s\n"
            << "  inverse consistency |p - inv(phi(p))| inside the head (" << r.consistency.voxels << " voxels): mean "
            << r.consistency.mean << ", p99 " << r.consistency.p99 << ", max " << r.consistency.max << " voxel\n";
}

void printWritten(pipeline::RegisterJobResult const& r) {
  auto const& o = r.job.outputs;
  const bool greedy = r.job.method == pipeline::RegistrationMethod::Greedy;
  auto line = [](std::filesystem::path const& p, std::string const& what) {
    if (!p.empty()) std::cout << "wrote " << p.string() << " (" << what << ")\n";
  };
  line(o.warped, "moving resampled on the fixed grid, original intensities");
  line(o.field, "the deformable part, ITK/ANTs displacement field, world mm, LPS; the whole map is "
                "`kortex apply --transform " + o.field.string() + " --transform " +
                (o.affine.empty() ? std::string("AFFINE") : o.affine.string()) +
                "` (antsApplyTransforms -t field -t affine)");
  line(o.inverseField, "the whole map's inverse on the moving grid, ITK/ANTs convention: moving point y -> fixed point "
                       "y + e(y); apply it alone");
  line(o.jacobian, std::string("det(I - grad u) of the ") + (greedy ? "greedy" : "fluid") + " part");
  line(o.affine, "the affine part, ITK transform file, fixed world -> moving world");
  line(o.composite, "the whole map as one ITK/ANTs displacement field on the fixed grid (affine included); "
                    "`kortex apply --transform " + o.composite.string() + "` alone");
  line(o.report, "the job's JSON report");
  if (!o.qc.empty())
    std::cout << "wrote " << (o.qc / "index.html").string() << " (the QC report, " << r.qc.files.size() - 1
              << " pictures beside it; " << std::fixed << std::setprecision(3) << r.qc.seconds << " s)\n";
}

// An output flag given without a file name names nothing outside a cohort.
void requireOutputNames(RegisterOptions const& o) {
  const std::pair<bool, std::string const*> flags[] = {
      {o.asked.warped, &o.outWarped}, {o.asked.field, &o.outField},           {o.asked.jacobian, &o.outJacobian},
      {o.asked.affine, &o.outAffine}, {o.asked.inverseField, &o.outInverseField}, {o.asked.composite, &o.outComposite},
      {o.asked.qc, &o.qcDir}};
  const char* names[] = {"--out-warped", "--out-field", "--out-jacobian", "--out-affine", "--out-inverse-field",
                         "--out-composite", "--qc"};
  for (int k = 0; k < 7; ++k)
    if (flags[k].first && flags[k].second->empty())
      throw InvalidArgument(std::string(names[k]) + (k == 6 ? " needs a folder name" : " needs a file name") +
                            " (without one it names a cohort's outputs: several --moving images, --list or --out-dir)");
}

int runRegistration(RegisterOptions const& o, pipeline::RegisterJob& job) {
  requireOutputNames(o);
  job.fixed.path = o.fixed;
  job.moving.path = o.moving.front();
  job.fixedMask.path = o.fixedMask;
  job.movingMask.path = o.movingMask;
  job.qcMovingLabels.path = o.qcLabels;
  job.qcFixedLabels.path = o.qcFixedLabels;
  job.useAffine = !o.noAffine;
  job.affineMetric = parseAffineMetric(o.affineMetric);
  // greedy: one --mi-bins for both stages (among the greedy options)
  job.miBins = job.method == pipeline::RegistrationMethod::Greedy ? job.greedy.miBins : o.miBins;
  job.biasSigmaMm = o.biasCorrectMm;
  job.backend = parseBackend(o.backend);
  job.outputs = {o.outWarped, o.outField, o.outJacobian, o.outAffine, o.outInverseField, o.outComposite, o.outReport, o.qcDir};
  ProgressBar bar(o.fluid.iterations, o.quiet);
  pipeline::RegisterProgress progress;
  progress.fluid = [&](RegistrationIteration const& it) { bar.fluid(it); };
  progress.greedy = [&](GreedyIteration const& it) { bar.greedy(it, job.greedy); };
  progress.affine = [&](AffineIteration const& it) { bar.affine(it); };
  const pipeline::RegisterJobResult r = pipeline::runRegisterJob(job, progress);
  bar.end();
  std::cout << "fixed:  " << o.fixed << " (" << describe(r.pair.fixedGrid) << ")\n"
            << "moving: " << o.moving.front() << " (" << describe(r.pair.movingGrid) << ")\n";
  if (!r.pair.fixedGrid.sameGrid(r.pair.movingGrid))
    std::cout << "  the grids differ: the moving image was resampled onto the fixed grid through the headers"
              << (job.useAffine ? " and the affine alignment" : "") << "\n";
  printPair(r.pair, job);
  printInverse(r);
  printWritten(r);
  return 0;
}

}  // namespace

int cmdRegisterUnbiased(RegisterOptions const& o) {
  pipeline::RegisterJob job;
  job.method = pipeline::RegistrationMethod::Unbiased;
  job.fluid = o.fluid;
  if (!o.variant.empty()) {
    job.fluid.variant = parseRegistrationVariant(o.variant);
    job.variantGiven = true;
  }
  return runRegistration(o, job);
}

namespace {

bool isCohort(RegisterOptions const& o) { return o.moving.size() > 1 || !o.list.empty() || !o.outDir.empty(); }

// One line over the cohort, rewritten in place on a terminal; a line per subject otherwise.
void cohortProgress(pipeline::CohortEvent const& e, bool quiet, bool tty) {
  if (quiet) return;
  const int width = 24, filled = std::min(width, (e.index + 1) * width / std::max(1, e.total));
  std::ostringstream s;
  s << "  cohort [" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << e.index + 1 << "/"
    << e.total << "  " << e.registered << " registered, " << e.failed << " failed  " << std::fixed
    << std::setprecision(2) << (e.elapsed > 0 ? e.registered / e.elapsed : 0.0) << " pairs/s  " << e.subject->stem
    << (e.subject->status == pipeline::CohortStatus::Failed ? " FAILED" : "");
  std::cerr << (tty ? "\r" : "") << s.str() << (tty ? "" : "\n") << std::flush;
  if (tty && e.index + 1 == e.total) std::cerr << "\n";
}

int runCohort(RegisterOptions const& o, GreedyParams const& greedy) {
  if (!o.qcLabels.empty() || !o.qcFixedLabels.empty())
    throw InvalidArgument("--qc-labels and --qc-fixed-labels are taken by a single pair, not by a cohort (one label map "
                          "would not fit every moving image)");
  if (!o.movingMask.empty())
    throw InvalidArgument("--moving-mask is taken by a single pair, not by a cohort (one mask for every moving image "
                          "would not fit them); --fixed-mask is");
  pipeline::RegisterCohortJob job;
  job.fixed.path = o.fixed;
  job.fixedMask.path = o.fixedMask;
  for (auto const& m : o.moving) job.moving.push_back({m, {}});
  job.movingList = o.list;
  job.greedy = greedy;
  job.useAffine = !o.noAffine;
  job.transform = pipeline::parseRegistrationTransform(o.transform);
  job.symmetric = o.symmetric;
  job.affineMetric = parseAffineMetric(o.affineMetric);
  job.miBins = greedy.miBins;  // one --mi-bins for both stages
  job.biasSigmaMm = o.biasCorrectMm;
  job.backend = parseBackend(o.backend);
  job.outDir = o.outDir;
  job.outputs = o.asked;
  job.report = o.outReport;
  job.keepGoing = o.keepGoing;
  job.maxMemoryMiB = o.maxMemoryMiB;
  for (std::string const* named :
       {&o.outWarped, &o.outField, &o.outJacobian, &o.outAffine, &o.outInverseField, &o.outComposite, &o.qcDir})
    if (!named->empty())
      throw InvalidArgument("a cohort's outputs are named after each moving image in --out-dir: give the output flags "
                            "without a file name ('" + *named + "' was given)");
  const bool tty = isatty(fileno(stderr)) != 0;
  const pipeline::RegisterCohortResult r =
      pipeline::runRegisterCohort(job, [&](pipeline::CohortEvent const& e) { cohortProgress(e, o.quiet, tty); });
  std::cout << "fixed: " << o.fixed << "\n"
            << "cohort: " << r.registered() << " of " << r.subjects.size() << " registered, " << r.failed()
            << " failed; " << r.concurrentPairs << " pair(s) at once";
  if (r.pairBytes > 0)
    std::cout << " (" << std::fixed << std::setprecision(0) << double(r.pairBytes) / 1048576.0 << " MiB each, cap "
              << double(r.memoryCap) / 1048576.0 << " MiB)";
  std::cout << "\n" << std::fixed << std::setprecision(3) << "read " << r.secondsRead << " s, registered and written in "
            << r.secondsRegister << " s (" << std::setprecision(2) << r.pairsPerSecond() << " pairs/s), total "
            << std::setprecision(3) << r.secondsTotal << " s\n";
  for (auto const& s : r.subjects)
    if (s.status == pipeline::CohortStatus::Failed) std::cerr << "kortex: error: " << s.error << "\n";
  if (r.registered() > 0 && job.outputs.any()) std::cout << "wrote the subjects' outputs in " << o.outDir << "\n";
  if (job.outputs.qc) std::cout << "wrote " << (std::filesystem::path(o.outDir) / "qc.html").string() << " (the cohort's QC page, worst subject first)\n";
  if (!o.outReport.empty()) std::cout << "wrote " << o.outReport << " (the cohort's JSON report)\n";
  return r.failed() > 0 ? 1 : 0;
}

}  // namespace

int cmdRegisterGreedy(RegisterOptions const& o) {
  if (isCohort(o)) return runCohort(o, o.greedy.toParams());
  if (o.moving.empty()) throw InvalidArgument("no moving image is given (--moving, or --list for a cohort)");
  pipeline::RegisterJob job;
  job.method = pipeline::RegistrationMethod::Greedy;
  job.greedy = o.greedy.toParams();
  job.transform = pipeline::parseRegistrationTransform(o.transform);
  job.symmetric = o.symmetric;
  return runRegistration(o, job);
}

namespace {
// The inputs and outputs both registration commands take; `part` names what the Jacobian map is of.
// The output options, whose count says whether a cohort asked for them.
struct OutputOptions {
  CLI::Option *warped, *field, *jacobian, *affine, *inverseField, *composite, *qc;
  void record(RegisterOptions& o) const {
    o.asked = {warped->count() > 0,      field->count() > 0,        jacobian->count() > 0,
               affine->count() > 0,      inverseField->count() > 0, composite->count() > 0,
               qc->count() > 0};
  }
};

OutputOptions addRegisterFiles(CLI::App& cmd, RegisterOptions& o, std::string const& part) {
  cmd.add_option("--fixed", o.fixed, "Fixed (reference) 3D image")->required();
  OutputOptions out;
  out.warped = cmd.add_option("--out-warped", o.outWarped, "Moving image resampled on the fixed grid");
  out.field = cmd.add_option("--out-field", o.outField,
                             "The deformable part as a displacement field, NIfTI, ITK/ANTs convention (world mm, LPS; "
                             "fixed point x -> x + d(x)). The whole map is the field then the affine: kortex apply "
                             "--transform FIELD --transform AFFINE (antsApplyTransforms -t FIELD -t AFFINE)");
  out.jacobian = cmd.add_option("--out-jacobian", o.outJacobian, "det(I - grad u) of the " + part + " part");
  out.affine = cmd.add_option("--out-affine", o.outAffine,
                              "The affine part as an ITK transform file (.txt; fixed world -> moving world; with "
                              "--no-affine the header alignment)");
  out.inverseField = cmd.add_option(
      "--out-inverse-field", o.outInverseField,
      "The WHOLE map's inverse (affine included) on the moving grid, NIfTI (ITK/ANTs convention: moving point y -> "
      "fixed point y + e(y)); apply it alone. Inverted point by point at the end (Newton), its inverse consistency "
      "printed");
  out.composite = cmd.add_option(
      "--out-composite", o.outComposite,
      "The WHOLE map (affine and deformable part) as one displacement field on the fixed grid, NIfTI (ITK/ANTs "
      "convention); kortex apply or antsApplyTransforms take it alone, in place of the field and the affine");
  cmd.add_option("--json", o.outReport, "The job's JSON report (the job, the stages, the files written)");
  out.qc = cmd.add_option("--qc", o.qcDir,
                          "QC report: a folder with index.html and its pictures (fixed image with the moving image's "
                          "edges before and after, checkerboard, det J with folds marked, convergence, numbers); "
                          "docs/qc.md");
  cmd.add_option("--qc-labels", o.qcLabels,
                 "The moving image's label map (its grid): warped through the map and outlined in the QC report");
  cmd.add_option("--qc-fixed-labels", o.qcFixedLabels,
                 "The fixed image's label map (its grid): the QC report gives the mean Dice over its labels against "
                 "--qc-labels warped");
  cmd.footer("At least one output is needed. Outputs are written all or none: a failure leaves the files that were "
             "there before.");
  return out;
}

// A greedy cohort: several moving images (or --list) against one fixed image; the output flags then
// take no file name.
void addCohortOptions(CLI::App& cmd, RegisterOptions& o, OutputOptions const& out) {
  for (CLI::Option* opt : {out.warped, out.field, out.jacobian, out.affine, out.inverseField, out.composite, out.qc})
    opt->expected(0, 1);
  cmd.add_option("--list", o.list, "Cohort: a text file of more moving images, one path per line ('#' comments)");
  cmd.add_option("--out-dir", o.outDir,
                 "Cohort: the folder of every subject's outputs, named after its moving image: STEM_warped.nii.gz, "
                 "STEM_field.nii.gz, STEM_jacobian.nii.gz, STEM_affine.txt, STEM_inverse_field.nii.gz, "
                 "STEM_composite.nii.gz, STEM_qc/ (and the cohort's page qc.html, worst subject first), as the "
                 "output flags (given without a file name) ask");
  cmd.add_flag("--keep-going", o.keepGoing,
               "Cohort: a subject that fails is reported and skipped (the exit status is still 1); without it the "
               "first failure stops the cohort");
  cmd.add_option("--max-memory", o.maxMemoryMiB,
                 "Cohort: device memory for the pairs that run at once, MiB (default: 90 % of what is free)");
}

// --affine-metric, --bias-correct, and for the unbiased command --mi-bins (the greedy command's --mi-bins, among the
// greedy options, serves both of its stages).
void addAffineMetricOptions(CLI::App& cmd, RegisterOptions& o, bool withBins) {
  cmd.add_option("--affine-metric", o.affineMetric,
                 "The affine stage's metric: ncc (normalised cross-correlation: images of one contrast) or mi (Mattes "
                 "mutual information: any two contrasts, e.g. T2, FLAIR, PD or EPI to T1)")
      ->capture_default_str();
  cmd.add_option("--bias-correct", o.biasCorrectMm,
                 "Remove a smooth intensity bias from both images first: each head voxel divided by the head's local "
                 "mean, a Gaussian of this many mm (30 suits MR at 1-2 mm; 0 = off). For MI across contrasts "
                 "(docs/greedy.md)")
      ->capture_default_str();
  if (withBins)
    cmd.add_option("--mi-bins", o.miBins,
                   "Mutual information: histogram bins per image, " + std::to_string(kMinMiBins) + "-" +
                       std::to_string(kMaxMiBins))
        ->capture_default_str();
}
}  // namespace

void addRegisterCommands(CLI::App& app, Action& action) {
  auto* reg = app.add_subcommand("register", "Register two images");
  reg->require_subcommand(1);
  auto rgop = std::make_shared<RegisterOptions>();
  RegisterOptions& rgo = *rgop;
  auto* unb = reg->add_subcommand(
      "unbiased",
      "Affine (NCC or MI) + unbiased fluid registration (symmetric-KL prior, Yanovsky et al. 2007) of two 3D images");
  const OutputOptions unbOut = addRegisterFiles(*unb, rgo, "fluid");
  unb->add_option("--moving", rgo.moving, "Moving (template) 3D image")->required()->expected(1);
  unb->add_option("--lambda", rgo.fluid.lambda, "Weight of the symmetric-KL regulariser (> 0)")->capture_default_str();
  unb->add_option("--sigma", rgo.fluid.sigma, "Gaussian smoothing of the force, voxels")->capture_default_str();
  unb->add_option("--iterations", rgo.fluid.iterations, "Cap on fluid iterations")->capture_default_str();
  addNoAffineFlag(*unb, rgo.noAffine);
  addAffineMetricOptions(*unb, rgo, true);
  addBackendOption(*unb, rgo.backend);
  unb->add_option("--variant", rgo.variant, "Kokkos force kernel: naive|recompute|reuse|two-pass (default: " + std::string(toString(RegistrationParams{}.variant)) + ")");
  unb->add_flag("--quiet", rgo.quiet, "No progress bar");
  unb->callback([rgop, unbOut, &action] {
    unbOut.record(*rgop);
    action = [rgop] { return cmdRegisterUnbiased(*rgop); };
  });

  auto* gr = reg->add_subcommand(
      "greedy",
      "Affine (NCC or MI) + greedy diffeomorphic registration (fluid operator, multi-scale; Ha et al. 2010) of two 3D images");
  const OutputOptions grOut = addRegisterFiles(*gr, rgo, "greedy");
  gr->add_option("--moving", rgo.moving,
                 "Moving (template) 3D image; several make a cohort, registered to the fixed image (--out-dir)")
      ->expected(1, -1);
  addCohortOptions(*gr, rgo, grOut);
  addGreedyOptions(*gr, rgo.greedy);
  addNoAffineFlag(*gr, rgo.noAffine);
  addAffineMetricOptions(*gr, rgo, false);
  gr->add_option("--fixed-mask", rgo.fixedMask,
                 "Cost-function mask on the fixed image's grid (antsRegistration's -x): the affine stage counts a "
                 "voxel only where it is nonzero (and where --moving-mask is, at the mapped point), and the greedy "
                 "stage's force is zero where either is 0 (the moving mask carried by the affine map)");
  gr->add_option("--moving-mask", rgo.movingMask, "Cost-function mask on the moving image's grid (see --fixed-mask)");
  gr->add_option("--transform", rgo.transform,
                 "What is fitted: rigid (6 parameters), similarity (7) or affine (12) by the affine stage alone, or "
                 "deformable (the affine stage, then the greedy one)")
      ->capture_default_str();
  gr->add_flag("--symmetric", rgo.symmetric,
               "Inverse-consistent registration: the affine stage fitted both ways and averaged, then both images "
               "move towards a midpoint (as ANTs SyN), each by half the step; the map is the moving half composed "
               "with the inverse of the fixed half (no masks)");
  addBackendOption(*gr, rgo.backend);
  gr->add_flag("--quiet", rgo.quiet, "No progress bar");
  gr->callback([rgop, grOut, &action] {
    grOut.record(*rgop);
    action = [rgop] { return cmdRegisterGreedy(*rgop); };
  });
}

}  // namespace kortex::app
