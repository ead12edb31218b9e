#include "pipeline/Atlas.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/ParamsJson.hpp"
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
// state.json holds the cohort key (the parameters and the content hash of every input image, in
// order: a checkpoint belongs to the images' contents, not to their paths), the grid key (the
// clipped box), the hash of every .bin file of the folder, and its own checksum (the hash of its
// text without that field). Resume checks all of them and refuses with the file and the reason.
// DIR/lock (pipeline/JobFiles.hpp) keeps a second run out while one uses the folder.

// 3: the cohort key holds the parameter structs' JSON (pipeline/ParamsJson.hpp), every field.
constexpr const char* kCheckpointFormat = "kortex-atlas-checkpoint-3";

using HostField4 = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

// The parameters and input contents a checkpoint belongs to (known before any image is read).
nlohmann::json cohortKey(AtlasJob const& job, std::vector<std::uint64_t> const& subjectHashes, std::uint64_t referenceHash) {
  nlohmann::json subjects = nlohmann::json::array();
  for (auto h : subjectHashes) subjects.push_back(hex64(h));
  return {{"subjects", subjects},
          {"reference", hex64(referenceHash)},
          {"greedy", toJson(job.params.greedy)},
          {"affine", job.useAffine},
          {"affine_params", toJson(job.affine)},
          {"clip", job.clip},
          {"intensity", toJson(job.intensity)}};
}

nlohmann::json gridKey(Geometry const& atlasGrid, std::array<Index, 3> const& low) {
  return {{"atlas_grid", describe(atlasGrid)}, {"box_low", low}};
}

void writeRaw(std::ofstream& out, ContentHasher& h, const void* p, std::size_t bytes) {
  out.write(static_cast<const char*>(p), std::streamsize(bytes));
  h.update(p, bytes);
}

std::uint64_t writeSubjectFile(fs::path const& path, int frozen, HostField4 const& u, HostField4 const* v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError("atlas checkpoint: cannot write " + path.string());
  ContentHasher h;
  const std::int32_t head[5] = {frozen, v ? 1 : 0, std::int32_t(u.extent(1)), std::int32_t(u.extent(2)), std::int32_t(u.extent(3))};
  writeRaw(out, h, head, sizeof head);
  writeRaw(out, h, u.data(), u.size() * sizeof(float));
  if (v) writeRaw(out, h, v->data(), v->size() * sizeof(float));
  out.close();
  if (!out) throw IoError("atlas checkpoint: writing " + path.string() + " failed (disk full?)");
  return h.digest();
}

std::string damaged(fs::path const& path, std::string const& why) {
  return "atlas checkpoint: " + path.string() + " is damaged (" + why + "); delete the checkpoint folder or resume without it";
}

void readRaw(std::ifstream& in, ContentHasher& h, void* p, std::size_t bytes) {
  in.read(static_cast<char*>(p), std::streamsize(bytes));
  h.update(p, std::size_t(in.gcount()));
}

void readSubjectFile(fs::path const& path, bool wantV, std::string const& expectedHash, AtlasState& st) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("atlas checkpoint: cannot read " + path.string());
  ContentHasher h;
  std::int32_t head[5];
  readRaw(in, h, head, sizeof head);
  if (!in || head[1] != (wantV ? 1 : 0) || head[2] < 1 || head[3] < 1 || head[4] < 1 || head[2] > (1 << 16) ||
      head[3] > (1 << 16) || head[4] > (1 << 16))
    throw IoError(damaged(path, "its header does not describe this solver's fields"));
  HostField4 u("kortex::atlas::resume_u", 3, head[2], head[3], head[4]);
  readRaw(in, h, u.data(), u.size() * sizeof(float));
  HostField4 v;
  if (wantV) {
    v = HostField4("kortex::atlas::resume_v", 3, head[2], head[3], head[4]);
    readRaw(in, h, v.data(), v.size() * sizeof(float));
  }
  if (!in) throw IoError(damaged(path, "truncated"));
  if (in.peek() != std::char_traits<char>::eof()) throw IoError(damaged(path, "longer than its header says"));
  if (hex64(h.digest()) != expectedHash) throw IoError(damaged(path, "its checksum does not match state.json"));
  st.frozen.push_back(head[0]);
  st.u.push_back(u);
  if (wantV) st.v.push_back(v);
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

std::string subjectFileName(int i) { return "subject-" + std::to_string(i) + ".bin"; }

// The checksum of state.json: the hash of its text without the "checksum" field.
std::string stateChecksum(nlohmann::json j) {
  j.erase("checksum");
  const std::string text = j.dump();
  return hex64(contentHash(text.data(), text.size()));
}

void writeCheckpoint(fs::path const& dir, AtlasState const& st, nlohmann::json const& key, nlohmann::json const& grid, int first,
                     int total, AtlasComm* comm) {
  const int rank = comm ? comm->rank() : 0;
  const fs::path next = dir / "next", current = dir / "current", previous = dir / "previous";
  if (rank == 0) {
    fs::remove_all(next);
    fs::create_directories(next);
  }
  if (comm) comm->barrier();
  // Every subject file's hash, gathered on rank 0 (one rank writes each slot, the others add 0).
  std::vector<std::int64_t> hashes(std::size_t(total), 0);
  for (std::size_t i = 0; i < st.u.size(); ++i) {
    const std::uint64_t h = writeSubjectFile(next / subjectFileName(first + int(i)), st.frozen[i], st.u[i], st.v.empty() ? nullptr : &st.v[i]);
    std::memcpy(&hashes[std::size_t(first) + i], &h, sizeof h);
  }
  if (comm) comm->sum(hashes.data(), hashes.size());
  if (rank == 0) {
    nlohmann::json files;
    for (int i = 0; i < total; ++i) {
      std::uint64_t h;
      std::memcpy(&h, &hashes[std::size_t(i)], sizeof h);
      files[subjectFileName(i)] = hex64(h);
    }
    {
      std::ofstream out(next / "template.bin", std::ios::binary | std::ios::trunc);
      ContentHasher h;
      writeRaw(out, h, st.templ.data(), st.templ.size() * sizeof(float));
      out.close();
      if (!out) throw IoError("atlas checkpoint: writing " + (next / "template.bin").string() + " failed");
      files["template.bin"] = hex64(h.digest());
    }
    nlohmann::json j;
    j["format"] = kCheckpointFormat;
    j["cohort"] = key;
    j["grid"] = grid;
    j["files"] = files;
    j["scale"] = st.scale;
    j["iteration"] = st.iteration;
    j["refused"] = st.refused;
    j["seconds"] = st.seconds;
    j["template_extents"] = {st.templ.extent(0), st.templ.extent(1), st.templ.extent(2)};
    j["history"] = historyJson(st.history);
    j["checksum"] = stateChecksum(j);
    writeTextFileAtomic(next / "state.json", j.dump(1));
    fs::remove_all(previous);
    if (fs::exists(current)) fs::rename(current, previous);
    fs::rename(next, current);
  }
  if (comm) comm->barrier();
}

// Which part of the cohort key differs, in words.
std::string keyDifference(nlohmann::json const& saved, nlohmann::json const& key, std::vector<std::string> const& images,
                          std::string const& reference) {
  std::vector<std::string> what;
  auto const& a = saved.value("subjects", nlohmann::json::array());
  auto const& b = key.at("subjects");
  if (a.size() != b.size()) {
    what.push_back("it was made for " + std::to_string(a.size()) + " images, this job has " + std::to_string(b.size()));
  } else {
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (a[i] == b[i]) continue;
      std::string s = "image " + std::to_string(i + 1) + " '" + images[i] + "' does not have the contents it had then";
      for (std::size_t k = 0; k < a.size(); ++k)
        if (a[k] == b[i]) s += " (its contents were image " + std::to_string(k + 1) + "'s: files swapped or renamed?)";
      what.push_back(s);
      if (what.size() == 3) break;
    }
  }
  if (saved.value("reference", nlohmann::json()) != key.at("reference"))
    what.push_back("the reference '" + reference + "' does not have the contents it had then");
  // The parameters that differ, by name ("alpha", "intensity.p_low"; the greedy ones without prefix).
  std::string params;
  for (auto const& [k, v] : key.items()) {
    if (k == "subjects" || k == "reference") continue;
    const nlohmann::json was = saved.value(k, nlohmann::json());
    if (was == v) continue;
    if (!v.is_object() || !was.is_object()) {
      params += (params.empty() ? "" : ", ") + k;
      continue;
    }
    for (auto const& [inner, value] : v.items())
      if (!was.contains(inner) || was.at(inner) != value)
        params += (params.empty() ? "" : ", ") + (k == "greedy" ? inner : k + "." + inner);
  }
  if (!params.empty()) what.push_back("other parameters (" + params + ")");
  std::string out;
  for (auto const& w : what) out += (out.empty() ? "" : "; ") + w;
  return out.empty() ? "another cohort" : out;
}

// The newest complete checkpoint under dir, for this rank's subjects, every file checked against
// state.json. `grid`: the grid key it was made on (checked once the box is known).
AtlasState readCheckpoint(fs::path const& dir, nlohmann::json const& key, int first, int local, bool wantV,
                          std::vector<std::string> const& images, std::string const& reference, nlohmann::json& grid) {
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
      throw IoError(damaged(s, "not valid JSON"));
    }
    if (!j.is_object() || j.value("format", "") != kCheckpointFormat)
      throw InvalidArgument("atlas: the checkpoint " + s.string() + " is not in the format of this Kortex (" + kCheckpointFormat +
                            "): resume it with the version that wrote it, or start afresh in another folder");
    if (!j.contains("checksum") || j.at("checksum") != stateChecksum(j)) throw IoError(damaged(s, "its checksum does not match its contents"));
    const std::size_t iters = j.value("history", nlohmann::json::array()).size();
    if (best.empty() || iters > bestIters) {
      best = dir / tag;
      bestIters = iters;
      bestJson = j;
    }
  }
  if (best.empty())
    throw InvalidArgument("atlas: no complete checkpoint in " + dir.string() + " to resume from");
  if (bestJson.at("cohort") != key)
    throw InvalidArgument("atlas: the checkpoint in " + best.string() + " was made for another cohort or other parameters: " +
                          keyDifference(bestJson.at("cohort"), key, images, reference));
  grid = bestJson.at("grid");
  auto const& files = bestJson.at("files");
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
    const fs::path t = best / "template.bin";
    std::ifstream in(t, std::ios::binary);
    if (!in) throw IoError("atlas checkpoint: cannot read " + t.string());
    ContentHasher h;
    readRaw(in, h, st.templ.data(), st.templ.size() * sizeof(float));
    if (!in) throw IoError(damaged(t, "truncated"));
    if (in.peek() != std::char_traits<char>::eof()) throw IoError(damaged(t, "longer than state.json says"));
    if (hex64(h.digest()) != files.value("template.bin", std::string())) throw IoError(damaged(t, "its checksum does not match state.json"));
  }
  for (int i = 0; i < local; ++i)
    readSubjectFile(best / subjectFileName(first + i), wantV, files.value(subjectFileName(first + i), std::string()), st);
  return st;
}

// ---- the ranks' agreement ------------------------------------------------------------------------------
// Before the first collective whose size depends on the job, every rank contributes the hash of each
// named part of its job; a rank whose parts differ from rank 0's is named with the parts. Sums of
// int64 slots (one rank writes each slot, the others add 0) are an exact all-gather.

void agreeOnJob(AtlasJob const& job, AtlasComm& comm) {
  auto list = [](auto const& v) {
    nlohmann::json a = nlohmann::json::array();
    for (auto const& x : v) a.push_back(x);
    return a.dump();
  };
  std::vector<std::pair<std::string, std::string>> parts = {
      {"number of images", std::to_string(job.images.size())},
      {"images", list(job.images)},
      {"reference", job.reference},
      {"label maps", list(job.labels)},
  };
  // Every greedy parameter by its name ("max step"), then the rest of the job.
  const nlohmann::json greedy = toJson(job.params.greedy);
  for (auto const& [k, v] : greedy.items()) {
    std::string name = k;
    std::replace(name.begin(), name.end(), '_', ' ');
    parts.emplace_back(name, v.dump());
  }
  const std::vector<std::pair<std::string, std::string>> rest = {
      {"affine alignment", job.useAffine ? "on" : "off"},
      {"affine parameters", toJson(job.affine).dump()},
      {"clipping", job.clip ? "on" : "off"},
      {"intensity window", toJson(job.intensity).dump()},
      {"back end", toString(job.backend)},
      {"template output", job.outTemplate},
      {"fields folder", job.outFieldsDir},
      {"warped folder", job.outWarpedDir},
      {"report", job.outReport},
      {"checkpoint folder", job.checkpointDir},
      {"checkpoint interval", std::to_string(job.checkpointEvery)},
      {"resume", job.resume ? "yes" : "no"},
  };
  parts.insert(parts.end(), rest.begin(), rest.end());
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
  // ---- every rank runs the same job (before any collective whose size depends on it)
  if (comm) agreeOnJob(job, *comm);
  {
    std::set<std::string> seen;
    for (auto const& p : job.images)
      if (!seen.insert(fs::weakly_canonical(p).string()).second)
        throw InvalidArgument("atlas: " + p + " is in the cohort twice");
  }
  requireSupportedExtension(job.outTemplate, Access::Write);
  for (auto const& p : job.images) requireSupportedExtension(p, Access::Read);
  if (!job.reference.empty()) requireSupportedExtension(job.reference, Access::Read);
  for (auto const& p : job.labels) requireSupportedExtension(p, Access::Read);
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
  auto fieldPath = [&](int i) { return fs::path(job.outFieldsDir) / (names[std::size_t(i)] + "_field.nii.gz"); };
  auto warpedPath = [&](int i) { return fs::path(job.outWarpedDir) / (names[std::size_t(i)] + "_warped.nii.gz"); };
  auto labelsPath = [&](int i) { return fs::path(job.outWarpedDir) / (names[std::size_t(i)] + "_labels.nii.gz"); };
  // ---- no output may land on an input or on another output
  {
    std::vector<JobFile> inputs, outputs;
    for (auto const& p : job.images) inputs.push_back({"image", p});
    if (!job.reference.empty()) inputs.push_back({"reference", job.reference});
    for (auto const& p : job.labels) inputs.push_back({"label map", p});
    for (auto const& p : job.otherInputs) inputs.push_back({"input", p});
    outputs.push_back({"template", job.outTemplate});
    if (!job.outReport.empty()) outputs.push_back({"report", job.outReport});
    for (int i = 0; i < n; ++i) {
      if (!job.outFieldsDir.empty()) outputs.push_back({"field", fieldPath(i)});
      if (!job.outWarpedDir.empty()) outputs.push_back({"warped image", warpedPath(i)});
      if (!job.labels.empty()) outputs.push_back({"warped label map", labelsPath(i)});
    }
    try {
      requireDistinctFiles(inputs, outputs);
    } catch (InvalidArgument const& e) {
      throw InvalidArgument(std::string("atlas: ") + e.what());
    }
  }
  const auto block = atlasBlock(n, r.ranks, r.rank);
  r.first = block[0];
  r.local = block[1];
  // ---- every output location, before the work (the files themselves are written at the end, all or none)
  if (r.rank == 0) {
    requireWritableFile(job.outTemplate, "template", false);
    if (!job.outReport.empty()) requireWritableFile(job.outReport, "report", false);
  }
  if (!job.outFieldsDir.empty()) requireWritableFile(fieldPath(r.first), "field", true);
  if (!job.outWarpedDir.empty()) requireWritableFile(warpedPath(r.first), "warped image", true);
  // Temporaries left by killed runs in this job's folders (rank 0: its pid test is of this host).
  if (r.rank == 0) {
    auto folderOf = [](std::string const& file) { return fs::path(file).has_parent_path() ? fs::path(file).parent_path() : fs::path("."); };
    std::vector<fs::path> folders{folderOf(job.outTemplate)};
    if (!job.outReport.empty()) folders.push_back(folderOf(job.outReport));
    for (auto const& d : {job.outFieldsDir, job.outWarpedDir, job.checkpointDir})
      if (!d.empty()) folders.push_back(d);
    for (auto const& d : folders) removeStaleTemporaries(d);
  }
  // The checkpoint folder: one run at a time (rank 0 holds the lock for the group).
  std::unique_ptr<FolderLock> lock;
  if (r.rank == 0 && !job.checkpointDir.empty()) {
    try {
      lock = std::make_unique<FolderLock>(job.checkpointDir, "checkpoint folder");
    } catch (InvalidArgument const& e) {
      throw InvalidArgument(std::string("atlas: ") + e.what());
    }
    removeStaleTemporaries(fs::path(job.checkpointDir));
  }

  // ---- the inputs' contents: every image's bytes hashed once (its owner rank; the reference by every rank)
  auto t0 = Clock::now();
  const std::string refPath = job.reference.empty() ? job.images.front() : job.reference;
  std::vector<std::uint64_t> subjectHashes(std::size_t(n), 0);
  std::uint64_t referenceHash = 0;
  {
    const std::size_t K = std::size_t(r.ranks);
    std::vector<std::int64_t> slots(std::size_t(n) + K, 0);
    for (int i = 0; i < n; ++i) {
      if (comm && (i < r.first || i >= r.first + r.local)) continue;
      const std::uint64_t h = fileHash(job.images[std::size_t(i)], "image");
      std::memcpy(&slots[std::size_t(i)], &h, sizeof h);
    }
    {
      const std::uint64_t h = job.reference.empty() ? 0 : fileHash(job.reference, "reference");
      std::memcpy(&slots[std::size_t(n) + std::size_t(r.rank)], &h, sizeof h);
    }
    if (comm) comm->sum(slots.data(), slots.size());
    for (int i = 0; i < n; ++i) std::memcpy(&subjectHashes[std::size_t(i)], &slots[std::size_t(i)], sizeof(std::uint64_t));
    std::memcpy(&referenceHash, &slots[std::size_t(n)], sizeof referenceHash);
    for (std::size_t k = 1; k < K; ++k)
      if (slots[std::size_t(n) + k] != slots[std::size_t(n)])
        throw InvalidArgument("atlas: rank " + std::to_string(k) + " reads other contents for the reference '" + job.reference +
                              "' than rank 0 (the file differs between the ranks' machines)");
    if (job.reference.empty()) referenceHash = subjectHashes.front();
  }
  const nlohmann::json key = cohortKey(job, subjectHashes, referenceHash);
  // ---- resume: the checkpoint is checked (key, checksums) and loaded before any image is aligned
  AtlasState resumeState;
  nlohmann::json resumeGrid;
  if (job.resume && r.backend != Backend::Cpu)
    resumeState = readCheckpoint(job.checkpointDir, key, r.first, r.local, atlasKeepsVelocity(job.params.greedy.solver), job.images,
                                 refPath, resumeGrid);

  // ---- read (the label maps too: readable and on their images' grids before any work)
  const HostImage reference = readImage(refPath);
  if (reference.geometry.dimension != 3) throw InvalidArgument("atlas: the reference " + refPath + " is not a 3D image");
  r.referenceGrid = reference.geometry;
  std::vector<HostImage> originals, labelMaps;
  for (int i = 0; i < r.local; ++i) {
    const std::string& p = job.images[std::size_t(r.first + i)];
    originals.push_back(readImage(p));
    if (originals.back().geometry.dimension != 3) throw InvalidArgument("atlas: " + p + " is not a 3D image");
    if (!job.labels.empty()) {
      const std::string& lp = job.labels[std::size_t(r.first + i)];
      labelMaps.push_back(readImage(lp));
      if (!labelMaps.back().geometry.sameGrid(originals.back().geometry))
        throw InvalidArgument("atlas: the label map " + lp + " (" + describe(labelMaps.back().geometry) +
                              ") is not on the grid of its image " + p + " (" + describe(originals.back().geometry) + ")");
    }
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
    for (std::size_t a = 0; a < 3; ++a) {
      const Index extent = G.size[a];
      Index l = std::max<Index>(0, lo[a] - kAtlasGuardVoxels), h = std::min<Index>(extent - 1, hi[a] + kAtlasGuardVoxels);
      const Index size = greedyExtentFor(h - l + 1, job.params.greedy);
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
  const nlohmann::json grid = gridKey(box, lo);
  if (job.resume && resumeGrid != grid)
    throw InvalidArgument("atlas: the checkpoint in " + job.checkpointDir + " was made on another atlas grid (" + resumeGrid.dump() +
                          ") than this job's (" + grid.dump() + ")");
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
    if (!job.checkpointDir.empty()) {
      run.checkpointEvery = job.checkpointEvery;
      run.checkpoint = [&](AtlasState const& st) { writeCheckpoint(job.checkpointDir, st, key, grid, r.first, n, comm); };
      if (job.resume) run.resume = &resumeState;
    }
    Exec exec;
    r.executionSpace = Exec::name();
    r.atlas = gpu::buildAtlas(exec, cropped, job.params, templ, fields, run);
    if (comm) r.group = comm->describe();  // now with the reduction path the first sum chose
  }
  r.secondsAtlas = secondsSince(t0);

  // ---- outputs: every file is staged beside its target; they are moved into place only when every
  // rank has written all of its files (a failure anywhere leaves none of them).
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
  // Outside the box: the fixed-point mean of the aligned images (the fields are 0 there). A
  // collective: before any write, so that a rank failing to write never leaves the others waiting here.
  std::vector<std::int64_t> outside(std::size_t(G.numVoxels()), 0);
  for (int i = 0; i < r.local; ++i) {
    const float* a = pre[std::size_t(i)].movingResampled.data.data();
    for (std::size_t k = 0; k < outside.size(); ++k) outside[k] += atlasFixed(a[k]);
  }
  if (comm) comm->sum(outside.data(), outside.size());
  StagedOutputs staged;
  std::vector<std::string> written;
  std::exception_ptr failure;
  try {
    for (int i = 0; i < r.local; ++i) {
      RegistrationPipelineResult& p = pre[std::size_t(i)];
      if (fields.empty()) continue;  // neither fields nor warped images asked for
      p.u = embedField(fields[std::size_t(i)]);
      if (!job.outFieldsDir.empty()) {
        writeDisplacementField(worldDisplacement(p), staged.stage(fieldPath(r.first + i)));
        written.push_back(fieldPath(r.first + i).string());
      }
      if (!job.outWarpedDir.empty()) {
        writeImage(warpedMoving(p, originals[std::size_t(i)]), staged.stage(warpedPath(r.first + i)));
        written.push_back(warpedPath(r.first + i).string());
        if (!job.labels.empty()) {
          writeImage(warpedLabels(p, labelMaps[std::size_t(i)]), staged.stage(labelsPath(r.first + i)));
          written.push_back(labelsPath(r.first + i).string());
        }
      }
    }
    if (r.rank == 0) {
      HostImage out("kortex::atlas::template", G);
      out.metadata = reference.metadata;
      for (std::size_t k = 0; k < outside.size(); ++k) out.data.data()[k] = atlasMean(outside[k], n);
      const Index ez = std::min(box.nz(), G.nz() - lo[2]), ey = std::min(box.ny(), G.ny() - lo[1]),
                  ex = std::min(box.nx(), G.nx() - lo[0]);
      for (Index z = 0; z < ez; ++z)
        for (Index y = 0; y < ey; ++y)
          for (Index x = 0; x < ex; ++x) out.data(lo[2] + z, lo[1] + y, lo[0] + x) = templ.data(z, y, x);
      writeImage(out, staged.stage(job.outTemplate));
      written.push_back(job.outTemplate);
      if (!job.outReport.empty()) {
        r.secondsWrite = secondsSince(t0);
        r.secondsTotal = secondsSince(tStart);
        writeTextFileAtomic(staged.stage(job.outReport), toJson(r).dump(2) + "\n");
        written.push_back(job.outReport);
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Every rank's outcome: a failing rank reports its own error (and, under MPI, ends the job); the
  // others drop their staged files and wait for that end.
  int failedRank = failure ? r.rank : -1;
  if (comm) {
    std::vector<std::int64_t> failed(std::size_t(r.ranks), 0);
    failed[std::size_t(r.rank)] = failure ? 1 : 0;
    comm->sum(failed.data(), failed.size());
    for (int k = r.ranks - 1; k >= 0; --k)
      if (failed[std::size_t(k)]) failedRank = k;
  }
  if (failure) std::rethrow_exception(failure);
  if (failedRank >= 0) {
    staged.discard();
    comm->barrier();  // the failing rank never arrives: its abort ends this rank
    throw IoError("atlas: rank " + std::to_string(failedRank) + " could not write its outputs; none were written");
  }
  staged.commit();
  r.secondsWrite = secondsSince(t0);
  r.secondsTotal = secondsSince(tStart);
  r.written = written;
  return r;
}

std::vector<std::string> readImageList(std::string const& path) {
  std::ifstream in(path);
  if (!in) throw IoError("the image list '" + path + "' cannot be read");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    fs::path p = line.substr(b, e - b + 1);
    if (p.is_relative()) p = fs::path(path).parent_path() / p;
    out.push_back(p.string());
  }
  if (out.empty()) throw InvalidArgument("the image list '" + path + "' names no image");
  return out;
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
