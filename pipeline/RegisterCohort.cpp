#include "pipeline/RegisterCohort.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iomanip>
#include <sstream>
#include <utility>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/detail/JsonReader.hpp"

namespace kortex::pipeline {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string subjectName(ImageInput const& in, int i) {
  return in.inMemory() ? "subject_" + std::to_string(i + 1) : in.path.string();
}

std::string subjectStem(ImageInput const& in, int i) {
  return in.inMemory() ? "subject_" + std::to_string(i + 1) : io::imageStem(in.path);
}

std::string subjectLabel(ImageInput const& in, int i) {
  return "subject " + std::to_string(i + 1) + (in.inMemory() ? std::string() : " '" + in.path.string() + "'");
}

// f() with its InvalidArgument / IoError message prefixed with `label`.
template <class F>
auto asSubject(std::string const& label, F&& f) {
  try {
    return f();
  } catch (IoError const& e) {
    throw IoError(label + ": " + e.what());
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(label + ": " + e.what());
  }
}

// The output folder is named and is not a file (where it is missing, the subjects' outputs are
// checked as files in a folder to be made: RegisterJob::makeFolders).
void requireOutputFolder(fs::path const& dir) {
  if (dir.empty()) throw InvalidArgument("register cohort: no output folder is named (the subjects' outputs go there)");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError("the output folder '" + dir.string() + "' is a file, not a folder");
}

std::string mib(double bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << bytes / 1048576.0 << " MiB";
  return os.str();
}

struct CohortInputs {
  HostImage fixed, fixedMask;
  std::vector<ImageInput> subjects;
  std::vector<HostImage> moving;  // empty where the subject failed to read
};

struct CohortPlan {
  RegistrationPipelineOptions options;
  int concurrent = 1;
  std::int64_t pairBytes = 0, cap = 0;
};

void checkStage(RegisterCohortJob const& job) {
  kx::ScopedRegion region("kortex::cohort::check");
  job.validate();
}

CohortInputs readStage(RegisterCohortJob const& job, std::vector<ImageInput> subjects, RegisterCohortResult& r) {
  kx::ScopedRegion region("kortex::cohort::read");
  const auto t0 = Clock::now();
  CohortInputs in;
  in.fixed = readImageInput(job.fixed);
  if (in.fixed.geometry.dimension != 3)
    throw InvalidArgument("register cohort: the fixed image must be 3D, got " + describe(in.fixed.geometry));
  in.fixedMask = readRegistrationMask(job.fixedMask, in.fixed, "fixed");
  in.subjects = std::move(subjects);
  in.moving.resize(in.subjects.size());
  // Without keepGoing the check stage refused any subject with a problem.
  const std::vector<std::string> problems =
      job.keepGoing ? job.subjectProblems(in.subjects) : std::vector<std::string>(in.subjects.size());
  for (std::size_t i = 0; i < in.subjects.size(); ++i) {
    CohortSubject& s = r.subjects[i];
    if (!problems[i].empty()) {
      s.status = CohortStatus::Failed;
      s.error = problems[i];
      continue;
    }
    try {
      asSubject(subjectLabel(in.subjects[i], int(i)), [&] {
        HostImage m = readImageInput(in.subjects[i]);
        if (m.geometry.dimension != 3 || m.numVoxels() == 0)
          throw InvalidArgument("the moving image must be 3D, got " + describe(m.geometry));
        in.moving[i] = std::move(m);
      });
    } catch (std::exception const& e) {
      if (!job.keepGoing) throw;
      s.status = CohortStatus::Failed;
      s.error = e.what();
    }
  }
  r.secondsRead = secondsSince(t0);
  return in;
}

CohortPlan planStage(RegisterCohortJob const& job, CohortInputs const& in, RegisterCohortResult& r) {
  kx::ScopedRegion region("kortex::cohort::plan");
  CohortPlan p;
  p.options = pairOptions(job.subjectJob(in.subjects, 0));
  p.options.masks.fixed = in.fixedMask;
  validatePairOptions(in.fixed.geometry, p.options);
  if (resolve(job.backend) == Backend::Cpu) return p;
  for (HostImage const& m : in.moving)
    if (m.numVoxels() > 0)
      p.pairBytes = std::max(p.pairBytes, greedyPairDeviceBytes(in.fixed.geometry, m.geometry, p.options.greedy));
  using Mem = Kokkos::DefaultExecutionSpace::memory_space;
  releaseRegisterPairWorkspace();  // a single pair's kept workspace is not the cohort's
  // What is free, less a tenth for the FFT plans' work areas and the allocator.
  p.cap = job.maxMemoryMiB > 0 ? std::int64_t(job.maxMemoryMiB * 1048576.0) : gpu::availableMemoryBytes<Mem>() / 10 * 9;
  if (job.maxMemoryMiB > 0 && p.pairBytes > p.cap)
    throw InvalidArgument("register cohort: the memory cap of " + mib(job.maxMemoryMiB * 1048576.0) +
                          " holds no pair: one pair needs " + mib(double(p.pairBytes)));
  if (kx::hasConcurrentInstances<Kokkos::DefaultExecutionSpace> && p.pairBytes > 0)
    p.concurrent = int(std::clamp<std::int64_t>(p.cap / p.pairBytes, 1, kMaxConcurrentPairs));
  r.concurrentPairs = std::min<int>(p.concurrent, std::max<int>(1, int(in.subjects.size())));
  r.pairBytes = p.pairBytes;
  r.memoryCap = p.cap;
  return p;
}

// Subject i: its pair, then its outputs written all or none.
void registerSubject(RegisterCohortJob const& job, CohortInputs& in, int i, PairRun const& run, CohortSubject& s) {
  const RegisterJob sub = job.subjectJob(in.subjects, i);
  RegistrationPipelineResult pair = run(in.moving[std::size_t(i)]);
  s.seconds = pair.secondsTotal;
  if (job.outputs.any() || job.keepResults) {
    RegisterJobResult r = finishRegisterJob(sub, std::move(pair), in.moving[std::size_t(i)]);
    s.report = toJson(r);
    if (job.keepResults) s.result = std::move(r);
  } else {
    RegisterJobResult r;
    r.job = sub;
    r.pair = std::move(pair);
    s.report = toJson(r);
  }
  in.moving[std::size_t(i)] = HostImage();
  s.status = CohortStatus::Registered;
}

void registerStage(RegisterCohortJob const& job, CohortInputs& in, CohortPlan const& plan, RegisterCohortResult& r,
                   CohortProgress const& progress) {
  kx::ScopedRegion region("kortex::cohort::register");
  const auto t0 = Clock::now();
  if (job.outputs.any()) {  // made once here: the workers' staged writes (and failures) then share it
    std::error_code ec;
    fs::create_directories(job.outDir, ec);
    if (ec) throw IoError("cannot create the output folder '" + job.outDir.string() + "': " + ec.message());
  }
  const int n = int(in.subjects.size());
  std::vector<std::exception_ptr> failure(static_cast<std::size_t>(n));
  auto work = [&](int i, PairRun const& run) {
    CohortSubject& s = r.subjects[std::size_t(i)];
    if (s.status == CohortStatus::Failed) return;  // not read (keepGoing)
    try {
      asSubject(subjectLabel(in.subjects[std::size_t(i)], i), [&] { registerSubject(job, in, i, run, s); });
    } catch (std::exception const& e) {
      s.status = CohortStatus::Failed;
      s.error = e.what();
      failure[std::size_t(i)] = std::current_exception();
    }
  };
  int registered = 0, failed = 0;
  auto ready = [&](int i) {
    CohortSubject const& s = r.subjects[std::size_t(i)];
    (s.status == CohortStatus::Registered ? registered : failed) += 1;
    if (progress) progress(CohortEvent{i, n, registered, failed, &s, secondsSince(t0)});
    return s.status != CohortStatus::Failed || job.keepGoing;
  };
  runPairs(n, in.fixed, plan.options, plan.options.useFluid, plan.concurrent, work, ready);
  r.secondsRegister = secondsSince(t0);
  if (!job.keepGoing)
    for (auto const& f : failure)
      if (f) std::rethrow_exception(f);
}

void reportStage(RegisterCohortJob const& job, RegisterCohortResult const& r) {
  if (job.report.empty() && !job.outputs.qc) return;
  kx::ScopedRegion region("kortex::cohort::report");
  if (job.outputs.qc) io::writeTextFileAtomic(job.outDir / "qc.html", cohortQcPage(r));
  if (!job.report.empty()) io::writeTextFileAtomic(job.report, toJson(r).dump(2) + "\n");
}

}  // namespace

std::vector<ImageInput> RegisterCohortJob::subjects() const {
  std::vector<ImageInput> all = moving;
  if (!movingList.empty())
    for (auto const& p : readImageList(movingList.string())) all.push_back(ImageInput{p, {}});
  return all;
}

RegisterJob RegisterCohortJob::subjectJob(std::vector<ImageInput> const& subjects, int i) const {
  RegisterJob sub;
  sub.method = RegistrationMethod::Greedy;
  sub.fixed = fixed;
  sub.fixedMask = fixedMask;
  sub.moving = subjects[std::size_t(i)];
  sub.greedy = greedy;
  sub.useAffine = useAffine;
  sub.transform = transform;
  sub.symmetric = symmetric;
  sub.affineMetric = affineMetric;
  sub.miBins = miBins;
  sub.biasSigmaMm = biasSigmaMm;
  sub.backend = backend;
  sub.inverse = inverse || outputs.inverseField;
  sub.keepResults = keepResults;
  sub.makeFolders = true;  // outDir is made when the first outputs are written
  const std::string stem = subjectStem(subjects[std::size_t(i)], i);
  auto named = [&](bool asked, const char* suffix) { return asked ? outDir / (stem + suffix) : fs::path(); };
  sub.outputs.warped = named(outputs.warped, "_warped.nii.gz");
  sub.outputs.field = named(outputs.field, "_field.nii.gz");
  sub.outputs.jacobian = named(outputs.jacobian, "_jacobian.nii.gz");
  sub.outputs.affine = named(outputs.affine, "_affine.txt");
  sub.outputs.inverseField = named(outputs.inverseField, "_inverse_field.nii.gz");
  sub.outputs.composite = named(outputs.composite, "_composite.nii.gz");
  sub.outputs.qc = named(outputs.qc, "_qc");
  return sub;
}

std::vector<std::string> RegisterCohortJob::subjectProblems(std::vector<ImageInput> const& subjects) const {
  std::vector<std::string> problems(subjects.size());
  for (int i = 0; i < int(subjects.size()); ++i) {
    const RegisterJob sub = subjectJob(subjects, i);
    try {
      asSubject(subjectLabel(subjects[std::size_t(i)], i), [&] {
        if (outputs.any() || keepResults) sub.validate();
        else requireImageInput(sub.moving, "moving image", "registration");
      });
    } catch (std::exception const& e) {
      if (!keepGoing) throw;
      problems[std::size_t(i)] = e.what();
    }
  }
  return problems;
}

void RegisterCohortJob::validate() const {
  subjectJob({ImageInput{}}, 0).validateParameters();
  requireMemoryCap(maxMemoryMiB, "register cohort");
  requireImageInput(fixed, "fixed image", "register cohort");
  if (!outputs.any() && report.empty() && !keepResults)
    throw InvalidArgument("register cohort: no output is named (warped images, fields, Jacobian maps, affine "
                          "transforms, inverse fields, composite fields, QC reports or a report)");
  if (outputs.any()) requireOutputFolder(outDir);
  if (!report.empty()) io::requireWritableFile(report, "the cohort report");
  const std::vector<ImageInput> all = subjects();
  if (all.empty()) throw InvalidArgument("register cohort: no moving image is given");
  std::vector<JobFile> inputs, outputsNamed;
  if (!fixed.inMemory()) inputs.push_back({"fixed image", fixed.path});
  if (!movingList.empty()) inputs.push_back({"moving image list", movingList});
  if (!fixedMask.inMemory()) inputs.push_back({"fixed mask", fixedMask.path});
  if (!report.empty()) outputsNamed.push_back({"cohort report", report});
  subjectProblems(all);  // throws unless keepGoing (then the read stage reports and skips those subjects)
  for (int i = 0; i < int(all.size()); ++i) {
    const std::string label = subjectLabel(all[std::size_t(i)], i);
    const RegisterJob sub = subjectJob(all, i);
    if (!sub.moving.inMemory()) inputs.push_back({label + " moving image", sub.moving.path});
    for (auto const& [role, path] : {std::pair<const char*, fs::path>{"warped image", sub.outputs.warped},
                                     {"field", sub.outputs.field},
                                     {"Jacobian map", sub.outputs.jacobian},
                                     {"affine transform", sub.outputs.affine},
                                     {"inverse field", sub.outputs.inverseField},
                                     {"composite field", sub.outputs.composite},
                                     {"QC report", sub.outputs.qc.empty() ? fs::path() : sub.outputs.qc / "index.html"}})
      if (!path.empty()) outputsNamed.push_back({label + " " + role, path});
  }
  if (outputs.qc) {
    outputsNamed.push_back({"cohort QC page", outDir / "qc.html"});
    io::requireWritableFile(outDir / "qc.html", "the cohort QC page", true);
  }
  requireDistinctFiles(inputs, outputsNamed);
}

const char* toString(CohortStatus s) {
  switch (s) {
    case CohortStatus::Registered: return "registered";
    case CohortStatus::Failed: return "failed";
    case CohortStatus::NotRun: return "not-run";
  }
  return "?";
}

int RegisterCohortResult::registered() const {
  return int(std::count_if(subjects.begin(), subjects.end(), [](auto const& s) { return s.status == CohortStatus::Registered; }));
}

int RegisterCohortResult::failed() const {
  return int(std::count_if(subjects.begin(), subjects.end(), [](auto const& s) { return s.status == CohortStatus::Failed; }));
}

double RegisterCohortResult::pairsPerSecond() const {
  return secondsRegister > 0 ? double(registered()) / secondsRegister : 0.0;
}

RegisterCohortResult runRegisterCohort(RegisterCohortJob const& job, CohortProgress const& progress) {
  const auto t0 = Clock::now();
  checkStage(job);
  RegisterCohortResult r;
  r.job = job;
  const std::vector<ImageInput> all = job.subjects();
  for (int i = 0; i < int(all.size()); ++i)
    r.subjects.push_back(CohortSubject{subjectName(all[std::size_t(i)], i), subjectStem(all[std::size_t(i)], i)});
  CohortInputs in = readStage(job, all, r);
  const CohortPlan plan = planStage(job, in, r);
  registerStage(job, in, plan, r, progress);
  r.secondsTotal = secondsSince(t0);
  reportStage(job, r);
  return r;
}

json toJson(RegisterCohortJob const& job) {
  json moving = json::array();
  for (auto const& m : job.moving) moving.push_back(toJson(m));
  return {{"job", "register_cohort"},
          {"fixed", toJson(job.fixed)},
          {"fixed_mask", toJson(job.fixedMask)},
          {"moving", moving},
          {"moving_list", job.movingList.string()},
          {"greedy", toJson(job.greedy)},
          {"affine", job.useAffine},
          {"transform", toString(job.transform)},
          {"symmetric", job.symmetric},
          {"affine_metric", toString(job.affineMetric)},
          {"mi_bins", job.miBins},
          {"bias_correct_mm", job.biasSigmaMm},
          {"backend", toString(job.backend)},
          {"inverse", job.inverse},
          {"out_dir", job.outDir.string()},
          {"outputs",
           {{"warped", job.outputs.warped},
            {"field", job.outputs.field},
            {"jacobian", job.outputs.jacobian},
            {"affine", job.outputs.affine},
            {"inverse_field", job.outputs.inverseField},
            {"composite", job.outputs.composite},
            {"qc", job.outputs.qc}}},
          {"report", job.report.string()},
          {"keep_going", job.keepGoing},
          {"keep_results", job.keepResults},
          {"max_memory", job.maxMemoryMiB}};
}

RegisterCohortJob registerCohortJobFromJson(json const& j) {
  RegisterCohortJob job;
  detail::JsonReader r(j, "register cohort job");
  r.jobKind("register_cohort");
  job.fixed.path = inputPathFromJson(r.raw("fixed"), "register cohort job", "fixed");
  job.fixedMask.path = inputPathFromJson(r.raw("fixed_mask"), "register cohort job", "fixed_mask");
  if (json const* v = r.raw("moving")) {
    if (!v->is_array()) r.wrongType("moving", "a list of file paths", *v);
    for (auto const& e : *v) job.moving.push_back(ImageInput{inputPathFromJson(&e, "register cohort job", "moving"), {}});
  }
  r.path("moving_list", job.movingList).object("greedy", job.greedy).flag("affine", job.useAffine);
  r.choice("backend", job.backend, parseBackend).flag("inverse", job.inverse).path("out_dir", job.outDir);
  r.choice("transform", job.transform, parseRegistrationTransform).flag("symmetric", job.symmetric);
  r.choice("affine_metric", job.affineMetric, parseAffineMetric).integer("mi_bins", job.miBins);
  r.number("bias_correct_mm", job.biasSigmaMm);
  if (json const* o = r.raw("outputs")) {
    detail::JsonReader outputs(*o, "register cohort job outputs");
    outputs.flag("warped", job.outputs.warped)
        .flag("field", job.outputs.field)
        .flag("jacobian", job.outputs.jacobian)
        .flag("affine", job.outputs.affine)
        .flag("inverse_field", job.outputs.inverseField)
        .flag("qc", job.outputs.qc)
        .flag("composite", job.outputs.composite);
    outputs.done();
  }
  r.path("report", job.report).flag("keep_going", job.keepGoing).flag("keep_results", job.keepResults);
  r.number("max_memory", job.maxMemoryMiB);
  r.done();
  return job;
}

json toJson(RegisterCohortResult const& r) {
  json subjects = json::array();
  for (auto const& s : r.subjects) {
    json e = {{"moving", s.moving}, {"stem", s.stem}, {"status", toString(s.status)}};
    if (s.status == CohortStatus::Failed) e["error"] = s.error;
    if (s.status == CohortStatus::Registered) {
      e["seconds"] = s.seconds;
      e["report"] = s.report;
    }
    subjects.push_back(e);
  }
  return {{"job", toJson(r.job)},
          {"subjects", subjects},
          {"registered", r.registered()},
          {"failed", r.failed()},
          {"concurrent_pairs", r.concurrentPairs},
          {"pair_device_bytes", r.pairBytes},
          {"memory_cap_bytes", r.memoryCap},
          {"pairs_per_second", r.pairsPerSecond()},
          {"seconds", {{"read", r.secondsRead}, {"register", r.secondsRegister}, {"total", r.secondsTotal}}}};
}

}  // namespace kortex::pipeline
