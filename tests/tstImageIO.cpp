#define BOOST_TEST_MODULE ImageIO
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <kortex/Config.hpp>

#include "ImageIOTestUtils.hpp"
#include "TestUtils.hpp"
#include "io/ImageIO.hpp"

// Synthetic images only; the reads of the real files (../shared/data) are tstImageIORealData.

using namespace kortex;
using namespace kortex::test::imageio;
namespace fs = std::filesystem;

namespace {

// Tolerances, each with its reason.
// NIfTI stores the geometry as float32 (quaternion + offsets): ~1e-7 relative, a few ulps more
// after quaternion -> matrix.
constexpr double kFloatHeaderTol = 2e-6;
// JPEG is lossy: quality 95 on a smooth 8-bit ramp stays within a few grey levels.
constexpr double kJpegTol = 6.0;
// Index <-> world displacement: one float32 rounding of each of 3 products and their sum, on
// values up to ~10 (|u| < 5 voxels, spacing <= 2.1 mm): a few ulps of 10.
constexpr double kFieldConversionTol = 1e-5;

std::set<std::string> listing(fs::path const& dir) {
  std::set<std::string> names;
  for (auto const& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

template <class T>
void patch(std::vector<char>& b, std::size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof(T));
}

// Rotation of `deg` degrees about the unit axis (ax, ay, az); row-major, columns = axes.
std::array<double, 9> rotation(double ax, double ay, double az, double deg) {
  const double n = std::sqrt(ax * ax + ay * ay + az * az);
  ax /= n, ay /= n, az /= n;
  const double t = deg * M_PI / 180.0, c = std::cos(t), s = std::sin(t), C = 1 - c;
  return {c + ax * ax * C,      ax * ay * C - az * s, ax * az * C + ay * s,
          ay * ax * C + az * s, c + ay * ay * C,      ay * az * C - ax * s,
          az * ax * C - ay * s, az * ay * C + ax * s, c + az * az * C};
}

// 7x5x4 volume, spacing 0.7/1.3/2.1, an oblique rotation, values that identify (i,j,k).
HostImage synthetic3D(bool leftHanded = false) {
  Geometry g = Geometry::make3D(7, 5, 4);
  g.spacing = {0.7, 1.3, 2.1};
  g.origin = {-12.5, 30.25, 7.125};
  g.direction = rotation(1, 2, 3, 30);
  if (leftHanded)
    for (int r = 0; r < 3; ++r) g.direction[r * 3 + 2] = -g.direction[r * 3 + 2];
  HostImage img("synthetic3D", g);
  for (Index k = 0; k < 4; ++k)
    for (Index j = 0; j < 5; ++j)
      for (Index i = 0; i < 7; ++i) img.data(k, j, i) = float(i + 10 * j + 100 * k) * 1.25f - 7.5f;
  return img;
}

HostImage synthetic2D(Index nx = 9, Index ny = 6) {
  HostImage img("synthetic2D", Geometry::make2D(nx, ny));
  img.geometry.spacing = {0.5, 0.75, 1.0};
  img.geometry.origin = {3.0, -4.0, 0.0};
  for (Index j = 0; j < ny; ++j)
    for (Index i = 0; i < nx; ++i) img.data(0, j, i) = float(i * 7 + j * 31 % 200);
  return img;
}

}  // namespace

// --------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(extensions) {
  using io::Access;
  for (auto n : {"a.nii", "a.nii.gz", "A.NII.GZ", "dir/a.dcm", "a.hdr", "a.img", "a.hdr.gz",
                 "A.IMG.GZ"})
    BOOST_TEST(io::isSupportedExtension(n), n);
  for (auto n : {"a.hdr", "a.img", "a.img.gz"}) BOOST_TEST(io::isSupportedExtension(n, Access::Write), n);
  // The VTK formats are supported exactly when the build has VTK.
  for (auto n : {"a.mha", "a.mhd", "a.vti", "a.png", "a.jpg", "a.JPEG"})
    BOOST_TEST(io::isSupportedExtension(n) == kHaveVtk, n);
  for (auto n : {"a.txt", "a", "a.gz", "a.nii.bz2", ".nii", "a.raw", "a.hdr.bz2"})
    BOOST_TEST(!io::isSupportedExtension(n), n);
  BOOST_TEST(io::isSupportedExtension("a.dcm", Access::Read));
  BOOST_TEST(!io::isSupportedExtension("a.dcm", Access::Write));
  BOOST_TEST(io::isSupportedExtension("a.nii.gz", Access::Write));
  const std::string r = io::supportedExtensions(), w = io::supportedExtensions(Access::Write);
  for (auto e : {".nii", ".nii.gz", ".dcm"}) BOOST_TEST(r.find(e) != std::string::npos, e);
  for (auto e : {".mha", ".mhd", ".vti", ".png", ".jpg", ".jpeg"})
    BOOST_TEST((r.find(e) != std::string::npos) == kHaveVtk, e);
  BOOST_TEST(w.find(".dcm") == std::string::npos);
  BOOST_TEST(w.find(".nii.gz") != std::string::npos);
  // requireSupportedExtension throws what readImage / writeImage would, before any work.
  BOOST_CHECK_NO_THROW(io::requireSupportedExtension("a.nii.gz", Access::Write));
  BOOST_CHECK_NO_THROW(io::requireSupportedExtension("a.dcm", Access::Read));
  expectIoError([] { io::requireSupportedExtension("out.txt", Access::Write); },
                {"out.txt", "unknown", ".nii.gz"});
  expectIoError([] { io::requireSupportedExtension("out.dcm", Access::Write); },
                {"out.dcm", "read-only"});
  expectIoError([] { io::requireSupportedExtension("noext", Access::Read); },
                {"noext", "no file extension"});
  if (kHaveVtk) BOOST_CHECK_NO_THROW(io::requireSupportedExtension("a.png", Access::Write));
}

// Without VTK: the VTK formats fail with Unsupported and one clear message, nothing is written.
// With VTK: the same calls succeed (checked by the round trips below).
BOOST_AUTO_TEST_CASE(vtk_formats_need_vtk) {
  if (kHaveVtk) {
    BOOST_CHECK_NO_THROW(io::requireSupportedExtension("a.mha", io::Access::Read));
    return;
  }
  TempDir dir;
  auto expectUnsupported = [](auto&& f, std::vector<std::string> const& fragments) {
    kortex::test::expectThrowWith<Unsupported>(f, fragments);
  };
  const std::vector<std::string> common = {"needs a Kortex build with VTK",
                                           "NIfTI (.nii, .nii.gz, .hdr/.img) is always available"};
  auto with = [&](std::vector<std::string> v, std::string const& a, std::string const& b) {
    v.push_back(a);
    v.push_back(b);
    return v;
  };
  const HostImage img = synthetic2D();
  expectUnsupported([&] { io::writeImage(img, dir / "a.png"); }, with(common, "a.png", "PNG"));
  expectUnsupported([&] { io::writeImage(img, dir / "a.mha"); },
                    with(common, "a.mha", "MetaImage"));
  expectUnsupported([&] { io::writeImage(img, dir / "a.vti"); }, with(common, "a.vti", "VTK XML"));
  expectUnsupported([&] { io::writeImage(img, dir / "a.jpg"); }, with(common, "a.jpg", "JPEG"));
  expectUnsupported([&] { io::writePngMontage({img}, dir / "m.png", 0, 1); },
                    with(common, "m.png", "PNG"));
  writeBytes(dir / "b.png", std::vector<char>(100, 'x'));
  expectUnsupported([&] { io::readImage(dir / "b.png"); }, with(common, "b.png", "DICOM (.dcm)"));
  expectUnsupported([&] { io::requireSupportedExtension("c.mhd", io::Access::Read); },
                    with(common, "c.mhd", "MetaImage"));
  BOOST_TEST(listing(dir.path) == std::set<std::string>{"b.png"});
}

// --------------------------------------------------------------------------------------------
// Round trips of a synthetic volume with a non-trivial geometry, for every writable 3D format.
BOOST_AUTO_TEST_CASE(roundtrip_3d_all_formats) {
  TempDir dir;
  std::vector<std::string> formats = {".nii", ".nii.gz"};
  if (requireVtk("roundtrip_3d_all_formats: .mha .mhd .vti"))
    formats.insert(formats.end(), {".mha", ".mhd", ".vti"});
  for (bool leftHanded : {false, true}) {
    const HostImage img = synthetic3D(leftHanded);
    for (std::string const& ext : formats) {
      BOOST_TEST_CONTEXT("format " << ext << (leftHanded ? " left-handed" : "")) {
        const fs::path p = dir / ("vol" + ext);
        io::writeImage(img, p);
        const HostImage back = io::readImage(p);
        // NIfTI keeps geometry in float32, the others in text with full precision.
        const bool nifti = ext.rfind(".nii", 0) == 0;
        checkGeometry(back.geometry, img.geometry, nifti ? kFloatHeaderTol : 1e-12);
        checkSameValues(back, img);
        // Voxel (i,j,k) stays voxel (i,j,k): spot check an asymmetric corner.
        BOOST_TEST(back.data(3, 4, 6) == img.data(3, 4, 6));
        BOOST_TEST(back.data(0, 0, 0) == -7.5f);
        if (ext == ".mhd") {
          BOOST_TEST(fs::exists(dir / "vol.raw"));
          auto hdr = readBytes(p);
          const std::string text(hdr.begin(), hdr.end());
          BOOST_TEST(text.find("ElementDataFile = vol.raw") != std::string::npos, text);
        }
        if (nifti) {
          BOOST_TEST(md(back, "nifti.datatype") == "float32");
          BOOST_TEST(md(back, "nifti.qform_code") == "1");
          BOOST_TEST(md(back, "nifti.sform_code") == "1");
          BOOST_TEST(md(back, "nifti.scl_slope") == "1");
          BOOST_TEST(md(back, "nifti.qfac") == (leftHanded ? "-1" : "1"));
          // Written again from what was read: header fields carried verbatim, exact geometry.
          const fs::path p2 = dir / ("again" + ext);
          io::writeImage(back, p2);
          const HostImage back2 = io::readImage(p2);
          checkGeometry(back2.geometry, back.geometry, 0.0);
          for (auto key : {"nifti.qform", "nifti.sform", "nifti.quatern", "nifti.qoffset",
                           "nifti.pixdim", "nifti.qform_code", "nifti.sform_code"})
            BOOST_TEST(md(back2, key) == md(back, key), key);
          checkSameValues(back2, back);
        }
      }
    }
  }
  // Only the files written, no temporaries.
  std::set<std::string> expected = {"vol.nii", "vol.nii.gz", "again.nii", "again.nii.gz"};
  if (kHaveVtk) expected.insert({"vol.mha", "vol.mhd", "vol.raw", "vol.vti"});
  BOOST_TEST(listing(dir.path) == expected, "directory holds exactly the written files");
}

// NIfTI-2 and header/data pairs, through nifti_clib. NIfTI-2 keeps the geometry in float64, so
// its round trip is exact to double precision; the version read is the version written back.
BOOST_AUTO_TEST_CASE(nifti_versions_and_pairs) {
  TempDir dir;
  // NIfTI-2 magic at byte 4: "n+2" (single file) or "ni2" (pair), then "\0\r\n\032\n".
  const char kMagic2[8] = {'n', 'i', '2', '\0', '\r', '\n', '\032', '\n'};
  char kMagic2Single[8];
  std::memcpy(kMagic2Single, kMagic2, 8);
  kMagic2Single[1] = '+';
  for (bool leftHanded : {false, true}) {
    HostImage img = synthetic3D(leftHanded);
    for (int version : {1, 2}) {
      if (version == 2) img.metadata["nifti.version"] = "2";
      for (std::string ext : {".nii", ".nii.gz", ".hdr", ".img.gz"}) {
        BOOST_TEST_CONTEXT("NIfTI-" << version << " " << ext << (leftHanded ? " left-handed" : "")) {
          const std::string stem = "v" + std::to_string(version) + (leftHanded ? "l" : "r");
          const fs::path p = dir / (stem + ext);
          io::writeImage(img, p);
          const HostImage back = io::readImage(p);
          checkGeometry(back.geometry, img.geometry, version == 2 ? 1e-12 : kFloatHeaderTol);
          checkSameValues(back, img);
          BOOST_TEST(md(back, "nifti.version") == std::to_string(version));
          BOOST_TEST(md(back, "nifti.qfac") == (leftHanded ? "-1" : "1"));
          const bool pair = ext != ".nii" && ext != ".nii.gz";
          if (pair) {
            const bool gz = ext == ".img.gz";
            const fs::path hdr = dir / (stem + (gz ? ".hdr.gz" : ".hdr"));
            const fs::path data = dir / (stem + (gz ? ".img.gz" : ".img"));
            BOOST_TEST(fs::exists(hdr));
            BOOST_TEST(fs::exists(data));
            if (!gz) {
              // Header alone (+ the 4-byte extension flag), voxels alone from byte 0.
              const auto h = readBytes(hdr);
              BOOST_TEST(h.size() == (version == 2 ? 544u : 352u));
              BOOST_TEST(fs::file_size(data) == 7u * 5u * 4u * 4u);
              BOOST_TEST(std::memcmp(h.data() + (version == 2 ? 4 : 344),
                                     version == 2 ? kMagic2 : "ni1\0", version == 2 ? 8 : 4) == 0);
              float first = 0;
              std::memcpy(&first, readBytes(data).data(), 4);
              BOOST_TEST(first == img.data(0, 0, 0));
              // Either file of the pair names the image.
              checkSameValues(io::readImage(data), img);
            }
          } else if (ext == ".nii") {
            const auto b = readBytes(p);
            std::int32_t size = 0;
            std::memcpy(&size, b.data(), 4);
            BOOST_TEST(size == (version == 2 ? 540 : 348));
            BOOST_TEST(std::memcmp(b.data() + (version == 2 ? 4 : 344),
                                   version == 2 ? kMagic2Single : "n+1\0", version == 2 ? 8 : 4) == 0);
            BOOST_TEST(b.size() == (version == 2 ? 544u : 352u) + 7u * 5u * 4u * 4u);
          }
          // Read -> write -> read: the header fields come back verbatim, same version.
          const fs::path again = dir / ("again" + ext);
          io::writeImage(back, again);
          const HostImage back2 = io::readImage(again);
          checkGeometry(back2.geometry, back.geometry, 0.0);
          for (auto key : {"nifti.version", "nifti.qform", "nifti.sform", "nifti.quatern",
                           "nifti.qoffset", "nifti.pixdim", "nifti.qform_code", "nifti.sform_code"})
            BOOST_TEST(md(back2, key) == md(back, key), key);
          checkSameValues(back2, back);
        }
      }
    }
  }
  // Only the written files (a pair is two), no temporaries.
  std::set<std::string> expected;
  for (std::string stem : {"v1r", "v1l", "v2r", "v2l", "again"})
    for (std::string f : {".nii", ".nii.gz", ".hdr", ".img", ".hdr.gz", ".img.gz"})
      expected.insert(stem + f);
  BOOST_TEST(listing(dir.path) == expected);

  // More than 32767 voxels along an axis: NIfTI-1 cannot say it, so the file is NIfTI-2.
  HostImage wide("wide", Geometry::make2D(40000, 2));
  for (Index i = 0; i < wide.numVoxels(); ++i) wide.data.data()[i] = float(i % 977);
  io::writeImage(wide, dir / "wide.nii");
  const HostImage wideBack = io::readImage(dir / "wide.nii");
  BOOST_TEST(md(wideBack, "nifti.version") == "2");
  BOOST_TEST(wideBack.geometry.nx() == 40000);
  checkSameValues(wideBack, wide);

  // Pair faults: a missing data file, a data file without its header.
  TempDir bad;
  io::writeImage(synthetic3D(), bad / "lone.hdr");
  fs::remove(bad / "lone.img");
  expectIoError([&] { io::readImage(bad / "lone.hdr"); }, {"lone.hdr", "data file 'lone.img'", "missing"});
  io::writeImage(synthetic3D(), bad / "orphan.hdr");
  fs::remove(bad / "orphan.hdr");
  expectIoError([&] { io::readImage(bad / "orphan.img"); }, {"orphan.img", "no NIfTI header"});
  const auto cut = readBytes(bad / "orphan.img");
  io::writeImage(synthetic3D(), bad / "short.hdr");
  writeBytes(bad / "short.img", std::vector<char>(cut.begin(), cut.end() - 8));
  expectIoError([&] { io::readImage(bad / "short.hdr"); }, {"short.hdr", "truncated", "'short.img'"});
}

// NIfTI reads run in parallel (the I/O lock is held around nifti_clib's calls only): files of
// every kind read from 8 threads at once, 3 times each, give the bits of the one-by-one reads, and
// a corrupt file read among them fails with its own message every time.
BOOST_AUTO_TEST_CASE(nifti_reads_in_parallel) {
  TempDir dir;
  std::vector<fs::path> files;
  std::vector<HostImage> expected;
  for (int k = 0; k < 6; ++k) {
    HostImage img = synthetic3D(k % 2 == 1);
    for (std::size_t i = 0; i < img.data.size(); ++i) img.data.data()[i] += float(k) * 0.25f;
    if (k >= 3) img.metadata["nifti.version"] = "2";
    const fs::path p = dir / ("p" + std::to_string(k) + (k % 3 == 0 ? ".nii.gz" : k % 3 == 1 ? ".nii" : ".img.gz"));
    io::writeImage(img, p);
    files.push_back(p);
    expected.push_back(io::readImage(p));
  }
  const fs::path bad = dir / "bad.nii";
  {
    auto bytes = readBytes(files[1]);
    bytes.resize(200);  // a truncated header
    writeBytes(bad, bytes);
  }
  std::string badMessage;
  try {
    io::readImage(bad);
  } catch (std::exception const& e) {
    badMessage = e.what();
  }
  BOOST_TEST(!badMessage.empty());
  constexpr int kThreads = 8, kRounds = 3;
  std::vector<int> wrong(kThreads, 0), badSeen(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r)
        for (std::size_t k = 0; k <= files.size(); ++k) {
          const std::size_t f = (k + std::size_t(t)) % (files.size() + 1);
          if (f == files.size()) {
            try {
              io::readImage(bad);
            } catch (std::exception const& e) {
              badSeen[std::size_t(t)] += std::string(e.what()) == badMessage;
            }
            continue;
          }
          const HostImage got = io::readImage(files[f]);
          wrong[std::size_t(t)] += got.data.size() != expected[f].data.size() ||
                                   std::memcmp(got.data.data(), expected[f].data.data(), got.data.size() * sizeof(float)) != 0 ||
                                   got.metadata != expected[f].metadata;
        }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) {
    BOOST_TEST(wrong[std::size_t(t)] == 0, "thread " << t);
    BOOST_TEST(badSeen[std::size_t(t)] == kRounds, "thread " << t << ": the corrupt file's message");
  }
}

BOOST_AUTO_TEST_CASE(roundtrip_2d) {
  TempDir dir;
  // A pure 2D image and a 2D slice with a 3D orientation (as a tilted CT slice has).
  HostImage flat = synthetic2D();
  HostImage tilted = synthetic2D();
  tilted.geometry.direction = rotation(1, 0, 0, 18.5);
  tilted.geometry.origin = {-125.0, -123.5, 5.8};
  std::vector<std::string> formats = {".nii.gz"};
  if (requireVtk("roundtrip_2d: .mha .mhd .vti"))
    formats.insert(formats.end(), {".mha", ".mhd", ".vti"});
  for (auto* img : {&flat, &tilted}) {
    for (std::string const& ext : formats) {
      BOOST_TEST_CONTEXT("format " << ext << (img == &flat ? " flat" : " tilted")) {
        const fs::path p = dir / ("slice" + ext);
        io::writeImage(*img, p);
        const HostImage back = io::readImage(p);
        BOOST_TEST(back.dimension() == 2);
        checkGeometry(back.geometry, img->geometry, ext == ".nii.gz" ? kFloatHeaderTol : 1e-12);
        checkSameValues(back, *img);
      }
    }
  }
}

// PNG/JPEG: 8-bit output, first row on top, window from display.min/max or the data range.
BOOST_AUTO_TEST_CASE(roundtrip_png_jpeg) {
  if (!requireVtk("roundtrip_png_jpeg")) return;
  TempDir dir;
  HostImage img("ramp", Geometry::make2D(40, 30));
  for (Index j = 0; j < 30; ++j)
    for (Index i = 0; i < 40; ++i) img.data(0, j, i) = float(i * 4 + j * 3);  // 0 .. 243
  img.metadata["display.min"] = "0";
  img.metadata["display.max"] = "255";
  io::writeImage(img, dir / "ramp.png");
  HostImage back = io::readImage(dir / "ramp.png");
  checkSameValues(back, img);              // integers in [0,255] with window [0,255]: exact
  BOOST_TEST(back.data(0, 0, 0) == 0.0f);  // top-left stays top-left
  BOOST_TEST(back.data(0, 29, 39) == 243.0f);
  BOOST_TEST(md(back, "display.max") == "255");
  // Read back and written again: the reader's window keeps the values.
  io::writeImage(back, dir / "ramp2.png");
  checkSameValues(io::readImage(dir / "ramp2.png"), img);

  io::writeImage(img, dir / "ramp.jpg");
  back = io::readImage(dir / "ramp.jpg");
  BOOST_TEST(back.geometry.nx() == 40);
  BOOST_TEST(back.geometry.ny() == 30);
  BOOST_TEST(kortex::test::maxAbsDifference(back, img) <= kJpegTol);

  // No window: the data range [-1000, 1000] maps to [0, 255].
  HostImage wide("wide", Geometry::make2D(3, 2));
  const float v[6] = {-1000, 0, 1000, 500, -500, 250};
  std::copy(v, v + 6, wide.data.data());
  io::writeImage(wide, dir / "wide.png");
  back = io::readImage(dir / "wide.png");
  const float expect[6] = {0, 128, 255, 191, 64, 159};  // round((v + 1000) / 2000 * 255)
  for (int i = 0; i < 6; ++i) BOOST_TEST(back.data.data()[i] == expect[i]);
  // A 3D image is refused for PNG, and the refused write leaves nothing behind.
  const auto before = listing(dir.path);
  expectIoError([&] { io::writeImage(synthetic3D(), dir / "vol.png"); }, {"vol.png", "2D"});
  BOOST_TEST(listing(dir.path) == before);
}

BOOST_AUTO_TEST_CASE(pgm_montage_without_vtk) {
  // Binary PGM in every build: header, then the rows from the top, panels separated by 255.
  TempDir dir;
  std::vector<HostImage> panels;
  for (int k = 0; k < 2; ++k) {
    HostImage p("panel", Geometry::make2D(3, 2));
    for (Index j = 0; j < 2; ++j)
      for (Index i = 0; i < 3; ++i) p.data(0, j, i) = float(k * 50 + i * 10 + j);
    panels.push_back(p);
  }
  io::writePngMontage(panels, dir / "m.pgm", 0.0f, 255.0f);
  std::ifstream f(dir / "m.pgm", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string header = "P5\n8 2\n255\n";
  BOOST_REQUIRE_EQUAL(bytes.size(), header.size() + 16);
  BOOST_TEST(bytes.substr(0, header.size()) == header);
  for (Index j = 0; j < 2; ++j)
    for (Index x = 0; x < 8; ++x) {
      const int v = static_cast<unsigned char>(bytes[header.size() + std::size_t(j * 8 + x)]);
      const int want = (x == 3 || x == 4) ? 255 : (x < 3 ? int(x * 10 + j) : int(50 + (x - 5) * 10 + j));
      BOOST_TEST(v == want, "pixel (" << x << ", " << j << ")");
    }
  expectIoError([&] { io::writePngMontage(panels, dir / "m.bmp", 0, 1); }, {"PNG (.png) or PGM (.pgm)"});
  BOOST_TEST(!fs::exists(dir / "m.bmp"));
}

BOOST_AUTO_TEST_CASE(png_montage) {
  if (!requireVtk("png_montage")) return;
  TempDir dir;
  std::vector<HostImage> panels;
  for (int k = 0; k < 3; ++k) {
    HostImage p("panel", Geometry::make2D(5, 4));
    for (Index j = 0; j < 4; ++j)
      for (Index i = 0; i < 5; ++i) p.data(0, j, i) = float(k * 100 + i * 10 + j);
    panels.push_back(p);
  }
  io::writePngMontage(panels, dir / "m.png", 0.0f, 255.0f);
  const HostImage m = io::readImage(dir / "m.png");
  BOOST_TEST(m.geometry.nx() == 5 * 3 + 2 * 2);
  BOOST_TEST(m.geometry.ny() == 4);
  for (int k = 0; k < 3; ++k)
    for (Index j = 0; j < 4; ++j)
      for (Index i = 0; i < 5; ++i)
        BOOST_TEST(m.data(0, j, k * 7 + i) == std::min(255.0f, float(k * 100 + i * 10 + j)));
  for (Index j = 0; j < 4; ++j)
    for (Index s : {5, 6, 12, 13}) BOOST_TEST(m.data(0, j, s) == 255.0f);  // separators
  // Unequal panels, empty list, bad window: refused, nothing written.
  panels.push_back(HostImage("odd", Geometry::make2D(6, 4)));
  expectIoError([&] { io::writePngMontage(panels, dir / "bad.png", 0, 1); }, {"differ in size"});
  expectIoError([&] { io::writePngMontage({}, dir / "bad.png", 0, 1); }, {"no panels"});
  panels.pop_back();
  expectIoError([&] { io::writePngMontage(panels, dir / "bad.png", 1, 1); }, {"window"});
  BOOST_TEST(listing(dir.path) == std::set<std::string>{"m.png"});
}

// --------------------------------------------------------------------------------------------
// NIfTI header corners, made by patching a file we wrote (qform == sform, codes 1/1, float32,
// little endian). Offsets are those of the NIfTI-1 header.
namespace {
constexpr std::size_t kDim = 40, kPixdim = 76, kSlope = 112, kInter = 116, kUnits = 123,
                      kQcode = 252, kScode = 254, kSrow = 280, kVox = 352;
void putSrow(std::vector<char>& b, std::array<float, 12> const& m) {
  for (int i = 0; i < 12; ++i) patch<float>(b, kSrow + 4 * i, m[i]);
}
HostImage readPatched(TempDir const& dir, std::vector<char> const& b, std::string const& name) {
  writeBytes(dir / name, b);
  return io::readImage(dir / name);
}
}  // namespace

BOOST_AUTO_TEST_CASE(nifti_header_rules) {
  TempDir dir;
  const HostImage img = synthetic3D();
  io::writeImage(img, dir / "base.nii");
  const std::vector<char> base = readBytes(dir / "base.nii");
  // Axis-aligned sform, as RAS with spacing: LPS direction diag(-1,-1,1), origin (-1,-2,3).
  const std::array<float, 12> plain = {0.7f, 0, 0, 1, 0, 1.3f, 0, 2, 0, 0, 2.1f, 3};
  Geometry plainGeom = img.geometry;
  plainGeom.direction = {-1, 0, 0, 0, -1, 0, 0, 0, 1};
  plainGeom.origin = {-1, -2, 3};

  // sform_code 2 (aligned) disagreeing with the qform: ITK keeps the qform.
  auto b = base;
  putSrow(b, plain);
  patch<std::int16_t>(b, kScode, 2);
  HostImage r = readPatched(dir, b, "q.nii");
  BOOST_TEST(md(r, "nifti.orientation_source") == "qform");
  checkGeometry(r.geometry, img.geometry, kFloatHeaderTol);
  // The same sform labelled scanner (1) wins over the qform.
  patch<std::int16_t>(b, kScode, 1);
  r = readPatched(dir, b, "s.nii");
  BOOST_TEST(md(r, "nifti.orientation_source") == "sform");
  checkGeometry(r.geometry, plainGeom, 1e-6);
  // Only an sform (qform_code 0): the sform.
  patch<std::int16_t>(b, kQcode, 0);
  patch<std::int16_t>(b, kScode, 4);
  r = readPatched(dir, b, "sonly.nii");
  checkGeometry(r.geometry, plainGeom, 1e-6);
  // ... but a skewed sform without qform has no orthonormal orientation: refused, like ITK.
  auto skew = plain;
  skew[1] = 0.5f;
  putSrow(b, skew);
  writeBytes(dir / "skew.nii", b);
  expectIoError([&] { io::readImage(dir / "skew.nii"); }, {"skew.nii", "orthonormal"});
  // A skewed sform next to a valid qform: the qform.
  patch<std::int16_t>(b, kQcode, 1);
  r = readPatched(dir, b, "skewq.nii");
  BOOST_TEST(md(r, "nifti.orientation_source") == "qform");
  checkGeometry(r.geometry, img.geometry, kFloatHeaderTol);
  // No orientation at all: origin 0, identity direction, pixdim spacing.
  patch<std::int16_t>(b, kQcode, 0);
  patch<std::int16_t>(b, kScode, 0);
  r = readPatched(dir, b, "none.nii");
  BOOST_TEST(md(r, "nifti.orientation_source") == "none");
  Geometry none = Geometry::make3D(7, 5, 4);
  none.spacing = img.geometry.spacing;
  checkGeometry(r.geometry, none, kFloatHeaderTol);
  // Units in metres: spacing and origin in mm are 1000 times the header values.
  b = base;
  putSrow(b, plain);
  patch<std::int16_t>(b, kScode, 1);
  b[kUnits] = 1;
  r = readPatched(dir, b, "metres.nii");
  BOOST_TEST(r.geometry.spacing[0] == 700.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(r.geometry.origin[2] == 3000.0, boost::test_tools::tolerance(1e-9));

  // Scaling: slope 2, intercept -1 applied; slope 0 means no scaling at all (NIfTI-1).
  b = base;
  patch<float>(b, kSlope, 2.0f);
  patch<float>(b, kInter, -1.0f);
  r = readPatched(dir, b, "scaled.nii");
  BOOST_TEST(r.data(3, 4, 6) == 2.0f * img.data(3, 4, 6) - 1.0f);
  patch<float>(b, kSlope, 0.0f);
  patch<float>(b, kInter, 5.0f);
  r = readPatched(dir, b, "slope0.nii");
  checkSameValues(r, img);

  // dim[0] = 2: a 2D file (ITK uses the 2x2 block of the orientation).
  HostImage flat = synthetic2D();
  io::writeImage(flat, dir / "flat.nii");
  b = readBytes(dir / "flat.nii");
  BOOST_TEST(*reinterpret_cast<std::int16_t*>(&b[kDim]) == 3);
  patch<std::int16_t>(b, kDim, 2);
  r = readPatched(dir, b, "flat2.nii");
  BOOST_TEST(r.dimension() == 2);
  checkGeometry(r.geometry, flat.geometry, kFloatHeaderTol);
  checkSameValues(r, flat);

  // Big-endian file: every multi-byte field and voxel byte-swapped.
  b = base;
  auto swapRange = [&](std::size_t off, std::size_t width, std::size_t count) {
    for (std::size_t k = 0; k < count; ++k)
      std::reverse(b.begin() + off + k * width, b.begin() + off + (k + 1) * width);
  };
  swapRange(0, 4, 1);             // sizeof_hdr
  swapRange(kDim, 2, 8);          // dim
  swapRange(56, 4, 3);            // intent_p1..3
  swapRange(68, 2, 4);            // intent_code, datatype, bitpix, slice_start
  swapRange(kPixdim, 4, 8);       // pixdim
  swapRange(108, 4, 3);           // vox_offset, scl_slope, scl_inter
  swapRange(120, 2, 1);           // slice_end
  swapRange(124, 4, 4);           // cal_max, cal_min, slice_duration, toffset
  swapRange(140, 4, 2);           // glmax, glmin
  swapRange(kQcode, 2, 2);        // qform_code, sform_code
  swapRange(256, 4, 6);           // quatern, qoffset
  swapRange(kSrow, 4, 12);        // srow
  swapRange(kVox, 4, 7 * 5 * 4);  // voxels
  r = readPatched(dir, b, "bigendian.nii");
  checkGeometry(r.geometry, img.geometry, kFloatHeaderTol);
  checkSameValues(r, img);
}

// --------------------------------------------------------------------------------------------
// Bad inputs: one IoError naming the file, and nothing printed on stderr by VTK or metaio.
BOOST_AUTO_TEST_CASE(bad_inputs) {
  TempDir dir;
  // Materials: a valid small NIfTI to damage, garbage bytes, empty files.
  io::writeImage(synthetic3D(), dir / "good.nii");
  const std::vector<char> good = readBytes(dir / "good.nii");
  std::vector<char> garbage(5000);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 7919 + 13) % 251);

  StderrCapture err(dir / "stderr.txt");
  expectIoError([&] { io::readImage(dir / "missing.nii.gz"); }, {"missing.nii.gz", "no such file"});
  fs::create_directory(dir / "folder.nii");
  expectIoError([&] { io::readImage(dir / "folder.nii"); }, {"folder.nii", "directory"});
  writeBytes(dir / "notes.txt", garbage);
  expectIoError([&] { io::readImage(dir / "notes.txt"); }, {"notes.txt", "unknown extension"});
  writeBytes(dir / "empty.nii", {});
  expectIoError([&] { io::readImage(dir / "empty.nii"); }, {"empty.nii", "empty"});

  // NIfTI: garbage, truncated header, truncated data, 4D, zero size, RGB, NIfTI-2.
  writeBytes(dir / "garbage.nii", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.nii"); }, {"garbage.nii", "not a NIfTI-1"});
  writeBytes(dir / "garbage.nii.gz", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.nii.gz"); }, {"garbage.nii.gz", "not a NIfTI"});
  writeBytes(dir / "short.nii", std::vector<char>(good.begin(), good.begin() + 200));
  expectIoError([&] { io::readImage(dir / "short.nii"); }, {"short.nii", "truncated"});
  writeBytes(dir / "cut.nii", std::vector<char>(good.begin(), good.end() - 17));
  expectIoError([&] { io::readImage(dir / "cut.nii"); }, {"cut.nii", "truncated"});
  {
    auto b = good;
    patch<std::int16_t>(b, 40, 4);  // dim[0]
    patch<std::int16_t>(b, 48, 5);  // dim[4] = 5 time points
    writeBytes(dir / "series.nii", b);
    expectIoError([&] { io::readImage(dir / "series.nii"); },
                  {"series.nii", "has 4 dimensions", "Kortex filters take 2D or 3D scalar images"});
    patch<std::int16_t>(b, 48, 1);  // 4D with one time point: a 3D image (ITK agrees)
    writeBytes(dir / "t1.nii", b);
    BOOST_TEST(io::readImage(dir / "t1.nii").geometry.nz() == 4);
    b = good;
    patch<std::int16_t>(b, 40, 5);
    patch<std::int16_t>(b, 48, 1);
    patch<std::int16_t>(b, 50, 3);  // dim[5] = 3: vector voxels
    writeBytes(dir / "vec.nii", b);
    expectIoError([&] { io::readImage(dir / "vec.nii"); }, {"vec.nii", "has 5 dimensions"});
    b = good;
    patch<std::int16_t>(b, 44, 0);  // dim[2] = 0
    writeBytes(dir / "zero.nii", b);
    expectIoError([&] { io::readImage(dir / "zero.nii"); }, {"zero.nii", "zero-size"});
    b = good;
    patch<std::int16_t>(b, 70, 128);  // RGB24
    writeBytes(dir / "rgb.nii", b);
    expectIoError([&] { io::readImage(dir / "rgb.nii"); }, {"rgb.nii", "RGB"});
    b = good;
    patch<std::int32_t>(b, 0, 540);  // a NIfTI-1 header claiming to be NIfTI-2: its 540 bytes
    writeBytes(dir / "v2.nii", b);    // hold no NIfTI-2 magic
    expectIoError([&] { io::readImage(dir / "v2.nii"); }, {"v2.nii", "NIfTI"});
    writeBytes(dir / "v2short.nii", std::vector<char>(b.begin(), b.begin() + 400));
    expectIoError([&] { io::readImage(dir / "v2short.nii"); }, {"v2short.nii", "truncated", "540-byte NIfTI-2"});
  }

  // DICOM (always available): garbage and truncated.
  writeBytes(dir / "garbage.dcm", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.dcm"); }, {"garbage.dcm", "not a DICOM"});
  if (!requireVtk("bad_inputs: MetaImage, VTI, PNG, JPEG")) {
    const std::string printed = err.text();
    BOOST_TEST(printed.empty(), "stderr got: " << printed);
    return;
  }

  // MetaImage: garbage, 4D, truncated data, multi-component.
  writeBytes(dir / "garbage.mha", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.mha"); }, {"garbage.mha"});
  io::writeImage(synthetic3D(), dir / "good.mha");
  const auto mha = readBytes(dir / "good.mha");
  writeBytes(dir / "cut.mha", std::vector<char>(mha.begin(), mha.end() - 40));
  expectIoError([&] { io::readImage(dir / "cut.mha"); }, {"cut.mha"});
  {
    std::ofstream h(dir / "four.mhd");
    h << "ObjectType = Image\nNDims = 4\nDimSize = 2 2 2 3\nElementType = MET_FLOAT\n"
         "ElementDataFile = four.raw\n";
    writeBytes(dir / "four.raw", std::vector<char>(2 * 2 * 2 * 3 * 4, 0));
  }
  expectIoError([&] { io::readImage(dir / "four.mhd"); }, {"four.mhd", "has 4 dimensions"});
  {
    std::ofstream h(dir / "vec.mhd");
    h << "ObjectType = Image\nNDims = 2\nDimSize = 2 2\nElementNumberOfChannels = 3\n"
         "ElementType = MET_UCHAR\nElementDataFile = vec.raw\n";
    writeBytes(dir / "vec.raw", std::vector<char>(12, 0));
  }
  expectIoError([&] { io::readImage(dir / "vec.mhd"); }, {"vec.mhd", "3 components"});
  {
    std::ofstream h(dir / "nodata.mhd");
    h << "ObjectType = Image\nNDims = 2\nDimSize = 4 4\nElementType = MET_SHORT\n"
         "ElementDataFile = absent.raw\n";
  }
  expectIoError([&] { io::readImage(dir / "nodata.mhd"); }, {"nodata.mhd"});

  {
    std::ofstream h(dir / "zero.mha");
    h << "ObjectType = Image\nNDims = 2\nDimSize = 0 4\nElementType = MET_SHORT\n"
         "ElementDataFile = LOCAL\n";
  }
  expectIoError([&] { io::readImage(dir / "zero.mha"); }, {"zero.mha", "zero-size"});

  // VTI, PNG, JPEG: garbage and truncated.
  writeBytes(dir / "garbage.vti", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.vti"); }, {"garbage.vti"});
  io::writeImage(synthetic3D(), dir / "good.vti");
  const auto vti = readBytes(dir / "good.vti");
  writeBytes(dir / "cut.vti", std::vector<char>(vti.begin(), vti.begin() + vti.size() * 2 / 3));
  expectIoError([&] { io::readImage(dir / "cut.vti"); }, {"cut.vti"});
  writeBytes(dir / "garbage.png", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.png"); }, {"garbage.png", "not a PNG"});
  writeBytes(dir / "garbage.jpg", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.jpg"); }, {"garbage.jpg", "not a JPEG"});
  const std::string printed = err.text();
  BOOST_TEST(printed.empty(), "stderr got: " << printed);
}

// --------------------------------------------------------------------------------------------
// Unwritable outputs: IoError before anything is written, and no file or temporary left.
BOOST_AUTO_TEST_CASE(unwritable_outputs) {
  TempDir dir;
  const HostImage img = synthetic3D();
  expectIoError([&] { io::writeImage(img, dir / "no" / "such" / "dir" / "out.nii.gz"); },
                {"out.nii.gz", "does not exist"});
  fs::create_directory(dir / "target.nii");
  expectIoError([&] { io::writeImage(img, dir / "target.nii"); }, {"target.nii", "directory"});
  writeBytes(dir / "plainfile", {'x'});
  expectIoError([&] { io::writeImage(img, dir / "plainfile" / "out.nii"); },
                {"out.nii", "not a directory"});
  expectIoError([&] { io::writeImage(img, dir / "out.txt"); }, {"out.txt", "extension"});
  expectIoError([&] { io::writeImage(img, dir / "out.dcm"); }, {"out.dcm"});
  BOOST_CHECK_THROW(io::writeImage(HostImage{}, dir / "none.nii"), std::exception);
  BOOST_TEST(listing(dir.path) == (std::set<std::string>{"target.nii", "plainfile"}));
  BOOST_TEST(fs::is_empty(dir / "target.nii"));

  if (::geteuid() != 0) {  // root ignores permissions
    fs::create_directory(dir / "locked");
    fs::permissions(dir / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    expectIoError([&] { io::writeImage(img, dir / "locked" / "out.nii"); },
                  {"out.nii", "permission"});
    BOOST_TEST(fs::is_empty(dir / "locked"));
  } else {
    BOOST_TEST_MESSAGE("running as root: permission-denied case not exercised");
  }

  // Overwriting is atomic: the new content replaces the old, nothing else appears.
  io::writeImage(img, dir / "over.nii.gz");
  HostImage other = synthetic3D();
  other.data(0, 0, 0) = 42.0f;
  io::writeImage(other, dir / "over.nii.gz");
  BOOST_TEST(io::readImage(dir / "over.nii.gz").data(0, 0, 0) == 42.0f);
  for (auto const& n : listing(dir.path)) BOOST_TEST(n.find(".kortex-tmp") == std::string::npos, n);
}

// --------------------------------------------------------------------------------------------
// A write that fails half-way (the file-size limit stands in for a full disk) leaves no partial
// file and no temporary, and an existing target keeps its old content.
BOOST_AUTO_TEST_CASE(failed_write_leaves_nothing) {
  TempDir dir;
  HostImage small = synthetic3D();
  io::writeImage(small, dir / "keep.nii");
  io::writeImage(small, dir / "keep.nii.gz");
  // 64x64x16 random floats: 256 KiB, also after gzip (random mantissas do not compress).
  HostImage big("big", Geometry::make3D(64, 64, 16));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1000.0f, 1000.0f);
  for (Index i = 0; i < big.numVoxels(); ++i) big.data.data()[i] = uni(rng);
  VectorField<Kokkos::HostSpace> field("field", big.geometry, 3);
  for (std::size_t i = 0; i < field.data.size(); ++i) field.data.data()[i] = uni(rng);
  const auto before = listing(dir.path);

  constexpr rlim_t kLimit = 64 * 1024;  // bytes: well below every file written here
  rlimit old{};
  BOOST_REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto oldHandler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of being killed
  rlimit lim = old;
  lim.rlim_cur = kLimit;
  BOOST_REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::vector<std::string> errors;
  auto attempt = [&](auto&& f) {
    try {
      f();
      errors.push_back("<no exception>");
    } catch (IoError const& e) {
      errors.push_back(e.what());
    } catch (std::exception const& e) {
      errors.push_back(std::string("<not IoError> ") + e.what());
    }
  };
  attempt([&] { io::writeImage(big, dir / "keep.nii"); });
  attempt([&] { io::writeImage(big, dir / "keep.nii.gz"); });
  attempt([&] { io::writeImage(big, dir / "new.nii"); });
  attempt([&] { io::writeDisplacementField(field, dir / "field.nii.gz"); });
  attempt([&] { io::writeImage(big, dir / "pair.hdr"); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, oldHandler);

  const std::vector<std::string> names = {"keep.nii", "keep.nii.gz", "new.nii", "field.nii.gz",
                                          "pair.hdr"};
  BOOST_REQUIRE(errors.size() == names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    BOOST_TEST(errors[k].find("cannot write") != std::string::npos, errors[k]);
    BOOST_TEST(errors[k].find(names[k]) != std::string::npos, errors[k]);
    BOOST_TEST(errors[k].find("write failed") != std::string::npos, errors[k]);
  }
  BOOST_TEST(listing(dir.path) == before, "no partial output, no temporary directory");
  checkSameValues(io::readImage(dir / "keep.nii"), small);
  checkSameValues(io::readImage(dir / "keep.nii.gz"), small);
  // And with the limit lifted the same writes succeed.
  io::writeImage(big, dir / "new.nii");
  checkSameValues(io::readImage(dir / "new.nii"), big);
}

// --------------------------------------------------------------------------------------------
// Displacement fields (ITK/ANTs convention: world mm, LPS, intent 1007; see io/ImageIO.hpp).
namespace {
// ITK orthogonalises the direction in float32 (nifti_mat33_polar), Kortex in double: srow entries
// (unit direction times spacing) may differ in their last bits.
constexpr std::int32_t kSrowUlps = 2;
constexpr std::size_t kIntent = 68, kDatatype = 70, kBitpix = 72, kVoxOffset = 108,
                      kDescrip = 148, kMagic = 344;

// 7x5x4 field on the synthetic3D grid (oblique direction, spacing 0.7/1.3/2.1), random values.
VectorField<Kokkos::HostSpace> randomField(bool leftHanded, unsigned seed) {
  VectorField<Kokkos::HostSpace> f("field", synthetic3D(leftHanded).geometry, 3);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-5.0f, 5.0f);
  for (std::size_t i = 0; i < f.data.size(); ++i) f.data.data()[i] = uni(rng);
  return f;
}

double maxFieldDifference(VectorField<Kokkos::HostSpace> const& a,
                          VectorField<Kokkos::HostSpace> const& b) {
  BOOST_REQUIRE(a.data.size() == b.data.size());
  double m = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::abs(double(a.data.data()[i]) - double(b.data.data()[i])));
  return m;
}

template <class T>
T at(std::vector<char> const& b, std::size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

// The same 4x3x2 field written by ITK 5.2.1 (itk::ImageFileWriter<itk::Image<itk::Vector<float,
// 3>, 3>>, default NiftiImageIO settings, as ANTs writes its warps): spacing 0.7 1.3 2.1, origin
// (-12.5, 30.25, 7.125), direction rotation(1, 2, 3, 30 deg), vector at index (i, j, k) =
// (i + 10 j + 100 k) / 4 - 3 c - 0.5 for component c. All 640 bytes of the .nii file.
const char* const kItkField =
    "5c01000000000000000000000000000000000000000000000000000000000000000000000000720005000400"
    "030002000100030001000100000000000000000000000000ef031000200000000000803f3333333f6666a63f"
    "66660640000000000000000000000000000000000000b0430000803f00000000000000020000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000100010035aa0d3e35aa8dbd"
    "ea4677bf000048410000f2c10000e44018e81cbf3418fe3e0f1d1fbf00004841058a96bee57996bf67e3233e"
    "0000f2c18efe2abed0527e3e3cf0ff3f0000e440000000000000000000000000000000006e2b310000000000"
    "000000bf000080be000000000000803e0000004000001040000020400000304000009040000098400000a040"
    "0000a8400000c4410000c6410000c8410000ca410000d8410000da410000dc410000de410000ec410000ee41"
    "0000f0410000f241000060c0000050c0000040c0000030c0000080bf000040bf000000bf000080be0000c03f"
    "0000e03f00000040000010400000ac410000ae410000b0410000b2410000c0410000c2410000c4410000c641"
    "0000d4410000d6410000d8410000da410000d0c00000c8c00000c0c00000b8c0000080c0000070c0000060c0"
    "000050c00000c0bf0000a0bf000080bf000040bf00009441000096410000984100009a410000a8410000aa41"
    "0000ac410000ae410000bc410000be410000c0410000c241"
    ;

std::vector<char> fromHex(const char* hex) {
  std::vector<char> b;
  for (const char* p = hex; p[0] && p[1]; p += 2)
    b.push_back(char(std::stoi(std::string(p, 2), nullptr, 16)));
  return b;
}

VectorField<Kokkos::HostSpace> itkTestField() {
  Geometry g = Geometry::make3D(4, 3, 2);
  g.spacing = {0.7, 1.3, 2.1};
  g.origin = {-12.5, 30.25, 7.125};
  g.direction = rotation(1, 2, 3, 30);
  VectorField<Kokkos::HostSpace> f("itk", g, 3);
  for (int c = 0; c < 3; ++c)
    for (Index k = 0; k < 2; ++k)
      for (Index j = 0; j < 3; ++j)
        for (Index i = 0; i < 4; ++i)
          f.data(c, k, j, i) = float(i + 10 * j + 100 * k) * 0.25f - 3.0f * c - 0.5f;
  return f;
}
}  // namespace

BOOST_AUTO_TEST_CASE(displacement_field_roundtrip) {
  TempDir dir;
  for (bool leftHanded : {false, true}) {
    const auto f = randomField(leftHanded, leftHanded ? 11u : 5u);
    for (std::string ext : {".nii", ".nii.gz"}) {
      BOOST_TEST_CONTEXT(ext << (leftHanded ? " left-handed" : "")) {
        const fs::path p = dir / ("field" + ext);
        io::writeDisplacementField(f, p);
        const auto back = io::readDisplacementField(p);
        BOOST_TEST(back.components() == 3);
        checkGeometry(back.geometry, f.geometry, kFloatHeaderTol);
        BOOST_TEST(maxFieldDifference(back, f) == 0.0);  // float32 stored verbatim
        BOOST_TEST(back.data(2, 3, 4, 6) == f.data(2, 3, 4, 6));
      }
    }
  }
  BOOST_TEST(listing(dir.path) == (std::set<std::string>{"field.nii", "field.nii.gz"}));
}

// The header fields and the voxel layout, from the raw bytes.
BOOST_AUTO_TEST_CASE(displacement_field_header) {
  TempDir dir;
  const auto f = randomField(false, 3);
  io::writeDisplacementField(f, dir / "f.nii");
  const auto b = readBytes(dir / "f.nii");
  const std::size_t nvox = 7 * 5 * 4;
  BOOST_REQUIRE(b.size() == 352 + 3 * nvox * 4);
  const std::int16_t dims[8] = {5, 7, 5, 4, 1, 3, 1, 1};
  for (int i = 0; i < 8; ++i) BOOST_TEST(at<std::int16_t>(b, kDim + 2 * i) == dims[i], "dim " << i);
  BOOST_TEST(at<std::int16_t>(b, kIntent) == 1007);  // NIFTI_INTENT_VECTOR
  BOOST_TEST(at<std::int16_t>(b, kDatatype) == 16);  // float32
  BOOST_TEST(at<std::int16_t>(b, kBitpix) == 32);
  BOOST_TEST(at<float>(b, kVoxOffset) == 352.0f);
  BOOST_TEST(at<float>(b, kSlope) == 1.0f);
  BOOST_TEST(at<float>(b, kInter) == 0.0f);
  BOOST_TEST(int(b[kUnits]) == 10);  // mm | s, as ITK >= 5.4
  BOOST_TEST(at<std::int16_t>(b, kQcode) == 1);
  BOOST_TEST(at<std::int16_t>(b, kScode) == 1);
  BOOST_TEST(at<float>(b, kPixdim + 4) == 0.7f);
  BOOST_TEST(at<float>(b, kPixdim + 8) == 1.3f);
  BOOST_TEST(at<float>(b, kPixdim + 12) == 2.1f);
  BOOST_TEST(std::memcmp(b.data() + kMagic, "n+1\0", 4) == 0);
  // Component-major (x block, y block, z block), x fastest; values verbatim (LPS, no flip).
  for (int c = 0; c < 3; ++c)
    for (Index k : {0, 3})
      for (Index j : {0, 4})
        for (Index i : {0, 5}) {
          const std::size_t idx = c * nvox + std::size_t(k * 35 + j * 7 + i);
          BOOST_TEST(at<float>(b, 352 + 4 * idx) == f.data(c, k, j, i));
        }
  // The scalar reader refuses it with a message that points to readDisplacementField.
  expectIoError([&] { io::readImage(dir / "f.nii"); },
                {"f.nii", "vector image", "intent_code 1007", "readDisplacementField"});
}

// Ground truth from ITK: its file reads back as ITK holds the field, and Kortex writes the same
// field to the same bytes (header and voxels) except descrip, xyzt_units and the last bit of
// some srow entries (ITK orthogonalises the direction in float32 arithmetic, Kortex in double).
BOOST_AUTO_TEST_CASE(displacement_field_itk_written) {
  TempDir dir;
  const std::vector<char> itk = fromHex(kItkField);
  BOOST_REQUIRE(itk.size() == 640u);
  writeBytes(dir / "itk.nii", itk);
  const auto expected = itkTestField();
  const auto f = io::readDisplacementField(dir / "itk.nii");
  // Geometry as ITK 5.2's reader prints it for this file (9 digits).
  Geometry g = Geometry::make3D(4, 3, 2);
  g.spacing = {0.699999988, 1.29999995, 2.0999999};
  g.origin = {-12.5, 30.25, 7.125};
  g.direction = {0.87559501,   -0.381752647, 0.295970097, 0.420031105, 0.904303855,
                 -0.0762129393, -0.238552406, 0.191048306, 0.952151926};
  checkGeometry(f.geometry, g, kItkPrintTol);
  BOOST_TEST(maxFieldDifference(f, expected) == 0.0);
  BOOST_TEST(f.data(0, 0, 0, 0) == -0.5f);  // ITK's reader: (-0.5, -3.5, -6.5) at (0, 0, 0)
  BOOST_TEST(f.data(1, 0, 0, 0) == -3.5f);
  BOOST_TEST(f.data(2, 1, 2, 3) == float(3 + 20 + 100) * 0.25f - 6.5f);

  io::writeDisplacementField(expected, dir / "kortex.nii");
  const auto mine = readBytes(dir / "kortex.nii");
  BOOST_REQUIRE(mine.size() == itk.size());
  for (std::size_t i = 0; i < itk.size(); ++i) {
    if (i >= kDescrip && i < kDescrip + 80) continue;  // ITK leaves descrip empty
    if (i == kUnits) continue;  // ITK 5.2/5.3 wrote 2 (mm), ITK >= 5.4 writes 10 (mm | s)
    if (i >= kSrow && i < kSrow + 48) continue;  // compared as floats below
    BOOST_TEST(int(mine[i]) == int(itk[i]), "byte " << i);
  }
  for (std::size_t e = 0; e < 12; ++e) {
    // Same sign, so the distance of the bit patterns is the distance in ulps.
    const std::int32_t a = at<std::int32_t>(mine, kSrow + 4 * e);
    const std::int32_t b = at<std::int32_t>(itk, kSrow + 4 * e);
    BOOST_TEST(std::abs(a - b) <= kSrowUlps,
               "srow element " << e << ": " << at<float>(mine, kSrow + 4 * e) << " vs ITK "
                               << at<float>(itk, kSrow + 4 * e) << ", " << std::abs(a - b)
                               << " ulps");
  }
  BOOST_TEST(int(itk[kUnits]) == 2);
}

// NIFTI_INTENT_DISPVECT (1006) holds RAS vectors: x and y are negated on reading (ITK >= 5.4).
BOOST_AUTO_TEST_CASE(displacement_field_intent_dispvect) {
  TempDir dir;
  const auto f = randomField(false, 9);
  io::writeDisplacementField(f, dir / "f.nii");
  auto b = readBytes(dir / "f.nii");
  patch<std::int16_t>(b, kIntent, 1006);
  writeBytes(dir / "ras.nii", b);
  const auto back = io::readDisplacementField(dir / "ras.nii");
  for (int c = 0; c < 3; ++c)
    for (Index k = 0; k < 4; ++k)
      for (Index j = 0; j < 5; ++j)
        for (Index i = 0; i < 7; ++i)
          BOOST_TEST(back.data(c, k, j, i) == (c < 2 ? -1.0f : 1.0f) * f.data(c, k, j, i));
  checkGeometry(back.geometry, f.geometry, kFloatHeaderTol);
}

BOOST_AUTO_TEST_CASE(displacement_field_rejections) {
  TempDir dir;
  io::writeImage(synthetic3D(), dir / "scalar.nii.gz");
  expectIoError([&] { io::readDisplacementField(dir / "scalar.nii.gz"); },
                {"scalar.nii.gz", "is not a displacement field", "scalar image", "intent_code 0",
                 "1007"});
  const auto f = randomField(false, 1);
  io::writeDisplacementField(f, dir / "f.nii");
  const auto good = readBytes(dir / "f.nii");
  auto b = good;
  patch<std::int16_t>(b, kDim + 10, 2);  // dim[5] = 2 components (file now has extra bytes)
  writeBytes(dir / "two.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "two.nii"); },
                {"two.nii", "has 2 components", "has 3"});
  b = good;
  patch<std::int16_t>(b, kDim + 10, 4);
  writeBytes(dir / "four.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "four.nii"); }, {"four.nii", "4 components"});
  b = good;
  patch<std::int16_t>(b, kDim + 8, 2);  // dim[4] = 2: a series of fields
  writeBytes(dir / "series.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "series.nii"); }, {"series.nii", "series"});
  b = good;
  patch<std::int16_t>(b, kIntent, 0);  // 5D, no vector intent: not a field for ITK either
  writeBytes(dir / "nointent.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "nointent.nii"); },
                {"nointent.nii", "is not a displacement field", "intent_code 0"});
  writeBytes(dir / "cut.nii", std::vector<char>(good.begin(), good.end() - 5));
  expectIoError([&] { io::readDisplacementField(dir / "cut.nii"); }, {"cut.nii", "truncated"});
  expectIoError([&] { io::readDisplacementField(dir / "missing.nii"); },
                {"missing.nii", "no such file"});
  writeBytes(dir / "f.mha", good);
  expectIoError([&] { io::readDisplacementField(dir / "f.mha"); }, {"f.mha", "NIfTI"});

  // Writing: NIfTI only, 3D, 3 components; data extents must match the geometry.
  expectIoError([&] { io::writeDisplacementField(f, dir / "out.mha"); }, {"out.mha", "NIfTI"});
  VectorField<Kokkos::HostSpace> flat("flat", Geometry::make2D(6, 5), 2);
  expectIoError([&] { io::writeDisplacementField(flat, dir / "flat.nii"); }, {"flat.nii", "3D"});
  VectorField<Kokkos::HostSpace> one("one", f.geometry, 1);
  expectIoError([&] { io::writeDisplacementField(one, dir / "one.nii"); },
                {"one.nii", "3 components"});
  VectorField<Kokkos::HostSpace> wrong = f;
  wrong.geometry = Geometry::make3D(8, 5, 4);
  BOOST_CHECK_THROW(io::writeDisplacementField(wrong, dir / "wrong.nii"), InvalidArgument);
  expectIoError([&] { io::writeDisplacementField(f, dir / "no" / "dir" / "x.nii"); },
                {"x.nii", "does not exist"});
  std::set<std::string> expected = {"scalar.nii.gz", "f.nii",  "two.nii", "four.nii", "series.nii",
                                    "nointent.nii",  "cut.nii", "f.mha"};
  BOOST_TEST(listing(dir.path) == expected);
}

// u (index units, h(p) = p - u(p)) -> d (world mm, LPS): d = -D diag(s) u, and back.
BOOST_AUTO_TEST_CASE(index_world_displacement) {
  const auto u = randomField(true, 21);  // reused as an index-space field
  const Geometry& g = u.geometry;
  const auto d = io::indexDisplacementToWorld(u, g);
  BOOST_TEST(d.geometry.sameGrid(g, 0.0));
  auto world = [&](double i, double j, double k, int r) {
    const double p[3] = {i, j, k};
    double w = g.origin[r];
    for (int c = 0; c < 3; ++c) w += g.direction[r * 3 + c] * g.spacing[c] * p[c];
    return w;
  };
  double worst = 0;
  for (Index k = 0; k < 4; ++k)
    for (Index j = 0; j < 5; ++j)
      for (Index i = 0; i < 7; ++i) {
        // x + d(x) is the world position of the index point p - u(p) the registration samples.
        const double q[3] = {i - double(u.data(0, k, j, i)), j - double(u.data(1, k, j, i)),
                             k - double(u.data(2, k, j, i))};
        for (int r = 0; r < 3; ++r) {
          const double expect = world(q[0], q[1], q[2], r) - world(i, j, k, r);
          worst = std::max(worst, std::abs(double(d.data(r, k, j, i)) - expect));
        }
      }
  BOOST_TEST(worst <= kFieldConversionTol);
  const auto back = io::worldDisplacementToIndex(d, g);
  BOOST_TEST(maxFieldDifference(back, u) <= kFieldConversionTol);
  // Sizes must agree.
  BOOST_CHECK_THROW(io::indexDisplacementToWorld(u, Geometry::make3D(7, 5, 3)), InvalidArgument);
  BOOST_CHECK_THROW(io::worldDisplacementToIndex(u, Geometry::make2D(7, 5)), InvalidArgument);
}

// --------------------------------------------------------------------------------------------
// A non-finite origin (or direction) is refused wherever a geometry is made: the NIfTI readers
// (qform and sform, raw header fields: nifti_clib turns a NaN qoffset into 0), the field reader,
// and every writer. Before: a NaN qoffset read as origin 0, a NaN srow translation reached the
// geometry and the written files.
namespace {
constexpr std::size_t kQuatern = 256, kQoffset = 268;
constexpr std::size_t kSrowX3 = kSrow + 12;  // srow_x[3]: the sform's x translation
}  // namespace

BOOST_AUTO_TEST_CASE(nonfinite_origin_is_refused) {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  io::writeImage(synthetic3D(), dir / "base.nii");
  const std::vector<char> base = readBytes(dir / "base.nii");

  // qform only (sform_code 0): qoffset_x NaN, qoffset_z +Inf.
  auto b = base;
  patch<std::int16_t>(b, kScode, 0);
  patch<float>(b, kQoffset, nan);
  writeBytes(dir / "qnan.nii", b);
  expectIoError([&] { io::readImage(dir / "qnan.nii"); }, {"qnan.nii", "qform", "origin must be finite", "nan"});
  b = base;
  patch<std::int16_t>(b, kScode, 0);
  patch<float>(b, kQoffset + 8, inf);
  writeBytes(dir / "qinf.nii", b);
  expectIoError([&] { io::readImage(dir / "qinf.nii"); }, {"qinf.nii", "qform", "origin must be finite", "inf"});
  // A non-finite quaternion (nifti_clib makes it 0: the identity rotation) is refused too.
  b = base;
  patch<std::int16_t>(b, kScode, 0);
  patch<float>(b, kQuatern, nan);
  writeBytes(dir / "quat.nii", b);
  expectIoError([&] { io::readImage(dir / "quat.nii"); }, {"quat.nii", "qform", "direction must be finite"});
  // The same NaN qoffset beside a valid scanner sform (which ITK's rule picks): still refused,
  // the header states a transform with no position.
  b = base;
  patch<float>(b, kQoffset + 4, nan);
  writeBytes(dir / "qnans.nii", b);
  expectIoError([&] { io::readImage(dir / "qnans.nii"); }, {"qnans.nii", "qform", "origin must be finite"});

  // sform_code 1 with a NaN translation, with and without a qform.
  b = base;
  patch<float>(b, kSrowX3, nan);
  writeBytes(dir / "snan.nii", b);
  expectIoError([&] { io::readImage(dir / "snan.nii"); }, {"snan.nii", "sform", "origin must be finite", "nan"});
  patch<std::int16_t>(b, kQcode, 0);
  writeBytes(dir / "snanonly.nii", b);
  expectIoError([&] { io::readImage(dir / "snanonly.nii"); }, {"snanonly.nii", "sform", "origin must be finite"});
  // sform_code 2 (aligned, disagreeing with the qform, so ITK's rule keeps the qform) with an
  // infinite translation: refused, never carried into the metadata and written back.
  b = base;
  putSrow(b, {0.7f, 0, 0, 1, 0, 1.3f, 0, 2, 0, 0, 2.1f, inf});
  patch<std::int16_t>(b, kScode, 2);
  writeBytes(dir / "s2inf.nii", b);
  expectIoError([&] { io::readImage(dir / "s2inf.nii"); }, {"s2inf.nii", "sform", "origin must be finite", "inf"});
  // A finite header next to them still reads (the patches above are what is refused).
  BOOST_TEST(io::readImage(dir / "base.nii").geometry.sameGrid(synthetic3D().geometry, kFloatHeaderTol));

  // Displacement field: a NaN origin is refused, not applied as if it were 0.
  const auto field = randomField(false, 4);
  io::writeDisplacementField(field, dir / "field.nii");
  const auto fieldBytes = readBytes(dir / "field.nii");
  b = fieldBytes;
  patch<float>(b, kSrowX3, nan);
  writeBytes(dir / "fsnan.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "fsnan.nii"); }, {"fsnan.nii", "sform", "origin must be finite"});
  b = fieldBytes;
  patch<std::int16_t>(b, kScode, 0);
  patch<float>(b, kQoffset, nan);
  writeBytes(dir / "fqnan.nii", b);
  expectIoError([&] { io::readDisplacementField(dir / "fqnan.nii"); }, {"fqnan.nii", "qform", "origin must be finite"});

  // Writers: refused before anything is written, in every format.
  const auto before = listing(dir.path);
  HostImage img = synthetic3D();
  img.geometry.origin[0] = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::string> outs = {"o.nii", "o.nii.gz", "o.hdr"};
  if (kHaveVtk) outs.insert(outs.end(), {"o.mha", "o.vti"});
  for (auto const& name : outs)
    expectIoError([&] { io::writeImage(img, dir / name); }, {name, "origin must be finite", "nan"});
  img.geometry.origin[0] = 0.0;
  img.geometry.direction[4] = std::numeric_limits<double>::infinity();
  expectIoError([&] { io::writeImage(img, dir / "d.nii"); }, {"d.nii", "direction must be finite"});
  VectorField<Kokkos::HostSpace> badField = field;
  badField.geometry.origin[2] = -std::numeric_limits<double>::infinity();
  expectIoError([&] { io::writeDisplacementField(badField, dir / "of.nii"); }, {"of.nii", "origin must be finite"});
  BOOST_TEST(listing(dir.path) == before, "no file written");

  // A header field in the metadata that is not finite is never written back verbatim: the header
  // is rebuilt from the (valid) geometry, and reads back as it.
  HostImage fromFile = io::readImage(dir / "base.nii");
  fromFile.metadata["nifti.qoffset"] = "nan 0 0";
  io::writeImage(fromFile, dir / "rebuilt.nii");
  const auto rebuilt = readBytes(dir / "rebuilt.nii");
  for (int i = 0; i < 3; ++i) BOOST_TEST(std::isfinite(at<float>(rebuilt, kQoffset + 4 * i)), "qoffset " << i);
  for (int i = 0; i < 12; ++i) BOOST_TEST(std::isfinite(at<float>(rebuilt, kSrow + 4 * i)), "srow " << i);
  checkGeometry(io::readImage(dir / "rebuilt.nii").geometry, synthetic3D().geometry, kFloatHeaderTol);

  // The rule itself: a NaN anywhere makes two grids differ.
  Geometry g = synthetic3D().geometry, h = g;
  h.origin[1] = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(!g.sameGrid(h));
  BOOST_TEST(!h.sameGrid(h));
}

// --------------------------------------------------------------------------------------------
// DICOM slices written here, element by element: a Part 10 file, explicit VR little endian,
// uncompressed 16-bit MR, 4x3 pixels, axial (IOP 1 0 0 0 1 0), 1 mm pixels, position (0, 0, z).
namespace {
void dicomElement(std::vector<char>& b, std::uint16_t group, std::uint16_t element, const char* vr,
                  std::string value) {
  if (value.size() % 2) value.push_back(std::strcmp(vr, "UI") == 0 ? '\0' : ' ');
  auto put16 = [&](std::uint16_t v) { b.push_back(char(v & 0xFF)), b.push_back(char(v >> 8)); };
  put16(group);
  put16(element);
  b.push_back(vr[0]);
  b.push_back(vr[1]);
  if (std::strcmp(vr, "OW") == 0) {
    put16(0);
    const std::uint32_t n = std::uint32_t(value.size());
    for (int k = 0; k < 4; ++k) b.push_back(char((n >> (8 * k)) & 0xFF));
  } else {
    put16(std::uint16_t(value.size()));
  }
  b.insert(b.end(), value.begin(), value.end());
}

std::string us(std::uint16_t v) { return std::string{char(v & 0xFF), char(v >> 8)}; }

std::vector<char> dicomSlice(std::string const& seriesUid, std::string const& frameUid, std::string const& z,
                             std::uint16_t fill) {
  std::vector<char> b(128, 0);
  b.insert(b.end(), {'D', 'I', 'C', 'M'});
  dicomElement(b, 0x0002, 0x0010, "UI", "1.2.840.10008.1.2.1");  // explicit VR little endian
  dicomElement(b, 0x0008, 0x0060, "CS", "MR");
  dicomElement(b, 0x0020, 0x000E, "UI", seriesUid);
  dicomElement(b, 0x0020, 0x0032, "DS", "0\\0\\" + z);
  dicomElement(b, 0x0020, 0x0037, "DS", "1\\0\\0\\0\\1\\0");
  if (!frameUid.empty()) dicomElement(b, 0x0020, 0x0052, "UI", frameUid);
  dicomElement(b, 0x0028, 0x0002, "US", us(1));
  dicomElement(b, 0x0028, 0x0004, "CS", "MONOCHROME2");
  dicomElement(b, 0x0028, 0x0010, "US", us(3));  // rows
  dicomElement(b, 0x0028, 0x0011, "US", us(4));  // columns
  dicomElement(b, 0x0028, 0x0030, "DS", "1\\1");
  dicomElement(b, 0x0028, 0x0100, "US", us(16));
  dicomElement(b, 0x0028, 0x0101, "US", us(16));
  dicomElement(b, 0x0028, 0x0102, "US", us(15));
  dicomElement(b, 0x0028, 0x0103, "US", us(0));
  std::string pixels;
  for (int i = 0; i < 12; ++i) pixels += us(std::uint16_t(fill + i));
  dicomElement(b, 0x7FE0, 0x0010, "OW", pixels);
  return b;
}
}  // namespace

// One SeriesInstanceUID holding two acquisitions (two FrameOfReferenceUIDs, slices interleaved):
// refused with both frames listed, never stacked into one volume. Before: read as one 6-slice
// volume at 1 mm.
BOOST_AUTO_TEST_CASE(dicom_two_frames_of_reference_are_refused) {
  TempDir dir;
  const std::string series = "1.2.826.0.1.3680043.2.1125.7";
  const std::string frameA = "1.2.826.0.1.3680043.2.1125.100", frameB = "1.2.826.0.1.3680043.2.1125.200";
  // Control: the same six slices in one frame of reference are one 4x3x6 volume, in z order.
  fs::create_directory(dir / "one");
  for (int k = 0; k < 6; ++k)
    writeBytes(dir / "one" / ("s" + std::to_string(k) + ".dcm"), dicomSlice(series, frameA, std::to_string(k), std::uint16_t(100 * k)));
  const HostImage vol = io::readImage(dir / "one");
  BOOST_TEST(vol.geometry.nz() == 6);
  BOOST_TEST(vol.data(5, 0, 0) == 500.0f);
  BOOST_TEST(md(vol, "dicom.frame_of_reference_uid") == frameA);

  // Interleaved: even positions in frame A, odd ones in frame B, one series UID.
  fs::create_directory(dir / "two");
  std::vector<fs::path> files;
  for (int k = 0; k < 6; ++k) {
    files.push_back(dir / "two" / ("s" + std::to_string(k) + ".dcm"));
    writeBytes(files.back(), dicomSlice(series, k % 2 ? frameB : frameA, std::to_string(k), std::uint16_t(100 * k)));
  }
  const std::vector<std::string> expected = {"two", "2 frames of reference", "FrameOfReferenceUID",
                                             frameA + ": 3 slices", frameB + ": 3 slices"};
  expectIoError([&] { io::readImage(dir / "two"); }, expected);
  expectIoError([&] { io::readImageSeries(files); }, {"2 frames of reference", frameA + ": 3 slices", frameB + ": 3 slices"});
  // Choosing the series by its UID does not choose a frame: still refused.
  io::ReadOptions chosen;
  chosen.series = {series};
  expectIoError([&] { io::readImage(dir / "two", chosen); }, expected);
  // One slice without the attribute among slices with it: two groups as well.
  fs::create_directory(dir / "missing");
  for (int k = 0; k < 4; ++k)
    writeBytes(dir / "missing" / ("s" + std::to_string(k) + ".dcm"), dicomSlice(series, k == 2 ? "" : frameA, std::to_string(k), 0));
  expectIoError([&] { io::readImage(dir / "missing"); },
                {"missing", "2 frames of reference", frameA + ": 3 slices", "(no FrameOfReferenceUID): 1 slice"});

  // A slice position that is not a number is refused as a non-finite origin.
  writeBytes(dir / "nanpos.dcm", dicomSlice(series, frameA, "nan", 0));
  expectIoError([&] { io::readImage(dir / "nanpos.dcm"); }, {"nanpos.dcm", "origin must be finite"});
}
