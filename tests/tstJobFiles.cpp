// pipeline/JobFiles.hpp: what a job checks about its files before it runs (no output over an input
// or over another output, by path and by identity), the content hash that keys checkpoints and
// detects damaged files, the folder lock, the removal of temporaries left by killed runs, and
// outputs staged and committed all or none.
#define BOOST_TEST_MODULE JobFiles
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "pipeline/JobFiles.hpp"

using namespace kortex;
using pipeline::JobFile;
namespace fs = std::filesystem;

namespace {

void touch(fs::path const& p, std::string const& text = "x") {
  std::ofstream(p) << text;
}

std::string slurp(fs::path const& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> listing(fs::path const& dir) {
  std::set<std::string> out;
  for (auto const& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A pid no process can have (above the kernel's pid_max, whose ceiling is 2^22).
constexpr long long kDeadPid = 2147480000LL;

}  // namespace

BOOST_AUTO_TEST_CASE(outputs_never_land_on_inputs_or_on_each_other) {
  test::TempDir dir("kortex-jobfiles");
  touch(dir / "a.nii");
  touch(dir / "b.nii");
  fs::create_directories(dir / "sub");
  const std::vector<JobFile> inputs{{"image", dir / "a.nii"}, {"image", dir / "b.nii"}};
  // The same path, spelled differently.
  test::expectThrowWith<InvalidArgument>(
      [&] { pipeline::requireDistinctFiles(inputs, {{"template", dir.path / "sub" / ".." / "b.nii"}}); },
      {"template", "would overwrite the input image", "b.nii"});
  // Through a symbolic link to the folder.
  fs::create_directory_symlink(dir.path, dir / "link");
  test::expectThrowWith<InvalidArgument>([&] { pipeline::requireDistinctFiles(inputs, {{"report", dir / "link" / "a.nii"}}); },
                                         {"report", "would overwrite the input image"});
  // A hard link: another name, the same file.
  fs::create_hard_link(dir / "a.nii", dir / "hard.nii");
  test::expectThrowWith<InvalidArgument>([&] { pipeline::requireDistinctFiles(inputs, {{"template", dir / "hard.nii"}}); },
                                         {"template", "hard.nii", "would overwrite the input image", "a.nii"});
  // Two outputs on one file (one of them not there yet).
  test::expectThrowWith<InvalidArgument>(
      [&] {
        pipeline::requireDistinctFiles(inputs, {{"template", dir / "t.nii"}, {"field", dir.path / "sub" / ".." / "t.nii"}});
      },
      {"two outputs are the same file", "template", "field"});
  // A NIfTI pair writes its other half too.
  touch(dir / "p.img");
  test::expectThrowWith<InvalidArgument>(
      [&] { pipeline::requireDistinctFiles({{"label map", dir / "p.img"}}, {{"template", dir / "p.hdr"}}); },
      {"p.img", "written with", "p.hdr", "would overwrite the input label map"});
  // Distinct files pass; empty paths (outputs not asked for) are ignored.
  BOOST_CHECK_NO_THROW(pipeline::requireDistinctFiles(inputs, {{"template", dir / "t.nii"}, {"field", ""}, {"report", dir / "r.json"}}));
}

BOOST_AUTO_TEST_CASE(content_hash_sees_every_change) {
  std::mt19937 rng(26);
  std::vector<unsigned char> bytes(1000);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  const std::uint64_t h = pipeline::contentHash(bytes.data(), bytes.size());
  // Streamed in uneven pieces: the same hash.
  pipeline::ContentHasher s;
  for (std::size_t off = 0, step = 1; off < bytes.size(); off += step, step = step % 37 + 3)
    s.update(bytes.data() + off, std::min(step, bytes.size() - off));
  BOOST_TEST(s.digest() == h);
  // Every single-bit flip changes it.
  int same = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= static_cast<unsigned char>(1u << bit);
      same += pipeline::contentHash(bytes.data(), bytes.size()) == h;
      bytes[i] ^= static_cast<unsigned char>(1u << bit);
    }
  BOOST_TEST(same == 0);
  // Two 8-byte words swapped (two subject files exchanged, in miniature) change it.
  std::swap_ranges(bytes.begin(), bytes.begin() + 8, bytes.begin() + 40);
  BOOST_TEST(pipeline::contentHash(bytes.data(), bytes.size()) != h);
  // The length counts: runs of zeros of different lengths differ.
  const std::vector<unsigned char> zeros(64, 0);
  std::set<std::uint64_t> seen;
  for (std::size_t n = 0; n <= zeros.size(); ++n) seen.insert(pipeline::contentHash(zeros.data(), n));
  BOOST_TEST(seen.size() == zeros.size() + 1);
  // A file's hash is its bytes' hash.
  test::TempDir dir("kortex-jobfiles");
  {
    std::ofstream out(dir / "f.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  BOOST_TEST(pipeline::fileHash(dir / "f.bin") == pipeline::contentHash(bytes.data(), bytes.size()));
  test::expectThrowWith<IoError>([&] { pipeline::fileHash(dir / "missing.nii", "image"); }, {"image", "missing.nii"});
}

BOOST_AUTO_TEST_CASE(a_locked_folder_refuses_a_second_holder) {
  test::TempDir dir("kortex-jobfiles");
  const fs::path ck = dir / "ck";
  {
    pipeline::FolderLock first(ck);  // creates the folder
    BOOST_TEST(fs::is_directory(ck));
    BOOST_TEST(slurp(ck / "lock").find("pid " + std::to_string(::getpid())) != std::string::npos);
    // flock locks belong to open files: a second open in this process is refused like another process.
    test::expectThrowWith<InvalidArgument>([&] { pipeline::FolderLock second(ck); },
                                           {"in use by another run", "pid " + std::to_string(::getpid()), "on host", "since"});
  }
  BOOST_CHECK_NO_THROW(pipeline::FolderLock again(ck));  // released with its holder
}

BOOST_AUTO_TEST_CASE(stale_temporaries_of_dead_processes_are_removed) {
  test::TempDir dir("kortex-jobfiles");
  const std::string dead = ".kortex-tmp-" + std::to_string(kDeadPid) + "-abc";
  const std::string mine = ".kortex-tmp-" + std::to_string(::getpid()) + "-def";
  const std::string live = ".kortex-tmp-" + std::to_string(::getppid()) + "-ghi";
  fs::create_directories(dir / dead / "inner");
  touch(dir / dead / "inner" / "t.nii");
  touch(dir / (".kortex-tmp-" + std::to_string(kDeadPid) + "-1-r.json"));  // writeTextFileAtomic's file
  fs::create_directories(dir / mine);
  fs::create_directories(dir / live);
  touch(dir / ".kortex-tmp-notapid");
  touch(dir / "result.nii");
  const auto removed = pipeline::removeStaleTemporaries(dir.path);
  BOOST_TEST(removed.size() == 2u);
  BOOST_TEST((listing(dir.path) == std::set<std::string>{mine, live, ".kortex-tmp-notapid", "result.nii"}));
  BOOST_TEST(pipeline::removeStaleTemporaries(dir / "no-such-folder").empty());
}

BOOST_AUTO_TEST_CASE(staged_outputs_are_committed_all_or_none) {
  test::TempDir dir("kortex-jobfiles");
  touch(dir / "t.nii", "old");
  {
    pipeline::StagedOutputs staged;
    const fs::path a = staged.stage(dir / "t.nii"), b = staged.stage(dir / "new" / "deeper" / "f.nii.gz");
    touch(a, "template");
    touch(b, "field");
    touch(a.parent_path() / "t.img", "companion");  // a pair's other half, written beside the staged file
    BOOST_TEST(slurp(dir / "t.nii") == "old");     // nothing in place before the commit
    staged.commit();
  }
  BOOST_TEST(slurp(dir / "t.nii") == "template");
  BOOST_TEST(slurp(dir / "t.img") == "companion");
  BOOST_TEST(slurp(dir / "new" / "deeper" / "f.nii.gz") == "field");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"new", "t.img", "t.nii"}));  // no staging folder left
  {
    pipeline::StagedOutputs staged;  // not committed (an exception): nothing lands, created folders go
    touch(staged.stage(dir / "t.nii"), "half");
    touch(staged.stage(dir / "other" / "w.nii"), "half");
  }
  BOOST_TEST(slurp(dir / "t.nii") == "template");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"new", "t.img", "t.nii"}));
}

// The commit is all or none with the user's files kept: a target taken by a folder refuses the
// commit before any move; a move that fails half way puts every file back as it was.
BOOST_AUTO_TEST_CASE(a_failed_commit_keeps_the_files_that_were_there) {
  test::TempDir dir("kortex-jobfiles");
  touch(dir / "a.nii", "user a");
  touch(dir / "b.nii", "user b");
  {
    pipeline::StagedOutputs staged;
    touch(staged.stage(dir / "a.nii"), "new a");
    touch(staged.stage(dir / "b.nii"), "new b");
    touch(staged.stage(dir / "c.nii"), "new c");
    fs::create_directory(dir / "c.nii");  // taken by a folder after the job's checks
    BOOST_CHECK_THROW(staged.commit(), IoError);
  }
  BOOST_TEST(slurp(dir / "a.nii") == "user a");
  BOOST_TEST(slurp(dir / "b.nii") == "user b");
  BOOST_TEST(fs::is_directory(dir / "c.nii"));
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"a.nii", "b.nii", "c.nii"}));
  // A move that fails after others were made: those are undone. The stages are committed folder by
  // folder in path order, so dir's a.nii moves before dir/sub's b.nii, whose user file cannot be set
  // aside because a folder holds its place in the stage (white box: ".kortex-tmp-old-<name>").
  fs::create_directory(dir / "sub");
  touch(dir / "sub" / "b.nii", "user sub b");
  {
    pipeline::StagedOutputs staged;
    touch(staged.stage(dir / "a.nii"), "new a");
    const fs::path b = staged.stage(dir / "sub" / "b.nii");
    touch(b, "new b");
    fs::create_directory(b.parent_path() / ".kortex-tmp-old-b.nii");
    touch(b.parent_path() / ".kortex-tmp-old-b.nii" / "x");
    BOOST_CHECK_THROW(staged.commit(), IoError);
  }
  BOOST_TEST(slurp(dir / "a.nii") == "user a");
  BOOST_TEST(slurp(dir / "sub" / "b.nii") == "user sub b");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"a.nii", "b.nii", "c.nii", "sub"}));
  BOOST_TEST((listing(dir / "sub") == std::set<std::string>{"b.nii"}));
}

// writeAllOrNone: a writer that fails (a full disk) leaves every target as it was, new or old.
BOOST_AUTO_TEST_CASE(a_failed_writer_keeps_the_files_that_were_there) {
  test::TempDir dir("kortex-jobfiles");
  touch(dir / "warped.nii", "user warped");
  auto write = [](std::string text) { return [text](fs::path const& p) { touch(p, text); }; };
  BOOST_CHECK_THROW(pipeline::writeAllOrNone({{"warped image", dir / "warped.nii", write("new warped")},
                                              {"field", dir / "field.nii.gz", write("new field")},
                                              {"Jacobian map", dir / "jac.nii",
                                               [](fs::path const&) { throw IoError("no space left on device"); }}}),
                    IoError);
  BOOST_TEST(slurp(dir / "warped.nii") == "user warped");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"warped.nii"}));
  const auto written = pipeline::writeAllOrNone({{"warped image", dir / "warped.nii", write("new warped")},
                                                 {"field", {}, write("skipped")},
                                                 {"Jacobian map", dir / "jac.nii", write("new jac")}});
  BOOST_TEST(written.size() == 2u);
  BOOST_TEST(slurp(dir / "warped.nii") == "new warped");
  BOOST_TEST(slurp(dir / "jac.nii") == "new jac");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"jac.nii", "warped.nii"}));
}

// writeAllOrNone's writers run concurrently: the error rethrown is the first failing output's in the
// planned order, and only once every writer has ended (none still writes into a discarded stage).
BOOST_AUTO_TEST_CASE(writers_end_before_the_first_failure_in_order_is_rethrown) {
  test::TempDir dir("kortex-jobfiles");
  std::atomic<int> ended{0};
  auto fail = [&](std::string why) {
    return [&ended, why](fs::path const&) {
      ++ended;
      throw IoError(why);
    };
  };
  auto slow = [&](fs::path const& p) {
    std::string big(8 << 20, 'x');  // some work after the failures were raised
    touch(p, big);
    ++ended;
  };
  try {
    pipeline::writeAllOrNone({{"field", dir / "a.nii", slow},
                              {"warped image", dir / "b.nii", fail("first in order")},
                              {"Jacobian map", dir / "c.nii", fail("second in order")},
                              {"inverse field", dir / "d.nii", slow}});
    BOOST_FAIL("no error");
  } catch (IoError const& e) {
    BOOST_TEST(std::string(e.what()).find("first in order") != std::string::npos);
  }
  BOOST_TEST(ended.load() == 4);
  BOOST_TEST(listing(dir.path).empty());
}

// writeAllOrNone with a second group formed after the first is written (the register job's QC report,
// drawn meanwhile): the first group is staged, not committed, when the second is asked for; a second
// group that fails (or a failed report) leaves every target as it was; otherwise both land together.
BOOST_AUTO_TEST_CASE(a_later_group_lands_with_the_first_or_neither_does) {
  test::TempDir dir("kortex-jobfiles");
  touch(dir / "warped.nii", "user warped");
  auto write = [](std::string text) { return [text](fs::path const& p) { touch(p, text); }; };
  const std::vector<pipeline::PlannedOutput> first = {{"warped image", dir / "warped.nii", write("new warped")},
                                                      {"field", dir / "field.nii", write("new field")}};
  BOOST_CHECK_THROW(pipeline::writeAllOrNone(first,
                                             [&]() -> std::vector<pipeline::PlannedOutput> {
                                               BOOST_TEST(slurp(dir / "warped.nii") == "user warped");
                                               BOOST_TEST(!fs::exists(dir / "field.nii"));
                                               throw InvalidArgument("QC report: the report failed");
                                             }),
                    InvalidArgument);
  BOOST_CHECK_THROW(pipeline::writeAllOrNone(first,
                                             [&] {
                                               return std::vector<pipeline::PlannedOutput>{
                                                   {"QC report", dir / "qc" / "index.html",
                                                    [](fs::path const&) { throw IoError("no space left on device"); }}};
                                             }),
                    IoError);
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"warped.nii"}));
  BOOST_TEST(slurp(dir / "warped.nii") == "user warped");
  const auto written = pipeline::writeAllOrNone(first, [&] {
    return std::vector<pipeline::PlannedOutput>{{"QC report", dir / "qc" / "index.html", write("page")},
                                                {"report", dir / "report.json", write("{}")}};
  });
  BOOST_TEST(written.size() == 4u);
  BOOST_TEST(slurp(dir / "warped.nii") == "new warped");
  BOOST_TEST(slurp(dir / "qc" / "index.html") == "page");
  BOOST_TEST((listing(dir.path) == std::set<std::string>{"field.nii", "qc", "report.json", "warped.nii"}));
}
