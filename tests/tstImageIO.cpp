#define BOOST_TEST_MODULE ImageIO
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "io/ImageIO.hpp"

using namespace kortex;
namespace fs = std::filesystem;

namespace {

// Tolerances, each with its reason.
// NIfTI stores the geometry as float32 (quaternion + offsets): ~1e-7 relative, a few ulps more
// after quaternion -> matrix.
constexpr double kFloatHeaderTol = 2e-6;
// Ground truth printed by ITK 5.2 (itk::ImageFileReader<Image<float,3>>) with 9 digits.
constexpr double kItkPrintTol = 1e-5;
// JPEG is lossy: quality 95 on a smooth 8-bit ramp stays within a few grey levels.
constexpr double kJpegTol = 6.0;

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kortex-tstImageIO-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  fs::path operator/(std::string const& n) const { return path / n; }
};

std::set<std::string> listing(fs::path const& dir) {
  std::set<std::string> names;
  for (auto const& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::vector<char> readBytes(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeBytes(fs::path const& p, std::vector<char> const& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
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

void checkGeometry(Geometry const& a, Geometry const& b, double tol) {
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

void checkSameValues(HostImage const& a, HostImage const& b) {
  BOOST_REQUIRE(a.numVoxels() == b.numVoxels());
  BOOST_TEST(kortex::test::maxAbsDifference(a, b) == 0.0);
}

double sum(HostImage const& img) {
  double s = 0;
  for (Index i = 0; i < img.numVoxels(); ++i) s += img.data.data()[i];
  return s;
}

std::string md(HostImage const& img, std::string const& key) {
  auto it = img.metadata.find(key);
  return it == img.metadata.end() ? std::string("<missing>") : it->second;
}

// Runs f, expects IoError whose message contains every fragment.
template <class F>
void expectIoError(F&& f, std::vector<std::string> const& fragments) {
  try {
    f();
    BOOST_ERROR("expected kortex::IoError, nothing was thrown");
  } catch (IoError const& e) {
    const std::string msg = e.what();
    for (auto const& frag : fragments)
      BOOST_TEST(msg.find(frag) != std::string::npos, "'" << frag << "' not in: " << msg);
  } catch (std::exception const& e) {
    BOOST_ERROR("expected kortex::IoError, got: " << e.what());
  }
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

fs::path data(std::string const& sub) { return kortex::test::dataDir() / sub; }

const char* kIxi = "mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz";

}  // namespace

// --------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(extensions) {
  using io::Access;
  for (auto n : {"a.nii", "a.nii.gz", "A.NII.GZ", "a.mha", "a.mhd", "a.vti", "a.png", "a.jpg",
                 "a.JPEG", "dir/a.dcm"})
    BOOST_TEST(io::isSupportedExtension(n), n);
  for (auto n : {"a.txt", "a", "a.gz", "a.nii.bz2", ".nii", "a.img", "a.hdr"})
    BOOST_TEST(!io::isSupportedExtension(n), n);
  BOOST_TEST(io::isSupportedExtension("a.dcm", Access::Read));
  BOOST_TEST(!io::isSupportedExtension("a.dcm", Access::Write));
  BOOST_TEST(io::isSupportedExtension("a.nii.gz", Access::Write));
  const std::string r = io::supportedExtensions(), w = io::supportedExtensions(Access::Write);
  for (auto e : {".nii", ".nii.gz", ".mha", ".mhd", ".vti", ".png", ".jpg", ".jpeg", ".dcm"})
    BOOST_TEST(r.find(e) != std::string::npos, e);
  BOOST_TEST(w.find(".dcm") == std::string::npos);
  BOOST_TEST(w.find(".nii.gz") != std::string::npos);
}

// --------------------------------------------------------------------------------------------
// Round trips of a synthetic volume with a non-trivial geometry, for every writable 3D format.
BOOST_AUTO_TEST_CASE(roundtrip_3d_all_formats) {
  TempDir dir;
  for (bool leftHanded : {false, true}) {
    const HostImage img = synthetic3D(leftHanded);
    for (std::string ext : {".nii", ".nii.gz", ".mha", ".mhd", ".vti"}) {
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
  const std::set<std::string> expected = {"vol.nii", "vol.nii.gz", "vol.mha",   "vol.mhd",
                                          "vol.raw", "vol.vti",    "again.nii", "again.nii.gz"};
  BOOST_TEST(listing(dir.path) == expected, "directory holds exactly the written files");
}

BOOST_AUTO_TEST_CASE(roundtrip_2d) {
  TempDir dir;
  // A pure 2D image and a 2D slice with a 3D orientation (as a tilted CT slice has).
  HostImage flat = synthetic2D();
  HostImage tilted = synthetic2D();
  tilted.geometry.direction = rotation(1, 0, 0, 18.5);
  tilted.geometry.origin = {-125.0, -123.5, 5.8};
  for (auto* img : {&flat, &tilted}) {
    for (std::string ext : {".nii.gz", ".mha", ".mhd", ".vti"}) {
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

BOOST_AUTO_TEST_CASE(png_montage) {
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
// Real data. Ground truth: the NIfTI headers parsed by hand (python struct) and ITK 5.2's
// ImageFileReader<Image<float,3>> on the same files (values printed with 9 digits).
BOOST_AUTO_TEST_CASE(nifti_ixi_real) {
  if (!kortex::test::requireData(kIxi)) return;
  const HostImage img = io::readImage(data(kIxi));
  const Geometry& g = img.geometry;
  BOOST_TEST(g.dimension == 3);
  BOOST_TEST(g.nx() == 120);
  BOOST_TEST(g.ny() == 120);
  BOOST_TEST(g.nz() == 90);
  Geometry itk = Geometry::make3D(120, 120, 90);
  itk.spacing = {2, 2, 2};
  itk.origin = {88.1609573, -118.232269, -135.268158};
  itk.direction = {0, 0, -1, 1, 0, 0, 0, 1, 0};
  checkGeometry(g, itk, kItkPrintTol);
  // Header: qform and sform both scanner-anatomical, qfac -1 (pixdim[0] = -1), uint8 with
  // scl_slope 13.895, data at byte 2912 after a 2.5 KB extension.
  BOOST_TEST(md(img, "nifti.qform_code") == "1");
  BOOST_TEST(md(img, "nifti.sform_code") == "1");
  BOOST_TEST(md(img, "nifti.qfac") == "-1");
  BOOST_TEST(md(img, "nifti.orientation_source") == "sform");
  BOOST_TEST(md(img, "nifti.datatype") == "uint8");
  BOOST_TEST(md(img, "nifti.quatern") == "0.5 -0.5 -0.5");
  const double slope = 13.895223617553711;  // float32 scl_slope of the file
  BOOST_TEST(float(std::stod(md(img, "nifti.scl_slope"))) == float(slope));
  // Values are stored uint8 times the slope: every voxel is an integer multiple in [0, 255].
  int notMultiple = 0;
  for (Index i = 0; i < img.numVoxels(); ++i) {
    const double q = img.data.data()[i] / slope;
    if (std::abs(q - std::round(q)) > 1e-4 || q < -1e-4 || q > 255.0001) ++notMultiple;
  }
  BOOST_TEST(notMultiple == 0);
  // Voxels at known indices (ITK), which also pins the slice order (qfac = -1 is NOT reversed).
  BOOST_TEST(img.data(45, 60, 60) == 1750.79822f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(img.data(30, 20, 10) == 13.8952236f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(img.data(89, 0, 119) == 0.0f);
  BOOST_TEST(sum(img) == 509647371.12665558, boost::test_tools::tolerance(1e-9));

  // Write and read back: identical geometry, codes, matrices and voxels; float32, slope 1.
  TempDir dir;
  for (std::string name : {"ixi.nii.gz", "ixi.nii"}) {
    io::writeImage(img, dir / name);
    const HostImage back = io::readImage(dir / name);
    checkGeometry(back.geometry, g, 0.0);
    for (auto key : {"nifti.qform_code", "nifti.sform_code", "nifti.qform", "nifti.sform",
                     "nifti.quatern", "nifti.qoffset", "nifti.qfac", "nifti.pixdim",
                     "nifti.xyzt_units", "nifti.orientation_source"})
      BOOST_TEST(md(back, key) == md(img, key), key);
    BOOST_TEST(md(back, "nifti.datatype") == "float32");
    BOOST_TEST(md(back, "nifti.scl_slope") == "1");
    checkSameValues(back, img);
  }
  // Uncompressed output is exactly header + extension flag + float voxels.
  BOOST_TEST(fs::file_size(dir / "ixi.nii") == 352u + 120u * 120u * 90u * 4u);
}

BOOST_AUTO_TEST_CASE(nifti_icbm_and_labels_real) {
  const std::string t1 =
      "mri/template_icbm152_2009a/mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz";
  if (!kortex::test::requireData(t1)) return;
  const HostImage img = io::readImage(data(t1));
  Geometry itk = Geometry::make3D(197, 233, 189);
  itk.origin = {98, 134, -72};
  itk.direction = {-1, 0, 0, 0, -1, 0, 0, 0, 1};
  checkGeometry(img.geometry, itk, 1e-12);
  BOOST_TEST(md(img, "nifti.qform_code") == "0");
  BOOST_TEST(md(img, "nifti.sform_code") == "2");
  BOOST_TEST(md(img, "nifti.orientation_source") == "sform");
  BOOST_TEST(img.data(94, 116, 98) == 198.0f);
  BOOST_TEST(sum(img) == 333468829.0);

  const std::string lab = "mri/ixi_2mm_labels/IXI012-HH-1211-T1_ds_DLMUSE.nii.gz";
  if (!kortex::test::requireData(lab)) return;
  const HostImage labels = io::readImage(data(lab));
  // Only an sform (code 2) here, but the same grid as the T1 it was computed from.
  BOOST_TEST(md(labels, "nifti.qform_code") == "0");
  BOOST_TEST(labels.geometry.sameGrid(io::readImage(data(kIxi)).geometry, 1e-6));
  BOOST_TEST(labels.data(45, 60, 60) == 35.0f);
  BOOST_TEST(sum(labels) == 20422750.0);
}

BOOST_AUTO_TEST_CASE(dicom_ct_real) {
  if (!kortex::test::requireData("ct/head_ge/01.dcm")) return;
  const HostImage s1 = io::readImage(data("ct/head_ge/01.dcm"));
  Geometry itk = Geometry::make2D(512, 512);
  itk.spacing = {0.4882812, 0.4882812, 1.0};
  itk.origin = {-125, -123.540457, 5.8360586};
  itk.direction = {1, 0, 0, 0, 0.948323647, 0.317304682, 0, -0.317304682, 0.948323647};
  checkGeometry(s1.geometry, itk, kItkPrintTol);
  BOOST_TEST(md(s1, "dicom.modality") == "CT");
  BOOST_TEST(md(s1, "dicom.pixel_padding_value") == "-1500");
  BOOST_TEST(s1.data(0, 256, 256) == 997.0f);
  BOOST_TEST(s1.data(0, 200, 100) == -41.0f);
  BOOST_TEST(s1.data(0, 0, 0) == -1500.0f);  // padding outside the reconstruction circle
  BOOST_TEST(sum(s1) == -170411964.0);
  // Hounsfield units: everything but padding lies in [-1100, 3100], and air (~ -1000) is common.
  Index padding = 0, outside = 0, air = 0;
  for (Index i = 0; i < s1.numVoxels(); ++i) {
    const float v = s1.data.data()[i];
    if (v == -1500.0f)
      ++padding;
    else if (v < -1100.0f || v > 3100.0f)
      ++outside;
    else if (v > -1050.0f && v < -950.0f)
      ++air;
  }
  BOOST_TEST(padding == 62180);
  BOOST_TEST(outside == 0);
  BOOST_TEST(air > 20000);

  const HostImage s11 = io::readImage(data("ct/head_ge/11.dcm"));
  BOOST_TEST(s11.geometry.origin[2] == 48.0360586, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s11.data(0, 256, 256) == 9.0f);

  if (!kortex::test::requireData("ct/pydicom_CT_small.dcm")) return;
  const HostImage small = io::readImage(data("ct/pydicom_CT_small.dcm"));
  Geometry itk2 = Geometry::make2D(128, 128);
  itk2.spacing = {0.661468, 0.661468, 1.0};
  itk2.origin = {-158.135803, -179.035797, -75.699997};
  checkGeometry(small.geometry, itk2, kItkPrintTol);
  BOOST_TEST(md(small, "dicom.rescale_intercept") == "-1024");
  BOOST_TEST(small.data(0, 0, 0) == -849.0f);
  BOOST_TEST(small.data(0, 20, 10) == -690.0f);
  BOOST_TEST(*std::min_element(small.data.data(), small.data.data() + small.numVoxels()) ==
             -896.0f);
  BOOST_TEST(*std::max_element(small.data.data(), small.data.data() + small.numVoxels()) ==
             1167.0f);
  BOOST_TEST(sum(small) == -1950906.0);
}

BOOST_AUTO_TEST_CASE(png_jpeg_real) {
  if (!kortex::test::requireData("slices2d/BrainProtonDensitySlice.png")) return;
  struct Case {
    const char* file;
    Index nx, ny;
    float v00, v_100_50, v_10_20;
    double sum;
  };
  // ITK values (palette and RGB images converted to luminance, equal to grey here).
  const Case cases[] = {
      {"slices2d/BrainProtonDensitySlice.png", 181, 217, 1, 170, 10, 4860107},
      {"slices2d/BrainProtonDensitySlice256x256.png", 214, 256, 1, 197, 9, 6751659},
      {"slices2d/BrainT1Slice.png", 181, 217, 3, 136, 1, 2673952},
      {"slices2d/shepp_logan_phantom.png", 400, 400, 0, 0, 0, 5024885},
      {"slices2d/r16slice.jpg", 256, 256, 0, 126, 0, 3307036},
      {"slices2d/r30slice.jpg", 256, 256, 0, 131, 0, 3072204},
  };
  for (auto const& c : cases) {
    BOOST_TEST_CONTEXT(c.file) {
      const HostImage img = io::readImage(data(c.file));
      BOOST_TEST(img.dimension() == 2);
      BOOST_TEST(img.geometry.nx() == c.nx);
      BOOST_TEST(img.geometry.ny() == c.ny);
      BOOST_TEST(img.data(0, 0, 0) == c.v00);
      BOOST_TEST(img.data(0, 50, 100) == c.v_100_50);
      BOOST_TEST(img.data(0, 20, 10) == c.v_10_20);
      BOOST_TEST(sum(img) == c.sum, boost::test_tools::tolerance(1e-6));
      checkGeometry(img.geometry, Geometry::make2D(c.nx, c.ny), 0.0);
    }
  }
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
    patch<std::int32_t>(b, 0, 540);
    writeBytes(dir / "v2.nii", b);
    expectIoError([&] { io::readImage(dir / "v2.nii"); }, {"v2.nii", "NIfTI-2"});
  }
  if (kortex::test::requireData(kIxi)) {
    // Real gzip volume cut in half, and one with a damaged compressed stream.
    const auto ixi = readBytes(data(kIxi));
    writeBytes(dir / "half.nii.gz", std::vector<char>(ixi.begin(), ixi.begin() + ixi.size() / 2));
    expectIoError([&] { io::readImage(dir / "half.nii.gz"); }, {"half.nii.gz"});
    auto bad = ixi;
    for (std::size_t i = bad.size() / 3; i < bad.size() / 3 + 64; ++i) bad[i] = char(~bad[i]);
    writeBytes(dir / "damaged.nii.gz", bad);
    expectIoError([&] { io::readImage(dir / "damaged.nii.gz"); }, {"damaged.nii.gz"});
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

  // VTI, PNG, JPEG, DICOM: garbage and truncated.
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
  writeBytes(dir / "garbage.dcm", garbage);
  expectIoError([&] { io::readImage(dir / "garbage.dcm"); }, {"garbage.dcm", "not a DICOM"});
  if (kortex::test::requireData("slices2d/BrainT1Slice.png")) {
    const auto png = readBytes(data("slices2d/BrainT1Slice.png"));
    writeBytes(dir / "cut.png", std::vector<char>(png.begin(), png.begin() + png.size() / 2));
    expectIoError([&] { io::readImage(dir / "cut.png"); }, {"cut.png"});
    const auto jpg = readBytes(data("slices2d/r16slice.jpg"));
    writeBytes(dir / "cut.jpg", std::vector<char>(jpg.begin(), jpg.begin() + jpg.size() / 3));
    expectIoError([&] { io::readImage(dir / "cut.jpg"); }, {"cut.jpg"});
  }
  if (kortex::test::requireData("ct/pydicom_CT_small.dcm")) {
    const auto dcm = readBytes(data("ct/pydicom_CT_small.dcm"));
    writeBytes(dir / "cut.dcm", std::vector<char>(dcm.begin(), dcm.begin() + 20000));
    expectIoError([&] { io::readImage(dir / "cut.dcm"); }, {"cut.dcm", "truncated"});
    auto jpegTs = dcm;  // claim a JPEG-compressed transfer syntax (same length UID)
    const std::string ts = "1.2.840.10008.1.2.1";
    auto at = std::search(jpegTs.begin(), jpegTs.end(), ts.begin(), ts.end());
    BOOST_REQUIRE(at != jpegTs.end());
    const std::string jpegUid = "1.2.840.10008.1.2.5";  // RLE lossless, also 19 characters
    std::copy(jpegUid.begin(), jpegUid.end(), at);
    writeBytes(dir / "rle.dcm", jpegTs);
    expectIoError([&] { io::readImage(dir / "rle.dcm"); }, {"rle.dcm", "compressed"});
  }
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
