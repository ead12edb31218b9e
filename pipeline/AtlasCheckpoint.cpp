// Atlas checkpoints (pipeline/detail/AtlasCheckpoint.hpp): the files, their keys and checksums.
#include "pipeline/detail/AtlasCheckpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/ParamsJson.hpp"

namespace kortex::pipeline::detail {
namespace fs = std::filesystem;
using io::writeTextFileAtomic;

namespace {

constexpr const char* kCheckpointFormat = "kortex-atlas-checkpoint-4";

using HostField4 = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

}  // namespace

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

namespace {

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

void readSubjectFile(fs::path const& path, bool wantV, std::string const& expectedHash, gpu::AtlasState& st) {
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

}  // namespace

nlohmann::json historyJson(std::vector<AtlasIteration> const& h) {
  nlohmann::json a = nlohmann::json::array();
  for (auto const& it : h)
    a.push_back({{"scale", it.scale}, {"factor", it.factor}, {"iteration", it.iteration},
                 {"template_change", it.templateChange}, {"mismatch", it.mismatch}, {"refused", it.refused},
                 {"frozen", it.frozen}, {"min_jacobian", it.minJacobian}, {"seconds", it.seconds}});
  return a;
}

namespace {

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

}  // namespace

void writeCheckpoint(fs::path const& dir, gpu::AtlasState const& st, nlohmann::json const& key, nlohmann::json const& grid, int first,
                     int total, gpu::Communicator* comm) {
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

namespace {

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
}  // namespace

namespace {

// The state saved in one checkpoint folder (its state.json read and checked already); IoError when a
// data file is damaged.
gpu::AtlasState loadState(fs::path const& folder, nlohmann::json const& saved, int first, int local, bool wantV) {
  auto const& files = saved.at("files");
  gpu::AtlasState st;
  st.scale = saved.at("scale");
  st.iteration = saved.at("iteration");
  st.refused = saved.at("refused");
  st.seconds = saved.at("seconds");
  st.history = historyFrom(saved.at("history"));
  auto ext = saved.at("template_extents");
  st.templ = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>("kortex::atlas::resume_template", ext[0].get<std::size_t>(),
                                                                            ext[1].get<std::size_t>(), ext[2].get<std::size_t>());
  {
    const fs::path t = folder / "template.bin";
    std::ifstream in(t, std::ios::binary);
    if (!in) throw IoError("atlas checkpoint: cannot read " + t.string());
    ContentHasher h;
    readRaw(in, h, st.templ.data(), st.templ.size() * sizeof(float));
    if (!in) throw IoError(damaged(t, "truncated"));
    if (in.peek() != std::char_traits<char>::eof()) throw IoError(damaged(t, "longer than state.json says"));
    if (hex64(h.digest()) != files.value("template.bin", std::string())) throw IoError(damaged(t, "its checksum does not match state.json"));
  }
  for (int i = 0; i < local; ++i)
    readSubjectFile(folder / subjectFileName(first + i), wantV, files.value(subjectFileName(first + i), std::string()), st);
  return st;
}

}  // namespace

gpu::AtlasState readCheckpoint(fs::path const& dir, nlohmann::json const& key, int first, int local, bool wantV,
                          std::vector<std::string> const& images, std::string const& reference, nlohmann::json& grid,
                          std::vector<std::string>& notes) {
  // The folders whose state.json is whole, newest (most iterations) first; one whose state.json is
  // damaged is passed over with a note. (Every rank reads every state.json, so all ranks choose the
  // same folder; a damaged data file, which only its subject's rank reads, stays an error.)
  struct Candidate {
    fs::path folder;
    std::size_t iterations;
    nlohmann::json saved;
  };
  std::vector<Candidate> candidates;
  std::vector<std::string> damage;
  for (const char* tag : {"current", "next", "previous"}) {
    const fs::path s = dir / tag / "state.json";
    if (!fs::exists(s)) continue;
    std::ifstream in(s);
    nlohmann::json j;
    try {
      in >> j;
    } catch (std::exception const&) {
      damage.push_back(damaged(s, "not valid JSON"));
      continue;
    }
    if (!j.is_object() || j.value("format", "") != kCheckpointFormat)
      throw InvalidArgument("atlas: the checkpoint " + s.string() + " is not in the format of this Kortex (" + kCheckpointFormat +
                            "): resume it with the version that wrote it, or start afresh in another folder");
    if (!j.contains("checksum") || j.at("checksum") != stateChecksum(j)) {
      damage.push_back(damaged(s, "its checksum does not match its contents"));
      continue;
    }
    candidates.push_back({dir / tag, j.value("history", nlohmann::json::array()).size(), j});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](Candidate const& a, Candidate const& b) { return a.iterations > b.iterations; });
  if (candidates.empty()) {
    if (!damage.empty()) throw IoError(damage.front());
    throw InvalidArgument("atlas: no complete checkpoint in " + dir.string() + " to resume from");
  }
  Candidate const& c = candidates.front();
  if (c.saved.at("cohort") != key)
    throw InvalidArgument("atlas: the checkpoint in " + c.folder.string() + " was made for another cohort or other parameters: " +
                          keyDifference(c.saved.at("cohort"), key, images, reference));
  gpu::AtlasState st = loadState(c.folder, c.saved, first, local, wantV);
  grid = c.saved.at("grid");
  for (auto const& d : damage)
    notes.push_back(d.substr(0, d.find("; delete")) + "; resumed from " + c.folder.string() + " (after iteration " +
                    std::to_string(c.iterations) + ") instead");
  return st;
}


}  // namespace kortex::pipeline::detail
