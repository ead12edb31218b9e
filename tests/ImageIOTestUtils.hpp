// Helpers shared by tstImageIO (synthetic images) and tstImageIORealData (the real files of
// ../shared/data): byte-level file access, geometry and value checks, IoError expectations, the
// stderr capture of the "nothing printed" checks, and the VTK-only guard.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <kortex/Config.hpp>

#include "TestUtils.hpp"
#include "io/ImageIO.hpp"

namespace kortex::test::imageio {

namespace fs = std::filesystem;

// Ground truth printed by ITK 5.2 (itk::ImageFileReader<Image<float,3>>) with 9 digits.
constexpr double kItkPrintTol = 1e-5;

// MetaImage, VTI, PNG and JPEG exist only in builds with VTK; NIfTI and DICOM always.
constexpr bool kHaveVtk = KORTEX_HAVE_VTK != 0;

// For cases (or parts) that need the VTK-only formats: prints a note and returns false without
// VTK. Not a skip: the rest of the suite (NIfTI, DICOM, fields) still ran.
inline bool requireVtk(const char* what) {
  if (kHaveVtk) return true;
  std::cout << "note: " << what
            << " not run: this build has no VTK (MetaImage, VTI, PNG, JPEG); NIfTI and DICOM "
               "cases run"
            << std::endl;
  BOOST_TEST_MESSAGE("not run without VTK: " << what);
  return false;
}

// Folder removed at the end of the scope (tests/TestUtils.hpp).
struct TempDir : kortex::test::TempDir {
  TempDir() : kortex::test::TempDir("kortex-tstImageIO") {}
};

inline std::vector<char> readBytes(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void writeBytes(fs::path const& p, std::vector<char> const& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

inline void checkGeometry(Geometry const& a, Geometry const& b, double tol) {
  BOOST_TEST(a.dimension == b.dimension);
  BOOST_TEST(a.size[0] == b.size[0]);
  BOOST_TEST(a.size[1] == b.size[1]);
  BOOST_TEST(a.size[2] == b.size[2]);
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(a.spacing[i] == b.spacing[i], boost::test_tools::tolerance(tol));
    BOOST_TEST(std::abs(a.origin[i] - b.origin[i]) <= tol * std::max(1.0, std::abs(b.origin[i])),
               "origin[" << i << "] " << a.origin[i] << " vs " << b.origin[i]);
  }
  for (int i = 0; i < 9; ++i)
    BOOST_TEST(std::abs(a.direction[i] - b.direction[i]) <= tol,
               "direction[" << i << "] " << a.direction[i] << " vs " << b.direction[i]);
}

inline void checkSameValues(HostImage const& a, HostImage const& b) {
  BOOST_REQUIRE(a.numVoxels() == b.numVoxels());
  BOOST_TEST(kortex::test::maxAbsDifference(a, b) == 0.0);
}

inline std::string md(HostImage const& img, std::string const& key) {
  auto it = img.metadata.find(key);
  return it == img.metadata.end() ? std::string("<missing>") : it->second;
}

// Runs f, expects IoError whose message contains every fragment.
template <class F>
void expectIoError(F&& f, std::vector<std::string> const& fragments) {
  kortex::test::expectThrowWith<kortex::IoError>(std::forward<F>(f), fragments);
}

// Redirects file descriptor 2 (stderr) to a file while alive; text() returns what was written.
struct StderrCapture {
  fs::path file;
  int saved = -1;
  explicit StderrCapture(fs::path f) : file(std::move(f)) {
    std::fflush(stderr);
    saved = ::dup(2);
    FILE* out = std::fopen(file.c_str(), "w");
    ::dup2(fileno(out), 2);
    std::fclose(out);
  }
  std::string text() {
    std::fflush(stderr);
    std::cerr.flush();
    if (saved >= 0) {
      ::dup2(saved, 2);
      ::close(saved);
      saved = -1;
    }
    auto b = readBytes(file);
    return std::string(b.begin(), b.end());
  }
  ~StderrCapture() { (void)text(); }
};

}  // namespace kortex::test::imageio
