// The files of a job: what every product job checks about its inputs and outputs before it runs,
// and the helpers that keep a long job's outputs whole.
//   * requireDistinctFiles: no output may overwrite an input, and no two outputs may be one file.
//     Paths are compared after resolving symbolic links and "." / ".." (weakly canonical), and
//     files that already exist also by identity (device and inode: hard links). A NIfTI pair or a
//     MetaImage header writes a second file beside the named one ("x.hdr" + "x.img", "x.mhd" +
//     "x.raw"): that file counts as an output too.
//   * contentHash / fileHash: a 64-bit hash of bytes (FNV-1a over 64-bit words in four independent
//     lanes, then a 64-bit finaliser; the byte length is part of it). Every step is a bijection of
//     the lane state, so any change confined to one word always changes the hash. Not
//     cryptographic: it keys checkpoints to the inputs and detects damaged files.
//   * FolderLock: an exclusive advisory lock (flock) on DIR/lock, which records the holder (pid,
//     host, start time, UTC). A second holder is refused with that record. The lock goes with the
//     process (a kill releases it); the file stays.
//   * removeStaleTemporaries: the hidden ".kortex-tmp-<pid>-..." files and folders that the atomic
//     writers (io/ImageIO.hpp, io/Output.hpp) and StagedOutputs leave when a process is killed
//     mid-write; removed when no process of that pid runs on this host.
//   * StagedOutputs: outputs written into one hidden folder ".kortex-tmp-<pid>-stage-<random>" per
//     target folder, moved into place together by commit(); without commit (an exception) the
//     destructor removes them and any output folder it created that is still empty. commit() is
//     all or none: every target is checked before the first move (a folder in the way refuses the
//     commit), a file the user had is moved aside into the stage folder, not removed, and put back
//     if a later move fails; it is deleted only once every output is in place.
//   * writeAllOrNone: a job's outputs, each written by its own writer into the stage, committed
//     together: a writer that fails (a full disk) leaves every target as it was. It first removes
//     the stale temporaries in the target folders (one process's job: the pid test is this host's).
//   * requireInputFile: the one rule for an input file (it exists and is not a folder).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "core/Backend.hpp"
#include "core/Image.hpp"

namespace kortex::pipeline {

// One image input of a job: a file, or an image in memory (Python's arrays; `path` empty).
struct ImageInput {
  std::filesystem::path path;
  HostImage image;
  bool inMemory() const { return path.empty(); }
};

// A path input: requireInputFile and a readable image extension; in memory: not empty.
// `role` names it ("fixed image"); `job` prefixes the message of an empty image ("registration").
void requireImageInput(ImageInput const& in, std::string const& role, std::string const& job);
// The image (read from its file, or the one in memory).
HostImage readImageInput(ImageInput const& in);
// Its JSON: the path, or {"in_memory": its grid, "content_hash"} (which no reader takes back), or
// null when not given.
nlohmann::json toJson(ImageInput const& in);
// A path from JSON (absent or null: empty); InvalidArgument for anything else, naming `key`.
std::filesystem::path inputPathFromJson(nlohmann::json const* v, std::string const& what, const char* key);

struct JobFile {
  std::string role;  // "template", "subject 3", "report", ...: the message names it
  std::filesystem::path path;
};

// The policies several jobs share, each written once (`job` prefixes the message: "surface").
// A memory cap in MiB must be finite and >= 0 (0: what the device or host reports free).
void requireMemoryCap(double mib, std::string const& job);
// A Kokkos variant chosen with the CPU back end means nothing: refused. `what` names the choice
// ("a variant selects a Kokkos implementation").
void requireKokkosForVariant(bool variantGiven, Backend backend, std::string const& job, std::string const& what);

// Throws IoError ("the <role> '<path>' does not exist" / "... is a folder, not a file");
// InvalidArgument when `path` is empty ("the <role> is not given").
void requireInputFile(std::filesystem::path const& path, std::string const& role);

// Throws InvalidArgument naming both files and their roles.
void requireDistinctFiles(std::vector<JobFile> const& inputs, std::vector<JobFile> const& outputs);

class ContentHasher {
 public:
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  void block(const unsigned char* p);
  std::uint64_t lane_[4] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL, 0x9ce484222325cbf2ULL, 0x2325cbf29ce48422ULL};
  unsigned char tail_[32] = {};
  std::size_t tailBytes_ = 0;
  std::uint64_t total_ = 0;
};

std::uint64_t contentHash(const void* data, std::size_t bytes);
// The hash of a file's bytes; IoError (naming `role` and the file) when it cannot be read.
std::uint64_t fileHash(std::filesystem::path const& path, std::string const& role = "file");
std::string hex64(std::uint64_t h);  // 16 lower-case hex digits

class FolderLock {
 public:
  // Creates `dir` if needed; throws InvalidArgument when another process holds the lock ("the
  // <what> 'dir' is in use by another run (its lock file names pid P on host H since T)"), IoError
  // when the lock file cannot be made.
  explicit FolderLock(std::filesystem::path const& dir, std::string const& what = "folder");
  ~FolderLock();
  FolderLock(FolderLock const&) = delete;
  FolderLock& operator=(FolderLock const&) = delete;

 private:
  int fd_ = -1;
};

// Removes the stale temporaries directly inside `dir`; returns their names.
std::vector<std::string> removeStaleTemporaries(std::filesystem::path const& dir);

class StagedOutputs {
 public:
  StagedOutputs() = default;
  ~StagedOutputs();
  StagedOutputs(StagedOutputs const&) = delete;
  StagedOutputs& operator=(StagedOutputs const&) = delete;
  // The path to write `target` to (the target's folder is created if missing).
  std::filesystem::path stage(std::filesystem::path const& target);
  // Moves every staged file into its target folder (companion files such as a pair's ".img" or a
  // MetaImage's ".raw" before the named ones); throws IoError if a move fails.
  void commit();
  // Removes every staged file and the output folders this object created that are still empty.
  void discard();

 private:
  std::map<std::filesystem::path, std::filesystem::path> stages_;  // target folder -> its staging folder
  std::vector<std::filesystem::path> targets_;                     // the staged paths, in stage() order
  std::vector<std::filesystem::path> createdDirs_;                 // outermost last
  bool done_ = false;
};

// Files written on threads while the caller goes on (forms the next outputs): each write runs on a
// thread of its own, at most `limit` at once (add() first waits for the oldest when that many are
// running); each write holds the data it writes. wait() ends them all and rethrows the first failure
// in the order they were added; the destructor waits too, so no write outlives its stage.
class BackgroundWrites {
 public:
  explicit BackgroundWrites(std::size_t limit);
  ~BackgroundWrites();
  BackgroundWrites(BackgroundWrites const&) = delete;
  BackgroundWrites& operator=(BackgroundWrites const&) = delete;
  void add(std::function<void()> write);
  void wait();

 private:
  void finishOldest();
  std::size_t limit_;
  std::vector<std::future<void>> pending_;
  std::size_t next_ = 0;  // pending_[next_ ...] still running
  std::exception_ptr failure_;
};

// One output of a job: `write` writes the file at the path it is given (the staged copy of `path`).
struct PlannedOutput {
  std::string role;
  std::filesystem::path path;
  std::function<void(std::filesystem::path const&)> write;
};

// Writes every output (those with an empty path are skipped) into the stage, then commits them all
// or none (StagedOutputs). Returns the paths written, in order.
std::vector<std::filesystem::path> writeAllOrNone(std::vector<PlannedOutput> const& outputs);
// The same with a second group known only after the first is written (what is still being formed on
// another thread meanwhile, e.g. a QC report): `rest` is called once, after the first group's writes,
// and its outputs are committed with the first group's, all or none.
std::vector<std::filesystem::path> writeAllOrNone(std::vector<PlannedOutput> const& first,
                                                  std::function<std::vector<PlannedOutput>()> const& rest);

// A cohort list: one image path per line; blank lines and lines starting with '#' skipped; relative
// paths are relative to the list's folder. IoError when it cannot be read, InvalidArgument when it
// names no image.
std::vector<std::string> readImageList(std::string const& path);

}  // namespace kortex::pipeline
