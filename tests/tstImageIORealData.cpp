// Image I/O on the real files of ../shared/data (or $KORTEX_DATA_DIR): NIfTI (IXI, ICBM152, DLMUSE
// labels), DICOM CT, PNG and JPEG slices against ITK 5.2's reading of the same files, and damaged
// copies of real files (one IoError naming the file, nothing printed on stderr). Each case is
// skipped (the executable exits 77) when its files are absent. The synthetic cases are tstImageIO.
#define BOOST_TEST_MODULE ImageIORealData
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ImageIOTestUtils.hpp"
#include "TestUtils.hpp"
#include "io/ImageIO.hpp"

using namespace kortex;
using namespace kortex::test::imageio;
namespace fs = std::filesystem;

namespace {

fs::path data(std::string const& sub) { return kortex::test::dataDir() / sub; }

const char* kIxi = "mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz";

double sum(HostImage const& img) {
  double s = 0;
  for (Index i = 0; i < img.numVoxels(); ++i) s += img.data.data()[i];
  return s;
}

}  // namespace

// --------------------------------------------------------------------------------------------
// Real data. Ground truth: the NIfTI headers parsed by hand (python struct) and ITK 5.2's
// ImageFileReader<Image<float,3>> on the same files (values printed with 9 digits).
BOOST_AUTO_TEST_CASE(nifti_ixi_real) {
  if (!test::requireData(kIxi)) return;
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
  if (!test::requireData(t1)) return;
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
  if (!test::requireData(lab)) return;
  const HostImage labels = io::readImage(data(lab));
  // Only an sform (code 2) here, but the same grid as the T1 it was computed from.
  BOOST_TEST(md(labels, "nifti.qform_code") == "0");
  BOOST_TEST(labels.geometry.sameGrid(io::readImage(data(kIxi)).geometry, 1e-6));
  BOOST_TEST(labels.data(45, 60, 60) == 35.0f);
  BOOST_TEST(sum(labels) == 20422750.0);
}

BOOST_AUTO_TEST_CASE(dicom_ct_real) {
  if (!test::requireData("ct/head_ge/01.dcm")) return;
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

  if (!test::requireData("ct/pydicom_CT_small.dcm")) return;
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
  if (!requireVtk("png_jpeg_real")) return;
  if (!test::requireData("slices2d/BrainProtonDensitySlice.png")) return;
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
// Damaged copies of real files (the synthetic bad inputs are tstImageIO's bad_inputs): one IoError
// naming the file, and nothing printed on stderr by the readers (zlib, DICOM, VTK).
BOOST_AUTO_TEST_CASE(bad_inputs_nifti_gz_real) {
  if (!test::requireData(kIxi)) return;
  TempDir dir;
  StderrCapture err(dir / "stderr.txt");
  // Real gzip volume cut in half, and one with a damaged compressed stream.
  const auto ixi = readBytes(data(kIxi));
  writeBytes(dir / "half.nii.gz", std::vector<char>(ixi.begin(), ixi.begin() + ixi.size() / 2));
  expectIoError([&] { io::readImage(dir / "half.nii.gz"); }, {"half.nii.gz"});
  auto bad = ixi;
  for (std::size_t i = bad.size() / 3; i < bad.size() / 3 + 64; ++i) bad[i] = char(~bad[i]);
  writeBytes(dir / "damaged.nii.gz", bad);
  expectIoError([&] { io::readImage(dir / "damaged.nii.gz"); }, {"damaged.nii.gz"});
  const std::string printed = err.text();
  BOOST_TEST(printed.empty(), "stderr got: " << printed);
}

BOOST_AUTO_TEST_CASE(bad_inputs_dicom_real) {
  if (!test::requireData("ct/pydicom_CT_small.dcm")) return;
  TempDir dir;
  StderrCapture err(dir / "stderr.txt");
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
  const std::string printed = err.text();
  BOOST_TEST(printed.empty(), "stderr got: " << printed);
}

BOOST_AUTO_TEST_CASE(bad_inputs_png_jpeg_real) {
  if (!requireVtk("bad_inputs_png_jpeg_real")) return;
  if (!test::requireData("slices2d/BrainT1Slice.png")) return;
  TempDir dir;
  StderrCapture err(dir / "stderr.txt");
  const auto png = readBytes(data("slices2d/BrainT1Slice.png"));
  writeBytes(dir / "cut.png", std::vector<char>(png.begin(), png.begin() + png.size() / 2));
  expectIoError([&] { io::readImage(dir / "cut.png"); }, {"cut.png"});
  const auto jpg = readBytes(data("slices2d/r16slice.jpg"));
  writeBytes(dir / "cut.jpg", std::vector<char>(jpg.begin(), jpg.begin() + jpg.size() / 3));
  expectIoError([&] { io::readImage(dir / "cut.jpg"); }, {"cut.jpg"});
  const std::string printed = err.text();
  BOOST_TEST(printed.empty(), "stderr got: " << printed);
}

KORTEX_REALDATA_TEST_MAIN()
