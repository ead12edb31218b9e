#include "pipeline/JobFiles.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <utility>

#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"

namespace kortex::pipeline {
namespace fs = std::filesystem;

namespace {

bool endsWith(std::string const& s, std::string const& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The second file a writer puts beside `p` (a NIfTI pair's other half, a MetaImage's data file).
std::vector<fs::path> companions(fs::path const& p) {
  const std::string s = p.string();
  static const std::pair<const char*, const char*> pairs[] = {
      {".hdr.gz", ".img.gz"}, {".img.gz", ".hdr.gz"}, {".hdr", ".img"}, {".img", ".hdr"}, {".mhd", ".raw"}};
  for (auto const& [from, to] : pairs)
    if (endsWith(s, from)) return {fs::path(s.substr(0, s.size() - std::strlen(from)) + to)};
  return {};
}

std::string keyOf(fs::path const& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  fs::path c = fs::weakly_canonical(abs, ec);
  return (ec ? abs.lexically_normal() : c).string();
}

struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

Identity identityOf(fs::path const& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino};
}

std::uint64_t load64(const unsigned char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

std::uint64_t fmix64(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr const char* kTmpPrefix = io::kTemporaryPrefix;

std::string hostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

void requireDistinctFiles(std::vector<JobFile> const& inputs, std::vector<JobFile> const& outputs) {
  struct Entry {
    JobFile const* file;
    fs::path path;
    std::string key;
    Identity id;
  };
  auto entry = [](JobFile const& f, fs::path const& p) { return Entry{&f, p, keyOf(p), identityOf(p)}; };
  std::map<std::string, Entry> inByKey;
  std::map<std::pair<dev_t, ino_t>, Entry> inById;
  for (auto const& f : inputs) {
    if (f.path.empty()) continue;
    Entry e = entry(f, f.path);
    inByKey.emplace(e.key, e);
    if (e.id.exists) inById.emplace(std::make_pair(e.id.dev, e.id.ino), e);
  }
  std::map<std::string, Entry> outByKey;
  std::map<std::pair<dev_t, ino_t>, Entry> outById;
  auto name = [](Entry const& e) {
    std::string s = "the " + e.file->role + " '" + e.path.string() + "'";
    if (e.path != e.file->path) s += " (written with '" + e.file->path.string() + "')";
    return s;
  };
  for (auto const& f : outputs) {
    if (f.path.empty()) continue;
    std::vector<fs::path> paths{f.path};
    for (auto const& c : companions(f.path)) paths.push_back(c);
    for (auto const& p : paths) {
      Entry e = entry(f, p);
      const Entry* in = nullptr;
      if (auto it = inByKey.find(e.key); it != inByKey.end()) in = &it->second;
      if (!in && e.id.exists)
        if (auto it = inById.find({e.id.dev, e.id.ino}); it != inById.end()) in = &it->second;
      if (in) throw InvalidArgument(name(e) + " would overwrite the input " + in->file->role + " '" + in->path.string() + "'");
      const Entry* other = nullptr;
      if (auto it = outByKey.find(e.key); it != outByKey.end()) other = &it->second;
      if (!other && e.id.exists)
        if (auto it = outById.find({e.id.dev, e.id.ino}); it != outById.end()) other = &it->second;
      if (other) throw InvalidArgument("two outputs are the same file: " + name(*other) + " and " + name(e));
      outByKey.emplace(e.key, e);
      if (e.id.exists) outById.emplace(std::make_pair(e.id.dev, e.id.ino), e);
    }
  }
}

void ContentHasher::block(const unsigned char* p) {
  for (int k = 0; k < 4; ++k) lane_[k] = (lane_[k] ^ load64(p + 8 * k)) * kFnvPrime;
}

void ContentHasher::update(const void* data, std::size_t bytes) {
  auto const* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (tailBytes_ > 0) {
    const std::size_t take = std::min(bytes, sizeof tail_ - tailBytes_);
    std::memcpy(tail_ + tailBytes_, p, take);
    tailBytes_ += take;
    p += take;
    bytes -= take;
    if (tailBytes_ < sizeof tail_) return;
    block(tail_);
    tailBytes_ = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32) block(p);
  std::memcpy(tail_, p, bytes);
  tailBytes_ = bytes;
}

std::uint64_t ContentHasher::digest() const {
  ContentHasher c = *this;
  if (c.tailBytes_ > 0) {
    std::memset(c.tail_ + c.tailBytes_, 0, sizeof c.tail_ - c.tailBytes_);
    c.block(c.tail_);
  }
  std::uint64_t h = fmix64(total_ ^ 0x9e3779b97f4a7c15ULL);
  for (int k = 0; k < 4; ++k) h = fmix64(h ^ c.lane_[k]) * kFnvPrime;
  return fmix64(h);
}

std::uint64_t contentHash(const void* data, std::size_t bytes) {
  ContentHasher h;
  h.update(data, bytes);
  return h.digest();
}

std::uint64_t fileHash(fs::path const& path, std::string const& role) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read the " + role + " '" + path.string() + "': " + std::strerror(errno));
  ContentHasher h;
  std::vector<char> buf(std::size_t(1) << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    h.update(buf.data(), std::size_t(in.gcount()));
  }
  if (in.bad()) throw IoError("reading the " + role + " '" + path.string() + "' failed");
  return h.digest();
}

std::string hex64(std::uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

FolderLock::FolderLock(fs::path const& dir, std::string const& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw IoError("cannot create the folder '" + dir.string() + "'" + (ec ? ": " + ec.message() : ""));
  const fs::path file = dir / "lock";
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create the lock file '" + file.string() + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    {
      std::ifstream in(file);
      std::getline(in, holder);
    }
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw InvalidArgument("the " + what + " '" + dir.string() + "' is in use by another run (" +
                            (holder.empty() ? std::string("its lock file names no holder yet") : "its lock file names " + holder) +
                            "); wait for it to end or use another folder");
    throw IoError("cannot lock '" + file.string() + "': " + std::strerror(err));
  }
  char when[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string record = "pid " + std::to_string(::getpid()) + " on host " + hostName() + " since " + when + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, record.data(), record.size(), 0) != ssize_t(record.size())) {
    ::close(fd_);
    fd_ = -1;
    throw IoError("cannot write the lock file '" + file.string() + "': " + std::strerror(errno));
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::vector<std::string> removeStaleTemporaries(fs::path const& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  const std::string prefix = kTmpPrefix;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    std::size_t k = prefix.size();
    long long pid = 0;
    while (k < n.size() && n[k] >= '0' && n[k] <= '9' && pid < (1LL << 40)) pid = pid * 10 + (n[k++] - '0');
    if (k == prefix.size() || k >= n.size() || n[k] != '-' || pid <= 0) continue;
    if (pid == ::getpid()) continue;
    if (pid <= 0x7fffffffLL && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)) continue;  // alive (or not ours to judge)
    std::error_code rec;
    fs::remove_all(it->path(), rec);
    if (!rec) removed.push_back(n);
  }
  return removed;
}

StagedOutputs::~StagedOutputs() {
  if (!done_) discard();
}

fs::path StagedOutputs::stage(fs::path const& target) {
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const fs::path key = fs::path(keyOf(dir));
  auto it = stages_.find(key);
  if (it == stages_.end()) {
    std::error_code ec;
    std::vector<fs::path> missing;
    for (fs::path d = fs::absolute(dir, ec); !d.empty() && !fs::exists(d, ec) && d != d.parent_path(); d = d.parent_path())
      missing.push_back(d);  // innermost first
    fs::create_directories(dir, ec);
    if (ec) throw IoError("cannot create the folder '" + dir.string() + "': " + ec.message());
    createdDirs_.insert(createdDirs_.begin(), missing.begin(), missing.end());
    fs::path s;
    for (int attempt = 0;; ++attempt) {
      s = io::temporaryName(dir, "stage");
      if (fs::create_directory(s, ec)) break;
      if (attempt >= 8 || ec != std::errc::file_exists)
        throw IoError("cannot create a temporary folder in '" + dir.string() + "'" + (ec ? ": " + ec.message() : ""));
    }
    it = stages_.emplace(key, s).first;
  }
  targets_.push_back(it->second / target.filename());
  return targets_.back();
}

void StagedOutputs::commit() {
  // The moves, companion files (a pair's ".img", a MetaImage's ".raw") before the named ones.
  struct Move {
    fs::path from, to, aside;  // aside: where the user's file waits (empty: there was none)
    bool setAside = false, placed = false;
  };
  std::vector<Move> moves;
  const std::set<fs::path> named(targets_.begin(), targets_.end());
  for (bool namedPass : {false, true}) {
    for (auto const& [dir, stage] : stages_) {
      std::error_code ec;
      std::vector<fs::path> files;
      for (fs::directory_iterator it(stage, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file() && it->path().filename().string().rfind(kTmpPrefix, 0) != 0) files.push_back(it->path());
      for (auto const& f : files)
        if ((named.count(f) != 0) == namedPass) moves.push_back({f, fs::path(dir) / f.filename(), {}});
    }
  }
  // Every target checked before the first move.
  for (auto& m : moves) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(m.to, ec);
    if (fs::is_directory(st))
      throw IoError("cannot write '" + m.to.string() + "': a folder of that name is in the way (nothing was written)");
    if (fs::exists(st)) m.aside = m.from.parent_path() / (std::string(kTmpPrefix) + "old-" + m.to.filename().string());
  }
  auto undo = [&] {  // in reverse: the new file back into the stage, the user's file back in place
    for (auto it = moves.rbegin(); it != moves.rend(); ++it) {
      std::error_code ec;
      if (it->placed) fs::rename(it->to, it->from, ec);
      if (it->setAside) fs::rename(it->aside, it->to, ec);
    }
  };
  for (auto& m : moves) {
    std::error_code ec;
    if (!m.aside.empty()) {
      fs::rename(m.to, m.aside, ec);
      if (ec) {
        undo();
        throw IoError("cannot replace '" + m.to.string() + "': " + ec.message() + " (nothing was written)");
      }
      m.setAside = true;
    }
    fs::rename(m.from, m.to, ec);
    if (ec) {
      undo();
      throw IoError("cannot move the finished file '" + m.to.string() + "' into place: " + ec.message() +
                    " (nothing was written; the files there before are kept)");
    }
    m.placed = true;
  }
  for (auto const& [dir, stage] : stages_) {
    std::error_code ec;
    fs::remove_all(stage, ec);
  }
  done_ = true;
}

void StagedOutputs::discard() {
  for (auto const& [dir, stage] : stages_) {
    std::error_code ec;
    fs::remove_all(stage, ec);
  }
  for (auto const& d : createdDirs_) {  // innermost first
    std::error_code ec;
    fs::remove(d, ec);                   // only when empty
  }
  stages_.clear();
  createdDirs_.clear();
  done_ = true;
}

void requireMemoryCap(double mib, std::string const& job) {
  if (!(mib >= 0.0) || !std::isfinite(mib))
    throw InvalidArgument(job + ": the memory cap must be a finite number of MiB >= 0, got " + std::to_string(mib));
}

void requireKokkosForVariant(bool variantGiven, Backend backend, std::string const& job, std::string const& what) {
  if (variantGiven && resolve(backend) == Backend::Cpu)
    throw InvalidArgument(job + ": " + what + "; it has no meaning with the CPU backend");
}

void requireInputFile(fs::path const& path, std::string const& role) {
  if (path.empty()) throw InvalidArgument("the " + role + " is not given");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw IoError("the " + role + " '" + path.string() + "' is a folder, not a file");
  if (!fs::exists(path, ec)) throw IoError("the " + role + " '" + path.string() + "' does not exist");
}

namespace {

// Removes the temporaries killed runs left in the outputs' folders (each folder once; this process's
// own temporaries are never touched, so a later group may sweep after an earlier one is staged).
void sweepFolders(std::vector<PlannedOutput> const& outputs, std::set<std::string>& swept) {
  for (auto const& o : outputs) {
    if (o.path.empty()) continue;
    const fs::path dir = o.path.has_parent_path() ? o.path.parent_path() : fs::path(".");
    if (swept.insert(keyOf(dir)).second) removeStaleTemporaries(dir);
  }
}

// Each output is staged in order (its temporary path chosen, its folder made), then the writers run
// concurrently, a thread each (BackgroundWrites): they write distinct files from data already formed
// (a NIfTI file is compressed outside the I/O lock).
void writeStaged(std::vector<PlannedOutput> const& outputs, StagedOutputs& staged, std::vector<fs::path>& written) {
  std::vector<std::pair<PlannedOutput const*, fs::path>> jobs;
  for (auto const& o : outputs) {
    if (o.path.empty()) continue;
    jobs.emplace_back(&o, staged.stage(o.path));
    written.push_back(o.path);
  }
  if (jobs.size() == 1) return jobs.front().first->write(jobs.front().second);
  BackgroundWrites writes(jobs.size());
  for (auto const& j : jobs) writes.add([&j] { j.first->write(j.second); });
  writes.wait();
}

}  // namespace

BackgroundWrites::BackgroundWrites(std::size_t limit) : limit_(std::max<std::size_t>(1, limit)) {}

BackgroundWrites::~BackgroundWrites() {
  for (std::size_t k = next_; k < pending_.size(); ++k) pending_[k].wait();
}

void BackgroundWrites::finishOldest() {
  try {
    pending_[next_].get();
  } catch (...) {
    if (!failure_) failure_ = std::current_exception();
  }
  ++next_;
}

void BackgroundWrites::add(std::function<void()> write) {
  if (pending_.size() - next_ >= limit_) finishOldest();
  pending_.push_back(std::async(std::launch::async, std::move(write)));
}

void BackgroundWrites::wait() {
  while (next_ < pending_.size()) finishOldest();
  if (failure_) std::rethrow_exception(failure_);
}

std::vector<fs::path> writeAllOrNone(std::vector<PlannedOutput> const& first,
                                     std::function<std::vector<PlannedOutput>()> const& rest) {
  std::set<std::string> swept;
  sweepFolders(first, swept);
  StagedOutputs staged;
  std::vector<fs::path> written;
  writeStaged(first, staged, written);
  const std::vector<PlannedOutput> second = rest();
  sweepFolders(second, swept);
  writeStaged(second, staged, written);
  staged.commit();
  return written;
}

std::vector<fs::path> writeAllOrNone(std::vector<PlannedOutput> const& outputs) {
  return writeAllOrNone(outputs, [] { return std::vector<PlannedOutput>{}; });
}

void requireImageInput(ImageInput const& in, std::string const& role, std::string const& job) {
  if (!in.inMemory()) {
    requireInputFile(in.path, role);
    io::requireSupportedExtension(in.path, io::Access::Read);
  } else if (in.image.data.data() == nullptr || in.image.numVoxels() == 0) {
    throw InvalidArgument(job + ": the " + role + " is not given");
  }
}

HostImage readImageInput(ImageInput const& in) { return in.inMemory() ? in.image : io::readImage(in.path); }

nlohmann::json toJson(ImageInput const& in) {
  if (!in.inMemory()) return in.path.string();
  if (in.image.data.data() == nullptr) return nullptr;  // not given yet
  return {{"in_memory", describe(in.image.geometry)},
          {"content_hash", hex64(contentHash(in.image.data.data(), std::size_t(in.image.numVoxels()) * sizeof(float)))}};
}

fs::path inputPathFromJson(nlohmann::json const* v, std::string const& what, const char* key) {
  if (v == nullptr || v->is_null()) return {};
  if (v->is_string()) return v->get<std::string>();
  throw InvalidArgument(what + ": '" + key + "' must be a file path" +
                        (v->is_object() ? " (an image in memory cannot be read back from a description)" : ""));
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

}  // namespace kortex::pipeline
