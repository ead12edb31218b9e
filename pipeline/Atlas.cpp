#include "pipeline/Atlas.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/Inverse.hpp"
#include "pipeline/Qc.hpp"
#include "pipeline/RegisterJob.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/detail/AtlasCheckpoint.hpp"
#include "pipeline/detail/JsonReader.hpp"
#include "pipeline/ParamsJson.hpp"
#include "reference_cpu/Atlas.hpp"

namespace kortex::pipeline {
namespace fs = std::filesystem;
using detail::cohortKey;
using detail::gridKey;
using detail::historyJson;
using detail::readCheckpoint;
using detail::writeCheckpoint;
using io::Access;
using io::readImage;
using io::writeImage;
using io::requireSupportedExtension;
using io::requireWritableFile;
using io::writeTextFileAtomic;
using io::writeDisplacementField;

namespace {

// The subjects' atlas labels: label values 0..kMaxVotedLabel (16-bit label maps: DLMUSE, FreeSurfer,
// ANTs), and at most this many vote counts held at once while the majority is summed over ranks.
constexpr int kMaxVotedLabel = 65535;
constexpr std::size_t kVoteChunkCounts = std::size_t(1) << 23;  // 64 MiB of int64 counts

// A label map the majority vote can count: integer values in [0, kMaxVotedLabel].
void requireVotableLabels(HostImage const& labels, std::string const& name) {
  const float* v = labels.data.data();
  for (Index k = 0; k < labels.numVoxels(); ++k)
    if (!(v[k] >= 0.0f && v[k] <= float(kMaxVotedLabel) && v[k] == std::floor(v[k])))
      throw InvalidArgument("atlas: the label map " + name + " holds " + std::to_string(v[k]) +
                            ": the subjects' atlas labels are voted from integer labels 0.." + std::to_string(kMaxVotedLabel));
}

std::string gib(std::int64_t bytes) {
  std::ostringstream s;
  s.precision(3);
  if (bytes >= (std::int64_t(1) << 30))
    s << double(bytes) / double(1 << 30) << " GiB";
  else
    s << double(bytes) / double(1 << 20) << " MiB";
  return s.str();
}

// The content hash of an image in memory: its grid and its voxels.
std::uint64_t imageHash(HostImage const& img) {
  ContentHasher h;
  const std::string grid = describe(img.geometry);
  h.update(grid.data(), grid.size());
  h.update(img.geometry.origin.data(), sizeof(double) * 3);
  h.update(img.geometry.direction.data(), sizeof(double) * 9);
  h.update(img.data.data(), img.data.size() * sizeof(float));
  return h.digest();
}

// ---- the ranks' agreement ------------------------------------------------------------------------------
// Before the first collective whose size depends on the job, every rank contributes the hash of each
// named part of its job; a rank whose parts differ from rank 0's is named with the parts. Sums of
// int64 slots (one rank writes each slot, the others add 0) are an exact all-gather.

void agreeOnJob(AtlasJob const& job, gpu::Communicator& comm) {
  // The job's JSON, key by key ("out_subject_labels" -> "out subject labels"), every greedy
  // parameter by its own name ("max step"); the count first, so that it is named when it differs.
  std::vector<std::pair<std::string, std::string>> parts = {{"number of images", std::to_string(job.images.size())}};
  auto add = [&](std::string name, nlohmann::json const& v) {
    std::replace(name.begin(), name.end(), '_', ' ');
    parts.emplace_back(name, v.dump());
  };
  const nlohmann::json described = toJson(job);
  for (auto const& [k, v] : described.items()) {
    if (k == "greedy") {
      for (auto const& [gk, gv] : v.items()) add(gk, gv);
    } else {
      add(k == "labels" ? "label maps" : k, v);
    }
  }
  const std::size_t P = parts.size(), K = std::size_t(comm.size()), me = std::size_t(comm.rank());
  std::vector<std::int64_t> slots(K * P, 0);
  for (std::size_t p = 0; p < P; ++p) {
    const std::uint64_t h = contentHash(parts[p].second.data(), parts[p].second.size()) | 1u;  // never 0
    std::memcpy(&slots[me * P + p], &h, sizeof h);
  }
  comm.sum(slots.data(), slots.size());
  std::string why;
  int differing = 0;
  for (std::size_t r = 1; r < K; ++r) {
    std::string which;
    for (std::size_t p = 0; p < P; ++p)
      if (slots[r * P + p] != slots[p]) which += (which.empty() ? "" : ", ") + std::string(parts[p].first);
    if (which.empty()) continue;
    if (++differing <= 3) why += (why.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " differs from rank 0 in: " + which);
  }
  if (differing > 3) why += "; and " + std::to_string(differing - 3) + " more ranks";
  if (!why.empty())
    throw InvalidArgument("atlas: the processes of the job were not given the same job (" + why +
                          "): every rank must run the same command on the same files");
}

// ---- clipping ------------------------------------------------------------------------------------------

HostImage cropImage(HostImage const& img, Geometry const& box, std::array<Index, 3> const& low) {
  if (box.size == img.geometry.size && low == std::array<Index, 3>{0, 0, 0}) return img;  // the whole grid: shared
  HostImage out("kortex::atlas::cropped", box);
  const Geometry& g = img.geometry;
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < box.nz(); ++z)
    for (Index y = 0; y < box.ny(); ++y)
      for (Index x = 0; x < box.nx(); ++x)
        out.data(z, y, x) = img.data(std::min(low[2] + z, g.nz() - 1), std::min(low[1] + y, g.ny() - 1),
                                     std::min(low[0] + x, g.nx() - 1));
  return out;
}

}  // namespace

std::array<int, 2> atlasBlock(int subjects, int ranks, int rank) {
  const int base = subjects / ranks, extra = subjects % ranks;
  const int first = rank * base + std::min(rank, extra);
  return {first, base + (rank < extra ? 1 : 0)};
}

namespace {

// ---- the atlas job in named stages (pipeline/Atlas.hpp's steps), each a region of the job's
// timeline (kokkos-tools, Nsight Systems): check / files / hash / resume / read / align / clip /
// plan / atlas / write. Each stage takes what it reads and returns what it makes; runAtlasJob runs
// them in order and records the report.

// What this process runs: the job, its group and its block of subjects (checkParameters).
struct AtlasPlace {
  AtlasJob const& job;
  gpu::Communicator* comm;
  bool inMemory;
  int n;                                  // subjects in the cohort
  int ranks = 1, rank = 0;
  int first = 0, local = 0;               // this process's subjects [first, first + local)
  Backend backend = Backend::Cpu;
  std::size_t at(int i) const { return std::size_t(first + i); }  // local subject i in the cohort
};

// Every output's file name (the subjects' names: their files' stems, numbered when two share one).
struct AtlasNames {
  std::vector<std::string> subject;
  fs::path fieldsDir, warpedDir, subjectLabelsDir;
  fs::path field(int i) const { return fieldsDir / (subject[std::size_t(i)] + "_field.nii.gz"); }
  fs::path inverseField(int i) const { return fieldsDir / (subject[std::size_t(i)] + "_inverse_field.nii.gz"); }
  fs::path warped(int i) const { return warpedDir / (subject[std::size_t(i)] + "_warped.nii.gz"); }
  fs::path labels(int i) const { return warpedDir / (subject[std::size_t(i)] + "_labels.nii.gz"); }
  fs::path subjectLabels(int i) const { return subjectLabelsDir / (subject[std::size_t(i)] + "_atlas_labels.nii.gz"); }
};

struct AtlasIdentity {
  std::string referencePath;  // empty: the first image in memory
  std::string referenceName;  // how messages name it
  nlohmann::json key;         // the cohort's key (parameters and contents): checkpoints
};

struct AtlasResume {
  gpu::AtlasState state;
  nlohmann::json grid;
  std::vector<std::string> notes;
};

struct AtlasInputs {
  HostImage reference;
  std::vector<HostImage> originals, labelMaps;  // this process's subjects
};

struct AtlasClip {
  Geometry reference, box;                 // the reference grid and the atlas box on it
  std::array<Index, 3> low{0, 0, 0};       // the box's first voxel
  nlohmann::json gridKey;
  std::vector<HostImage> cropped;          // this process's aligned subjects on the box
};

struct AtlasBuilt {
  HostImage templ;                                     // on the box
  std::vector<std::pair<int, HostImage>> scaleTemplates;  // with QC: (factor, the template at that scale's end)
  std::vector<VectorField<Kokkos::HostSpace>> fields;  // this process's u_i on the box (when asked for)
  AtlasResult atlas;
  std::string executionSpace;
};

// ---- parameters, once, before any file is read; every rank runs the same job
AtlasPlace checkParameters(AtlasJob const& job, gpu::Communicator* comm) {
  kx::ScopedRegion region("kortex::atlas::check");
  AtlasPlace p{job, comm, !job.imageData.empty(), 0};
  const int n = p.n = int(p.inMemory ? job.imageData.size() : job.images.size());
  p.ranks = comm ? comm->size() : 1;
  p.rank = comm ? comm->rank() : 0;
  if (n < AtlasParams::kMinSubjects)
    throw InvalidArgument("atlas: at least " + std::to_string(AtlasParams::kMinSubjects) + " images are needed, got " +
                          std::to_string(n));
  if (n > AtlasParams::kMaxSubjects)
    throw InvalidArgument("atlas: at most " + std::to_string(AtlasParams::kMaxSubjects) + " images, got " + std::to_string(n));
  if (p.ranks > n)
    throw InvalidArgument("atlas: " + std::to_string(p.ranks) + " processes for " + std::to_string(n) +
                          " subjects: every process needs at least one subject");
  if (!job.labels.empty() && job.labels.size() != std::size_t(n))
    throw InvalidArgument("atlas: " + std::to_string(job.labels.size()) + " label maps for " + std::to_string(n) +
                          " images (one per image, in the same order)");
  if (!job.outSubjectLabelsDir.empty() && job.labels.empty())
    throw InvalidArgument("atlas: the subjects' atlas labels are voted from label maps: give one per image");
  if (!job.labels.empty() && job.outWarpedDir.empty() && job.outSubjectLabelsDir.empty())
    throw InvalidArgument("atlas: the warped label maps are written beside the warped images: name their folder");
  if (p.inMemory && !job.images.empty())
    throw InvalidArgument("atlas: the cohort is either files or images in memory, not both");
  if (p.inMemory && comm) throw InvalidArgument("atlas: a cohort in memory belongs to one process (give files to a process group)");
  if (job.checkpointEvery < 1) throw InvalidArgument("atlas: the checkpoint interval must be >= 1 iteration");
  if (job.resume && job.checkpointDir.empty()) throw InvalidArgument("atlas: resuming needs the checkpoint folder");
  requireMemoryCap(job.maxMemoryMiB, "atlas");
  for (auto const& f : job.images) requireInputFile(f, "image");
  job.params.validate();
  job.intensity.validate();
  if (job.useAffine) job.affine.validate();
  p.backend = resolve(job.backend);
  if (p.backend == Backend::Cpu && (comm || !job.checkpointDir.empty()))
    throw InvalidArgument("atlas: the CPU reference runs the whole cohort in one process, without checkpoints "
                          "(use the Kokkos back end for process groups and checkpoints)");
  // Every rank runs the same job (before any collective whose size depends on it).
  if (comm) agreeOnJob(job, *comm);
  std::set<std::string> seen;
  for (auto const& f : job.images)
    if (!seen.insert(fs::weakly_canonical(f).string()).second) throw InvalidArgument("atlas: " + f + " is in the cohort twice");
  if (!job.outTemplate.empty()) requireSupportedExtension(job.outTemplate, Access::Write);
  for (auto const& f : job.images) requireSupportedExtension(f, Access::Read);
  if (!job.reference.empty()) requireSupportedExtension(job.reference, Access::Read);
  for (auto const& f : job.labels) requireSupportedExtension(f, Access::Read);
  const auto block = atlasBlock(n, p.ranks, p.rank);
  p.first = block[0];
  p.local = block[1];
  return p;
}

// The report as far as the place decides it.
AtlasJobResult startReport(AtlasPlace const& p) {
  AtlasJobResult r;
  r.ranks = p.ranks;
  r.rank = p.rank;
  r.group = p.comm ? p.comm->describe() : "1 process";
  r.subjects = p.n;
  r.backend = p.backend;
  r.params = p.job.params;
  r.first = p.first;
  r.local = p.local;
  return r;
}

AtlasNames outputNames(AtlasPlace const& p) {
  AtlasJob const& job = p.job;
  AtlasNames names{{}, job.outFieldsDir, job.outWarpedDir, job.outSubjectLabelsDir};
  std::map<std::string, int> count;
  for (auto const& f : job.images) ++count[io::imageStem(f)];
  bool clash = false;
  for (auto const& [k, c] : count) clash = clash || c > 1;
  for (int i = 0; i < p.n; ++i) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, p.inMemory ? "subject-%03d" : "%03d_", i);
    names.subject.push_back(p.inMemory ? std::string(prefix)
                                       : (clash ? std::string(prefix) : std::string()) + io::imageStem(job.images[std::size_t(i)]));
  }
  return names;
}

// ---- no output on an input or another output; every output location; temporaries of killed runs
// removed; the checkpoint folder locked for the run (the lock returned)
std::unique_ptr<FolderLock> checkFiles(AtlasPlace const& p, AtlasNames const& names) {
  kx::ScopedRegion region("kortex::atlas::files");
  AtlasJob const& job = p.job;
  std::vector<JobFile> inputs, outputs;
  for (auto const& f : job.images) inputs.push_back({"image", f});
  if (!job.reference.empty()) inputs.push_back({"reference", job.reference});
  for (auto const& f : job.labels) inputs.push_back({"label map", f});
  for (auto const& f : job.otherInputs) inputs.push_back({"input", f});
  if (!job.outTemplate.empty()) outputs.push_back({"template", job.outTemplate});
  if (!job.outReport.empty()) outputs.push_back({"report", job.outReport});
  if (!job.outQc.empty()) outputs.push_back({"QC report", fs::path(job.outQc) / "index.html"});
  for (int i = 0; i < p.n; ++i) {
    if (!job.outQc.empty()) outputs.push_back({"QC thumbnail", fs::path(job.outQc) / atlasQcThumbnailName(names.subject[std::size_t(i)])});
    if (!job.outFieldsDir.empty()) outputs.push_back({"field", names.field(i)});
    if (!job.outFieldsDir.empty()) outputs.push_back({"inverse field", names.inverseField(i)});
    if (!job.outWarpedDir.empty()) outputs.push_back({"warped image", names.warped(i)});
    if (!job.labels.empty() && !job.outWarpedDir.empty()) outputs.push_back({"warped label map", names.labels(i)});
    if (!job.outSubjectLabelsDir.empty()) outputs.push_back({"subject atlas labels", names.subjectLabels(i)});
  }
  try {
    requireDistinctFiles(inputs, outputs);
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("atlas: ") + e.what());
  }
  // Every output location, before the work (the files themselves are written at the end, all or none).
  if (p.rank == 0 && !job.outTemplate.empty()) {
    requireWritableFile(job.outTemplate, "template", true);  // a missing folder is made (and removed if the job fails)
    if (!job.outReport.empty()) requireWritableFile(job.outReport, "report", true);
  }
  if (!job.outFieldsDir.empty()) requireWritableFile(names.field(p.first), "field", true);
  if (!job.outWarpedDir.empty()) requireWritableFile(names.warped(p.first), "warped image", true);
  if (!job.outSubjectLabelsDir.empty()) requireWritableFile(names.subjectLabels(p.first), "subject atlas labels", true);
  if (!job.outQc.empty()) {
    if (fs::exists(job.outQc) && !fs::is_directory(job.outQc))
      throw IoError("atlas: the QC report's folder '" + job.outQc + "' is a file");
    requireWritableFile(fs::path(job.outQc) / "index.html", "QC report", true);
  }
  if (p.rank != 0) return nullptr;
  // Temporaries left by killed runs in this job's folders (rank 0: its pid test is of this host).
  auto folderOf = [](std::string const& file) { return fs::path(file).has_parent_path() ? fs::path(file).parent_path() : fs::path("."); };
  std::vector<fs::path> folders;
  if (!job.outTemplate.empty()) folders.push_back(folderOf(job.outTemplate));
  if (!job.outReport.empty()) folders.push_back(folderOf(job.outReport));
  for (auto const& d : {job.outFieldsDir, job.outWarpedDir, job.outSubjectLabelsDir, job.checkpointDir, job.outQc})
    if (!d.empty()) folders.push_back(d);
  for (auto const& d : folders) removeStaleTemporaries(d);
  if (job.checkpointDir.empty()) return nullptr;
  // The checkpoint folder: one run at a time (rank 0 holds the lock for the group).
  std::unique_ptr<FolderLock> lock;
  try {
    lock = std::make_unique<FolderLock>(job.checkpointDir, "checkpoint folder");
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("atlas: ") + e.what());
  }
  removeStaleTemporaries(fs::path(job.checkpointDir));
  return lock;
}

// ---- the inputs' contents: every image's bytes hashed once (its owner rank; the reference by every rank)
AtlasIdentity hashInputs(AtlasPlace const& p, AtlasNames const& names) {
  kx::ScopedRegion region("kortex::atlas::hash");
  AtlasJob const& job = p.job;
  const int n = p.n;
  AtlasIdentity id;
  id.referencePath = !job.reference.empty() ? job.reference : p.inMemory ? std::string() : job.images.front();
  id.referenceName = id.referencePath.empty() ? names.subject.front() : id.referencePath;
  std::vector<std::uint64_t> subjectHashes(std::size_t(n), 0);
  std::uint64_t referenceHash = 0;
  const std::size_t K = std::size_t(p.ranks);
  std::vector<std::int64_t> slots(std::size_t(n) + K, 0);
  for (int i = 0; i < n; ++i) {
    if (p.comm && (i < p.first || i >= p.first + p.local)) continue;
    const std::uint64_t h = p.inMemory ? imageHash(job.imageData[std::size_t(i)]) : fileHash(job.images[std::size_t(i)], "image");
    std::memcpy(&slots[std::size_t(i)], &h, sizeof h);
  }
  {  // every rank reads the reference itself (the first image when none is named): its contents must agree
    const std::uint64_t h = id.referencePath.empty() ? 0 : fileHash(id.referencePath, "reference");
    std::memcpy(&slots[std::size_t(n) + std::size_t(p.rank)], &h, sizeof h);
  }
  if (p.comm) p.comm->sum(slots.data(), slots.size());
  for (int i = 0; i < n; ++i) std::memcpy(&subjectHashes[std::size_t(i)], &slots[std::size_t(i)], sizeof(std::uint64_t));
  std::memcpy(&referenceHash, &slots[std::size_t(n)], sizeof referenceHash);
  for (std::size_t k = 1; k < K; ++k)
    if (slots[std::size_t(n) + k] != slots[std::size_t(n)])
      throw InvalidArgument("atlas: rank " + std::to_string(k) + " reads other contents for the reference '" +
                            id.referencePath + "'" + (job.reference.empty() ? " (the first image)" : "") +
                            " than rank 0 (the file differs between the ranks' machines)");
  if (job.reference.empty()) referenceHash = subjectHashes.front();
  id.key = cohortKey(job, subjectHashes, referenceHash);
  return id;
}

// ---- resume: the checkpoint is checked (key, checksums) and loaded before any image is aligned
AtlasResume loadCheckpoint(AtlasPlace const& p, AtlasNames const& names, AtlasIdentity const& id) {
  kx::ScopedRegion region("kortex::atlas::resume");
  AtlasResume resume;
  if (p.job.resume && p.backend != Backend::Cpu)
    resume.state = readCheckpoint(p.job.checkpointDir, id.key, p.first, p.local, atlasKeepsVelocity(p.job.params.greedy.solver),
                                  p.inMemory ? names.subject : p.job.images, id.referenceName, resume.grid, resume.notes);
  return resume;
}

// ---- read (the label maps too: readable and on their images' grids before any work)
AtlasInputs readInputs(AtlasPlace const& p, AtlasNames const& names, AtlasIdentity const& id) {
  kx::ScopedRegion region("kortex::atlas::read");
  AtlasJob const& job = p.job;
  AtlasInputs in;
  in.reference = id.referencePath.empty() ? job.imageData.front() : readImage(id.referencePath);
  if (in.reference.geometry.dimension != 3) throw InvalidArgument("atlas: the reference " + id.referenceName + " is not a 3D image");
  // The files read in parallel (NIfTI decompresses without the I/O lock); the checks then run in
  // subject order, so the first bad subject is the one named, as when read one by one.
  const bool withLabels = !job.labels.empty();
  in.originals.resize(std::size_t(p.local));
  if (withLabels) in.labelMaps.resize(std::size_t(p.local));
  std::vector<std::exception_ptr> imageFailed(std::size_t(p.local)), labelFailed(std::size_t(p.local));
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < p.local; ++i) {
    const std::size_t g = p.at(i), k = std::size_t(i);
    try {
      in.originals[k] = p.inMemory ? job.imageData[g] : readImage(job.images[g]);
    } catch (...) {
      imageFailed[k] = std::current_exception();
      continue;
    }
    try {
      if (withLabels) in.labelMaps[k] = readImage(job.labels[g]);
    } catch (...) {
      labelFailed[k] = std::current_exception();
    }
  }
  for (int i = 0; i < p.local; ++i) {
    const std::size_t k = std::size_t(i);
    if (imageFailed[k]) std::rethrow_exception(imageFailed[k]);
    const std::string& name = p.inMemory ? names.subject[p.at(i)] : job.images[p.at(i)];
    if (in.originals[k].geometry.dimension != 3) throw InvalidArgument("atlas: " + name + " is not a 3D image");
    if (!withLabels) continue;
    if (labelFailed[k]) std::rethrow_exception(labelFailed[k]);
    const std::string& lp = job.labels[p.at(i)];
    if (!in.labelMaps[k].geometry.sameGrid(in.originals[k].geometry))
      throw InvalidArgument("atlas: the label map " + lp + " (" + describe(in.labelMaps[k].geometry) +
                            ") is not on the grid of its image " + name + " (" + describe(in.originals[k].geometry) + ")");
    if (!job.outSubjectLabelsDir.empty()) requireVotableLabels(in.labelMaps[k], lp);
  }
  return in;
}

// ---- normalise + affine to the reference, resampled onto its grid (the parameters were validated
// once, in checkParameters)
std::vector<RegistrationPipelineResult> align(AtlasPlace const& p, AtlasNames const& names, AtlasInputs const& in) {
  kx::ScopedRegion region("kortex::atlas::align");
  AtlasJob const& job = p.job;
  RegistrationPipelineOptions ro;
  ro.backend = p.backend;
  ro.useAffine = job.useAffine;
  ro.affine = job.affine;
  ro.intensity = job.intensity;
  std::vector<HostImage const*> moving;
  std::vector<std::string> labels;
  for (int i = 0; i < p.local; ++i) {
    moving.push_back(&in.originals[std::size_t(i)]);
    labels.push_back(p.inMemory ? names.subject[p.at(i)] : job.images[p.at(i)]);
  }
  auto pre = alignPairs(moving, in.reference, ro, labels, [&](int i) {
    if (job.subjectDone) job.subjectDone(p.first + i, "aligned");
  });
  for (auto& r : pre) r.fixedNormalised = HostImage();
  return pre;
}

void recordAlignment(std::vector<RegistrationPipelineResult> const& pre, AtlasJobResult& r) {
  for (auto const& p : pre) {
    r.affineNcc.push_back(p.affineRan ? p.affineResult.valueFinal : 0.0);
    r.alignSeconds.push_back({p.secondsNormalise, p.secondsAffine, p.secondsResample, p.secondsTotal});
    r.executionSpace = p.executionSpace;
  }
}

// ---- clipping box: the union of the subjects' boxes of voxels above the threshold (slots summed
// over ranks), grown by the guard band and to the greedy grid quantum; the subjects cropped to it
AtlasClip clipBox(AtlasPlace const& p, Geometry const& reference, std::vector<RegistrationPipelineResult> const& pre,
                  AtlasResume const& resume) {
  kx::ScopedRegion region("kortex::atlas::clip");
  AtlasJob const& job = p.job;
  std::vector<std::array<Index, 6>> boxes;
  if (job.clip) {
    // Each subject's box by its rank, in slots summed over the ranks (one rank writes each slot).
    std::vector<double> slots(6 * std::size_t(p.n), 0.0);
    for (int i = 0; i < p.local; ++i) {
      const auto b = voxelBox(pre[std::size_t(i)].movingResampled, kAtlasClipThreshold);
      for (int k = 0; k < 6; ++k) slots[6 * p.at(i) + std::size_t(k)] = double(b[std::size_t(k)]);
    }
    if (p.comm) p.comm->sum(slots.data(), slots.size());
    for (int i = 0; i < p.n; ++i) {
      std::array<Index, 6> b{};
      for (int k = 0; k < 6; ++k) b[std::size_t(k)] = Index(slots[6 * std::size_t(i) + std::size_t(k)]);
      boxes.push_back(b);
    }
  }
  const AtlasBox box = atlasBox(reference, boxes, job.clip, job.params.greedy);
  AtlasClip c{reference, box.grid, box.low, gridKey(box.grid, box.low), {}};
  job.params.validateFor(c.box, p.n);
  if (job.resume && resume.grid != c.gridKey)
    throw InvalidArgument("atlas: the checkpoint in " + job.checkpointDir + " was made on another atlas grid (" +
                          resume.grid.dump() + ") than this job's (" + c.gridKey.dump() + ")");
  for (int i = 0; i < p.local; ++i) c.cropped.push_back(cropImage(pre[std::size_t(i)].movingResampled, c.box, c.low));
  return c;
}

// ---- memory: the subjects that stay on the device (the others streamed from pinned host memory)
AtlasResidency planResidency(AtlasPlace const& p, Geometry const& box, AtlasMemory const& memory) {
  kx::ScopedRegion region("kortex::atlas::plan");
  using Mem = Kokkos::DefaultExecutionSpace::memory_space;
  const bool onDevice = p.backend == Backend::Kokkos && !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  if (onDevice) releaseRegisterPairWorkspace();  // a single pair's kept workspace is not the atlas's
  const std::int64_t avail = p.job.maxMemoryMiB > 0 ? std::int64_t(p.job.maxMemoryMiB * 1048576.0)
                             : onDevice              ? gpu::availableMemoryBytes<Mem>()
                                                     : hostAvailableMemoryBytes();
  return atlasResidency(memory, p.local, avail, onDevice, hostAvailableMemoryBytes(),
                        std::to_string(p.local) + " subjects on a " + describe(box) + " box");
}

// ---- the atlas (reference_cpu or gpu back end), the sums over ranks in int64 fixed point
AtlasBuilt buildTemplate(AtlasPlace const& p, AtlasIdentity const& id, AtlasClip const& clip, AtlasResidency const& plan,
                         AtlasResume const& resume) {
  kx::ScopedRegion region("kortex::atlas::atlas");
  using Exec = Kokkos::DefaultExecutionSpace;
  AtlasJob const& job = p.job;
  AtlasBuilt b;
  AtlasScaleTemplate keep;
  if (!job.outQc.empty() && p.rank == 0) keep = [&b](int, int f, HostImage const& t) { b.scaleTemplates.emplace_back(f, t); };
  if (p.backend == Backend::Cpu) {
    b.executionSpace = "OpenMP reference (" + std::to_string(omp_get_max_threads()) + " threads)";
    b.atlas = ref::buildAtlas(clip.cropped, job.params, b.templ, b.fields, job.progress, keep);
    return b;
  }
  gpu::AtlasRun run;
  run.comm = p.comm;
  run.first = p.first;
  run.returnFields = !job.outFieldsDir.empty() || !job.outWarpedDir.empty() || !job.outSubjectLabelsDir.empty() ||
                     !job.outQc.empty();  // 12 B per voxel and subject back
  run.residentSubjects = plan.resident == p.local ? -1 : plan.resident;  // -1: every subject resident
  run.total = p.n;
  run.progress = job.progress;
  run.scaleTemplate = keep;
  if (!job.checkpointDir.empty()) {
    run.checkpointEvery = job.checkpointEvery;
    run.checkpoint = [&](gpu::AtlasState const& st) { writeCheckpoint(job.checkpointDir, st, id.key, clip.gridKey, p.first, p.n, p.comm); };
    if (job.resume) run.resume = &resume.state;
  }
  Exec exec;
  b.executionSpace = Exec::name();
  b.atlas = gpu::buildAtlas(exec, clip.cropped, job.params, b.templ, b.fields, run);
  return b;
}

// The atlas-box field u on the reference grid (0 outside the box).
VectorField<Kokkos::HostSpace> embedField(VectorField<Kokkos::HostSpace> const& u, AtlasClip const& c) {
  Geometry const& G = c.reference;
  VectorField<Kokkos::HostSpace> full("kortex::atlas::u", G, 3);
  const Index ez = std::min(c.box.nz(), G.nz() - c.low[2]), ey = std::min(c.box.ny(), G.ny() - c.low[1]),
              ex = std::min(c.box.nx(), G.nx() - c.low[0]);
  for (int k = 0; k < 3; ++k)
    for (Index z = 0; z < ez; ++z)
      for (Index y = 0; y < ey; ++y)
        for (Index x = 0; x < ex; ++x) full.data(k, c.low[2] + z, c.low[1] + y, c.low[0] + x) = u.data(k, z, y, x);
  return full;
}

// The template on the reference grid: the atlas on the box, outside it `outside` (the fixed-point sum
// of every aligned image: the mean, the fields being 0 there).
HostImage templateOnReference(AtlasClip const& c, HostImage const& templ, std::vector<std::int64_t> const& outside, int n,
                              HostImage const& reference) {
  Geometry const& G = c.reference;
  HostImage out("kortex::atlas::template", G);
  out.metadata = reference.metadata;
  for (std::size_t k = 0; k < outside.size(); ++k) out.data.data()[k] = atlasMean(outside[k], n);
  const Index ez = std::min(c.box.nz(), G.nz() - c.low[2]), ey = std::min(c.box.ny(), G.ny() - c.low[1]),
              ex = std::min(c.box.nx(), G.nx() - c.low[0]);
  for (Index z = 0; z < ez; ++z)
    for (Index y = 0; y < ey; ++y)
      for (Index x = 0; x < ex; ++x) out.data(c.low[2] + z, c.low[1] + y, c.low[0] + x) = templ.data(z, y, x);
  return out;
}

// The fixed-point sum over every rank's aligned images (a collective: before any write, so that a rank
// failing to write never leaves the others waiting here).
std::vector<std::int64_t> sumAligned(AtlasPlace const& p, Geometry const& reference, std::vector<RegistrationPipelineResult> const& pre) {
  std::vector<std::int64_t> outside(std::size_t(reference.numVoxels()), 0);
  for (auto const& r : pre) {
    const float* a = r.movingResampled.data.data();
    for (std::size_t k = 0; k < outside.size(); ++k) outside[k] += atlasFixed(a[k]);
  }
  if (p.comm) p.comm->sum(outside.data(), outside.size());
  return outside;
}

// The template-space majority labels (AtlasJob::outSubjectLabelsDir): every subject's label map
// warped onto the reference grid (nearest, as --out-warped's) votes (voteMajority). A collective.
HostImage majorityLabels(AtlasPlace const& p, Geometry const& reference, std::vector<RegistrationPipelineResult> const& pre,
                         AtlasInputs const& in) {
  kx::ScopedRegion region("kortex::atlas::vote");
  std::vector<HostImage> warped;
  for (int i = 0; i < p.local; ++i) warped.push_back(warpedLabels(pre[std::size_t(i)], in.labelMaps[std::size_t(i)]));
  return voteMajority(warped, reference, p.first, p.n, p.comm);
}

// The majority labels on subject r's own grid: through its inverse field, label interpolation.
HostImage subjectAtlasLabels(RegistrationPipelineResult const& r, HostImage const& majority,
                             VectorField<Kokkos::HostSpace> const& inverse, HostImage const& subjectLabels, Backend backend) {
  TransformChain chain;
  ChainTransform t;
  t.kind = ChainKind::Field;
  t.field = inverse;
  t.name = "the subject's inverse field";
  chain.transforms.push_back(t);
  HostImage out = applyTransforms(majority, r.movingGrid, chain, ApplyInterpolation::Label, backend).image;
  out.metadata = subjectLabels.metadata;
  return out;
}

// Writes this process's subject files into `staged`; returns the files and the inverse fields' count
// of unconverged voxels. Each file's data is formed here, in order, and compressed and written on a
// thread (BackgroundWrites) while the next is formed; `writes` ends them.
long stageSubjectOutputs(AtlasPlace const& p, AtlasNames const& names, AtlasInputs const& in,
                         std::vector<RegistrationPipelineResult> const& pre, HostImage const& majority,
                         StagedOutputs& staged, std::vector<std::string>& written, BackgroundWrites& writes) {
  AtlasJob const& job = p.job;
  long unconverged = 0;
  auto stageImage = [&](fs::path const& path, HostImage img) {
    const fs::path t = staged.stage(path);
    written.push_back(path.string());
    writes.add([t, img] { writeImage(img, t); });
  };
  auto stageField = [&](fs::path const& path, VectorField<Kokkos::HostSpace> field) {
    const fs::path t = staged.stage(path);
    written.push_back(path.string());
    writes.add([t, field] { writeDisplacementField(field, t); });
  };
  for (int i = 0; i < p.local; ++i) {
    RegistrationPipelineResult const& r = pre[std::size_t(i)];
    const int g = p.first + i;
    if (!job.outFieldsDir.empty()) stageField(names.field(g), worldDisplacement(r));
    std::optional<VectorField<Kokkos::HostSpace>> inverse;  // both directions (core/Inverse.hpp)
    if (!job.outFieldsDir.empty() || !job.outSubjectLabelsDir.empty()) {
      const InverseMap inv = invertRegistration(r);
      unconverged += inv.stats.unconverged;
      inverse = inverseWorldDisplacement(r, inv);
    }
    if (!job.outFieldsDir.empty()) stageField(names.inverseField(g), *inverse);
    if (!job.outWarpedDir.empty()) {
      stageImage(names.warped(g), warpedMoving(r, in.originals[std::size_t(i)]));
      if (!job.labels.empty()) stageImage(names.labels(g), warpedLabels(r, in.labelMaps[std::size_t(i)]));
    }
    if (!job.outSubjectLabelsDir.empty())
      stageImage(names.subjectLabels(g),
                 subjectAtlasLabels(r, majority, *inverse, in.labelMaps[std::size_t(i)], p.backend));
  }
  return unconverged;
}

// Every rank's outcome of staging: a failing rank reports its own error (and, under MPI, ends the
// job); the others drop their staged files and wait for that end.
void agreeOnStaging(AtlasPlace const& p, std::exception_ptr failure, StagedOutputs& staged) {
  int failedRank = failure ? p.rank : -1;
  if (p.comm) {
    std::vector<std::int64_t> failed(std::size_t(p.ranks), 0);
    failed[std::size_t(p.rank)] = failure ? 1 : 0;
    p.comm->sum(failed.data(), failed.size());
    for (int k = p.ranks - 1; k >= 0; --k)
      if (failed[std::size_t(k)]) failedRank = k;
  }
  if (failure) std::rethrow_exception(failure);
  if (failedRank < 0) return;
  staged.discard();
  p.comm->barrier();  // the failing rank never arrives: its abort ends this rank
  throw IoError("atlas: rank " + std::to_string(failedRank) + " could not write its outputs; none were written");
}

// ---- the QC report's parts (a collective): each rank's subjects (their numbers and thumbnails), their
// numbers summed over ranks, and the mean |u| (mm) and det J maps summed in fixed point (the same
// pictures for any split over ranks).
struct AtlasQcParts {
  std::vector<AtlasQcSubject> local, all;
  HostImage meanU, meanDet;
};

constexpr double kQcUScale = 1e4, kQcDetScale = 1e6;  // fixed point: 0.1 um, 1e-6

AtlasQcParts atlasQcParts(AtlasPlace const& p, AtlasNames const& names, AtlasInputs const& in,
                          std::vector<RegistrationPipelineResult> const& pre, HostImage const& templ) {
  kx::ScopedRegion region("kortex::atlas::qc");
  AtlasQcParts q;
  const Index nv = templ.numVoxels();
  std::vector<std::int64_t> sums(std::size_t(2 * nv), 0);
  std::vector<double> stats(std::size_t(6 * p.n), 0.0);
  const AtlasQcTemplate shownTemplate(templ);
  for (int i = 0; i < p.local; ++i) {
    RegistrationPipelineResult const& r = pre[std::size_t(i)];
    const VectorField<Kokkos::HostSpace> d = deformableWorldDisplacement(r);
    HostImage mm("kortex::atlas::qc_u", templ.geometry);
    const float* u = d.data.data();  // (component, z, y, x), LayoutRight
    for (Index v = 0; v < nv; ++v)
      mm.data.data()[v] = std::sqrt(u[v] * u[v] + u[nv + v] * u[nv + v] + u[2 * nv + v] * u[2 * nv + v]);
    const HostImage det = jacobianMap(r);
    for (Index v = 0; v < nv; ++v) {
      sums[std::size_t(v)] += std::llround(double(mm.data.data()[v]) * kQcUScale);
      sums[std::size_t(nv + v)] += std::llround(double(det.data.data()[v]) * kQcDetScale);
    }
    const int g = p.first + i;
    q.local.push_back(shownTemplate.subject(names.subject[std::size_t(g)], warpedMoving(r, in.originals[std::size_t(i)]), det, mm));
    auto const& s = q.local.back();
    const double values[6] = {s.ncc, s.meanDisplacementMm, double(s.folds), double(s.minDet), double(s.thumbWidth), double(s.thumbHeight)};
    std::copy(values, values + 6, stats.begin() + 6 * g);
  }
  if (p.comm) {
    p.comm->sum(sums.data(), sums.size());
    p.comm->sum(stats.data(), stats.size());
  }
  for (int g = 0; g < p.n; ++g) {
    AtlasQcSubject s;
    s.name = names.subject[std::size_t(g)];
    double const* v = stats.data() + 6 * g;
    s.ncc = v[0], s.meanDisplacementMm = v[1], s.folds = long(v[2]), s.minDet = float(v[3]);
    s.thumbWidth = int(v[4]), s.thumbHeight = int(v[5]);
    q.all.push_back(s);
  }
  q.meanU = HostImage("kortex::atlas::qc_mean_u", templ.geometry);
  q.meanDet = HostImage("kortex::atlas::qc_mean_det", templ.geometry);
  for (Index v = 0; v < nv; ++v) {
    q.meanU.data.data()[v] = float(double(sums[std::size_t(v)]) / kQcUScale / p.n);
    q.meanDet.data.data()[v] = float(double(sums[std::size_t(nv + v)]) / kQcDetScale / p.n);
  }
  return q;
}

// ---- outputs: every file is staged beside its target; they are moved into place only when every
// rank has written all of its files (a failure anywhere leaves none of them). The report (`r`, its
// write and total times so far) is the last file rank 0 stages.
void writeOutputs(AtlasPlace const& p, AtlasNames const& names, AtlasInputs const& in, std::vector<RegistrationPipelineResult>& pre,
                  AtlasClip const& clip, AtlasBuilt const& built, AtlasJobResult& r, Clock::time_point jobStart) {
  kx::ScopedRegion region("kortex::atlas::write");
  AtlasJob const& job = p.job;
  const auto t0 = Clock::now();
  const std::vector<std::int64_t> outside = sumAligned(p, clip.reference, pre);
  for (std::size_t i = 0; i < built.fields.size(); ++i) pre[i].u = embedField(built.fields[i], clip);
  const HostImage majority = job.outSubjectLabelsDir.empty() ? HostImage() : majorityLabels(p, clip.reference, pre, in);  // a collective too
  std::optional<AtlasQcParts> qc;
  HostImage templ;  // on the reference grid: every rank's with QC (its subjects need it), else rank 0's below
  if (!job.outQc.empty()) {  // a collective too
    templ = templateOnReference(clip, built.templ, outside, p.n, in.reference);
    qc = atlasQcParts(p, names, in, pre, templ);
  }
  StagedOutputs staged;
  std::vector<std::string> written;
  std::exception_ptr failure;
  try {
    // At most 4 files in flight: each holds its data (a 1-mm field is ~90 MB), and 4 threads already
    // compress in parallel what one thread forms (an inverse field takes longer than its write).
    BackgroundWrites writes(4);
    if (!built.fields.empty())
      r.inverseUnconverged += stageSubjectOutputs(p, names, in, pre, majority, staged, written, writes);
    auto stageQc = [&](QcFile const& f) {
      const fs::path path = fs::path(job.outQc) / f.name;
      writeTextFileAtomic(staged.stage(path), std::string(f.bytes.begin(), f.bytes.end()));
      written.push_back(path.string());
    };
    if (qc)
      for (auto const& s : qc->local) stageQc(s.thumbnail);
    if (p.rank == 0) {
      r.templateImage = qc ? templ : templateOnReference(clip, built.templ, outside, p.n, in.reference);
      if (!job.outTemplate.empty()) {
        const fs::path t = staged.stage(job.outTemplate);
        writes.add([t, img = r.templateImage] { writeImage(img, t); });
        written.push_back(job.outTemplate);
      }
      if (qc) {
        r.secondsWrite = secondsSince(t0);
        r.secondsTotal = secondsSince(jobStart);
        for (auto const& f : atlasQc(r, qc->all, qc->meanU, qc->meanDet, built.scaleTemplates).files) stageQc(f);
      }
    }
    writes.wait();  // every image and field written (the report's times include them)
    if (p.rank == 0 && !job.outReport.empty()) {
      r.secondsWrite = secondsSince(t0);  // so far: the report is written with the outputs
      r.secondsTotal = secondsSince(jobStart);
      writeTextFileAtomic(staged.stage(job.outReport), toJson(r).dump(2) + "\n");
      written.push_back(job.outReport);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agreeOnStaging(p, failure, staged);
  staged.commit();
  r.secondsWrite = secondsSince(t0);
  r.secondsTotal = secondsSince(jobStart);
  r.written = written;
}

// The stages in order; the report recorded between them.
AtlasJobResult runStages(AtlasJob const& job, gpu::Communicator* comm) {
  const auto tStart = Clock::now();
  const AtlasPlace place = checkParameters(job, comm);
  AtlasJobResult r = startReport(place);
  const AtlasNames names = outputNames(place);
  const std::unique_ptr<FolderLock> lock = checkFiles(place, names);
  const auto tRead = Clock::now();
  const AtlasIdentity id = hashInputs(place, names);
  const AtlasResume resume = loadCheckpoint(place, names, id);
  r.notes.insert(r.notes.end(), resume.notes.begin(), resume.notes.end());
  const AtlasInputs in = readInputs(place, names, id);
  r.referenceGrid = in.reference.geometry;
  r.secondsRead = secondsSince(tRead);
  const auto tPrepare = Clock::now();
  std::vector<RegistrationPipelineResult> pre = align(place, names, in);
  recordAlignment(pre, r);
  r.secondsAlign = secondsSince(tPrepare);
  const AtlasClip clip = clipBox(place, in.reference.geometry, pre, resume);
  r.atlasGrid = clip.box;
  r.boxLow = clip.low;
  r.boxSize = clip.box.size;
  r.secondsPrepare = secondsSince(tPrepare);
  r.memory = gpu::atlasMemory(clip.box, job.params);
  const AtlasResidency plan = planResidency(place, clip.box, r.memory);
  r.streamed = plan.resident == place.local ? 0 : place.local - plan.resident;
  const auto tAtlas = Clock::now();
  const AtlasBuilt built = buildTemplate(place, id, clip, plan, resume);
  r.executionSpace = built.executionSpace;
  r.atlas = built.atlas;
  if (comm) r.group = comm->describe();  // now with the reduction path the first sum chose
  r.secondsAtlas = secondsSince(tAtlas);
  writeOutputs(place, names, in, pre, clip, built, r, tStart);
  return r;
}

}  // namespace

AtlasJobResult runAtlasJob(AtlasJob const& given, gpu::Communicator* comm) {
  AtlasJob job = given;
  if (!job.imageList.empty()) {
    kx::ScopedRegion region("kortex::atlas::list");
    const auto more = readImageList(job.imageList);
    job.images.insert(job.images.end(), more.begin(), more.end());
    job.otherInputs.push_back(job.imageList);
  }
  return runStages(job, comm);
}

nlohmann::json toJson(AtlasJob const& job) {
  nlohmann::json cohort = nlohmann::json::array();
  for (auto const& p : job.images) cohort.push_back(p);
  for (auto const& im : job.imageData) cohort.push_back(toJson(ImageInput{{}, im}));
  return {{"job", "atlas"},
          {"images", cohort},
          {"image_list", job.imageList},
          {"labels", job.labels},
          {"reference", job.reference},
          {"greedy", toJson(job.params.greedy)},
          {"affine", job.useAffine},
          {"affine_params", toJson(job.affine)},
          {"clip", job.clip},
          {"intensity", toJson(job.intensity)},
          {"backend", toString(job.backend)},
          {"out_template", job.outTemplate},
          {"out_fields", job.outFieldsDir},
          {"out_warped", job.outWarpedDir},
          {"out_subject_labels", job.outSubjectLabelsDir},
          {"out_report", job.outReport},
          {"out_qc", job.outQc},
          {"other_inputs", job.otherInputs},
          {"checkpoint", job.checkpointDir},
          {"checkpoint_every", job.checkpointEvery},
          {"resume", job.resume},
          {"max_memory", job.maxMemoryMiB}};
}

AtlasJob atlasJobFromJson(nlohmann::json const& j) {
  AtlasJob job;
  detail::JsonReader r(j, "atlas job");
  r.jobKind("atlas");
  auto paths = [&](const char* key, std::vector<std::string>& out) {
    if (nlohmann::json const* v = r.raw(key)) {
      if (!v->is_array()) r.wrongType(key, "a list of file paths", *v);
      for (auto const& e : *v) out.push_back(inputPathFromJson(&e, "atlas job", key).string());
    }
  };
  paths("images", job.images);
  paths("labels", job.labels);
  paths("other_inputs", job.otherInputs);
  r.text("image_list", job.imageList).text("reference", job.reference);
  r.object("greedy", job.params.greedy).flag("affine", job.useAffine).object("affine_params", job.affine);
  r.flag("clip", job.clip).object("intensity", job.intensity).choice("backend", job.backend, parseBackend);
  r.text("out_template", job.outTemplate)
      .text("out_fields", job.outFieldsDir)
      .text("out_warped", job.outWarpedDir)
      .text("out_subject_labels", job.outSubjectLabelsDir)
      .text("out_report", job.outReport)
      .text("out_qc", job.outQc);
  r.text("checkpoint", job.checkpointDir).integer("checkpoint_every", job.checkpointEvery).flag("resume", job.resume);
  r.number("max_memory", job.maxMemoryMiB);
  r.done();
  return job;
}


AtlasResidency atlasResidency(AtlasMemory const& m, int subjects, std::int64_t avail, bool onDevice,
                              std::int64_t hostAvail, std::string const& what) {
  const std::int64_t need = m.total(subjects);
  if (avail <= 0 || need <= avail) return {subjects, 0};  // unknown memory (0): as before, all resident
  const std::string told = "atlas: " + what + " need " + gib(need) + " of " + (onDevice ? "device" : "host") + " memory (" +
                           gib(m.perSubject) + " per subject + " + gib(m.shared) + " shared) but " + gib(avail) + " is available";
  // On a device the subjects that do not fit are streamed from pinned host memory; a host back end
  // has nowhere else to put them.
  const int fit = onDevice ? m.resident(subjects, avail) : -1;
  if (fit < 0)
    throw InvalidArgument(told + (onDevice ? " (streaming needs " + gib(m.shared + m.streamBuffers) + " of it for the shared and stream buffers)"
                                           : std::string()) +
                          ": spread the subjects over more processes, or clip the volumes");
  const int streamed = subjects - fit;
  const std::int64_t hostNeed = std::int64_t(streamed) * m.perStreamedHost;
  if (hostAvail > 0 && hostNeed > hostAvail)
    throw InvalidArgument(told + "; streaming the " + std::to_string(streamed) + " that do not fit needs " + gib(hostNeed) +
                          " of host memory (" + gib(m.perStreamedHost) + " per subject) but " + gib(hostAvail) +
                          " is available: spread the subjects over more processes, or clip the volumes");
  return {fit, streamed};
}

std::array<Index, 6> voxelBox(HostImage const& img, float threshold) {
  Geometry const& G = img.geometry;
  Index b0 = G.nx(), b1 = G.ny(), b2 = G.nz(), b3 = -1, b4 = -1, b5 = -1;
  // Slices scanned in parallel (min / max: the order does not matter).
#pragma omp parallel for reduction(min : b0, b1, b2) reduction(max : b3, b4, b5)
  for (Index z = 0; z < G.nz(); ++z)
    for (Index y = 0; y < G.ny(); ++y)
      for (Index x = 0; x < G.nx(); ++x)
        if (img.data(z, y, x) > threshold) {
          b0 = std::min(b0, x), b1 = std::min(b1, y), b2 = std::min(b2, z);
          b3 = std::max(b3, x), b4 = std::max(b4, y), b5 = std::max(b5, z);
        }
  return {b0, b1, b2, b3, b4, b5};
}

AtlasBox atlasBox(Geometry const& grid, std::vector<std::array<Index, 6>> const& boxes, bool clip, GreedyParams const& greedy) {
  std::array<Index, 3> lo{0, 0, 0}, hi{grid.nx() - 1, grid.ny() - 1, grid.nz() - 1};
  if (clip) {
    lo = {grid.nx(), grid.ny(), grid.nz()};
    hi = {-1, -1, -1};
    for (auto const& b : boxes)
      for (std::size_t a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], b[a]);
        hi[a] = std::max(hi[a], b[3 + a]);
      }
  }
  AtlasBox out{grid, {0, 0, 0}};
  for (std::size_t a = 0; a < 3; ++a) {
    const Index extent = grid.size[a];
    Index l = std::max<Index>(0, lo[a] - kAtlasGuardVoxels), h = std::min<Index>(extent - 1, hi[a] + kAtlasGuardVoxels);
    if (h < l) l = 0, h = extent - 1;  // nothing above the threshold anywhere: the whole grid
    const Index size = greedyExtentFor(h - l + 1, greedy);
    l = std::max<Index>(0, std::min(l, extent - size));  // keep the box inside the grid when it fits
    out.low[a] = l;
    out.grid.size[a] = size;
  }
  out.grid.origin = indexToWorld(grid, {double(out.low[0]), double(out.low[1]), double(out.low[2])});
  return out;
}

HostImage voteMajority(std::vector<HostImage> const& maps, Geometry const& grid, int first, int subjects,
                       gpu::Communicator* comm) {
  const std::size_t voxels = std::size_t(grid.numVoxels());
  for (auto const& m : maps)
    if (!m.geometry.sameGrid(grid)) throw InvalidArgument("voteMajority: a label map is not on the voting grid");
  std::vector<std::int64_t> present(std::size_t(kMaxVotedLabel) + 1, 0);
  for (auto const& m : maps) {
    const float* w = m.data.data();
    for (std::size_t k = 0; k < voxels; ++k) present[std::size_t(w[k])] = 1;
  }
  if (comm) comm->sum(present.data(), present.size());
  std::vector<int> index(present.size(), -1), value;
  for (std::size_t l = 0; l < present.size(); ++l)
    if (present[l] > 0) {
      index[l] = int(value.size());
      value.push_back(int(l));
    }
  const std::size_t L = value.size(), N = std::size_t(subjects);
  HostImage out("kortex::atlas::majority_labels", grid);
  if (L <= N) {
    // Counts per (voxel, label), summed over the ranks: voxels x L.
    const std::size_t chunk = std::max<std::size_t>(1, kVoteChunkCounts / L);
    std::vector<std::int64_t> votes;
    for (std::size_t v0 = 0; v0 < voxels; v0 += chunk) {
      const std::size_t c = std::min(chunk, voxels - v0);
      votes.assign(c * L, 0);
      for (auto const& w : maps)
        for (std::size_t k = 0; k < c; ++k) ++votes[k * L + std::size_t(index[std::size_t(w.data.data()[v0 + k])])];
      if (comm) comm->sum(votes.data(), votes.size());
      for (std::size_t k = 0; k < c; ++k) {
        std::size_t best = 0;
        for (std::size_t l = 1; l < L; ++l)
          if (votes[k * L + l] > votes[k * L + best]) best = l;
        out.data.data()[v0 + k] = float(value[best]);
      }
    }
    return out;
  }
  // More labels than subjects: each subject's label per voxel (one slot per subject, filled by its
  // rank), the mode of the N values: voxels x N, whatever the number of labels.
  const std::size_t chunk = std::max<std::size_t>(1, kVoteChunkCounts / N);
  std::vector<std::int64_t> slots, column(N);
  for (std::size_t v0 = 0; v0 < voxels; v0 += chunk) {
    const std::size_t c = std::min(chunk, voxels - v0);
    slots.assign(c * N, 0);
    for (std::size_t i = 0; i < maps.size(); ++i)
      for (std::size_t k = 0; k < c; ++k) slots[k * N + std::size_t(first) + i] = std::int64_t(maps[i].data.data()[v0 + k]);
    if (comm) comm->sum(slots.data(), slots.size());
    for (std::size_t k = 0; k < c; ++k) {
      std::copy(slots.begin() + std::ptrdiff_t(k * N), slots.begin() + std::ptrdiff_t((k + 1) * N), column.begin());
      std::sort(column.begin(), column.end());  // ascending: the first of the longest runs is the smaller label
      std::int64_t best = column[0];
      std::size_t bestRun = 0;
      for (std::size_t a = 0; a < N;) {
        std::size_t b = a;
        while (b < N && column[b] == column[a]) ++b;
        if (b - a > bestRun) bestRun = b - a, best = column[a];
        a = b;
      }
      out.data.data()[v0 + k] = float(best);
    }
  }
  return out;
}

nlohmann::json toJson(AtlasJobResult const& r) {
  nlohmann::json j;
  j["backend"] = toString(r.backend);
  j["execution_space"] = r.executionSpace;
  j["group"] = r.group;
  j["params"] = toJson(r.params);  // the greedy step's (metric, solver, schedule) and the atlas's
  j["subjects"] = r.subjects;
  j["ranks"] = r.ranks;
  if (!r.notes.empty()) j["notes"] = r.notes;
  j["reference_grid"] = describe(r.referenceGrid);
  j["atlas_grid"] = describe(r.atlasGrid);
  j["box_low"] = r.boxLow;
  j["box_size"] = r.boxSize;
  j["clipped_fraction"] = double(r.atlasGrid.numVoxels()) / double(std::max<Index>(1, r.referenceGrid.numVoxels()));
  j["memory"] = {{"per_subject_bytes", r.memory.perSubject}, {"shared_bytes", r.memory.shared},
                 {"stream_buffer_bytes", r.memory.streamBuffers}, {"per_streamed_subject_host_bytes", r.memory.perStreamedHost},
                 {"streamed_subjects", r.streamed}};
  j["iterations"] = r.atlas.iterations;
  j["resumed_at"] = r.atlas.resumedAt;
  j["refused"] = r.atlas.refused;
  j["inverse_unconverged"] = r.inverseUnconverged;  // this rank's inverse fields (0 when none written)
  j["min_jacobian"] = r.atlas.minJacobian;
  j["mean_displacement_rms"] = r.atlas.meanDisplacementRms;
  j["history"] = historyJson(r.atlas.history);
  nlohmann::json align = nlohmann::json::array();
  for (std::size_t i = 0; i < r.alignSeconds.size(); ++i) {
    auto const& t = r.alignSeconds[i];
    align.push_back({{"subject", r.first + int(i)}, {"affine_ncc", r.affineNcc[i]},
                     {"seconds", {{"normalise", t[0]}, {"affine", t[1]}, {"resample", t[2]}, {"total", t[3]}}}});
  }
  j["alignment"] = align;  // this rank's subjects
  j["seconds"] = {{"read", r.secondsRead},       {"prepare", r.secondsPrepare}, {"align", r.secondsAlign}, {"atlas", r.secondsAtlas},
                  {"atlas_setup", r.atlas.secondsSetup}, {"atlas_compute", r.atlas.secondsCompute},
                  {"atlas_reduce", r.atlas.secondsReduce}, {"write", r.secondsWrite}, {"total", r.secondsTotal}};
  return j;
}

}  // namespace kortex::pipeline
