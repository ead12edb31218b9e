#include "pipeline/Atlas.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "reference_cpu/Atlas.hpp"

namespace kortex::pipeline {
namespace fs = std::filesystem;
using io::Access;
using io::readImage;
using io::writeImage;
using io::requireSupportedExtension;
using io::requireWritableFile;
using io::writeTextFileAtomic;
using io::writeDisplacementField;

namespace {

std::string gib(std::int64_t bytes) {
  std::ostringstream s;
  s.precision(3);
  if (bytes >= (std::int64_t(1) << 30))
    s << double(bytes) / double(1 << 30) << " GiB";
  else
    s << double(bytes) / double(1 << 20) << " MiB";
  return s.str();
}

std::string stemOf(std::string const& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* ext : {".nii.gz", ".nii", ".mha", ".mhd", ".vti", ".dcm"})
    if (name.size() > std::string(ext).size() && name.compare(name.size() - std::string(ext).size(), std::string::npos, ext) == 0)
      return name.substr(0, name.size() - std::string(ext).size());
  return fs::path(path).stem().string();
}

// ---- checkpoints -------------------------------------------------------------------------------------
// DIR/next, DIR/current, DIR/previous: one state each. Writing: rank 0 empties DIR/next; every rank
// writes its subjects' files subject-<i>.bin there (int32 frozen, has-v, nz, ny, nx; u; v); after a
// barrier rank 0 writes template.bin and, last, state.json (atomically): a folder is complete when
// its state.json exists. Then rank 0 renames current -> previous and next -> current. A kill at any
// point leaves at least one complete folder once the first checkpoint is done; resume takes the
// complete folder with the most iterations.

nlohmann::json cohortKey(AtlasJob const& job, Geometry const& atlasGrid, std::array<Index, 3> const& low) {
  GreedyParams const& g = job.params.greedy;
  return {{"images", job.images},
          {"reference", job.reference.empty() ? job.images.front() : job.reference},
          {"scales", g.scales},
          {"iterations", g.iterations},
          {"solver", toString(g.solver)},
          {"alpha", g.fluid.alpha},
          {"beta", g.fluid.beta},
          {"gamma", g.fluid.gamma},
          {"max_step", g.maxStep},
          {"min_step", g.minStep},
          {"affine", job.useAffine},
          {"atlas_grid", describe(atlasGrid)},
          {"box_low", low}};
}

void writeRaw(std::ofstream& out, const void* p, std::size_t bytes) {
  out.write(static_cast<const char*>(p), std::streamsize(bytes));
}

void writeSubjectFile(fs::path const& path, int frozen, Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> const& u,
                      Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> const* v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError("atlas checkpoint: cannot write " + path.string());
  const std::int32_t head[5] = {frozen, v ? 1 : 0, std::int32_t(u.extent(1)), std::int32_t(u.extent(2)), std::int32_t(u.extent(3))};
  writeRaw(out, head, sizeof head);
  writeRaw(out, u.data(), u.size() * sizeof(float));
  if (v) writeRaw(out, v->data(), v->size() * sizeof(float));
  out.close();
  if (!out) throw IoError("atlas checkpoint: writing " + path.string() + " failed (disk full?)");
}

void readSubjectFile(fs::path const& path, bool wantV, AtlasState& st) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("atlas checkpoint: cannot read " + path.string());
  std::int32_t head[5];
  in.read(reinterpret_cast<char*>(head), sizeof head);
  if (!in || head[1] != (wantV ? 1 : 0) || head[2] < 1 || head[3] < 1 || head[4] < 1)
    throw IoError("atlas checkpoint: " + path.string() + " is damaged or from another solver");
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> u("kortex::atlas::resume_u", 3, head[2], head[3], head[4]);
  in.read(reinterpret_cast<char*>(u.data()), std::streamsize(u.size() * sizeof(float)));
  st.frozen.push_back(head[0]);
  st.u.push_back(u);
  if (wantV) {
    Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> v("kortex::atlas::resume_v", 3, head[2], head[3], head[4]);
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
    st.v.push_back(v);
  }
  if (!in) throw IoError("atlas checkpoint: " + path.string() + " is truncated");
}

nlohmann::json historyJson(std::vector<AtlasIteration> const& h) {
  nlohmann::json a = nlohmann::json::array();
  for (auto const& it : h)
    a.push_back({{"scale", it.scale}, {"factor", it.factor}, {"iteration", it.iteration},
                 {"template_change", it.templateChange}, {"mismatch", it.mismatch}, {"refused", it.refused},
                 {"frozen", it.frozen}, {"min_jacobian", it.minJacobian}, {"seconds", it.seconds}});
  return a;
}

std::vector<AtlasIteration> historyFrom(nlohmann::json const& a) {
  std::vector<AtlasIteration> h;
  for (auto const& j : a) {
    AtlasIteration it;
    it.scale = j.at("scale");
    it.factor = j.at("factor");
    it.iteration = j.at("iteration");
    it.templateChange = j.at("template_change");
    it.mismatch = j.at("mismatch");
    it.refused = j.at("refused");
    it.frozen = j.at("frozen");
    it.minJacobian = j.at("min_jacobian");
    it.seconds = j.at("seconds");
    h.push_back(it);
  }
  return h;
}

void writeCheckpoint(fs::path const& dir, AtlasState const& st, nlohmann::json const& key, int first, AtlasComm* comm) {
  const int rank = comm ? comm->rank() : 0;
  const fs::path next = dir / "next", current = dir / "current", previous = dir / "previous";
  if (rank == 0) {
    fs::remove_all(next);
    fs::create_directories(next);
  }
  if (comm) comm->barrier();
  for (std::size_t i = 0; i < st.u.size(); ++i)
    writeSubjectFile(next / ("subject-" + std::to_string(first + int(i)) + ".bin"), st.frozen[i], st.u[i],
                     st.v.empty() ? nullptr : &st.v[i]);
  if (comm) comm->barrier();
  if (rank == 0) {
    {
      std::ofstream out(next / "template.bin", std::ios::binary | std::ios::trunc);
      writeRaw(out, st.templ.data(), st.templ.size() * sizeof(float));
      out.close();
      if (!out) throw IoError("atlas checkpoint: writing " + (next / "template.bin").string() + " failed");
    }
    nlohmann::json j;
    j["format"] = "kortex-atlas-checkpoint-1";
    j["cohort"] = key;
    j["scale"] = st.scale;
    j["iteration"] = st.iteration;
    j["refused"] = st.refused;
    j["seconds"] = st.seconds;
    j["template_extents"] = {st.templ.extent(0), st.templ.extent(1), st.templ.extent(2)};
    j["history"] = historyJson(st.history);
    writeTextFileAtomic(next / "state.json", j.dump(1));
    fs::remove_all(previous);
    if (fs::exists(current)) fs::rename(current, previous);
    fs::rename(next, current);
  }
  if (comm) comm->barrier();
}

// The newest complete checkpoint under dir, for this rank's subjects.
AtlasState readCheckpoint(fs::path const& dir, nlohmann::json const& key, int first, int local, bool wantV) {
  fs::path best;
  std::size_t bestIters = 0;
  nlohmann::json bestJson;
  for (const char* tag : {"current", "next", "previous"}) {
    const fs::path s = dir / tag / "state.json";
    if (!fs::exists(s)) continue;
    std::ifstream in(s);
    nlohmann::json j;
    try {
      in >> j;
    } catch (std::exception const&) {
      continue;
    }
    const std::size_t iters = j.value("history", nlohmann::json::array()).size();
    if (best.empty() || iters > bestIters) {
      best = dir / tag;
      bestIters = iters;
      bestJson = j;
    }
  }
  if (best.empty())
    throw InvalidArgument("atlas: no complete checkpoint in " + dir.string() + " to resume from");
  if (bestJson.value("format", "") != "kortex-atlas-checkpoint-1" || bestJson.at("cohort") != key)
    throw InvalidArgument("atlas: the checkpoint in " + best.string() +
                          " was made for another cohort or other parameters (images, reference, scales, iterations, "
                          "solver, operator, steps, affine, atlas grid must all match)");
  AtlasState st;
  st.scale = bestJson.at("scale");
  st.iteration = bestJson.at("iteration");
  st.refused = bestJson.at("refused");
  st.seconds = bestJson.at("seconds");
  st.history = historyFrom(bestJson.at("history"));
  auto ext = bestJson.at("template_extents");
  st.templ = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>("kortex::atlas::resume_template", ext[0].get<std::size_t>(),
                                                                            ext[1].get<std::size_t>(), ext[2].get<std::size_t>());
  {
    std::ifstream in(best / "template.bin", std::ios::binary);
    in.read(reinterpret_cast<char*>(st.templ.data()), std::streamsize(st.templ.size() * sizeof(float)));
    if (!in) throw IoError("atlas checkpoint: " + (best / "template.bin").string() + " is missing or truncated");
  }
  for (int i = 0; i < local; ++i) readSubjectFile(best / ("subject-" + std::to_string(first + i) + ".bin"), wantV, st);
  return st;
}

// ---- clipping ------------------------------------------------------------------------------------------

HostImage cropImage(HostImage const& img, Geometry const& box, std::array<Index, 3> const& low) {
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

AtlasJobResult runAtlasJob(AtlasJob const& job, AtlasComm* comm) {
  const auto tStart = Clock::now();
  AtlasJobResult r;
  r.ranks = comm ? comm->size() : 1;
  r.rank = comm ? comm->rank() : 0;
  r.group = comm ? comm->describe() : "1 process";
  const int n = int(job.images.size());
  r.subjects = n;
  // ---- parameters, once, before any file is read
  if (n < AtlasParams::kMinSubjects)
    throw InvalidArgument("atlas: at least " + std::to_string(AtlasParams::kMinSubjects) + " images are needed, got " +
                          std::to_string(n));
  if (n > AtlasParams::kMaxSubjects)
    throw InvalidArgument("atlas: at most " + std::to_string(AtlasParams::kMaxSubjects) + " images, got " + std::to_string(n));
  if (r.ranks > n)
    throw InvalidArgument("atlas: " + std::to_string(r.ranks) + " processes for " + std::to_string(n) +
                          " subjects: every process needs at least one subject");
  if (!job.labels.empty() && job.labels.size() != job.images.size())
    throw InvalidArgument("atlas: " + std::to_string(job.labels.size()) + " label maps for " + std::to_string(n) +
                          " images (one per image, in the same order)");
  if (!job.labels.empty() && job.outWarpedDir.empty())
    throw InvalidArgument("atlas: the warped label maps are written beside the warped images: name their folder");
  if (job.outTemplate.empty()) throw InvalidArgument("atlas: an output file for the template is required");
  if (job.checkpointEvery < 1) throw InvalidArgument("atlas: the checkpoint interval must be >= 1 iteration");
  if (job.resume && job.checkpointDir.empty()) throw InvalidArgument("atlas: resuming needs the checkpoint folder");
  if (job.maxDeviceBytes < 0) throw InvalidArgument("atlas: the memory cap must be >= 0 bytes");
  job.params.validate();
  job.intensity.validate();
  if (job.useAffine) job.affine.validate();
  r.backend = resolve(job.backend);
  if (r.backend == Backend::Cpu && (comm || !job.checkpointDir.empty()))
    throw InvalidArgument("atlas: the CPU reference runs the whole cohort in one process, without checkpoints "
                          "(use the Kokkos back end for process groups and checkpoints)");
  {
    std::set<std::string> seen;
    for (auto const& p : job.images)
      if (!seen.insert(fs::weakly_canonical(p).string()).second)
        throw InvalidArgument("atlas: " + p + " is in the cohort twice");
  }
  requireSupportedExtension(job.outTemplate, Access::Write);
  if (r.rank == 0) requireWritableFile(job.outTemplate, "template", true);
  for (auto const& p : job.images) requireSupportedExtension(p, Access::Read);
  // Output names: the files' stems, numbered when two subjects share one.
  std::vector<std::string> names;
  {
    std::map<std::string, int> count;
    for (auto const& p : job.images) ++count[stemOf(p)];
    bool clash = false;
    for (auto const& [k, c] : count) clash = clash || c > 1;
    for (int i = 0; i < n; ++i) {
      char prefix[16];
      std::snprintf(prefix, sizeof prefix, "%03d_", i);
      names.push_back((clash ? std::string(prefix) : std::string()) + stemOf(job.images[std::size_t(i)]));
    }
  }
  const auto block = atlasBlock(n, r.ranks, r.rank);
  r.first = block[0];
  r.local = block[1];

  // ---- read
  auto t0 = Clock::now();
  const std::string refPath = job.reference.empty() ? job.images.front() : job.reference;
  const HostImage reference = readImage(refPath);
  if (reference.geometry.dimension != 3) throw InvalidArgument("atlas: the reference " + refPath + " is not a 3D image");
  r.referenceGrid = reference.geometry;
  std::vector<HostImage> originals;
  for (int i = 0; i < r.local; ++i) {
    const std::string& p = job.images[std::size_t(r.first + i)];
    originals.push_back(readImage(p));
    if (originals.back().geometry.dimension != 3) throw InvalidArgument("atlas: " + p + " is not a 3D image");
  }
  r.secondsRead = secondsSince(t0);

  // ---- normalise + affine to the reference, resampled onto its grid
  t0 = Clock::now();
  std::vector<RegistrationPipelineResult> pre;
  RegistrationPipelineOptions ro;
  ro.backend = r.backend;
  ro.method = RegistrationMethod::Greedy;
  ro.useFluid = false;
  ro.useAffine = job.useAffine;
  ro.affine = job.affine;
  ro.intensity = job.intensity;
  ro.greedy = job.params.greedy;
  for (int i = 0; i < r.local; ++i) {
    const std::string& p = job.images[std::size_t(r.first + i)];
    try {
      pre.push_back(registerPair(originals[std::size_t(i)], reference, ro));
    } catch (InvalidArgument const& e) {
      throw InvalidArgument(p + ": " + e.what());
    }
    pre.back().fixedNormalised = HostImage();
    r.affineNcc.push_back(pre.back().affineRan ? pre.back().affineResult.nccFinal : 0.0);
    r.executionSpace = pre.back().executionSpace;
    if (job.subjectDone) job.subjectDone(r.first + i, "aligned");
  }

  // ---- clipping box: the union of the subjects' boxes of voxels > 0 (slots summed over ranks)
  const Geometry& G = reference.geometry;
  std::array<Index, 3> lo{0, 0, 0}, hi{G.nx() - 1, G.ny() - 1, G.nz() - 1};
  if (job.clip) {
    std::vector<double> slots(6 * std::size_t(n), 0.0);
    for (int i = 0; i < r.local; ++i) {
      auto const& img = pre[std::size_t(i)].movingResampled;
      Index b[6] = {G.nx(), G.ny(), G.nz(), -1, -1, -1};
      for (Index z = 0; z < G.nz(); ++z)
        for (Index y = 0; y < G.ny(); ++y)
          for (Index x = 0; x < G.nx(); ++x)
            if (img.data(z, y, x) > kAtlasClipThreshold) {
              b[0] = std::min(b[0], x), b[1] = std::min(b[1], y), b[2] = std::min(b[2], z);
              b[3] = std::max(b[3], x), b[4] = std::max(b[4], y), b[5] = std::max(b[5], z);
            }
      for (int k = 0; k < 6; ++k) slots[6 * std::size_t(r.first + i) + std::size_t(k)] = double(b[k]);
    }
    if (comm) comm->sum(slots.data(), slots.size());
    lo = {G.nx(), G.ny(), G.nz()};
    hi = {-1, -1, -1};
    for (int i = 0; i < n; ++i)
      for (int a = 0; a < 3; ++a) {
        lo[std::size_t(a)] = std::min(lo[std::size_t(a)], Index(slots[6 * std::size_t(i) + std::size_t(a)]));
        hi[std::size_t(a)] = std::max(hi[std::size_t(a)], Index(slots[6 * std::size_t(i) + 3 + std::size_t(a)]));
      }
  }
  Geometry box = G;
  {
    int m = 1;
    for (int f : job.params.greedy.scales) m = std::max(m, f);
    if (usesSor(job.params.greedy.solver)) m *= 2;
    for (std::size_t a = 0; a < 3; ++a) {
      const Index extent = G.size[a];
      Index l = std::max<Index>(0, lo[a] - kAtlasGuardVoxels), h = std::min<Index>(extent - 1, hi[a] + kAtlasGuardVoxels);
      Index size = std::max<Index>(h - l + 1, Index(kFluidMinExtent) * m);
      size = (size + m - 1) / m * m;
      l = std::max<Index>(0, std::min(l, extent - size));  // keep the box inside the grid when it fits
      lo[a] = l;
      box.size[a] = size;
    }
    box.origin = indexToWorld(G, {double(lo[0]), double(lo[1]), double(lo[2])});
  }
  r.atlasGrid = box;
  r.boxLow = lo;
  r.boxSize = box.size;
  job.params.validateFor(box, n);
  std::vector<HostImage> cropped;
  for (int i = 0; i < r.local; ++i) cropped.push_back(cropImage(pre[std::size_t(i)].movingResampled, box, lo));
  r.secondsPrepare = secondsSince(t0);

  // ---- memory
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  r.memory = atlasMemory(box, job.params);
  int resident = -1;  // all
  {
    const bool onDevice = r.backend == Backend::Kokkos && !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
    const std::int64_t need = r.memory.total(r.local);
    const std::int64_t avail = job.maxDeviceBytes > 0 ? job.maxDeviceBytes
                               : onDevice             ? gpu::availableMemoryBytes<Mem>()
                                                      : hostAvailableMemoryBytes();
    const std::string what = "atlas: " + std::to_string(r.local) + " subjects on a " + describe(box) + " box need " + gib(need) +
                             " of " + (onDevice ? "device" : "host") + " memory (" + gib(r.memory.perSubject) + " per subject + " +
                             gib(r.memory.shared) + " shared) but " + gib(avail) + " is available";
    if (avail > 0 && need > avail) {
      // On a device the subjects that do not fit are streamed from pinned host memory; a host back
      // end has nowhere else to put them.
      const int fit = onDevice ? r.memory.resident(r.local, avail) : -1;
      if (fit < 0)
        throw InvalidArgument(what + (onDevice ? " (streaming needs " + gib(r.memory.shared + r.memory.streamBuffers) +
                                                     " of it for the shared and stream buffers)"
                                               : std::string()) +
                              ": spread the subjects over more processes, or clip the volumes");
      const int streamed = r.local - fit;
      const std::int64_t hostNeed = std::int64_t(streamed) * r.memory.perStreamedHost, hostAvail = hostAvailableMemoryBytes();
      if (hostAvail > 0 && hostNeed > hostAvail)
        throw InvalidArgument(what + "; streaming the " + std::to_string(streamed) + " that do not fit needs " + gib(hostNeed) +
                              " of host memory (" + gib(r.memory.perStreamedHost) + " per subject) but " + gib(hostAvail) +
                              " is available: spread the subjects over more processes, or clip the volumes");
      resident = fit;
    }
  }
  r.streamed = resident < 0 ? 0 : r.local - resident;

  // ---- the atlas
  t0 = Clock::now();
  const nlohmann::json key = cohortKey(job, box, lo);
  HostImage templ;
  std::vector<VectorField<Kokkos::HostSpace>> fields;
  if (r.backend == Backend::Cpu) {
    r.executionSpace = "OpenMP reference (" + std::to_string(omp_get_max_threads()) + " threads)";
    r.atlas = ref::buildAtlas(cropped, job.params, templ, fields, job.progress);
  } else {
    AtlasRun run;
    run.comm = comm;
    run.first = r.first;
    run.returnFields = !job.outFieldsDir.empty() || !job.outWarpedDir.empty();  // 12 B per voxel and subject back
    run.residentSubjects = resident;
    run.total = n;
    run.progress = job.progress;
    AtlasState resumeState;
    if (!job.checkpointDir.empty()) {
      fs::create_directories(job.checkpointDir);
      run.checkpointEvery = job.checkpointEvery;
      run.checkpoint = [&](AtlasState const& st) { writeCheckpoint(job.checkpointDir, st, key, r.first, comm); };
      if (job.resume) {
        resumeState = readCheckpoint(job.checkpointDir, key, r.first, r.local, atlasKeepsVelocity(job.params.greedy.solver));
        run.resume = &resumeState;
      }
    }
    Exec exec;
    r.executionSpace = Exec::name();
    r.atlas = gpu::buildAtlas(exec, cropped, job.params, templ, fields, run);
    if (comm) r.group = comm->describe();  // now with the reduction path the first sum chose
  }
  r.secondsAtlas = secondsSince(t0);

  // ---- outputs
  t0 = Clock::now();
  auto embedField = [&](VectorField<Kokkos::HostSpace> const& u) {
    VectorField<Kokkos::HostSpace> full("kortex::atlas::u", G, 3);
    const Index ez = std::min(box.nz(), G.nz() - lo[2]), ey = std::min(box.ny(), G.ny() - lo[1]),
                ex = std::min(box.nx(), G.nx() - lo[0]);
    for (int c = 0; c < 3; ++c)
      for (Index z = 0; z < ez; ++z)
        for (Index y = 0; y < ey; ++y)
          for (Index x = 0; x < ex; ++x) full.data(c, lo[2] + z, lo[1] + y, lo[0] + x) = u.data(c, z, y, x);
    return full;
  };
  for (int i = 0; i < r.local; ++i) {
    RegistrationPipelineResult& p = pre[std::size_t(i)];
    const std::string& name = names[std::size_t(r.first + i)];
    if (fields.empty()) continue;  // neither fields nor warped images asked for
    p.u = embedField(fields[std::size_t(i)]);
    if (!job.outFieldsDir.empty()) {
      fs::create_directories(job.outFieldsDir);
      const fs::path f = fs::path(job.outFieldsDir) / (name + "_field.nii.gz");
      writeDisplacementField(worldDisplacement(p), f);
      r.written.push_back(f.string());
    }
    if (!job.outWarpedDir.empty()) {
      fs::create_directories(job.outWarpedDir);
      const fs::path f = fs::path(job.outWarpedDir) / (name + "_warped.nii.gz");
      writeImage(warpedMoving(p, originals[std::size_t(i)]), f);
      r.written.push_back(f.string());
      if (!job.labels.empty()) {
        const std::string& lp = job.labels[std::size_t(r.first + i)];
        const HostImage labels = readImage(lp);
        if (!labels.geometry.sameGrid(p.movingGrid))
          throw InvalidArgument("atlas: the label map " + lp + " is not on the grid of its image");
        const fs::path lf = fs::path(job.outWarpedDir) / (name + "_labels.nii.gz");
        writeImage(warpedLabels(p, labels), lf);
        r.written.push_back(lf.string());
      }
    }
  }
  // Outside the box: the fixed-point mean of the aligned images (the fields are 0 there).
  std::vector<std::int64_t> outside(std::size_t(G.numVoxels()), 0);
  for (int i = 0; i < r.local; ++i) {
    const float* a = pre[std::size_t(i)].movingResampled.data.data();
    for (std::size_t k = 0; k < outside.size(); ++k) outside[k] += atlasFixed(a[k]);
  }
  if (comm) comm->sum(outside.data(), outside.size());
  if (r.rank == 0) {
    HostImage out("kortex::atlas::template", G);
    out.metadata = reference.metadata;
    for (std::size_t k = 0; k < outside.size(); ++k) out.data.data()[k] = atlasMean(outside[k], n);
    const Index ez = std::min(box.nz(), G.nz() - lo[2]), ey = std::min(box.ny(), G.ny() - lo[1]),
                ex = std::min(box.nx(), G.nx() - lo[0]);
    for (Index z = 0; z < ez; ++z)
      for (Index y = 0; y < ey; ++y)
        for (Index x = 0; x < ex; ++x) out.data(lo[2] + z, lo[1] + y, lo[0] + x) = templ.data(z, y, x);
    writeImage(out, job.outTemplate);
    r.written.push_back(job.outTemplate);
  }
  r.secondsWrite = secondsSince(t0);
  r.secondsTotal = secondsSince(tStart);
  return r;
}

nlohmann::json toJson(AtlasJobResult const& r) {
  nlohmann::json j;
  j["backend"] = toString(r.backend);
  j["execution_space"] = r.executionSpace;
  j["group"] = r.group;
  j["subjects"] = r.subjects;
  j["ranks"] = r.ranks;
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
  j["min_jacobian"] = r.atlas.minJacobian;
  j["mean_displacement_rms"] = r.atlas.meanDisplacementRms;
  j["history"] = historyJson(r.atlas.history);
  j["seconds"] = {{"read", r.secondsRead},       {"prepare", r.secondsPrepare}, {"atlas", r.secondsAtlas},
                  {"atlas_setup", r.atlas.secondsSetup}, {"atlas_compute", r.atlas.secondsCompute},
                  {"atlas_reduce", r.atlas.secondsReduce}, {"write", r.secondsWrite}, {"total", r.secondsTotal}};
  return j;
}

}  // namespace kortex::pipeline
