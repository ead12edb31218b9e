// The register cohort job (pipeline/RegisterCohort.hpp): every subject's outputs are the single-pair
// job's, bit for bit, on both back ends; bad subjects refused before any work or, with keepGoing,
// reported and skipped; the job's files and memory rules; its JSON read back.
#define BOOST_TEST_MODULE RegisterCohort
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/RegisterCohort.hpp"

using namespace kortex;
namespace fs = std::filesystem;

namespace {

// A smooth blob with a ramp, its centre shifted per subject: something to register.
HostImage blob(Geometry const& g, double cx, double cy, double cz) {
  HostImage img("kortex::test::blob", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const double r2 = (x - cx) * (x - cx) + (y - cy) * (y - cy) + 1.3 * (z - cz) * (z - cz);
        img.data(z, y, x) = float(100.0 * std::exp(-r2 / 30.0) + 0.5 * x + 10.0);
      }
  return img;
}

GreedyParams smallGreedy() {
  GreedyParams p = greedyRegistrationDefaults();
  p.scales = {2, 1};
  p.iterations = {4, 3};
  return p;
}

std::string fileBytes(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class T>
bool sameData(T const& x, T const& y) {
  if (!x.geometry.sameGrid(y.geometry) || x.data.size() != y.data.size()) return false;
  for (std::size_t i = 0; i < x.data.size(); ++i)
    if (x.data.data()[i] != y.data.data()[i]) return false;
  return true;
}
bool sameVoxels(fs::path const& a, fs::path const& b) { return sameData(io::readImage(a), io::readImage(b)); }
bool sameField(fs::path const& a, fs::path const& b) {
  return sameData(io::readDisplacementField(a), io::readDisplacementField(b));
}

struct Files {
  test::TempDir dir{"kortex-tstRegisterCohort"};
  fs::path fixed, moving[3];
  Files() {
    const Geometry g = Geometry::make3D(20, 18, 16);
    fixed = dir / "fixed.nii";
    io::writeImage(blob(g, 9.5, 8.5, 7.5), fixed);
    const double shift[3][3] = {{1.2, -0.8, 0.5}, {-1.0, 0.7, -0.6}, {0.6, 1.1, 0.9}};
    for (int s = 0; s < 3; ++s) {
      moving[s] = dir / ("subj" + std::to_string(s) + ".nii");
      io::writeImage(blob(g, 9.5 + shift[s][0], 8.5 + shift[s][1], 7.5 + shift[s][2]), moving[s]);
    }
  }
  pipeline::RegisterCohortJob job(Backend b, fs::path const& out) const {
    pipeline::RegisterCohortJob j;
    j.fixed.path = fixed;
    for (auto const& m : moving) j.moving.push_back({m, {}});
    j.greedy = smallGreedy();
    j.backend = b;
    j.outDir = out;
    j.outputs.warped = j.outputs.field = j.outputs.affine = true;
    return j;
  }
};

}  // namespace

// Each subject's files are what the single-pair job writes for that pair: the same voxels, the same
// affine text, on the CPU reference and the Kokkos back end.
BOOST_AUTO_TEST_CASE(cohort_outputs_equal_single_pair_outputs) {
  Files f;
  for (auto transform : {pipeline::RegistrationTransform::Deformable, pipeline::RegistrationTransform::Rigid})
  for (Backend b : {Backend::Cpu, Backend::Kokkos}) {
    const fs::path out = f.dir / (std::string("out_") + toString(b) + "_" + toString(transform));
    auto job = f.job(b, out);
    job.transform = transform;
    job.outputs.composite = true;
    const auto r = pipeline::runRegisterCohort(job);
    BOOST_TEST(r.registered() == 3);
    BOOST_TEST(r.failed() == 0);
    for (int s = 0; s < 3; ++s) {
      pipeline::RegisterJob single;
      single.method = pipeline::RegistrationMethod::Greedy;
      single.fixed.path = f.fixed;
      single.moving.path = f.moving[s];
      single.greedy = smallGreedy();
      single.backend = b;
      single.transform = transform;
      const std::string stem = "subj" + std::to_string(s);
      single.outputs.warped = f.dir / (stem + "_single_warped.nii.gz");
      single.outputs.field = f.dir / (stem + "_single_field.nii.gz");
      single.outputs.affine = f.dir / (stem + "_single_affine.txt");
      single.outputs.composite = f.dir / (stem + "_single_composite.nii.gz");
      const auto one = pipeline::runRegisterJob(single);
      BOOST_TEST_INFO("backend " << toString(b) << ", " << toString(transform) << ", subject " << s);
      BOOST_TEST(sameVoxels(out / (stem + "_warped.nii.gz"), single.outputs.warped));
      BOOST_TEST(sameField(out / (stem + "_field.nii.gz"), single.outputs.field));
      BOOST_TEST(sameField(out / (stem + "_composite.nii.gz"), single.outputs.composite));
      // A rigid cohort fits no deformable part, as the single pair does not.
      BOOST_TEST((one.pair.greedy.iterations == 0) == (transform == pipeline::RegistrationTransform::Rigid));
      BOOST_TEST(fileBytes(out / (stem + "_affine.txt")) == fileBytes(single.outputs.affine));
      BOOST_TEST(r.subjects[std::size_t(s)].status == pipeline::CohortStatus::Registered);
    }
  }
}

// A subject that cannot be read stops the job before any registration (nothing written, the output
// folder not left behind); with keepGoing it is reported and the others are registered.
BOOST_AUTO_TEST_CASE(bad_subjects_refused_or_skipped) {
  Files f;
  const fs::path broken = f.dir / "broken.nii";
  std::ofstream(broken) << "not an image";
  const fs::path out = f.dir / "out" / "nested";
  auto job = f.job(Backend::Kokkos, out);
  job.moving.push_back({f.dir / "missing.nii.gz", {}});
  test::expectThrowWith<IoError>([&] { pipeline::runRegisterCohort(job); }, {"subject 4", "missing.nii.gz", "does not exist"});
  BOOST_TEST(!fs::exists(f.dir / "out"));
  job.moving.pop_back();
  job.moving.insert(job.moving.begin() + 1, {broken, {}});
  test::expectThrowWith<IoError>([&] { pipeline::runRegisterCohort(job); }, {"subject 2", "broken.nii"});
  BOOST_TEST(!fs::exists(f.dir / "out"));

  job.moving.push_back({f.dir / "missing.nii.gz", {}});
  job.keepGoing = true;
  job.report = f.dir / "cohort.json";
  std::vector<int> order;
  const auto r = pipeline::runRegisterCohort(job, [&](pipeline::CohortEvent const& e) { order.push_back(e.index); });
  BOOST_TEST(r.registered() == 3);
  BOOST_TEST(r.failed() == 2);
  BOOST_TEST(order == std::vector<int>({0, 1, 2, 3, 4}));
  BOOST_TEST(r.subjects[1].status == pipeline::CohortStatus::Failed);
  BOOST_TEST(r.subjects[1].error.find("subject 2") != std::string::npos);
  BOOST_TEST(r.subjects[4].status == pipeline::CohortStatus::Failed);
  for (int s = 0; s < 3; ++s) BOOST_TEST(fs::exists(out / ("subj" + std::to_string(s) + "_warped.nii.gz")));
  BOOST_TEST(!fs::exists(out / "broken_warped.nii.gz"));
  const auto report = nlohmann::json::parse(fileBytes(job.report));
  BOOST_TEST(report.at("failed").get<int>() == 2);
  BOOST_TEST(report.at("subjects").at(1).at("status").get<std::string>() == "failed");
}

// A registration that fails (no overlap through the headers) stops the cohort, naming the subject;
// with keepGoing the subject is skipped.
BOOST_AUTO_TEST_CASE(failing_registration_stops_or_is_skipped) {
  Files f;
  const fs::path far = f.dir / "far.nii";
  HostImage img = io::readImage(f.moving[0]);
  img.geometry.origin = {500.0, 0.0, 0.0};
  io::writeImage(img, far);
  const fs::path out = f.dir / "out";
  auto job = f.job(Backend::Cpu, out);
  job.moving = {{far, {}}, {f.moving[1], {}}};
  test::expectThrowWith<InvalidArgument>([&] { pipeline::runRegisterCohort(job); }, {"subject 1", "far.nii", "no overlap"});
  BOOST_TEST(!fs::exists(out / "far_warped.nii.gz"));
  job.keepGoing = true;
  const auto r = pipeline::runRegisterCohort(job);
  BOOST_TEST(r.failed() == 1);
  BOOST_TEST(r.registered() == 1);
  BOOST_TEST(fs::exists(out / "subj1_warped.nii.gz"));
}

// The files' rules: two subjects whose outputs would be one file, an output folder that is a file,
// no output, a memory cap that holds no pair (Kokkos), a bad cap.
BOOST_AUTO_TEST_CASE(cohort_files_and_memory_refused) {
  Files f;
  auto job = f.job(Backend::Kokkos, f.dir / "out");
  job.moving.push_back({f.moving[0], {}});
  test::expectThrowWith<InvalidArgument>([&] { pipeline::runRegisterCohort(job); }, {"two outputs are the same file", "subj0_warped"});
  job.moving.pop_back();
  std::ofstream(f.dir / "afile") << "x";
  job.outDir = f.dir / "afile";
  test::expectThrowWith<IoError>([&] { pipeline::runRegisterCohort(job); }, {"is a file, not a folder"});
  job.outDir = f.dir / "out";
  job.outputs = {};
  test::expectThrowWith<InvalidArgument>([&] { pipeline::runRegisterCohort(job); }, {"no output is named"});
  job.outputs.warped = true;
  job.maxMemoryMiB = 0.01;
  test::expectThrowWith<InvalidArgument>([&] { pipeline::runRegisterCohort(job); }, {"holds no pair"});
  BOOST_TEST(!fs::exists(f.dir / "out"));
  job.maxMemoryMiB = -1;
  test::expectThrowWith<InvalidArgument>([&] { pipeline::runRegisterCohort(job); }, {"memory cap"});
}

// The list file adds subjects after the named ones; the JSON description reads back.
BOOST_AUTO_TEST_CASE(cohort_list_and_json) {
  Files f;
  const fs::path list = f.dir / "list.txt";
  std::ofstream(list) << "# subjects\nsubj1.nii\n\n" << f.moving[2].string() << "\n";
  auto job = f.job(Backend::Cpu, f.dir / "out");
  job.moving = {{f.moving[0], {}}};
  job.movingList = list;
  const auto all = job.subjects();
  BOOST_TEST(all.size() == 3u);
  BOOST_TEST(all[1].path == f.dir / "subj1.nii");
  job.keepGoing = true;
  job.maxMemoryMiB = 512;
  job.report = f.dir / "r.json";
  const auto back = pipeline::registerCohortJobFromJson(pipeline::toJson(job));
  BOOST_TEST(pipeline::toJson(back).dump() == pipeline::toJson(job).dump());
  auto j = pipeline::toJson(job);
  j["outputs"]["warpd"] = true;
  test::expectThrowWith<InvalidArgument>([&] { pipeline::registerCohortJobFromJson(j); }, {"warpd"});
}

// A fixed mask reaches every subject of a cohort as it reaches a single pair, rigid or deformable.
BOOST_AUTO_TEST_CASE(cohort_fixed_mask_equals_single_pairs) {
  Files f;
  const Geometry g = io::readImage(f.fixed).geometry;
  HostImage mask("mask", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) mask.data(z, y, x) = (x + y) % 7 == 0 ? 0.0f : 1.0f;
  const fs::path maskPath = f.dir / "mask.nii";
  io::writeImage(mask, maskPath);
  for (auto transform : {pipeline::RegistrationTransform::Rigid, pipeline::RegistrationTransform::Deformable}) {
    const fs::path out = f.dir / (std::string("out_") + toString(transform));
    auto job = f.job(Backend::Cpu, out);
    job.fixedMask.path = maskPath;
    job.transform = transform;
    pipeline::runRegisterCohort(job);
    for (int s = 0; s < 3; ++s) {
      pipeline::RegisterJob single;
      single.fixed.path = f.fixed;
      single.moving.path = f.moving[s];
      single.fixedMask.path = maskPath;
      single.greedy = smallGreedy();
      single.backend = Backend::Cpu;
      single.transform = transform;
      single.outputs.affine = f.dir / ("single" + std::to_string(s) + "_affine.txt");
      single.outputs.field = f.dir / ("single" + std::to_string(s) + "_field.nii.gz");
      pipeline::runRegisterJob(single);
      BOOST_TEST_INFO(toString(transform) << ", subject " << s);
      BOOST_TEST(fileBytes(out / ("subj" + std::to_string(s) + "_affine.txt")) == fileBytes(single.outputs.affine));
      BOOST_TEST(sameField(out / ("subj" + std::to_string(s) + "_field.nii.gz"), single.outputs.field));
    }
  }
  // The mask changes the fit (it is used).
  auto plain = f.job(Backend::Cpu, f.dir / "plain");
  plain.transform = pipeline::RegistrationTransform::Rigid;
  pipeline::runRegisterCohort(plain);
  BOOST_TEST(fileBytes(f.dir / "plain" / "subj0_affine.txt") != fileBytes(f.dir / "out_rigid" / "subj0_affine.txt"));
}
