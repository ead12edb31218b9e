// The register cohort job (`kortex register greedy --fixed T --moving A B C ... --out-dir D`, or
// `--list`; Python kortex.register_greedy with a list of moving images): many moving images
// registered to one fixed image, each subject exactly the single-pair job (pipeline/RegisterJob.hpp)
// of that pair: the same stages, the same outputs, the same bits.
//
// Stages (each a kx::ScopedRegion "kortex::cohort::<stage>"): check (RegisterCohortJob::validate:
// the parameters once, then every subject's single-pair job: inputs, outputs, no output overwriting
// an input or another output), read (the fixed image, then every moving image: a subject that
// cannot be read is refused before any registration, or with keepGoing reported and skipped),
// plan (how many pairs run at once: the device memory cap over greedyPairDeviceBytes), register
// (runPairs: on a device up to that many pairs at once, each on its own instance; every subject's
// outputs computed and written all or none as its pair ends), report.
//
// Outputs, in outDir, named after the moving image's stem (io::imageStem; "subject_<i>" for an
// image in memory, i from 1): <stem>_warped.nii.gz, <stem>_field.nii.gz, <stem>_jacobian.nii.gz,
// <stem>_affine.txt, <stem>_inverse_field.nii.gz, <stem>_composite.nii.gz, <stem>_qc/ (the QC report),
// each where asked for (the single pair's outputs and conventions); the cohort's report
// (toJson(RegisterCohortResult)) where named; with QC, outDir/qc.html: every subject, worst first
// (pipeline/Qc.hpp cohortQcPage), written at the end.
//
// A subject whose registration fails stops the cohort (no new pair starts, the running ones finish
// and keep their outputs; runRegisterCohort throws, naming the subject), or with keepGoing is
// reported and skipped.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "pipeline/RegisterJob.hpp"

namespace kortex::pipeline {

// Which per-subject outputs a cohort writes (the single pair's, by kind).
struct CohortOutputs {
  bool warped = false, field = false, jacobian = false, affine = false, inverseField = false, composite = false;
  bool qc = false;  // every subject's QC report in <stem>_qc/, and the cohort's page outDir/qc.html
  bool any() const { return warped || field || jacobian || affine || inverseField || composite || qc; }
};

struct RegisterCohortJob {
  ImageInput fixed;
  ImageInput fixedMask;            // optional: the affine stage's fixed mask, every subject's (RegisterJob's)
  std::vector<ImageInput> moving;
  std::filesystem::path movingList;  // optional: readImageList's file, its images after `moving`
  GreedyParams greedy = greedyRegistrationDefaults();
  bool useAffine = true;
  RegistrationTransform transform = RegistrationTransform::Deformable;  // what is fitted (RegisterJob's)
  bool symmetric = false;                                               // RegisterJob's
  AffineMetricKind affineMetric = AffineMetricKind::Ncc;                // RegisterJob's
  int miBins = AffineParams{}.miBins;                                   // RegisterJob's
  double biasSigmaMm = 0.0;                                             // RegisterJob's
  Backend backend = Backend::Auto;
  bool inverse = false;            // invert every map (implied by outputs.inverseField)
  std::filesystem::path outDir;    // the subjects' outputs (created when missing)
  CohortOutputs outputs;
  std::filesystem::path report;    // the cohort's JSON report (optional)
  bool keepGoing = false;          // a failing subject is reported and skipped
  bool keepResults = false;        // the caller takes every subject's results in memory (Python)
  double maxMemoryMiB = 0.0;       // device memory for concurrent pairs (finite, >= 0); 0: what is free

  // The parameters, the moving list (read here), then every subject (subjectProblems; with keepGoing a
  // failing subject is left to the read stage, which reports and skips it) and the files together
  // (no output overwrites an input or another output): InvalidArgument / IoError, one message.
  void validate() const;
  // The moving images: `moving` then the list's.
  std::vector<ImageInput> subjects() const;
  // Every subject's inputs and outputs (its job's validate): the first failure thrown (InvalidArgument /
  // IoError naming the subject), or with keepGoing each subject's message ("" where it passed).
  std::vector<std::string> subjectProblems(std::vector<ImageInput> const& subjects) const;
  // Subject i's single-pair job (i from 0 over subjects()): its outputs named in outDir.
  RegisterJob subjectJob(std::vector<ImageInput> const& subjects, int i) const;
};

nlohmann::json toJson(RegisterCohortJob const& job);
RegisterCohortJob registerCohortJobFromJson(nlohmann::json const& j);

enum class CohortStatus { Registered, Failed, NotRun };
const char* toString(CohortStatus s);  // "registered" | "failed" | "not-run"
inline std::ostream& operator<<(std::ostream& os, CohortStatus s) { return os << toString(s); }

struct CohortSubject {
  std::string moving;  // the path, or "subject_<i>" in memory
  std::string stem;
  CohortStatus status = CohortStatus::NotRun;
  std::string error;                       // Failed: the message
  double seconds = 0.0;                    // the pair's registration (RegistrationPipelineResult::secondsTotal)
  nlohmann::json report;                   // Registered: toJson(RegisterJobResult)
  std::optional<RegisterJobResult> result;  // Registered with keepResults
};

struct RegisterCohortResult {
  RegisterCohortJob job;
  std::vector<CohortSubject> subjects;
  int concurrentPairs = 1;           // pairs run at once
  std::int64_t pairBytes = 0;        // device bytes of one pair (greedyPairDeviceBytes; 0 on the CPU back end)
  std::int64_t memoryCap = 0;        // the bytes planned with (0 on the CPU back end)
  double secondsRead = 0, secondsRegister = 0, secondsTotal = 0;
  int registered() const;
  int failed() const;
  // Registered subjects per second of the register stage (pairs, their outputs and writes).
  double pairsPerSecond() const;
};

// One event per subject as its pair ends (in subject order): the cohort's progress.
struct CohortEvent {
  int index = 0, total = 0, registered = 0, failed = 0;
  CohortSubject const* subject = nullptr;
  double elapsed = 0.0;  // seconds since the register stage began
};
using CohortProgress = std::function<void(CohortEvent const&)>;

// check, read, plan, register, report (above).
RegisterCohortResult runRegisterCohort(RegisterCohortJob const& job, CohortProgress const& progress = {});

nlohmann::json toJson(RegisterCohortResult const& r);

}  // namespace kortex::pipeline
