// Tuning database (core/Tuning.hpp): size classes, JSON round trip and strict validation, atomic
// saves, the user database path, and the run-time lookup (user file, corrupt file, notices).
#define BOOST_TEST_MODULE Tuning
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "core/Tuning.hpp"
#include "io/Output.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

using namespace kortex;
using namespace kortex::tuning;
namespace fs = std::filesystem;

namespace {

// Saves and restores the environment the lookup reads, and gives each test a fresh folder and a
// fresh lookup cache.
struct TuningEnv {
  std::map<std::string, std::optional<std::string>> saved;
  fs::path dir;
  TuningEnv() {
    for (const char* k : {"KORTEX_TUNING_DB", "KORTEX_TUNING_QUIET", "XDG_CACHE_HOME", "HOME"}) {
      const char* v = std::getenv(k);
      saved[k] = v ? std::optional<std::string>(v) : std::nullopt;
    }
    unsetenv("KORTEX_TUNING_QUIET");
    dir = fs::temp_directory_path() /
          ("kortex-tstTuning-" + std::to_string(getpid()) + "-" +
           boost::unit_test::framework::current_test_case().p_name.get());
    fs::remove_all(dir);
    fs::create_directories(dir);
    // Never the developer's own database.
    setenv("KORTEX_TUNING_DB", (dir / "absent.json").c_str(), 1);
    resetCache();
  }
  ~TuningEnv() {
    for (auto const& [k, v] : saved) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
    resetCache();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Captures std::cerr (where the lookup's notices and warnings go) while alive.
struct CaptureStderr {
  std::ostringstream text;
  std::streambuf* old;
  CaptureStderr() : old(std::cerr.rdbuf(text.rdbuf())) {}
  ~CaptureStderr() { std::cerr.rdbuf(old); }
  std::string str() const { return text.str(); }
};

int countLines(std::string const& s, std::string const& needle) {
  int n = 0;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

void writeFile(fs::path const& p, std::string const& text) {
  std::ofstream(p, std::ios::binary) << text;
}

Entry makeEntry(std::string kernel, std::string device, std::string sc, Config cfg,
                double median = 0.125, double worst = 0.5) {
  Entry e;
  e.kernel = std::move(kernel);
  e.device = std::move(device);
  e.sizeClass = std::move(sc);
  e.config = std::move(cfg);
  e.medianMs = median;
  e.worstMs = worst;
  e.candidates = 50;
  e.kokkos = "4.6.99 Cuda";
  e.git = "abc123";
  e.date = "2026-11-22";
  return e;
}

// One valid entry as JSON text, with `field` replaced by `value` (raw JSON) or removed
// (value == "").
std::string entryJson(std::string const& field = "", std::string const& value = "") {
  std::map<std::string, std::string> f = {
      {"kernel", "\"ct.nlm.boxsum\""},   {"device", "\"NVIDIA H200\""},
      {"size_class", "\"2d-1024\""},     {"config", "{\"x\": 32, \"y\": 16, \"batch\": 6}"},
      {"median_ms", "0.63"},             {"worst_ms", "1.9"},
      {"candidates", "39"},              {"kokkos", "\"4.6.99 Cuda\""},
      {"git", "\"abc\""},                {"date", "\"2026-11-22\""}};
  if (!field.empty()) {
    if (value.empty())
      f.erase(field);
    else
      f[field] = value;
  }
  std::string s = "{";
  for (auto const& [k, v] : f) s += (s.size() > 1 ? ", " : "") + ("\"" + k + "\": " + v);
  return s + "}";
}

std::string databaseJson(std::string const& entries, std::string const& schema = "\"kortex-tuning\"",
                         std::string const& version = "1") {
  return "{\"schema\": " + schema + ", \"schema_version\": " + version + ", \"entries\": [" +
         entries + "]}";
}

// parse() must throw IoError naming the origin and the reason, without the word "error" (the
// same text appears in the lookup's warning).
void expectRejected(std::string const& text, std::string const& reason) {
  try {
    Database::parse(text, "test.json");
    BOOST_ERROR("accepted: " << text);
  } catch (IoError const& e) {
    const std::string msg = e.what();
    BOOST_TEST_INFO("message: " << msg);
    BOOST_TEST(msg.find("test.json") != std::string::npos);
    BOOST_TEST(msg.find(reason) != std::string::npos);
    std::string lower = msg;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    BOOST_TEST(lower.find("error") == std::string::npos);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(size_classes) {
  BOOST_TEST(sizeClass(1000, 1000) == "2d-1024");
  BOOST_TEST(sizeClass(64, 64, 64) == "3d-256");
  BOOST_TEST(sizeClass(1024, 1024) == "2d-1024");
  BOOST_TEST(sizeClass(1025, 3) == "2d-2048");
  BOOST_TEST(sizeClass(1, 1) == "2d-256");
  BOOST_TEST(sizeClass(256, 257) == "2d-512");
  BOOST_TEST(sizeClass(300, 20, 2) == "3d-512");
  BOOST_TEST(sizeClass(8192, 100) == "2d-8192");
  BOOST_TEST(sizeClass(100000, 100) == "2d-8192");
  BOOST_CHECK_THROW(sizeClass(0, 10), InvalidArgument);
}

BOOST_AUTO_TEST_CASE(dump_parse_round_trip) {
  Database db;
  db.put(makeEntry("ct.bilateral.scratch", "NVIDIA H200", "2d-1024", {{"x", 32}, {"y", 16}, {"per_thread", 4}}, 0.1734, 0.52));
  db.put(makeEntry("ct.nlm.boxsum", "NVIDIA H100 80GB HBM3", "2d-512", {{"x", 16}, {"y", 32}, {"batch", 6}}, 0.1 / 3.0, 1.0 / 7.0));
  const std::string text = db.dump();
  const Database back = Database::parse(text, "round-trip");
  BOOST_TEST_REQUIRE(back.entries().size() == 2u);
  for (auto const& e : db.entries()) {
    const Entry* b = back.find(e.kernel, e.device, e.sizeClass);
    BOOST_TEST_REQUIRE(b != nullptr);
    BOOST_TEST((b->config == e.config));
    BOOST_TEST(b->medianMs == e.medianMs);  // shortest round-trip representation: exact
    BOOST_TEST(b->worstMs == e.worstMs);
    BOOST_TEST(b->candidates == e.candidates);
    BOOST_TEST(b->kokkos == e.kokkos);
    BOOST_TEST(b->git == e.git);
    BOOST_TEST(b->date == e.date);
  }
  BOOST_TEST(back.dump() == text);  // stable: sorted entries, fixed field order
  BOOST_TEST(text.find("\"schema_version\": 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(put_replaces_and_find) {
  Database db;
  db.put(makeEntry("k", "dev A", "2d-1024", {{"x", 32}}));
  db.put(makeEntry("k", "dev B", "2d-1024", {{"x", 64}}));
  db.put(makeEntry("k", "dev A", "2d-2048", {{"x", 128}}));
  BOOST_TEST(db.entries().size() == 3u);
  db.put(makeEntry("k", "dev A", "2d-1024", {{"x", 16}}, 0.2, 0.3));
  BOOST_TEST(db.entries().size() == 3u);
  const Entry* e = db.find("k", "dev A", "2d-1024");
  BOOST_TEST_REQUIRE(e != nullptr);
  BOOST_TEST(e->config.at("x") == 16);
  BOOST_TEST(e->medianMs == 0.2);
  BOOST_TEST(db.find("k", "dev B", "2d-1024")->config.at("x") == 64);
  BOOST_TEST(db.find("k", "dev C", "2d-1024") == nullptr);
  BOOST_TEST(db.find("other", "dev A", "2d-1024") == nullptr);
  BOOST_TEST(db.find("k", "dev A", "2d-512") == nullptr);
}

BOOST_AUTO_TEST_CASE(parse_accepts_the_documented_schema) {
  const Database db = Database::parse(databaseJson(entryJson()), "ok.json");
  BOOST_TEST_REQUIRE(db.entries().size() == 1u);
  BOOST_TEST(db.entries()[0].config.at("batch") == 6);
  // kokkos / git / date are optional.
  const std::string minimal = databaseJson(entryJson("kokkos", ""));
  BOOST_TEST(Database::parse(minimal, "minimal.json").entries()[0].kokkos.empty());
  BOOST_TEST(Database::parse(databaseJson(""), "empty.json").entries().empty());
  BOOST_CHECK_NO_THROW(shippedDefaults());  // the compiled-in core/tuning_defaults.json
}

BOOST_AUTO_TEST_CASE(parse_rejects_malformed_databases) {
  expectRejected("{\"schema\": \"kortex-tuning\", ", "not valid JSON");
  expectRejected("", "not valid JSON");
  expectRejected("[1, 2]", "top level");
  expectRejected(databaseJson(entryJson(), "\"something-else\""), "'schema'");
  expectRejected("{\"schema_version\": 1, \"entries\": []}", "'schema'");
  expectRejected(databaseJson(entryJson(), "\"kortex-tuning\"", "2"), "schema version 2");
  expectRejected(databaseJson(entryJson(), "\"kortex-tuning\"", "\"1\""), "schema version");
  expectRejected("{\"schema\": \"kortex-tuning\", \"schema_version\": 1}", "'entries'");
  expectRejected(databaseJson("") + " trailing", "not valid JSON");
  for (const char* f : {"kernel", "device", "size_class", "config", "median_ms", "worst_ms", "candidates"})
    expectRejected(databaseJson(entryJson(f, "")), std::string("no '") + f + "'");
  expectRejected(databaseJson(entryJson("config", "{\"x\": 0, \"y\": 16}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{\"x\": -32}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{\"x\": 32.5}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{\"x\": \"32\"}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{\"x\": true}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{\"x\": 4294967296}")), "positive integer");
  expectRejected(databaseJson(entryJson("config", "{}")), "'config' is empty");
  expectRejected(databaseJson(entryJson("config", "[32, 16]")), "'config'");
  expectRejected(databaseJson(entryJson("median_ms", "0")), "median_ms");
  expectRejected(databaseJson(entryJson("median_ms", "\"fast\"")), "median_ms");
  expectRejected(databaseJson(entryJson("worst_ms", "0.1")), "below");
  expectRejected(databaseJson(entryJson("candidates", "0")), "candidates");
  expectRejected(databaseJson(entryJson("kernel", "\"\"")), "'kernel' is empty");
  expectRejected(databaseJson(entryJson("device", "7")), "'device'");
  expectRejected(databaseJson(entryJson("size_class", "\"2d-1000\"")), "size class");
  expectRejected(databaseJson(entryJson("size_class", "\"4d-1024\"")), "size class");
  expectRejected(databaseJson(entryJson("size_class", "\"2d-128\"")), "size class");
  expectRejected(databaseJson(entryJson("median", "1.0")), "unknown field 'median'");
  expectRejected(databaseJson(entryJson() + ", " + entryJson()), "repeats");
  expectRejected(databaseJson("3"), "entries[0]");
  expectRejected(databaseJson("") + "x", "not valid JSON");
}

BOOST_AUTO_TEST_CASE(load_and_save) {
  TuningEnv env;
  BOOST_TEST(!Database::load((env.dir / "missing.json").string()).has_value());
  BOOST_CHECK_THROW(Database::load(env.dir.string()), IoError);  // a directory
  writeFile(env.dir / "corrupt.json", "{\"schema\": ");
  BOOST_CHECK_THROW(Database::load((env.dir / "corrupt.json").string()), IoError);

  Database db;
  db.put(makeEntry("ct.nlm.boxsum", "dev", "2d-256", {{"x", 8}, {"y", 4}, {"batch", 2}}));
  const fs::path target = env.dir / "a" / "b" / "tuning.json";  // parents do not exist yet
  io::saveTuningDatabase(db, target);
  BOOST_TEST(fs::is_regular_file(target));
  for (auto const& f : fs::directory_iterator(target.parent_path()))
    BOOST_TEST(f.path().filename() == "tuning.json");  // no temporary file left behind
  const auto back = Database::load(target.string());
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST(back->dump() == db.dump());

  // Overwrite: replaced as a whole.
  db.put(makeEntry("ct.nlm.boxsum", "dev", "2d-512", {{"x", 16}, {"y", 8}, {"batch", 4}}));
  io::saveTuningDatabase(db, target);
  BOOST_TEST(Database::load(target.string())->entries().size() == 2u);

  // A parent that is a file: IoError, nothing written.
  writeFile(env.dir / "plain", "x");
  BOOST_CHECK_THROW(io::saveTuningDatabase(db, env.dir / "plain" / "tuning.json"), IoError);
  BOOST_CHECK_THROW(io::saveTuningDatabase(db, ""), IoError);
}

BOOST_AUTO_TEST_CASE(user_database_path) {
  TuningEnv env;
  setenv("KORTEX_TUNING_DB", "/somewhere/t.json", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  BOOST_TEST(userDatabasePath() == "/somewhere/t.json");
  unsetenv("KORTEX_TUNING_DB");
  BOOST_TEST(userDatabasePath() == "/xdg/kortex/tuning.json");
  setenv("XDG_CACHE_HOME", "relative/cache", 1);  // invalid per the XDG spec: ignored
  BOOST_TEST(userDatabasePath() == "/home/u/.cache/kortex/tuning.json");
  unsetenv("XDG_CACHE_HOME");
  BOOST_TEST(userDatabasePath() == "/home/u/.cache/kortex/tuning.json");
  unsetenv("HOME");
  BOOST_TEST(userDatabasePath().empty());
}

BOOST_AUTO_TEST_CASE(devices) {
  BOOST_TEST(!currentDevice().empty());
  BOOST_TEST(!hostDevice().empty());
  BOOST_TEST(deviceFor<Kokkos::DefaultHostExecutionSpace>() == hostDevice());
  BOOST_TEST(deviceFor<Kokkos::DefaultExecutionSpace>() == currentDevice());
}

BOOST_AUTO_TEST_CASE(lookup_uses_the_user_database) {
  TuningEnv env;
  const fs::path file = env.dir / "user.json";
  Database db;
  db.put(makeEntry("test.kernel", currentDevice(), "2d-1024", {{"x", 64}, {"y", 2}}));
  db.put(makeEntry("test.kernel", "Some Other GPU", "2d-2048", {{"x", 8}, {"y", 8}}));
  io::saveTuningDatabase(db, file);
  setenv("KORTEX_TUNING_DB", file.c_str(), 1);
  resetCache();
  const Config fallback{{"x", 32}, {"y", 16}};
  CaptureStderr err;
  std::string source;
  const Config c = lookup("test.kernel", sizeClass(1000, 1000), fallback, &source);
  BOOST_TEST(source == "user");
  BOOST_TEST(c.at("x") == 64);
  BOOST_TEST(c.at("y") == 2);
  BOOST_TEST(err.str().empty());  // a hit is silent
  // Another device's entry is not this device's.
  const Config other = lookupOn(currentDevice(), "test.kernel", "2d-2048", fallback, &source);
  BOOST_TEST(source == "default");
  BOOST_TEST((other == fallback));
  BOOST_TEST(lookupOn("Some Other GPU", "test.kernel", "2d-2048", fallback).at("x") == 8);
}

BOOST_AUTO_TEST_CASE(lookup_miss_notices_once) {
  TuningEnv env;
  const Config fallback{{"x", 32}, {"y", 16}};
  CaptureStderr err;
  std::string source;
  for (int i = 0; i < 3; ++i) {
    const Config c = lookup("test.kernel", "2d-512", fallback, &source);
    BOOST_TEST(source == "default");
    BOOST_TEST((c == fallback));
  }
  lookup("test.kernel", "2d-1024", fallback);
  const std::string text = err.str();
  BOOST_TEST_INFO("stderr: " << text);
  BOOST_TEST(countLines(text, "kortex: notice: no tuning entry for test.kernel on " + currentDevice() +
                                  " (2d-512); using the default x=32,y=16") == 1);
  BOOST_TEST(countLines(text, "(2d-1024)") == 1);
  BOOST_TEST(countLines(text, "kortex:") == 2);
  BOOST_TEST(countLines(text, "error") == 0);

  // KORTEX_TUNING_QUIET silences notices.
  resetCache();
  setenv("KORTEX_TUNING_QUIET", "1", 1);
  CaptureStderr quiet;
  lookup("test.kernel", "2d-512", fallback);
  BOOST_TEST(quiet.str().empty());
}

BOOST_AUTO_TEST_CASE(lookup_with_a_corrupt_user_database_warns_and_falls_back) {
  TuningEnv env;
  const fs::path file = env.dir / "corrupt.json";
  writeFile(file, "{\"schema\": \"kortex-tuning\", \"schema_version\": 1, \"entries\": [ {");
  setenv("KORTEX_TUNING_DB", file.c_str(), 1);
  setenv("KORTEX_TUNING_QUIET", "1", 1);  // silences the notice, not the warning
  resetCache();
  const Config fallback{{"x", 32}, {"y", 16}};
  CaptureStderr err;
  std::string source;
  Config c;
  BOOST_CHECK_NO_THROW(c = lookup("test.kernel", "2d-1024", fallback, &source));
  BOOST_TEST((c == fallback));
  BOOST_TEST(source == "default");
  BOOST_CHECK_NO_THROW(lookup("test.kernel", "2d-2048", fallback));
  const std::string text = err.str();
  BOOST_TEST_INFO("stderr: " << text);
  BOOST_TEST(countLines(text, "kortex: warning: tuning database '" + file.string() + "' ignored: ") == 1);
  BOOST_TEST(countLines(text, "kortex:") == 1);
  BOOST_TEST(countLines(text, "error") == 0);

  // Valid JSON with a bad entry, and a directory in its place: the same.
  for (int k = 0; k < 2; ++k) {
    resetCache();
    if (k == 0) {
      writeFile(file, databaseJson(entryJson("config", "{\"x\": -1}")));
    } else {
      fs::remove(file);
      fs::create_directory(file);
    }
    CaptureStderr again;
    BOOST_CHECK_NO_THROW(c = lookup("test.kernel", "2d-1024", fallback, &source));
    BOOST_TEST((c == fallback));
    BOOST_TEST(countLines(again.str(), "kortex: warning: tuning database") == 1);
  }

  // A missing user database is silent.
  resetCache();
  setenv("KORTEX_TUNING_DB", (env.dir / "nothing-here.json").c_str(), 1);
  CaptureStderr none;
  lookup("test.kernel", "2d-1024", fallback);
  BOOST_TEST(none.str().empty());
}

BOOST_AUTO_TEST_CASE(warn_once_and_config_text) {
  TuningEnv env;
  CaptureStderr err;
  warnOnce("tile 7x3 ignored");
  warnOnce("tile 7x3 ignored");
  warnOnce("something else");
  BOOST_TEST(countLines(err.str(), "kortex: warning: tile 7x3 ignored") == 1);
  BOOST_TEST(countLines(err.str(), "kortex: warning:") == 2);
  BOOST_TEST(toString(Config{{"y", 4}, {"x", 32}}) == "x=32,y=4");
  BOOST_TEST(toString(Config{}).empty());
}
