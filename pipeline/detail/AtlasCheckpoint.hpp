// Atlas checkpoints (internal to pipeline/: the atlas job's). The files:
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
// DIR/lock (pipeline/JobFiles.hpp) keeps a second run out while one uses the folder. Any rank count
// can resume any checkpoint (the files are per subject).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/Atlas.hpp"
#include "pipeline/Atlas.hpp"

namespace kortex::pipeline::detail {

// The parameters and input contents a checkpoint belongs to (known before any image is read).
nlohmann::json cohortKey(AtlasJob const& job, std::vector<std::uint64_t> const& subjectHashes, std::uint64_t referenceHash);
// The clipped atlas grid a checkpoint belongs to.
nlohmann::json gridKey(Geometry const& atlasGrid, std::array<Index, 3> const& low);

// The per-iteration history as the checkpoint and the job's report write it.
nlohmann::json historyJson(std::vector<AtlasIteration> const& h);

// Writes the state of this rank's subjects [first, first + st.u.size()) of `total` (a collective
// over comm when given).
void writeCheckpoint(std::filesystem::path const& dir, gpu::AtlasState const& st, nlohmann::json const& key,
                     nlohmann::json const& grid, int first, int total, gpu::Communicator* comm);
// The newest complete checkpoint's state of subjects [first, first + local): refused (IoError /
// InvalidArgument naming the file and the reason) unless it belongs to `key`; `grid` receives its
// grid key (checked by the caller once the grid is known). A damaged folder (state.json or a data
// file) is passed over for the next newest whole one (previous/), with a note for the user in
// `notes`; IoError (the first damage) when none is whole.
gpu::AtlasState readCheckpoint(std::filesystem::path const& dir, nlohmann::json const& key, int first, int local, bool wantV,
                          std::vector<std::string> const& images, std::string const& reference, nlohmann::json& grid,
                          std::vector<std::string>& notes);

}  // namespace kortex::pipeline::detail
