// The register job (`kortex register unbiased|greedy`, Python kortex.register_unbiased /
// register_greedy): one description, validated once, run in named stages, its outputs written all
// or none, its report one JSON object. The CLI and Python bind their arguments to a RegisterJob and
// call runRegisterJob; neither checks a policy of its own.
//
// Stages (each a kx::ScopedRegion "kortex::register::<stage>", a function taking and returning
// values): check (RegisterJob::validate: parameters and files, before anything is read), read
// (the two images), register (registerPair, pipeline/Register.hpp), outputs (the images and fields
// asked for, computed from the map), write (writeAllOrNone: staged, committed together; the user's
// files are replaced only once every output is ready).
//
// Outputs, ITK/ANTs conventions (world mm, LPS; the map Phi(p) = A(p - u(p)), Register.hpp):
//   warped        the moving image on the fixed grid, one trilinear interpolation through Phi;
//   field         the DEFORMABLE part: d(x) = world(p - u(p)) - world(p) on the fixed grid, so that
//                 ANTs' `-t field -t affine` (kortex apply's order: the field takes the point first,
//                 then the affine) reproduces Phi, as antsRegistration's Warp + GenericAffine do;
//   affine        the affine part A in world coordinates, an ITK transform file (fixed -> moving);
//   jacobian      det(I - grad u), the deformable part's Jacobian;
//   inverseField  the WHOLE map's inverse on the moving grid (apply it alone);
//   composite     the WHOLE map as one displacement field on the fixed grid: c(x) = world(Phi(p)) -
//                 world(p) (worldDisplacement), which `kortex apply` or antsApplyTransforms take alone
//                 in place of `-t field -t affine`;
//   report        the job's JSON report (toJson(RegisterJobResult));
//   qc            a folder: the QC report (pipeline/Qc.hpp), DIR/index.html and its pictures, written
//                 with the other outputs (all or none); it makes the job form the warped image and
//                 the Jacobian map.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/Backend.hpp"
#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "pipeline/Inverse.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/Qc.hpp"
#include "pipeline/Register.hpp"

namespace kortex::pipeline {

struct RegisterOutputs {
  std::filesystem::path warped, field, jacobian, affine, inverseField, composite, report;
  std::filesystem::path qc;  // a folder
  bool any() const;
};

struct RegisterJob {
  RegistrationMethod method = RegistrationMethod::Greedy;
  ImageInput fixed, moving;
  ImageInput fixedMask, movingMask;  // optional cost-function masks (Register.hpp RegistrationPipelineOptions::masks)
  // Optional, with outputs.qc: the moving image's label map (warped and outlined in the QC report)
  // and the fixed image's (the report's mean Dice over its labels); each on its image's grid.
  ImageInput qcMovingLabels, qcFixedLabels;
  RegistrationParams fluid;                            // method Unbiased
  GreedyParams greedy = greedyRegistrationDefaults();  // method Greedy
  bool useAffine = true;
  RegistrationTransform transform = RegistrationTransform::Deformable;  // method Greedy: what is fitted
  bool symmetric = false;  // method Greedy, deformable: both images move to the midpoint (GreedyParams::symmetric)
  AffineMetricKind affineMetric = AffineMetricKind::Ncc;  // the affine stage's metric (AffineParams::metric)
  int miBins = AffineParams{}.miBins;                     // its MI bins (AffineParams::miBins)
  double biasSigmaMm = 0.0;  // both images bias-corrected first (IntensityParams::biasSigmaMm); 0: not
  Backend backend = Backend::Auto;
  bool variantGiven = false;  // fluid.variant was chosen (it names a Kokkos kernel: refused with the CPU back end)
  bool inverse = false;       // invert the map (implied by outputs.inverseField)
  bool keepResults = false;   // the caller takes the results in memory (Python): no output file is needed
  bool makeFolders = false;   // an output's missing folder is made when it is written (a cohort's folder)
  RegisterOutputs outputs;

  // The parameters (the method's; the unbiased lambda must be finite and > 0: the symmetric-KL
  // prior is what makes it unbiased), the inputs (files exist and are images; arrays are 3D) and
  // the outputs (writable, of the right format, distinct from the inputs and from each other; at
  // least one unless keepResults). InvalidArgument / IoError with one message.
  void validate() const;
  // The parameters' part of validate (what does not depend on files).
  void validateParameters() const;
};

// The description as JSON: inputs by path (an image in memory by its grid and content hash),
// parameters through pipeline/ParamsJson.hpp, outputs. registerJobFromJson reads it back (unknown
// keys and wrong types refused by name); an image in memory cannot be read back (InvalidArgument).
nlohmann::json toJson(RegisterJob const& job);
RegisterJob registerJobFromJson(nlohmann::json const& j);

struct RegisterProgress {
  RegistrationProgress fluid;
  GreedyProgress greedy;
  AffineProgress affine;
};

struct RegisterJobResult {
  RegisterJob job;
  RegistrationPipelineResult pair;
  HostImage warped, jacobian;                 // when asked for (an output, or keepResults)
  VectorField<Kokkos::HostSpace> field;       // the deformable part, world mm (as written)
  Matrix4 affineWorld{};                      // fixed world -> moving world (as written)
  std::optional<InverseMap> inverse;          // job.inverse or outputs.inverseField
  VectorField<Kokkos::HostSpace> inverseField;  // the whole map's inverse, world mm, moving grid
  VectorField<Kokkos::HostSpace> composite;     // the whole map, world mm, fixed grid (when asked for)
  InverseConsistency consistency;             // inside the head (headMask)
  QcReport qc;                                // when outputs.qc is named
  std::vector<std::filesystem::path> written;
};

// check, read, register, outputs, write (above).
RegisterJobResult runRegisterJob(RegisterJob const& job, RegisterProgress const& progress = {});

// A cost-function mask as given (absent: an empty image), read and checked to lie on its image's
// grid (InvalidArgument naming `name`, "fixed" or "moving").
HostImage readRegistrationMask(ImageInput const& mask, HostImage const& image, const char* name);

// The pair's options of a job (what registerPair is given; the masks are read by the job).
RegistrationPipelineOptions pairOptions(RegisterJob const& job, RegisterProgress const& progress = {});
// The outputs and write stages of runRegisterJob for a pair registered by the caller (the cohort's
// pairs): the outputs asked for, computed from `pair` and the original moving image, written all or
// none; `labels` the QC report's label maps as read (QcLabels: none for a cohort's subjects).
RegisterJobResult finishRegisterJob(RegisterJob const& job, RegistrationPipelineResult pair, HostImage const& moving,
                                    QcLabels const& labels = {});

// An optional input on its image's grid (InvalidArgument naming `what` and `name`'s image otherwise):
// the masks and label maps of a registration; not given: an empty image.
HostImage readOnImageGrid(ImageInput const& in, HostImage const& image, std::string const& what, const char* name);

// The report: the job, the pair's stages (toJson(RegistrationPipelineResult)), the inverse, the files.
nlohmann::json toJson(RegisterJobResult const& r);

// The deformable part of r's map as an ITK/ANTs field on the fixed grid (world mm, LPS):
// d(x) = world(p - u(p)) - world(p).
VectorField<Kokkos::HostSpace> deformableWorldDisplacement(RegistrationPipelineResult const& r);

}  // namespace kortex::pipeline
