// Per-device tuning database (core/Tuning.hpp): JSON I/O with strict validation, the compiled-in
// defaults and the process-wide cached lookup.
#include "core/Tuning.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include <kortex/TuningDefaults.hpp>

#include "core/Backend.hpp"
#include "core/Errors.hpp"

namespace kortex::tuning {

namespace fs = std::filesystem;

namespace {

// A reason why a database is unusable, without the "tuning database '<origin>'" prefix (the
// lookup's warning words it differently). Never contains the word "error": the lookup prints it
// in a warning, and the CLI's error lines must carry that word exactly once.
struct Invalid : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* kSchemaName = "kortex-tuning";
constexpr int kMinSizeClass = 256;
constexpr int kMaxSizeClass = 8192;

std::string jsonType(nlohmann::json const& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

bool validSizeClass(std::string const& s) {
  if (s.size() < 4 || (s[0] != '2' && s[0] != '3') || s[1] != 'd' || s[2] != '-') return false;
  const std::string n = s.substr(3);
  if (n.empty() || n.size() > 4 || n[0] == '0') return false;
  for (char c : n)
    if (c < '0' || c > '9') return false;
  const int v = std::stoi(n);
  return v >= kMinSizeClass && v <= kMaxSizeClass && (v & (v - 1)) == 0;
}

Entry parseEntry(nlohmann::json const& j, std::size_t index) {
  const std::string where = "entries[" + std::to_string(index) + "]";
  if (!j.is_object()) throw Invalid(where + " is " + jsonType(j) + ", expected an object");
  static const std::set<std::string> known = {"kernel",     "device",  "size_class", "config",
                                              "median_ms",  "worst_ms", "candidates", "kokkos",
                                              "git",        "date"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) throw Invalid(where + " has an unknown field '" + it.key() + "'");
  auto field = [&](const char* name) -> nlohmann::json const& {
    auto it = j.find(name);
    if (it == j.end()) throw Invalid(where + " has no '" + std::string(name) + "'");
    return *it;
  };
  auto text = [&](const char* name, bool required) -> std::string {
    if (!required && !j.contains(name)) return {};
    auto const& v = field(name);
    if (!v.is_string()) throw Invalid(where + ": '" + name + "' is " + jsonType(v) + ", expected a string");
    std::string s = v.get<std::string>();
    if (required && s.empty()) throw Invalid(where + ": '" + name + "' is empty");
    return s;
  };
  Entry e;
  e.kernel = text("kernel", true);
  e.device = text("device", true);
  e.sizeClass = text("size_class", true);
  const std::string what = where + " (" + e.kernel + " on " + e.device + ", " + e.sizeClass + ")";
  if (!validSizeClass(e.sizeClass))
    throw Invalid(what + ": size class '" + e.sizeClass +
                  "' is not <2|3>d-<power of two in [256, 8192]>");
  auto const& cfg = field("config");
  if (!cfg.is_object()) throw Invalid(what + ": 'config' is " + jsonType(cfg) + ", expected an object");
  if (cfg.empty()) throw Invalid(what + ": 'config' is empty");
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    if (it.key().empty()) throw Invalid(what + ": 'config' has an empty key");
    auto const& v = it.value();
    const bool positiveInt = (v.is_number_unsigned() && v.get<std::uint64_t>() <= INT_MAX &&
                              v.get<std::uint64_t>() > 0) ||
                             (v.is_number_integer() && !v.is_number_unsigned() &&
                              v.get<std::int64_t>() > 0 && v.get<std::int64_t>() <= INT_MAX);
    if (!positiveInt)
      throw Invalid(what + ": config value '" + it.key() + "' must be a positive integer, got " +
                    v.dump());
    e.config[it.key()] = static_cast<int>(v.get<std::int64_t>());
  }
  auto time = [&](const char* name) {
    auto const& v = field(name);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0)
      throw Invalid(what + ": '" + name + "' must be a positive number of milliseconds, got " +
                    v.dump());
    return v.get<double>();
  };
  e.medianMs = time("median_ms");
  e.worstMs = time("worst_ms");
  if (e.worstMs < e.medianMs)
    throw Invalid(what + ": 'worst_ms' (" + field("worst_ms").dump() + ") is below 'median_ms' (" +
                  field("median_ms").dump() + ")");
  auto const& n = field("candidates");
  if (!n.is_number_integer() || n.get<std::int64_t>() < 1 || n.get<std::int64_t>() > INT_MAX)
    throw Invalid(what + ": 'candidates' must be a positive integer, got " + n.dump());
  e.candidates = static_cast<int>(n.get<std::int64_t>());
  e.kokkos = text("kokkos", false);
  e.git = text("git", false);
  e.date = text("date", false);
  return e;
}

// Throws Invalid.
Database parseOrThrow(std::string const& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (nlohmann::json::parse_error const& e) {
    throw Invalid("not valid JSON (at byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object()) throw Invalid("the top level is " + jsonType(j) + ", expected an object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "schema" && it.key() != "schema_version" && it.key() != "entries")
      throw Invalid("unknown top-level field '" + it.key() + "'");
  if (!j.contains("schema") || !j["schema"].is_string() || j["schema"] != kSchemaName)
    throw Invalid(std::string("'schema' must be \"") + kSchemaName + "\"" +
                  (j.contains("schema") ? ", got " + j["schema"].dump() : ", it is missing"));
  if (!j.contains("schema_version")) throw Invalid("'schema_version' is missing");
  auto const& v = j["schema_version"];
  if (!v.is_number_integer() || v.get<std::int64_t>() != kTuningSchemaVersion)
    throw Invalid("schema version " + v.dump() + " is not supported (this kortex reads version " +
                  std::to_string(kTuningSchemaVersion) + ")");
  if (!j.contains("entries")) throw Invalid("'entries' is missing");
  auto const& list = j["entries"];
  if (!list.is_array()) throw Invalid("'entries' is " + jsonType(list) + ", expected an array");
  Database db;
  for (std::size_t i = 0; i < list.size(); ++i) {
    Entry e = parseEntry(list[i], i);
    if (db.find(e.kernel, e.device, e.sizeClass))
      throw Invalid("entries[" + std::to_string(i) + "] repeats " + e.kernel + " on " + e.device +
                    ", " + e.sizeClass);
    db.put(e);
  }
  return db;
}

// Reads a file into `out`; false if it does not exist. Throws Invalid if unreadable.
bool readFile(std::string const& path, std::string& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw Invalid("cannot read it: " + ec.message());
    return false;
  }
  if (fs::is_directory(st)) throw Invalid("it is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Invalid(std::string("cannot read it: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Invalid("cannot read it");
  out = ss.str();
  return true;
}

IoError ioError(std::string const& origin, Invalid const& e) {
  return IoError("tuning database '" + origin + "': " + e.what());
}

// ---- process-wide cache ----------------------------------------------------------------------

struct Cache {
  std::mutex mutex;
  bool loaded = false;
  Database user;
  std::set<std::tuple<std::string, std::string, std::string>> noticed;
  std::set<std::string> warned;
};

Cache& cache() {
  static Cache c;
  return c;
}

bool quiet() {
  const char* q = std::getenv("KORTEX_TUNING_QUIET");
  return q && *q && std::string(q) != "0";
}

// One line, written with one call so that concurrent writers do not interleave inside it.
void printLine(std::string const& line) { std::cerr << (line + "\n") << std::flush; }

// Caller holds the mutex.
void warnLocked(Cache& c, std::string const& message) {
  if (c.warned.insert(message).second) printLine("kortex: warning: " + message);
}

// Caller holds the mutex.
void loadUserLocked(Cache& c) {
  if (c.loaded) return;
  c.loaded = true;
  c.user = Database{};
  const std::string path = userDatabasePath();
  if (path.empty()) return;
  try {
    std::string text;
    if (!readFile(path, text)) return;  // a missing user database is the normal case
    c.user = parseOrThrow(text);
  } catch (Invalid const& e) {
    warnLocked(c, "tuning database '" + path + "' ignored: " + e.what());
  } catch (std::exception const& e) {  // e.g. std::bad_alloc; never let a lookup throw
    warnLocked(c, "tuning database '" + path + "' ignored: " + e.what());
  }
}

}  // namespace

// ---- size classes and devices ------------------------------------------------------------------

std::string sizeClass(Index nx, Index ny, Index nz) {
  if (nx < 1 || ny < 1 || nz < 1)
    throw InvalidArgument("tuning size class: extents must be positive, got " +
                          std::to_string(nx) + "x" + std::to_string(ny) + "x" + std::to_string(nz));
  const Index largest = std::max(nx, std::max(ny, nz));
  Index n = kMinSizeClass;
  while (n < largest && n < kMaxSizeClass) n *= 2;
  return std::string(nz > 1 ? "3d-" : "2d-") + std::to_string(n);
}

std::string currentDevice() {
  static const std::string name = deviceName();
  return name;
}

std::string hostDevice() {
  static const std::string name = cpuModel();
  return name;
}

std::string toString(Config const& c) {
  std::string s;
  for (auto const& [k, v] : c) s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s;
}

// ---- Database -----------------------------------------------------------------------------------

Database Database::parse(std::string const& text, std::string const& origin) {
  try {
    return parseOrThrow(text);
  } catch (Invalid const& e) {
    throw ioError(origin, e);
  }
}

std::optional<Database> Database::load(std::string const& path) {
  try {
    std::string text;
    if (!readFile(path, text)) return std::nullopt;
    return parseOrThrow(text);
  } catch (Invalid const& e) {
    throw ioError(path, e);
  }
}

std::string Database::dump() const {
  // Entries sorted by key, fields in schema order: stable diffs of committed databases.
  std::vector<Entry const*> sorted;
  for (auto const& e : entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](Entry const* a, Entry const* b) {
    return std::tie(a->kernel, a->device, a->sizeClass) < std::tie(b->kernel, b->device, b->sizeClass);
  });
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (Entry const* e : sorted) {
    nlohmann::ordered_json j;
    j["kernel"] = e->kernel;
    j["device"] = e->device;
    j["size_class"] = e->sizeClass;
    nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
    for (auto const& [k, v] : e->config) cfg[k] = v;
    j["config"] = cfg;
    j["median_ms"] = e->medianMs;
    j["worst_ms"] = e->worstMs;
    j["candidates"] = e->candidates;
    j["kokkos"] = e->kokkos;
    j["git"] = e->git;
    j["date"] = e->date;
    list.push_back(std::move(j));
  }
  nlohmann::ordered_json root;
  root["schema"] = kSchemaName;
  root["schema_version"] = kTuningSchemaVersion;
  root["entries"] = std::move(list);
  return root.dump(2) + "\n";
}

void Database::put(Entry const& e) {
  for (auto& x : entries_)
    if (x.kernel == e.kernel && x.device == e.device && x.sizeClass == e.sizeClass) {
      x = e;
      return;
    }
  entries_.push_back(e);
}

const Entry* Database::find(std::string const& kernel, std::string const& device,
                            std::string const& sizeClass) const {
  for (auto const& x : entries_)
    if (x.kernel == kernel && x.device == device && x.sizeClass == sizeClass) return &x;
  return nullptr;
}

// ---- user database, shipped defaults, lookup ----------------------------------------------------

std::string userDatabasePath() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (std::string p = env("KORTEX_TUNING_DB"); !p.empty()) return p;
  // XDG Base Directory: a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/')
    return (fs::path(x) / "kortex" / "tuning.json").string();
  if (std::string h = env("HOME"); !h.empty())
    return (fs::path(h) / ".cache" / "kortex" / "tuning.json").string();
  return {};
}

Database const& shippedDefaults() {
  // Parsed once; a malformed file fails the configure step (CMakeLists.txt) and tstTuning.
  static const Database db = Database::parse(kShippedTuningDefaultsJson, kShippedTuningDefaultsOrigin);
  return db;
}

Config lookupOn(std::string const& device, std::string const& kernel, std::string const& sizeClass,
                Config const& fallback, std::string* source) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  loadUserLocked(c);
  if (const Entry* e = c.user.find(kernel, device, sizeClass)) {
    if (source) *source = "user";
    return e->config;
  }
  try {
    if (const Entry* e = shippedDefaults().find(kernel, device, sizeClass)) {
      if (source) *source = "shipped";
      return e->config;
    }
  } catch (std::exception const& e) {
    warnLocked(c, std::string("shipped tuning defaults ignored: ") + e.what());
  }
  if (source) *source = "default";
  if (c.noticed.emplace(kernel, device, sizeClass).second && !quiet())
    printLine("kortex: notice: no tuning entry for " + kernel + " on " + device + " (" +
              sizeClass + "); using the default " + toString(fallback));
  return fallback;
}

Config lookup(std::string const& kernel, std::string const& sizeClass, Config const& fallback,
              std::string* source) {
  return lookupOn(currentDevice(), kernel, sizeClass, fallback, source);
}

Config lookup(std::string const& kernel, std::string const& sizeClass, Config const& fallback) {
  return lookupOn(currentDevice(), kernel, sizeClass, fallback, nullptr);
}

void warnOnce(std::string const& message) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  warnLocked(c, message);
}

void resetCache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.loaded = false;
  c.user = Database{};
  c.noticed.clear();
  c.warned.clear();
}

}  // namespace kortex::tuning
