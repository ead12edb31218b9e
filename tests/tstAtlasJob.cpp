// The atlas job's pure pieces (pipeline/Atlas.hpp), tested alone: the subjects' majority vote.
#define BOOST_TEST_MODULE AtlasJob
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <map>
#include <random>
#include <vector>

#include "TestUtils.hpp"
#include "pipeline/Atlas.hpp"

using namespace kortex;

namespace {

// The mode of each voxel's values by counting (ties to the smaller label): what voteMajority must give.
HostImage bruteForceMajority(std::vector<HostImage> const& maps, Geometry const& g) {
  HostImage out("kortex::test::majority", g);
  for (Index k = 0; k < g.numVoxels(); ++k) {
    std::map<float, int> count;
    for (auto const& m : maps) ++count[m.data.data()[k]];
    float best = -1.0f;
    int bestCount = 0;
    for (auto const& [label, n] : count)  // ascending labels: a tie keeps the smaller
      if (n > bestCount) best = label, bestCount = n;
    out.data.data()[k] = best;
  }
  return out;
}

std::vector<HostImage> randomMaps(Geometry const& g, int subjects, std::vector<float> const& labels, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, labels.size() - 1);
  std::vector<HostImage> maps;
  for (int s = 0; s < subjects; ++s) {
    HostImage m("kortex::test::labels", g);
    for (Index k = 0; k < g.numVoxels(); ++k) m.data.data()[k] = labels[pick(rng)];
    maps.push_back(m);
  }
  return maps;
}

}  // namespace

// Few labels (counts per label) and more labels than subjects (each subject's label per voxel, the
// bound that keeps 65,536 labels from costing voxels x 65,536): both are the brute-force mode.
BOOST_AUTO_TEST_CASE(majority_vote_is_the_mode_with_ties_to_the_smaller_label) {
  const Geometry g = Geometry::make3D(9, 7, 5);
  const std::vector<float> few{0, 3, 17};
  std::vector<float> many;
  for (int l = 0; l < 60; ++l) many.push_back(float(l * 1000 + 7));  // up to 59007: beyond 16 bits' half
  for (std::vector<float> const* labels : std::vector<std::vector<float> const*>{&few, &many}) {
    for (int subjects : {1, 2, 4, 5}) {
      const auto maps = randomMaps(g, subjects, *labels, unsigned(subjects * 31 + labels->size()));
      const HostImage want = bruteForceMajority(maps, g);
      const HostImage got = pipeline::voteMajority(maps, g, 0, subjects, nullptr);
      Index differ = 0;
      for (Index k = 0; k < g.numVoxels(); ++k) differ += got.data.data()[k] != want.data.data()[k];
      BOOST_TEST_INFO(labels->size() << " labels, " << subjects << " subjects");
      BOOST_TEST(differ == 0);
    }
  }
  // A two-way tie: the smaller label, in both paths.
  HostImage a("kortex::test::a", g), b("kortex::test::b", g);
  for (Index k = 0; k < g.numVoxels(); ++k) a.data.data()[k] = 40000.0f, b.data.data()[k] = 12.0f;
  for (auto const& out : {pipeline::voteMajority({a, b}, g, 0, 2, nullptr), pipeline::voteMajority({b, a}, g, 0, 2, nullptr)})
    BOOST_TEST(out.data.data()[0] == 12.0f);
  BOOST_CHECK_THROW(pipeline::voteMajority({a, HostImage("kortex::test::c", Geometry::make3D(3, 3, 3))}, g, 0, 2, nullptr),
                    InvalidArgument);
}

// The job's JSON: every field read back, unknown keys and images in memory refused by name.
BOOST_AUTO_TEST_CASE(atlas_job_round_trip) {
  pipeline::AtlasJob job;
  job.images = {"a.nii.gz", "b.nii.gz", "c.nii"};
  job.imageList = "more.txt";
  job.labels = {"la.nii", "lb.nii", "lc.nii"};
  job.reference = "ref.nii";
  job.params.greedy.scales = {4, 2, 1};
  job.params.greedy.iterations = {3, 4, 5};
  job.params.greedy.metric = GreedyMetric::Lncc;
  job.useAffine = false;
  job.clip = false;
  job.backend = Backend::Kokkos;
  job.outTemplate = "t/template.nii.gz";
  job.outFieldsDir = "f";
  job.outWarpedDir = "w";
  job.outSubjectLabelsDir = "s";
  job.outReport = "r.json";
  job.otherInputs = {"list.txt"};
  job.checkpointDir = "ck";
  job.checkpointEvery = 7;
  job.resume = true;
  job.maxMemoryMiB = 512.5;
  const nlohmann::json j = pipeline::toJson(job);
  BOOST_TEST(pipeline::toJson(pipeline::atlasJobFromJson(nlohmann::json::parse(j.dump()))) == j);
  nlohmann::json bad = j;
  bad["max_memmory"] = 1;
  BOOST_CHECK_EXCEPTION(pipeline::atlasJobFromJson(bad), InvalidArgument,
                        [](InvalidArgument const& e) { return std::string(e.what()).find("'max_memmory'") != std::string::npos; });
  pipeline::AtlasJob inMemory;
  inMemory.imageData = {HostImage("kortex::test::s", Geometry::make3D(4, 4, 4))};
  BOOST_CHECK_THROW(pipeline::atlasJobFromJson(pipeline::toJson(inMemory)), InvalidArgument);
}

// The clip box alone: a subject's box of voxels above the threshold; the union, the guard band,
// the greedy quantum and the box kept inside the grid.
BOOST_AUTO_TEST_CASE(atlas_clip_box) {
  const Geometry g = Geometry::make3D(40, 36, 30);
  HostImage img("kortex::test::img", g);
  img.data(12, 10, 8) = 0.5f;   // (x, y, z) = (8, 10, 12)
  img.data(20, 25, 30) = 0.9f;  // (30, 25, 20)
  img.data(5, 5, 5) = 0.04f;    // below the threshold
  const auto b = pipeline::voxelBox(img, pipeline::kAtlasClipThreshold);
  BOOST_TEST((b == std::array<Index, 6>{8, 10, 12, 30, 25, 20}));
  HostImage empty("kortex::test::empty", g);
  const auto none = pipeline::voxelBox(empty, pipeline::kAtlasClipThreshold);
  BOOST_TEST(none[3] == -1);

  GreedyParams greedy;
  greedy.scales = {2, 1};  // extents even at the coarse scale
  const std::array<Index, 6> other{14, 3, 13, 20, 12, 15};
  const pipeline::AtlasBox box = pipeline::atlasBox(g, {b, other}, true, greedy);
  const int guard = pipeline::kAtlasGuardVoxels;
  // x: [8 - 4, 30 + 4] = [4, 34]: 31 voxels -> 32 (even); y: [3 - 4 -> 0, 25 + 4 = 29]: 30; z: [12 - 4, 20 + 4] = [8, 24]: 17 -> 18
  BOOST_TEST(box.low[0] == 8 - guard);
  BOOST_TEST(box.grid.size[0] == 32);
  BOOST_TEST(box.low[1] == 0);
  BOOST_TEST(box.grid.size[1] == 30);
  BOOST_TEST(box.low[2] == 12 - guard);
  BOOST_TEST(box.grid.size[2] == 18);
  for (int a = 0; a < 3; ++a) {
    BOOST_TEST(box.grid.size[a] % 2 == 0);
    BOOST_TEST(box.low[a] + box.grid.size[a] <= g.size[a]);  // inside the grid where it fits
  }
  const auto origin = indexToWorld(g, {double(box.low[0]), double(box.low[1]), double(box.low[2])});
  for (int a = 0; a < 3; ++a) BOOST_TEST(box.grid.origin[a] == origin[a]);
  // A box at the grid's end: moved back inside rather than past the edge.
  const pipeline::AtlasBox edge = pipeline::atlasBox(g, {{35, 30, 25, 39, 35, 29}}, true, greedy);
  BOOST_TEST(edge.low[0] + edge.grid.size[0] == 40);
  // No clipping: the whole grid (its extents rounded up for the schedule).
  const pipeline::AtlasBox whole = pipeline::atlasBox(g, {}, false, greedy);
  BOOST_TEST((whole.low == std::array<Index, 3>{0, 0, 0}));
  BOOST_TEST((whole.grid.size == g.size));
}

// The residency plan alone: all resident when they fit; on a device the rest streamed; refusals.
BOOST_AUTO_TEST_CASE(atlas_residency_plan) {
  AtlasMemory m;
  m.perSubject = 100;
  m.shared = 300;
  m.streamBuffers = 250;
  m.perStreamedHost = 60;
  const auto all = pipeline::atlasResidency(m, 8, 1100, true, 0, "8 subjects");  // 300 + 800 fits
  BOOST_TEST(all.resident == 8);
  BOOST_TEST(all.streamed == 0);
  BOOST_TEST(pipeline::atlasResidency(m, 8, 0, true, 0, "8 subjects").resident == 8);  // memory unknown
  const auto some = pipeline::atlasResidency(m, 8, 1000, true, 0, "8 subjects");  // (1000 - 300 - 250) / 100 = 4
  BOOST_TEST(some.resident == 4);
  BOOST_TEST(some.streamed == 4);
  auto refused = [&](auto&& call, std::string const& words) {
    try {
      call();
    } catch (InvalidArgument const& e) {
      return std::string(e.what()).find(words) != std::string::npos;
    }
    return false;
  };
  BOOST_TEST(refused([&] { pipeline::atlasResidency(m, 8, 1000, false, 0, "8 subjects"); }, "8 subjects need"));  // a host back end
  BOOST_TEST(refused([&] { pipeline::atlasResidency(m, 8, 500, true, 0, "8 subjects"); }, "streaming needs"));  // buffers alone
  BOOST_TEST(refused([&] { pipeline::atlasResidency(m, 8, 1000, true, 200, "8 subjects"); }, "of host memory"));  // 4 x 60 > 200
}
