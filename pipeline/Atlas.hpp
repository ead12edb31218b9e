// Atlas job (atlas build): a cohort of 3D images -> the unbiased greedy template (core/Atlas.hpp),
// on one process or over the ranks of an MPI job (distributed/ProcessGroup.hpp).
//
// Pipeline, per rank for its block of subjects (contiguous, as even as the count allows):
//   1. every rank reads the reference (the first image unless one is named) and its own subjects;
//   2. intensity normalisation (core/Intensity.hpp; NaN/Inf or constant images are refused) and the
//      affine alignment of each subject to the reference (core/Affine.hpp, NCC, 12 parameters; or
//      the header alignment alone), resampled onto the reference grid: registerPair with its
//      nonlinear stage off (pipeline/Register.hpp). Images on other grids are resampled this way,
//      never refused;
//   3. volume clipping (the paper's): the union over subjects of their bounding boxes of voxels
//      above kAtlasClipThreshold (normalised intensity: scanner noise in the background of
//      unmasked heads keeps a "> 0" box at the whole grid), grown by kAtlasGuardVoxels on every
//      side and to extents every scale factor divides (and even for SOR); past the grid's end
//      the clamp rule repeats the edge voxel. The atlas runs on this box; outside it the fields
//      are 0 (the affine part alone) and the template is the (fixed-point) mean of the aligned
//      images, i.e. the atlas with u_i = 0 there;
//   4. the atlas (reference_cpu or gpu back end), the sums over ranks in int64 fixed point;
//   5. outputs: the template on the reference grid (normalised intensities) written by rank 0;
//      per subject (by its rank) the ITK/ANTs displacement field, world mm, LPS, of the whole map
//      reference point -> subject point Phi_i(p) = A_i(p - u_i(p)), the subject warped into
//      template space with one trilinear interpolation of its original image, and its labels
//      (nearest voxel of Phi_i).
// Checkpoints (checkpointDir, every checkpointEvery iterations): per subject its fields and frozen
// flag, and the template and history (pipeline/Atlas.cpp states the files and how they are made
// atomic); resume reads the newest complete one and refuses one made for other parameters or other
// input contents (a content hash of every image), or whose files do not match their checksums.
// Any rank count can resume any checkpoint (the files are per subject). The folder is locked
// (rank 0) for the run's duration.
// Refused at the start, before any image is aligned (docs/atlas.md): ranks given different jobs
// (the hash of every part of the job, compared over the group, names the rank and the parts), an
// output that would overwrite an input or another output, an output location that cannot be
// written, a label map that cannot be read or is not on its image's grid, a checkpoint folder in
// use, a checkpoint that does not match. Outputs (template, report, fields, warped images and
// labels) are written all or none: staged beside their targets, moved into place once every rank
// has written its own.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/Affine.hpp"
#include "core/Atlas.hpp"
#include "core/Backend.hpp"
#include "core/Intensity.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "pipeline/Register.hpp"

namespace kortex::pipeline {

constexpr int kAtlasGuardVoxels = 4;         // clipping guard band, full-grid voxels
constexpr float kAtlasClipThreshold = 0.05f;  // normalised intensity (background noise of IXI T1 heads: measured in docs/atlas.md)

struct AtlasJob {
  std::vector<std::string> images;   // the cohort, in order (subject i = images[i])
  std::string imageList;             // optional: a cohort list file (readImageList) whose images follow `images`
  // Or the cohort in memory (one process; then `images` stays empty): subject i = imageData[i],
  // named subject-<i> in the outputs, keyed for checkpoints on its voxels and geometry.
  std::vector<HostImage> imageData;
  std::vector<std::string> labels;   // empty, or one label map per image (its grid)
  std::string reference;             // empty: images[0]
  AtlasParams params;
  AffineParams affine;
  bool useAffine = true;
  bool clip = true;
  IntensityParams intensity;
  Backend backend = Backend::Auto;
  std::string outTemplate;           // written by rank 0; empty: none (AtlasJobResult::templateImage has it)
  std::string outFieldsDir, outWarpedDir;  // optional; outFieldsDir: <name>_field (template -> subject) and <name>_inverse_field (subject grid -> template)
  // Optional, with labels: the template-space majority labels (each voxel the label most subjects'
  // warped label maps give it, ties to the smaller label; every rank's subjects vote) carried back
  // onto each subject's own grid through its inverse field (label interpolation): <name>_atlas_labels.
  std::string outSubjectLabelsDir;
  std::string outReport;             // optional: toJson of the result, written by rank 0 with the other outputs
  std::string outQc;                 // optional: the QC report's folder (pipeline/Qc.hpp atlasQc), written with the outputs
  std::vector<std::string> otherInputs;  // files the caller read for the job (a cohort list): never written over
  std::string checkpointDir;         // empty: no checkpoints
  int checkpointEvery = 10;          // iterations
  bool resume = false;
  double maxMemoryMiB = 0.0;         // the subjects' memory cap, MiB (finite, >= 0); 0: the device's (or host's) available memory
  AtlasProgress progress;            // every rank; the app prints on rank 0
  std::function<void(int subject, std::string const& what)> subjectDone;  // pre-processing steps
};

struct AtlasJobResult {
  Backend backend = Backend::Cpu;
  std::string executionSpace, group;
  AtlasParams params;                 // the job's (the report's "params")
  int subjects = 0, ranks = 1, rank = 0, first = 0, local = 0;
  Geometry referenceGrid, atlasGrid;  // atlasGrid: the clipped box
  std::array<Index, 3> boxLow{}, boxSize{};
  AtlasMemory memory;                 // bytes on the atlas grid
  int streamed = 0;                   // local subjects streamed from pinned host memory (the device holds the rest)
  AtlasResult atlas;
  std::vector<double> affineNcc;      // local subjects
  std::vector<std::array<double, 4>> alignSeconds;  // local subjects: normalise, affine, resample, pair total
  double secondsAlign = 0;            // the alignment stage (part of secondsPrepare; pairs overlap on a device)
  double secondsRead = 0, secondsPrepare = 0, secondsAtlas = 0, secondsWrite = 0, secondsTotal = 0;
  long inverseUnconverged = 0;        // outFieldsDir: moving voxels whose inverse did not converge (core/Inverse.hpp)
  std::vector<std::string> written;   // files this rank wrote
  std::vector<std::string> notes;     // what the user should know (a damaged checkpoint passed over for an older one)
  HostImage templateImage;            // rank 0: the template, as written to outTemplate
};


// The subjects rank r holds: [first, first + count).
std::array<int, 2> atlasBlock(int subjects, int ranks, int rank);

// Runs the job on this process (comm: null or the job's group): the image list read (its images
// appended, the list itself an input no output may overwrite), then the stages above. Throws
// InvalidArgument / IoError with one message; the caller ends the other ranks.
AtlasJobResult runAtlasJob(AtlasJob const& job, gpu::Communicator* comm);

// The description as JSON (every field but the callbacks; images in memory by their grid and
// content hash) and back (unknown keys and wrong types refused by name; images in memory cannot be
// read back). What the ranks of a group compare (agreeOnJob), the report's "job", Python's form.
nlohmann::json toJson(AtlasJob const& job);
AtlasJob atlasJobFromJson(nlohmann::json const& j);

nlohmann::json toJson(AtlasJobResult const& r);

// The residency plan: of `subjects` needing m (AtlasMemory) in `avail` bytes of the back end's memory
// (0: unknown, all resident), all stay when they fit; else, on a device, as many as fit beside the
// shared and stream buffers stay and the rest are streamed from pinned host memory (`hostAvail`
// bytes: 0 unknown). InvalidArgument, naming `what` ("4 subjects on a ... box") and the bytes,
// where a host back end does not fit, the buffers alone do not fit, or the host cannot hold the
// streamed subjects.
struct AtlasResidency {
  int resident = 0, streamed = 0;
};
AtlasResidency atlasResidency(AtlasMemory const& m, int subjects, std::int64_t avail, bool onDevice,
                              std::int64_t hostAvail, std::string const& what);

// A subject's box of voxels above `threshold`: {lo x, lo y, lo z, hi x, hi y, hi z} (hi = -1 and
// lo = the extent where there is none).
std::array<Index, 6> voxelBox(HostImage const& img, float threshold);

// The atlas box (step 3 above): the union of the subjects' boxes, grown by kAtlasGuardVoxels on
// every side, each extent rounded up to what the greedy schedule needs (greedyExtentFor) and the
// box moved inside the grid where it fits (past the end the clamp rule repeats the edge voxel);
// without clipping, or with nothing above the threshold, the whole grid (rounded up likewise).
struct AtlasBox {
  Geometry grid;                 // the box's grid: the reference's spacing and direction
  std::array<Index, 3> low{};    // its first voxel on the reference grid
};
AtlasBox atlasBox(Geometry const& reference, std::vector<std::array<Index, 6>> const& boxes, bool clip,
                  GreedyParams const& greedy);

// The voxel-wise majority of integer label maps (values 0..65535) on `grid`, ties to the smaller
// label; this process holds the maps of subjects [first, first + maps.size()) of `subjects`, the
// other ranks of `comm` (null: one process) the rest. The votes are summed in chunks, as counts
// per label where there are no more distinct labels than subjects, else as each subject's label
// per voxel: the work is bounded by voxels x min(distinct labels, subjects).
HostImage voteMajority(std::vector<HostImage> const& maps, Geometry const& grid, int first, int subjects,
                       gpu::Communicator* comm);

}  // namespace kortex::pipeline
