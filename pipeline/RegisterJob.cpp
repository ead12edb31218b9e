#include "pipeline/RegisterJob.hpp"

#include <cmath>
#include <future>
#include <string>
#include <utility>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/detail/JsonReader.hpp"

namespace kortex::pipeline {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool isNifti(fs::path const& p) {
  const std::string s = p.filename().string();
  auto ends = [&](std::string const& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; };
  return ends(".nii") || ends(".nii.gz");
}

// The outputs, named once: JSON key, role (messages, the report), member, format.
enum class OutputFormat { Image, Field, Text };
struct OutputSlot {
  const char* key;
  const char* role;
  fs::path RegisterOutputs::*member;
  OutputFormat format;
};
const OutputSlot kOutputSlots[] = {
    {"warped", "warped image", &RegisterOutputs::warped, OutputFormat::Image},
    {"field", "field", &RegisterOutputs::field, OutputFormat::Field},
    {"jacobian", "Jacobian map", &RegisterOutputs::jacobian, OutputFormat::Image},
    {"affine", "affine transform", &RegisterOutputs::affine, OutputFormat::Text},
    {"inverse_field", "inverse field", &RegisterOutputs::inverseField, OutputFormat::Field},
    {"composite", "composite field", &RegisterOutputs::composite, OutputFormat::Field},
    {"report", "report", &RegisterOutputs::report, OutputFormat::Text},
};

// The QC report's page: the one file of its folder that the job's rules (distinct files) name.
fs::path qcPage(RegisterOutputs const& o) { return o.qc.empty() ? fs::path() : o.qc / "index.html"; }

std::vector<JobFile> outputFiles(RegisterOutputs const& o) {
  std::vector<JobFile> files;
  for (auto const& s : kOutputSlots) files.push_back({s.role, o.*s.member});
  files.push_back({"QC report", qcPage(o)});
  return files;
}

// An optional input that was given (a path, or an image in memory).
bool given(ImageInput const& in) { return !in.inMemory() || in.image.data.data() != nullptr; }

void validateParams(RegisterJob const& job) {
  if (job.method == RegistrationMethod::Unbiased) {
    if (!(job.fluid.lambda > 0.0) || !std::isfinite(job.fluid.lambda))
      throw InvalidArgument("registration: lambda must be a finite number > 0 (the symmetric-KL prior is what makes the "
                            "registration unbiased), got " + std::to_string(job.fluid.lambda));
    requireKokkosForVariant(job.variantGiven, job.backend, "registration", "a force-kernel variant selects a Kokkos kernel");
    job.fluid.validate();
  } else {
    job.greedy.validate();
  }
  AffineParams affine;
  affine.metric = job.affineMetric;
  affine.miBins = job.miBins;
  affine.validate();
  const bool masked = given(job.fixedMask) || given(job.movingMask);
  if (masked && job.method != RegistrationMethod::Greedy)
    throw InvalidArgument("registration: masks are taken by the greedy registration's job, not the unbiased one");
  if (job.transform != RegistrationTransform::Deformable) {
    if (job.method != RegistrationMethod::Greedy)
      throw InvalidArgument("registration: a rigid, similarity or affine transform alone is fitted by the greedy "
                            "registration's job, not the unbiased one");
    if (!job.useAffine)
      throw InvalidArgument(std::string("registration: a ") + toString(job.transform) +
                            " transform is what the affine stage fits; it cannot be skipped");
  }
  IntensityParams intensity;
  intensity.biasSigmaMm = job.biasSigmaMm;
  intensity.validate();
  if ((given(job.qcMovingLabels) || given(job.qcFixedLabels)) && job.outputs.qc.empty())
    throw InvalidArgument("registration: label maps are drawn in the QC report; no QC report is asked for");
  if (given(job.qcFixedLabels) && !given(job.qcMovingLabels))
    throw InvalidArgument("registration: the fixed label map is compared with the moving one, which is not given");
  if (job.symmetric) {
    if (job.method != RegistrationMethod::Greedy || job.transform != RegistrationTransform::Deformable)
      throw InvalidArgument("registration: the symmetric mode is the greedy registration's deformable stage (not the "
                            "unbiased job, nor an affine stage alone)");
    if (masked) throw InvalidArgument("registration: the symmetric mode takes no cost-function masks");
  }
}

void validateFiles(RegisterJob const& job) {
  requireImageInput(job.fixed, "fixed image", "registration");
  requireImageInput(job.moving, "moving image", "registration");
  if (given(job.fixedMask)) requireImageInput(job.fixedMask, "fixed mask", "registration");
  if (given(job.movingMask)) requireImageInput(job.movingMask, "moving mask", "registration");
  if (given(job.qcMovingLabels)) requireImageInput(job.qcMovingLabels, "moving label map", "registration");
  if (given(job.qcFixedLabels)) requireImageInput(job.qcFixedLabels, "fixed label map", "registration");
  if (!job.outputs.any() && !job.keepResults)
    throw InvalidArgument("registration: no output is named (a warped image, a field, a Jacobian map, an affine "
                          "transform, an inverse field, a composite field, a report or a QC report)");
  for (auto const& s : kOutputSlots) {
    fs::path const& p = job.outputs.*s.member;
    if (p.empty()) continue;
    io::requireWritableFile(p, std::string("the ") + s.role, job.makeFolders);
    if (s.format == OutputFormat::Field && !isNifti(p))
      throw IoError(std::string("the ") + s.role + " '" + p.string() + "': a displacement field is written as NIfTI (.nii or .nii.gz)");
    if (s.format == OutputFormat::Image) io::requireSupportedExtension(p, io::Access::Write);
  }
  if (!job.outputs.qc.empty()) {
    if (fs::exists(job.outputs.qc) && !fs::is_directory(job.outputs.qc))
      throw IoError("the QC report's folder '" + job.outputs.qc.string() + "' is a file");
    io::requireWritableFile(qcPage(job.outputs), "QC report", true);
  }
  std::vector<JobFile> inputs;
  if (!job.fixed.inMemory()) inputs.push_back({"fixed image", job.fixed.path});
  if (!job.moving.inMemory()) inputs.push_back({"moving image", job.moving.path});
  if (!job.fixedMask.inMemory()) inputs.push_back({"fixed mask", job.fixedMask.path});
  if (!job.movingMask.inMemory()) inputs.push_back({"moving mask", job.movingMask.path});
  if (!job.qcMovingLabels.inMemory()) inputs.push_back({"moving label map", job.qcMovingLabels.path});
  if (!job.qcFixedLabels.inMemory()) inputs.push_back({"fixed label map", job.qcFixedLabels.path});
  requireDistinctFiles(inputs, outputFiles(job.outputs));
}

// ---- the stages ------------------------------------------------------------------------------------

struct Inputs {
  HostImage fixed, moving;
  AffineMasks masks;
  QcLabels labels;
};

}  // namespace

HostImage readOnImageGrid(ImageInput const& in, HostImage const& image, std::string const& what, const char* name) {
  if (!given(in)) return {};
  HostImage m = readImageInput(in);
  if (!m.geometry.sameGrid(image.geometry)) {
    const bool sameShape = m.geometry.size == image.geometry.size && m.geometry.spacing == image.geometry.spacing;
    throw InvalidArgument("registration: the " + what + " (" + describe(m.geometry) + ") is not on the " + name +
                          " image's grid (" + describe(image.geometry) + ")" +
                          (sameShape ? ": their origins or orientations differ" : "") +
                          "; resample it onto that grid first (nearest neighbour)");
  }
  return m;
}

HostImage readRegistrationMask(ImageInput const& mask, HostImage const& image, const char* name) {
  return readOnImageGrid(mask, image, std::string(name) + " mask", name);
}

namespace {

Inputs readStage(RegisterJob const& job) {
  kx::ScopedRegion region("kortex::register::read");
  Inputs in;
  in.fixed = readImageInput(job.fixed);
  in.moving = readImageInput(job.moving);
  in.masks.fixed = readRegistrationMask(job.fixedMask, in.fixed, "fixed");
  in.masks.moving = readRegistrationMask(job.movingMask, in.moving, "moving");
  in.labels.moving = readOnImageGrid(job.qcMovingLabels, in.moving, "moving label map", "moving");
  in.labels.fixed = readOnImageGrid(job.qcFixedLabels, in.fixed, "fixed label map", "fixed");
  return in;
}

RegistrationPipelineResult registerStage(RegisterJob const& job, Inputs const& in, RegisterProgress const& progress) {
  RegistrationPipelineOptions opt = pairOptions(job, progress);
  opt.masks = in.masks;
  return registerPair(in.moving, in.fixed, opt);
}

RegisterJobResult outputsStage(RegisterJob const& job, RegistrationPipelineResult pair, HostImage const& moving) {
  kx::ScopedRegion region("kortex::register::outputs");
  RegisterJobResult r;
  r.job = job;
  r.pair = std::move(pair);
  RegisterOutputs const& o = job.outputs;
  const bool all = job.keepResults, qc = !o.qc.empty();
  if (all || qc || !o.warped.empty()) r.warped = warpedMoving(r.pair, moving);
  if (all || qc || !o.jacobian.empty()) r.jacobian = jacobianMap(r.pair);
  if (all || !o.field.empty()) r.field = deformableWorldDisplacement(r.pair);
  if (all || !o.composite.empty()) r.composite = worldDisplacement(r.pair);
  r.affineWorld = toWorldMatrix(r.pair.affine, r.pair.fixedGrid, r.pair.movingGrid);
  if (job.inverse || !o.inverseField.empty()) {
    r.inverse = invertRegistration(r.pair);
    const HostImage head = headMask(r.pair);
    r.consistency = inverseConsistency(r.pair, *r.inverse, &head);
    r.inverseField = inverseWorldDisplacement(r.pair, *r.inverse);
  }
  return r;
}

// Writes the outputs; the QC report (when asked for) is drawn on another thread meanwhile (it only
// reads r), then its files and the JSON report, which holds its numbers, are written; all or none.
std::vector<fs::path> writeStage(RegisterJobResult& r, HostImage const& moving, QcLabels const& labels) {
  kx::ScopedRegion region("kortex::register::write");
  RegisterOutputs const& o = r.job.outputs;
  std::future<QcReport> drawn;
  if (!o.qc.empty()) drawn = std::async(std::launch::async, [&] { return registrationQc(r, moving, labels); });
  // The report names every file; it is written with them (its own entry included).
  std::vector<fs::path> named;
  for (auto const& f : outputFiles(o))
    if (!f.path.empty()) named.push_back(f.path);
  const std::vector<PlannedOutput> first = {
      {"warped image", o.warped, [&](fs::path const& p) { io::writeImage(r.warped, p); }},
      {"field", o.field, [&](fs::path const& p) { io::writeDisplacementField(r.field, p); }},
      {"Jacobian map", o.jacobian, [&](fs::path const& p) { io::writeImage(r.jacobian, p); }},
      {"affine transform", o.affine, [&](fs::path const& p) { io::writeTextFileAtomic(p, itkTransformText(r.affineWorld)); }},
      {"inverse field", o.inverseField, [&](fs::path const& p) { io::writeDisplacementField(r.inverseField, p); }},
      {"composite field", o.composite, [&](fs::path const& p) { io::writeDisplacementField(r.composite, p); }},
  };
  return writeAllOrNone(first, [&] {
    if (drawn.valid()) r.qc = drawn.get();
    std::vector<PlannedOutput> rest;
    for (auto const& f : r.qc.files)
      rest.push_back({"QC report", o.qc / f.name, [&f](fs::path const& p) {
                        io::writeTextFileAtomic(p, std::string(f.bytes.begin(), f.bytes.end()));
                      }});
    rest.push_back({"report", o.report, [&](fs::path const& p) {
                      RegisterJobResult withFiles = r;
                      withFiles.written = named;
                      io::writeTextFileAtomic(p, toJson(withFiles).dump(2) + "\n");
                    }});
    return rest;
  });
}

}  // namespace

RegistrationPipelineOptions pairOptions(RegisterJob const& job, RegisterProgress const& progress) {
  RegistrationPipelineOptions opt;
  opt.method = job.method;
  opt.backend = job.backend;
  opt.fluid = job.fluid;
  opt.greedy = job.greedy;
  opt.greedy.symmetric = job.symmetric;
  opt.intensity.biasSigmaMm = job.biasSigmaMm;
  opt.useAffine = job.useAffine;
  opt.useFluid = job.transform == RegistrationTransform::Deformable;
  opt.affine.dof = job.transform == RegistrationTransform::Rigid        ? AffineDof::Rigid
                   : job.transform == RegistrationTransform::Similarity ? AffineDof::Similarity
                                                                        : AffineDof::Affine;
  opt.affine.metric = job.affineMetric;
  opt.affine.miBins = job.miBins;
  opt.progress = progress.fluid;
  opt.greedyProgress = progress.greedy;
  opt.affineProgress = progress.affine;
  return opt;
}

RegisterJobResult finishRegisterJob(RegisterJob const& job, RegistrationPipelineResult pair, HostImage const& moving,
                                    QcLabels const& labels) {
  RegisterJobResult r = outputsStage(job, std::move(pair), moving);
  r.written = writeStage(r, moving, labels);
  return r;
}

bool RegisterOutputs::any() const {
  return !(warped.empty() && field.empty() && jacobian.empty() && affine.empty() && inverseField.empty() &&
           composite.empty() && report.empty() && qc.empty());
}

void RegisterJob::validate() const {
  validateParams(*this);
  validateFiles(*this);
}

void RegisterJob::validateParameters() const { validateParams(*this); }

json toJson(RegisterJob const& job) {
  json j = {{"job", "register"},
            {"method", toString(job.method)},
            {"fixed", toJson(job.fixed)},
            {"moving", toJson(job.moving)},
            {"fixed_mask", toJson(job.fixedMask)},
            {"moving_mask", toJson(job.movingMask)},
            {"qc_moving_labels", toJson(job.qcMovingLabels)},
            {"qc_fixed_labels", toJson(job.qcFixedLabels)},
            {"affine", job.useAffine},
            {"transform", toString(job.transform)},
            {"symmetric", job.symmetric},
            {"affine_metric", toString(job.affineMetric)},
            {"mi_bins", job.miBins},
            {"bias_correct_mm", job.biasSigmaMm},
            {"backend", toString(job.backend)},
            {"inverse", job.inverse},
            {"keep_results", job.keepResults},
            {"make_folders", job.makeFolders}};
  if (job.method == RegistrationMethod::Greedy) {
    j["greedy"] = toJson(job.greedy);
  } else {
    j["fluid"] = toJson(job.fluid);
    j["variant_given"] = job.variantGiven;
  }
  json o = json::object();
  for (auto const& s : kOutputSlots)
    if (!(job.outputs.*s.member).empty()) o[s.key] = (job.outputs.*s.member).string();
  if (!job.outputs.qc.empty()) o["qc"] = job.outputs.qc.string();
  j["outputs"] = o;
  return j;
}

RegisterJob registerJobFromJson(json const& j) {
  RegisterJob job;
  detail::JsonReader r(j, "register job");
  std::string method = toString(job.method), backend = toString(job.backend);
  r.jobKind("register").text("method", method).text("backend", backend);
  if (method == "greedy") job.method = RegistrationMethod::Greedy;
  else if (method == "unbiased") job.method = RegistrationMethod::Unbiased;
  else throw InvalidArgument("register job: 'method' must be \"greedy\" or \"unbiased\", got \"" + method + "\"");
  job.backend = parseBackend(backend);
  job.fixed.path = inputPathFromJson(r.raw("fixed"), "register job", "fixed");
  job.moving.path = inputPathFromJson(r.raw("moving"), "register job", "moving");
  job.fixedMask.path = inputPathFromJson(r.raw("fixed_mask"), "register job", "fixed_mask");
  job.movingMask.path = inputPathFromJson(r.raw("moving_mask"), "register job", "moving_mask");
  job.qcMovingLabels.path = inputPathFromJson(r.raw("qc_moving_labels"), "register job", "qc_moving_labels");
  job.qcFixedLabels.path = inputPathFromJson(r.raw("qc_fixed_labels"), "register job", "qc_fixed_labels");
  r.flag("affine", job.useAffine).flag("inverse", job.inverse).flag("keep_results", job.keepResults);
  r.flag("make_folders", job.makeFolders);
  r.choice("transform", job.transform, parseRegistrationTransform).flag("symmetric", job.symmetric);
  r.choice("affine_metric", job.affineMetric, parseAffineMetric).integer("mi_bins", job.miBins);
  r.number("bias_correct_mm", job.biasSigmaMm);
  r.object("greedy", job.greedy).object("fluid", job.fluid).flag("variant_given", job.variantGiven);
  if (json const* o = r.raw("outputs")) {
    detail::JsonReader outputs(*o, "register job outputs");
    for (auto const& s : kOutputSlots) outputs.path(s.key, job.outputs.*s.member);
    outputs.path("qc", job.outputs.qc);
    outputs.done();
  }
  r.done();
  return job;
}

RegisterJobResult runRegisterJob(RegisterJob const& job, RegisterProgress const& progress) {
  {
    kx::ScopedRegion region("kortex::register::check");
    job.validate();
  }
  const Inputs in = readStage(job);
  return finishRegisterJob(job, registerStage(job, in, progress), in.moving, in.labels);
}

json toJson(RegisterJobResult const& r) {
  json j;
  j["job"] = toJson(r.job);
  j["registration"] = toJson(r.pair);
  j["affine_world"] = r.affineWorld;
  if (r.inverse) {
    j["inverse"] = {{"points", r.inverse->stats.points},
                    {"unconverged", r.inverse->stats.unconverged},
                    {"max_residual", r.inverse->stats.maxResidual},
                    {"seconds", r.inverse->seconds},
                    {"consistency", {{"mean", r.consistency.mean}, {"p99", r.consistency.p99},
                                     {"max", r.consistency.max}, {"voxels", r.consistency.voxels}}}};
  }
  if (!r.qc.files.empty()) {
    json names = json::array();
    for (auto const& f : r.qc.files) names.push_back(f.name);
    j["qc"] = {{"folder", r.job.outputs.qc.string()}, {"files", names},        {"seconds", r.qc.seconds},
               {"ncc", r.qc.ncc},                       {"folds", r.qc.folds},    {"min_det", r.qc.minDet},
               {"dice", r.qc.dice >= 0 ? json(r.qc.dice) : json()},
               {"max_det", r.qc.maxDet},                {"thumb_width", r.qc.thumbWidth}, {"thumb_height", r.qc.thumbHeight}};
  }
  json files = json::array();
  for (auto const& p : r.written) files.push_back(p.string());
  j["written"] = files;
  return j;
}

VectorField<Kokkos::HostSpace> deformableWorldDisplacement(RegistrationPipelineResult const& r) {
  return io::indexDisplacementToWorld(r.u, r.fixedGrid);  // world(p - u(p)) - world(p) = -D diag(s) u(p)
}

}  // namespace kortex::pipeline
