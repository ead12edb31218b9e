// The QC report (pipeline/Qc.hpp) and its pictures (io/Png.hpp): PNG files that decode to what was
// written; panels whose pixels say what the images hold (an edge drawn where the image has one, a
// fold marked where the Jacobian folds, the patient's left on the picture's left); a register job's
// report folder whose page names every picture at its size, written all or none with the outputs.
// The report opened in a real browser: python/tests/test_qc.py.
#define BOOST_TEST_MODULE Qc
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Png.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/Atlas.hpp"
#include "pipeline/Qc.hpp"
#include "pipeline/Register.hpp"
#include "pipeline/RegisterCohort.hpp"
#include "pipeline/RegisterJob.hpp"

using namespace kortex;
namespace fs = std::filesystem;

namespace {

// A head-like phantom on an LPS grid of 2 mm: background 0, a ball of 30 ("scalp") holding a cube of
// 100 at voxels [12, 27] on every axis.
HostImage phantom(Geometry const& g) {
  HostImage img("kortex::test::qc_phantom", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const double r = std::sqrt(std::pow(x - 19.5, 2) + std::pow(y - 19.5, 2) + std::pow(z - 19.5, 2));
        const bool cube = x >= 12 && x <= 27 && y >= 12 && y <= 27 && z >= 12 && z <= 27;
        img.data(z, y, x) = cube ? 100.0f : r < 18.0 ? 30.0f : 0.0f;
      }
  return img;
}

// The QC tests' registration job: greedy, 2 scales of a few iterations, Kokkos, the report in dir/qc,
// on dir/fixed.nii and dir/moving.nii.
pipeline::RegisterJob qcJob(std::filesystem::path const& dir) {
  pipeline::RegisterJob job;
  job.method = pipeline::RegistrationMethod::Greedy;
  job.fixed.path = dir / "fixed.nii";
  job.moving.path = dir / "moving.nii";
  job.greedy.scales = {2, 1};
  job.greedy.iterations = {3, 2};
  job.backend = Backend::Kokkos;
  job.outputs.qc = dir / "qc";
  return job;
}

Geometry grid() {
  Geometry g = Geometry::make3D(40, 40, 40);
  g.spacing = {2.0, 2.0, 2.0};
  return g;
}

std::array<double, 3> world(Geometry const& g, double x, double y, double z) { return indexToWorld(g, {x, y, z}); }

bool colour(io::Picture const& p, int i, int j, std::array<std::uint8_t, 3> const& c) {
  if (i < 0 || j < 0 || i >= p.width || j >= p.height) return false;
  const auto* q = p.at(i, j);
  return q[0] == c[0] && q[1] == c[1] && q[2] == c[2];
}

// Some pixel within `r` of (i, j) along the row has colour c.
bool colourNear(io::Picture const& p, int i, int j, int r, std::array<std::uint8_t, 3> const& c) {
  for (int d = -r; d <= r; ++d)
    if (colour(p, i + d, j, c)) return true;
  return false;
}

std::string slurp(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every picture a page names (src, width, height) is a PNG of that size in `dir`; returns how many.
int picturesAtTheirSizes(fs::path const& dir, std::string const& page) {
  const std::regex img("src=\"([A-Za-z0-9_.-]+\\.png)\" width=\"([0-9]+)\" height=\"([0-9]+)\"");
  int pictures = 0;
  for (std::sregex_iterator it(page.begin(), page.end(), img), end; it != end; ++it, ++pictures) {
    const io::Picture p = io::readPng(dir / (*it)[1].str());
    BOOST_TEST_INFO((*it)[1].str());
    BOOST_TEST(p.width == std::stoi((*it)[2].str()));
    BOOST_TEST(p.height == std::stoi((*it)[3].str()));
  }
  return pictures;
}

}  // namespace

BOOST_AUTO_TEST_CASE(png_round_trip) {
  std::mt19937 rng(7);
  for (int channels : {1, 3, 4}) {
    io::Picture p(37, 23, channels);
    for (auto& v : p.pixels) v = std::uint8_t(rng());
    const io::Picture q = io::decodePng(io::encodePng(p));
    BOOST_TEST(q.width == 37);
    BOOST_TEST(q.height == 23);
    BOOST_TEST(q.channels == channels);
    BOOST_TEST((q.pixels == p.pixels));
  }
  test::TempDir dir("kortex-png");
  io::Picture p(5, 4, 3);
  p.at(2, 1)[0] = 200;
  io::writePng(p, dir / "a.png");
  BOOST_TEST((io::readPng(dir / "a.png").pixels == p.pixels));
  auto bytes = io::encodePng(p);
  bytes[bytes.size() / 2] ^= 0x40;  // inside IDAT: its CRC no longer holds
  BOOST_CHECK_THROW(io::decodePng(bytes), IoError);
  BOOST_CHECK_THROW(io::encodePng(io::Picture(0, 4, 3)), InvalidArgument);
  io::Picture bad(4, 4, 2);
  BOOST_CHECK_THROW(io::encodePng(bad), InvalidArgument);
  BOOST_CHECK_THROW(io::readPng(dir / "missing.png"), IoError);
}

// The moving image equal to the fixed one: the edges drawn lie on the cube's faces (within the one
// pixel of the edge's thinning) and not inside the cube.
// The mean label Dice by hand: label 1 in 11 fixed voxels and 9 warped ones, 7 of them shared (2*7/20);
// label 2 in the same 5 voxels (1); label 3 only in the warped map (not a fixed label: left out); runs
// that alternate, and a value just off a whole number (rounded).
BOOST_AUTO_TEST_CASE(mean_label_dice_by_hand) {
  const Geometry g = Geometry::fromSize(20, 2, 1);
  HostImage fixed("fixed", g), warped("warped", g);
  for (Index x = 0; x < 20; ++x) fixed.data(0, 0, x) = warped.data(0, 0, x) = 0.0f;
  for (Index x = 0; x < 10; ++x) fixed.data(0, 1, x) = 1.0f;   // label 1: x 0..9
  for (Index x = 4; x < 12; ++x) warped.data(0, 1, x) = 1.0f;  // label 1: x 4..11 (6 shared)
  for (Index x = 12; x < 17; ++x) fixed.data(0, 1, x) = warped.data(0, 1, x) = 2.0f;
  for (Index x = 17; x < 20; ++x) fixed.data(0, 1, x) = warped.data(0, 1, x) = 0.0f;
  warped.data(0, 1, 13) = 2.0000002f;
  warped.data(0, 0, 18) = warped.data(0, 0, 19) = 3.0f;
  fixed.data(0, 0, 0) = 1.0f;  // a run of 1, 0, 1: one more fixed voxel of label 1
  warped.data(0, 0, 0) = 1.0f;  //   shared: 11 fixed, 9 warped, 7 shared
  const auto d = pipeline::meanLabelDice(fixed, warped);
  BOOST_TEST(d.labels == 2);
  BOOST_TEST(d.mean == (2.0 * 7 / 20.0 + 1.0) / 2.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(edges_are_drawn_where_the_image_has_them) {
  const Geometry g = grid();
  const HostImage img = phantom(g);
  const pipeline::QcFrame f = pipeline::qcFrame(img, pipeline::QcPlane::Axial, 0.5);
  const io::Picture p = pipeline::qcEdgePanel(f, img, img);
  BOOST_TEST(p.width == f.width);
  BOOST_TEST(p.height == f.height);
  // The cube's faces along x at the panel's row through its centre: x = 11.5 and 27.5 voxels.
  for (double x : {11.5, 27.5}) {
    const auto px = pipeline::qcPixel(f, world(g, x, 19.5, 19.5));
    BOOST_TEST_INFO("face at x = " << x << " voxels: pixel " << px[0] << ", " << px[1]);
    BOOST_TEST(colourNear(p, px[0], px[1], 1, pipeline::kQcEdgeColour));
  }
  const auto centre = pipeline::qcPixel(f, world(g, 19.5, 19.5, 19.5));
  BOOST_TEST(!colourNear(p, centre[0], centre[1], 4, pipeline::kQcEdgeColour));
  // Neurological convention: x (LPS: towards the patient's left) runs to the picture's left.
  const auto left = pipeline::qcPixel(f, world(g, 30, 19.5, 19.5)), right = pipeline::qcPixel(f, world(g, 9, 19.5, 19.5));
  BOOST_TEST(left[0] < right[0]);
  // Anterior (-y in LPS) at the top.
  const auto front = pipeline::qcPixel(f, world(g, 19.5, 5, 19.5)), back = pipeline::qcPixel(f, world(g, 19.5, 34, 19.5));
  BOOST_TEST(front[1] < back[1]);
}

// A fold at one voxel (det -0.5) is marked in the panel through it; det 1 elsewhere shows white.
BOOST_AUTO_TEST_CASE(folds_are_marked) {
  const Geometry g = grid();
  const HostImage img = phantom(g);
  HostImage det("kortex::test::det", g);
  for (Index i = 0; i < det.numVoxels(); ++i) det.data.data()[i] = 1.0f;
  det.data(17, 22, 15) = -0.5f;
  for (pipeline::QcPlane pl : {pipeline::QcPlane::Axial, pipeline::QcPlane::Coronal, pipeline::QcPlane::Sagittal}) {
    const pipeline::QcFrame f = pipeline::qcFrameThrough(img, pl, world(g, 15, 22, 17));
    const io::Picture p = pipeline::qcJacobianPanel(f, img, det);
    const auto fold = pipeline::qcPixel(f, world(g, 15, 22, 17));
    BOOST_TEST_INFO("plane " << int(pl) << ": fold pixel " << fold[0] << ", " << fold[1]);
    BOOST_TEST(colour(p, fold[0], fold[1], pipeline::kQcFoldColour));
    int marked = 0;
    for (int j = 0; j < p.height; ++j)
      for (int i = 0; i < p.width; ++i) marked += colour(p, i, j, pipeline::kQcFoldColour);
    // One 2-mm voxel at about 240 / (the head box's ~84 mm) pixels per mm: 5-6 pixels a side.
    BOOST_TEST(marked > 4);
    BOOST_TEST(marked < 80);
    if (pl != pipeline::QcPlane::Axial) continue;
    const auto plain = pipeline::qcPixel(f, world(g, 24, 14, 17));  // in the cube, the fold's slice
    BOOST_TEST(colour(p, plain[0], plain[1], {255, 255, 255}));
  }
}

// The register job with a QC folder: the page and the pictures it names, each at the size the page
// states; the JSON report records the folder and its time. Refused: a QC folder that is a file.
BOOST_AUTO_TEST_CASE(register_job_writes_the_report) {
  test::TempDir dir("kortex-qc-job");
  const Geometry g = grid();
  HostImage moving = phantom(g);
  for (Index i = 0; i < moving.numVoxels(); ++i) moving.data.data()[i] *= 0.9f;
  io::writeImage(phantom(g), dir / "fixed.nii");
  io::writeImage(moving, dir / "moving.nii");
  pipeline::RegisterJob job = qcJob(dir.path);
  job.outputs.report = dir / "report.json";
  const auto r = pipeline::runRegisterJob(job);
  const std::string page = slurp(dir / "qc" / "index.html");
  BOOST_TEST(page.find("<!DOCTYPE html>") == 0u);
  BOOST_TEST(page.find("<script") == std::string::npos);
  const int pictures = picturesAtTheirSizes(dir / "qc", page);
  BOOST_TEST(pictures == 12);  // before, after, checkerboard, det J: three planes each
  BOOST_TEST(int(r.qc.files.size()) == pictures + 1);
  const std::string report = slurp(dir / "report.json");
  BOOST_TEST(report.find("\"qc\"") != std::string::npos);
  // A QC folder that is a file is refused before any work, and nothing is written.
  std::ofstream(dir / "taken") << "x";
  job.outputs.qc = dir / "taken";
  job.outputs.report = dir / "report2.json";
  BOOST_CHECK_THROW(pipeline::runRegisterJob(job), IoError);
  BOOST_TEST(!fs::exists(dir / "report2.json"));
}

// A cohort with QC: every subject's report in <stem>_qc/, and the cohort's page listing the subjects
// worst first: a subject that failed (skipped with keepGoing; no report of its own), then the noisy
// subject (lower correlation with the fixed image) above the clean one.
BOOST_AUTO_TEST_CASE(cohort_page_lists_the_worst_subject_first) {
  test::TempDir dir("kortex-qc-cohort");
  const Geometry g = grid();
  const HostImage fixed = phantom(g);
  HostImage noisy = phantom(g);
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 15.0f);
  for (Index i = 0; i < noisy.numVoxels(); ++i) noisy.data.data()[i] += noise(rng);
  io::writeImage(fixed, dir / "fixed.nii");
  io::writeImage(phantom(g), dir / "clean.nii");
  io::writeImage(noisy, dir / "noisy.nii");
  pipeline::RegisterCohortJob job;
  job.fixed.path = dir / "fixed.nii";
  job.moving = {{dir / "clean.nii", {}}, {dir / "noisy.nii", {}}};
  job.greedy.scales = {2, 1};
  job.greedy.iterations = {3, 2};
  job.backend = Backend::Kokkos;
  job.outDir = dir / "out";
  job.outputs.qc = true;
  // A subject that cannot be registered (a constant image), skipped with keepGoing: listed first, failed.
  io::writeImage(HostImage("kortex::test::flat", g), dir / "flat.nii");
  job.moving.push_back({dir / "flat.nii", {}});
  job.keepGoing = true;
  const auto r = pipeline::runRegisterCohort(job);
  BOOST_TEST(r.registered() == 2);
  BOOST_TEST(r.failed() == 1);
  for (const char* stem : {"clean", "noisy"}) BOOST_TEST(fs::is_regular_file(dir / "out" / (std::string(stem) + "_qc") / "index.html"));
  const std::string page = slurp(dir / "out" / "qc.html");
  const auto clean = page.find("clean_qc/index.html"), noisyAt = page.find("noisy_qc/index.html");
  BOOST_TEST(clean != std::string::npos);
  BOOST_TEST(noisyAt != std::string::npos);
  BOOST_TEST(noisyAt < clean);
  const auto flat = page.find("failed: ");
  BOOST_TEST(flat != std::string::npos);
  BOOST_TEST(flat < noisyAt);
  BOOST_TEST(!fs::exists(dir / "out" / "flat_qc"));
  BOOST_TEST(r.subjects[1].report["qc"]["ncc"].get<double>() < r.subjects[0].report["qc"]["ncc"].get<double>());
}

// `apply` with a QC folder: the reference with the input's edges before (the input where its header
// puts it) and after (through a translation of 4 mm along x), a checkerboard: nine pictures at their
// stated sizes, written with the output; the result's edges sit 4 mm (two voxels) off the input's.
BOOST_AUTO_TEST_CASE(apply_job_writes_the_report) {
  test::TempDir dir("kortex-qc-apply");
  const Geometry g = grid();
  io::writeImage(phantom(g), dir / "in.nii");
  Matrix4 shift{};
  for (int k = 0; k < 4; ++k) shift[std::size_t(5 * k)] = 1.0;
  shift[3] = 4.0;  // fixed world x -> x + 4 mm
  std::ofstream(dir / "shift.txt") << itkTransformText(shift);
  pipeline::ApplyJob job;
  job.input.path = dir / "in.nii";
  job.reference.path = dir / "in.nii";
  job.transforms = {{dir / "shift.txt", false}};
  job.output = dir / "out.nii";
  job.qc = dir / "qc";
  job.backend = Backend::Kokkos;
  const auto r = pipeline::runApplyJob(job);
  BOOST_TEST(fs::is_regular_file(dir / "out.nii"));
  const std::string page = slurp(dir / "qc" / "index.html");
  const int pictures = picturesAtTheirSizes(dir / "qc", page);
  BOOST_TEST(pictures == 9);
  BOOST_TEST(int(r.qc.files.size()) == 10);
  // The panels themselves: before, the cube's face x = 11.5 has an edge; after, the result samples the
  // input at x + 4 mm, so its face lies 2 voxels lower (x = 9.5) and not at 11.5.
  const pipeline::QcFrame f = pipeline::qcFrame(phantom(g), pipeline::QcPlane::Axial, 0.5);
  const io::Picture before = pipeline::qcEdgePanel(f, phantom(g), phantom(g)), after = pipeline::qcEdgePanel(f, phantom(g), r.image);
  const auto at = pipeline::qcPixel(f, world(g, 11.5, 19.5, 19.5)), moved = pipeline::qcPixel(f, world(g, 9.5, 19.5, 19.5));
  BOOST_TEST(colourNear(before, at[0], at[1], 1, pipeline::kQcEdgeColour));
  BOOST_TEST(colourNear(after, moved[0], moved[1], 1, pipeline::kQcEdgeColour));
  BOOST_TEST(!colourNear(after, at[0], at[1], 1, pipeline::kQcEdgeColour));
}

// Label maps in the register job's report: the moving labels (the cube as label 7) outlined in cyan on
// the cube's faces; the fixed labels give the mean Dice (the pair is one image at two contrasts: the
// map stays near the identity, Dice near 1). Refused before any work: labels without a QC report, the
// fixed labels without the moving ones, a label map off its image's grid.
BOOST_AUTO_TEST_CASE(register_job_draws_the_labels) {
  test::TempDir dir("kortex-qc-labels");
  const Geometry g = grid();
  HostImage moving = phantom(g), labels("kortex::test::labels", g);
  for (Index i = 0; i < moving.numVoxels(); ++i) {
    labels.data.data()[i] = moving.data.data()[i] > 50.0f ? 7.0f : 0.0f;
    moving.data.data()[i] *= 0.9f;
  }
  io::writeImage(phantom(g), dir / "fixed.nii");
  io::writeImage(moving, dir / "moving.nii");
  io::writeImage(labels, dir / "labels.nii");
  pipeline::RegisterJob job = qcJob(dir.path);
  job.qcMovingLabels.path = dir / "labels.nii";
  job.qcFixedLabels.path = dir / "labels.nii";
  const auto r = pipeline::runRegisterJob(job);
  BOOST_TEST(int(r.qc.files.size()) == 16);  // the page, 12 pictures and labels_* in three planes
  BOOST_TEST_MESSAGE("label Dice " << r.qc.dice);
  BOOST_TEST(r.qc.dice > 0.95);
  BOOST_TEST(slurp(dir / "qc" / "index.html").find("label Dice") != std::string::npos);
  const io::Picture p = io::readPng(dir / "qc" / "labels_axial.png");
  const pipeline::QcFrame f = pipeline::qcFrame(r.pair.fixedNormalised, pipeline::QcPlane::Axial, 0.5);
  const auto face = pipeline::qcPixel(f, world(g, 11.5, 19.5, 19.5)), centre = pipeline::qcPixel(f, world(g, 19.5, 19.5, 19.5));
  BOOST_TEST(colourNear(p, face[0], face[1], 2, pipeline::kQcLabelColour));
  BOOST_TEST(!colourNear(p, centre[0], centre[1], 4, pipeline::kQcLabelColour));
  auto refused = [&](pipeline::RegisterJob const& j) {
    BOOST_CHECK_THROW(pipeline::runRegisterJob(j), InvalidArgument);
    BOOST_TEST(!fs::exists(j.outputs.qc));
  };
  pipeline::RegisterJob bad = job;
  bad.outputs.qc = dir / "qc2";
  bad.qcMovingLabels.path.clear();  // the fixed labels alone
  refused(bad);
  bad = job;
  bad.outputs.qc.clear();
  bad.outputs.warped = dir / "w.nii";
  refused(bad);
  BOOST_TEST(!fs::exists(dir / "w.nii"));
  io::writeImage(HostImage("kortex::test::small", Geometry::make3D(20, 20, 20)), dir / "small.nii");
  bad = job;
  bad.outputs.qc = dir / "qc3";
  bad.qcMovingLabels.path = dir / "small.nii";
  refused(bad);
}

// The atlas's report: the template, mean |u| and mean det J in three planes and one thumbnail per
// subject, each at the size the page states; the subjects worst first (the noisy subject, least like
// the template, above the two clean ones). Under MPI the pictures are the same bytes for 1, 2 and 3
// ranks (tests/atlas_mpi_test.sh).
BOOST_AUTO_TEST_CASE(atlas_job_writes_the_report) {
  test::TempDir dir("kortex-qc-atlas");
  const Geometry g = grid();
  HostImage noisy = phantom(g);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 15.0f);
  for (Index i = 0; i < noisy.numVoxels(); ++i) noisy.data.data()[i] += noise(rng);
  pipeline::AtlasJob job;
  for (auto const& [name, img] : {std::pair<const char*, HostImage>{"a.nii", phantom(g)}, {"b.nii", noisy}, {"c.nii", phantom(g)}}) {
    io::writeImage(img, dir / name);
    job.images.push_back((dir / name).string());
  }
  job.useAffine = false;
  job.backend = Backend::Kokkos;
  job.params.greedy.scales = {2, 1};
  job.params.greedy.iterations = {2, 3};
  job.outTemplate = (dir / "t.nii").string();
  job.outQc = (dir / "qc").string();
  pipeline::runAtlasJob(job, nullptr);
  const std::string page = slurp(dir / "qc" / "index.html");
  const int pictures = picturesAtTheirSizes(dir / "qc", page);
  BOOST_TEST(pictures == 14);  // 9 of the template and maps, 2 of the template per scale, 3 thumbnails
  const auto b = page.find("<td>b</td>"), a = page.find("<td>a</td>"), c = page.find("<td>c</td>");
  BOOST_TEST((b != std::string::npos && a != std::string::npos && c != std::string::npos));
  BOOST_TEST(b < a);
  BOOST_TEST(b < c);
}
