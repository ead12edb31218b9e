// The QC report of a registration (`--qc DIR`, Python `qc=`; issue 42): DIR/index.html and its
// pictures beside it (PNG, io/Png.hpp; plots inline SVG), self-contained: no network, no script.
//
// Panels. Each picture is a row of panels, one per level through the fixed image's head (the box of
// its voxels above 10 % of its 99.5th percentile, 4 mm margin) at 35, 50 and 65 % along the plane's
// normal, sampled in world space (any orientation of the grid; the pixel the head box's longest side
// / 240 mm, so a panel is at most ~240 pixels). Neurological convention: the patient's left on the
// picture's left (axial and coronal), anterior at the right (sagittal), superior or anterior at the
// top; each panel carries its letters (L R, A P, S I) on its edges.
//   before / after  the fixed image (grey, window = its head's 1st..99.5th percentiles) with the edges
//                   of the moving image drawn over it (red): resampled by the affine stage alone
//                   (before) and by the whole map (after). Edges: the gradient magnitude of the
//                   sampled moving panel above 25 % of its 98th percentile that are maxima along
//                   their gradient (thin lines).
//   checkerboard    squares of 20 pixels, fixed and warped moving image in turn (each its own window).
//   jacobian        det of the deformable part's Jacobian: log2 det in [-1, 1] from blue (det 0.5)
//                   through white (1) to red (2), clamped beyond; det <= 0 (a fold) yellow; nearest
//                   voxel (a fold is never averaged away); a fourth panel through the voxel of the
//                   smallest det. Outside the head the fixed image, dimmed.
// Plot: the misfit per iteration, a line per scale (refused steps marked). Numbers: the job, its
// stage times and the report's time, min / max det and the folded voxels, inverse consistency where
// the inverse was formed, the inputs (path and 64-bit content hash, pipeline/JobFiles.hpp) and the
// build (version, git hash).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/Image.hpp"
#include "io/Png.hpp"

namespace kortex::pipeline {

struct RegisterJobResult;     // pipeline/RegisterJob.hpp
struct RegisterCohortResult;  // pipeline/RegisterCohort.hpp
struct ApplyJob;              // pipeline/Apply.hpp
struct ApplyResult;
struct AtlasJobResult;        // pipeline/Atlas.hpp

enum class QcPlane { Axial, Coronal, Sagittal };

// One panel's sampling frame: the world point (LPS, mm) of pixel (i, j) is origin + i right + j down.
struct QcFrame {
  QcPlane plane = QcPlane::Axial;
  std::array<double, 3> origin{}, right{}, down{};
  int width = 0, height = 0;
};

// The panel through the head box of `fixed` at `level` (0..1 along the plane's normal: inferior to
// superior, posterior to anterior, right to left), or through the world point `through` when given.
QcFrame qcFrame(HostImage const& fixed, QcPlane plane, double level);
QcFrame qcFrameThrough(HostImage const& fixed, QcPlane plane, std::array<double, 3> const& through);
// The pixel (i, j) of a world point in a frame (the nearest; may lie outside the panel).
std::array<int, 2> qcPixel(QcFrame const& f, std::array<double, 3> const& world);

// The panels (exposed for tests). `moving` is on any grid: sampled in world space like the fixed.
io::Picture qcEdgePanel(QcFrame const& f, HostImage const& fixed, HostImage const& moving);
io::Picture qcCheckerPanel(QcFrame const& f, HostImage const& fixed, HostImage const& moving);
io::Picture qcJacobianPanel(QcFrame const& f, HostImage const& fixed, HostImage const& det);

inline constexpr std::array<std::uint8_t, 3> kQcEdgeColour{255, 48, 48};
inline constexpr std::array<std::uint8_t, 3> kQcFoldColour{255, 230, 0};

struct QcFile {
  std::string name;                 // inside the report's folder
  std::vector<std::uint8_t> bytes;
};
struct QcReport {
  std::vector<QcFile> files;        // index.html first
  double seconds = 0.0;             // to render it
  // What a cohort's page ranks subjects by: the correlation of the fixed and the warped moving image
  // over the fixed image's head (its voxels above 10 % of its 99.5th percentile), and det J.
  double ncc = 0.0;
  double dice = -1.0;  // the mean label Dice where both label maps were given, else -1
  long folds = 0;
  float minDet = 1.0f, maxDet = 1.0f;
  int thumbWidth = 0, thumbHeight = 0;  // after_axial.png, the cohort page's thumbnail
};

// The label maps a registration's report draws (empty images: none): the moving image's, warped
// through the map (nearest voxel) and outlined over the fixed image, and the fixed image's, against
// which the report gives the mean Dice over its labels (pipeline/Register.hpp meanLabelDice).
struct QcLabels {
  HostImage moving, fixed;
};
inline constexpr std::array<std::uint8_t, 3> kQcLabelColour{0, 220, 255};

// The report of a registration: `r` with its warped image and Jacobian map formed (runRegisterJob
// forms them when the job asks for QC; the fixed image shown is the registration's normalised one),
// `moving` the moving image as read (its hash when it was given in memory).
QcReport registrationQc(RegisterJobResult const& r, HostImage const& moving, QcLabels const& labels = {});

// The report of `kortex apply` (--qc): the reference image with the edges of the input as it lies in
// world space (its header alone: "before") and of the result (through the transforms: "after"), a
// checkerboard of the two, and the numbers (inputs and transforms with their hashes, interpolation,
// back end, times). `input` and `reference` as read; `r` the result on the reference grid.
QcReport applyQc(ApplyJob const& job, HostImage const& input, HostImage const& reference, ApplyResult const& r);

// The atlas's report (`atlas build --qc DIR`). Subject i's part is formed by the rank that holds it
// (AtlasQcTemplate::subject; the template's window, head and thumbnail frame found once per rank):
// the correlation of the template and the subject warped into template space over
// the template's head, its det J (min, folded voxels), its mean |u| (mm, over the head) and a
// thumbnail (the template with the warped subject's edges, axial, 50 %) written by that rank as
// DIR/subject_<name>.png. Rank 0 writes the page (atlasQc): the template in three planes, the
// template at each scale's end (scaleTemplates: factor and image on that scale's grid; a resumed run
// has those of the scales it ran), the mean
// over subjects of |u| (mm) and of det J in three planes, the convergence (the mismatch per
// iteration), the subjects worst first (folds first, then the lowest correlation) with their
// thumbnails, and the run's parameters and times (the report).
struct AtlasQcSubject {
  std::string name;
  double ncc = 0.0, meanDisplacementMm = 0.0;
  long folds = 0;
  float minDet = 1.0f;
  int thumbWidth = 0, thumbHeight = 0;
  QcFile thumbnail;  // DIR/<thumbnail.name>; only on the subject's rank
};
class AtlasQcTemplate {
 public:
  explicit AtlasQcTemplate(HostImage const& templ);  // kept by reference: it must outlive this
  AtlasQcSubject subject(std::string const& name, HostImage const& warped, HostImage const& det,
                         HostImage const& displacementMm) const;

 private:
  struct Impl;  // the template as shown and the thumbnails' frame
  std::shared_ptr<const Impl> impl_;
};
QcReport atlasQc(AtlasJobResult const& r, std::vector<AtlasQcSubject> const& subjects, HostImage const& meanDisplacementMm,
                 HostImage const& meanDet, std::vector<std::pair<int, HostImage>> const& scaleTemplates = {});
std::string atlasQcThumbnailName(std::string const& subject);

// A cohort's page (outDir/qc.html): every subject, worst first: failed subjects, then those with
// folds (most first), then by the correlation of their QC report (lowest first); each with its
// numbers, a link to its report (<stem>_qc/index.html) and its after_axial.png as a thumbnail.
std::string cohortQcPage(RegisterCohortResult const& r);

}  // namespace kortex::pipeline
