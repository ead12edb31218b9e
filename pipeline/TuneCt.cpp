// Tuners of the CT filters (issue 2 kernels): the bilateral ScratchTiled tile and the NLM BoxSum
// tile/batch. Both time a 2D Shepp-Logan phantom with Gaussian noise at SNR 25 and the quality
// study's parameters (core/QualitySettings.hpp), on the default execution space.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <sstream>
#include <string>

#include "pipeline/Tune.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/detail/BilateralKernels.hpp"
#include "gpu/nlm/detail/NlmBoxSum.hpp"
#include "gpu/nlm/detail/NlmScratchTiled.hpp"
#include "core/QualitySettings.hpp"

namespace kortex::pipeline::tune {

namespace {

namespace bilateral_detail = gpu::bilateral_detail;
namespace nlm_detail = gpu::nlm_detail;
using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;

constexpr std::uint64_t kNoiseSeed = 0x7E57ull;
// Bilateral: window 17x17 (radius 8), the largest of the paper's Table I and the issue-2 target.
constexpr int kBilateralWindow = 17;
// NLM: patch 7x7 (r = 3), search window 17x17 (R = 8): Table II's largest case, issue-2 target.
constexpr int kNlmWindow = 17;
constexpr int kNlmPatchRadius = 3;

HostImage noisyPhantom(int size, double* sigma) {
  if (size < 1) throw InvalidArgument("tuning: image size must be positive");
  const HostImage clean = sheppLogan2D(size);
  *sigma = noiseSigmaForSnr(clean, kQualitySnr);
  return addGaussianNoise(clean, *sigma, kNoiseSeed);
}

ImageView<Mem> toDevice(HostImage const& h, const char* label) {
  ImageView<Mem> d(std::string(label), h.data.extent(0), h.data.extent(1), h.data.extent(2));
  Kokkos::deep_copy(d, h.data);
  return d;
}

HostImage toHost(ImageView<Mem> const& d, Geometry const& g) {
  HostImage h("kortex::tune::result", g);
  Kokkos::deep_copy(h.data, d);
  return h;
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// ---- ct.bilateral.scratch ---------------------------------------------------------------------

using bilateral_detail::TileShape;

Config bilateralConfig(TileShape const& t) {
  return {{"x", t.x}, {"y", t.y}, {"per_thread", t.perThread}};
}

TileShape bilateralTile(Config const& c) {
  TileShape t;
  t.x = configValue(c, "x");
  t.y = configValue(c, "y");
  t.z = 1;
  t.perThread = configValue(c, "per_thread");
  t.streamZ = false;
  return t;
}

bool sameTile(TileShape const& a, TileShape const& b) {
  return a.x == b.x && a.y == b.y && a.z == b.z && a.perThread == b.perThread &&
         a.streamZ == b.streamZ;
}

// Candidate space: x in {8, 16, 32, 64, 128} (tile width), y in {2, 4, 8, 16, 32}, P (outputs
// per work item along y) in {1, 2, 4} dividing y: 70 shapes. Pruned, in this order (a shape is
// counted under the first rule it breaks):
//   1. rows shorter than 16 floats (x < 16): a tile row is what consecutive lanes read, and rows
//      under 64 B waste most of each memory transaction (the paper's coalescing rule);
//   2. tiles larger than the image in x or y (they only time idle threads);
//   3. fewer than 32 work items per team (x * y / P < 32): less than one warp of work;
//   4. more than 1024 work items per team: a team of one thread per item would exceed the
//      1024-thread limit of a CUDA block (the kernel caps teams at 256 threads, so such tiles
//      serialise most of their work);
//   5. tiles whose scratch at radius 8 exceeds scratch_size_max(0): fitTile would shrink them to
//      a shape that is already in the list.
// 50 shapes remain on CUDA and on Kokkos 3.4 Serial at 1024^2 (none hits rule 5 at radius 8).
CandidateSet enumerateBilateral(int size) {
  const int radius = (kBilateralWindow - 1) / 2;
  const std::size_t maxBytes = kx::scratchSizeMax<bilateral_detail::TiledPolicy<Exec>>(0);
  CandidateSet s;
  for (int x : {8, 16, 32, 64, 128})
    for (int y : {2, 4, 8, 16, 32})
      for (int p : {1, 2, 4}) {
        if (y % p != 0) continue;  // not a shape: P must divide y
        ++s.enumerated;
        const int items = x * y / p;
        const TileShape t{x, y, 1, p, false};
        if (x < 16)
          countPruned(s, "rows shorter than 16 floats (uncoalesced)");
        else if (x > size || y > size)
          countPruned(s, "tile larger than the image");
        else if (items < 32)
          countPruned(s, "fewer than 32 work items per team (under a warp)");
        else if (items > 1024)
          countPruned(s, "more than 1024 work items per team");
        else if (!sameTile(bilateral_detail::fitTile(t, radius, 2, maxBytes), t))
          countPruned(s, "scratch above scratch_size_max(0) = " + std::to_string(maxBytes) + " B");
        else
          s.candidates.push_back(bilateralConfig(t));
      }
  // gpu::bilateral's default without a database entry (bilateral_detail::defaultTileFor).
  const TileShape def = bilateral_detail::adaptTile(
      bilateral_detail::defaultTile(2, radius, maxBytes), size, size, 1, 2, kx::concurrency(Exec()));
  s.defaultConfig = bilateralConfig(def);
  s.reference = bilateralConfig(TileShape{16, 16, 1, 1, false});
  s.referenceName = "16x16, one output per thread (the paper's assumed optimum)";
  return s;
}

Workload prepareBilateral(int size) {
  double sigma = 0.0;
  const HostImage noisy = noisyPhantom(size, &sigma);
  const BilateralParams params = qualityBilateralParams(kBilateralWindow, sigma);
  params.validateFor(noisy.geometry);
  const ImageView<Mem> in = toDevice(noisy, "kortex::tune::bilateral::in");
  const ImageView<Mem> out(std::string("kortex::tune::bilateral::out"), in.extent(0), in.extent(1), in.extent(2));
  const Geometry g = noisy.geometry;
  Workload w;
  w.problem = "noisy Shepp-Logan " + std::to_string(size) + "^2 (SNR 25), radius " +
              std::to_string(params.radius) + ", sigma_s " + num(params.sigmaSpatial) +
              ", sigma_r " + num(params.sigmaRange);
  w.launch = [in, out, params](Config const& c) {
    const TileShape t = bilateralTile(c);
    const TileShape used = bilateral_detail::scratchTiled(Exec(), ConstImageView<Mem>(in), out, params, t);
    if (!sameTile(used, t))
      throw Unsupported("tuning ct.bilateral.scratch: tile " + bilateral_detail::describe(t) +
                        " was shrunk to " + bilateral_detail::describe(used));
  };
  w.fence = [] { Exec().fence(); };
  w.result = [out, g] { return toHost(out, g); };
  return w;
}

// ---- ct.nlm.boxsum ------------------------------------------------------------------------------

using nlm_detail::BoxSumConfig;

nlm_detail::Problem nlmProblem(int size) {
  nlm_detail::Problem pb;
  pb.nx = pb.ny = size;
  pb.nz = 1;
  pb.dim = 2;
  pb.r = kNlmPatchRadius;
  pb.R = (kNlmWindow - 1) / 2;
  return pb;
}

Config nlmConfig(BoxSumConfig const& c) { return {{"x", c.tx}, {"y", c.ty}, {"batch", c.batch}}; }

// Candidate space: the 2D kernel's preference list (chooseBoxSum2DConfig: 32x16, 32x8, 16x8, 8x8,
// 8x4) plus its neighbours (64x16, 64x8, 64x4, 32x32, 32x4, 16x32, 16x16, 16x4), all multiples of
// the kernel's 8x4 strips, times batch B in {2, 4, 6, 8} offsets per pass pair: 52 requests.
// Each request is resolved as the kernel resolves it (the batch is clamped to what fits the
// scratch, then balanced over the 2R+1 = 17 values of o_x: 8 runs as 6). Pruned, in this order:
//   1. tiles larger than the image in x or y;
//   2. tiles that fit the team scratch with no batch at all;
//   3. requests that resolve to the same launch as an earlier one (only distinct launches are
//      timed; the stored configuration is the resolved one).
CandidateSet enumerateNlm(int size) {
  const nlm_detail::Problem pb = nlmProblem(size);
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<Exec>>(0);
  CandidateSet s;
  const int tiles[][2] = {{32, 16}, {32, 8}, {16, 8}, {8, 8},   {8, 4},  {64, 16}, {64, 8},
                          {64, 4},  {32, 32}, {32, 4}, {16, 32}, {16, 16}, {16, 4}};
  for (auto const& t : tiles)
    for (int b : {2, 4, 6, 8}) {
      ++s.enumerated;
      BoxSumConfig req;
      req.tx = t[0];
      req.ty = t[1];
      req.tz = 1;
      req.batch = b;
      BoxSumConfig c;
      if (t[0] > size || t[1] > size) {
        countPruned(s, "tile larger than the image");
        continue;
      }
      if (!nlm_detail::chooseBoxSum2DConfig<kNlmPatchRadius, Exec>(pb, maxBytes, req, c)) {
        countPruned(s, "no batch fits scratch_size_max(0) = " + std::to_string(maxBytes) + " B");
        continue;
      }
      const Config cfg = nlmConfig(c);
      if (std::find(s.candidates.begin(), s.candidates.end(), cfg) != s.candidates.end()) {
        countPruned(s, "same launch as another request (batch clamped or balanced)");
        continue;
      }
      s.candidates.push_back(cfg);
    }
  BoxSumConfig def;
  if (!nlm_detail::chooseBoxSum2DConfig<kNlmPatchRadius, Exec>(pb, maxBytes, {}, def))
    throw Unsupported("tuning ct.nlm.boxsum: the 2D BoxSum kernel fits no tile in this execution "
                      "space's team scratch");
  s.defaultConfig = nlmConfig(def);
  BoxSumConfig ref, refReq;
  refReq.tx = refReq.ty = 16;
  refReq.tz = 1;
  refReq.batch = 6;
  if (nlm_detail::chooseBoxSum2DConfig<kNlmPatchRadius, Exec>(pb, maxBytes, refReq, ref)) {
    s.reference = nlmConfig(ref);
    s.referenceName = "16x16 tile";
  }
  return s;
}

// The NLM tuners' problem (both variants): the noisy phantom on the device, the quality study's
// parameters for a 17x17 window and 7x7 patch, and the workload's fence/result/description.
struct NlmSetup {
  ImageView<Mem> out;
  nlm_detail::InputView<Mem> input;
  nlm_detail::Problem pb;
  Workload w;  // problem, fence and result set; launch left to the tuner
};

NlmSetup prepareNlmProblem(int size, const char* label) {
  double sigma = 0.0;
  const HostImage noisy = noisyPhantom(size, &sigma);
  NlmParams params = qualityNlmParams(kNlmWindow, sigma, kNlmPatchRadius);
  params.validateFor(noisy.geometry);
  NlmSetup s;
  const ImageView<Mem> in = toDevice(noisy, (std::string(label) + "::in").c_str());
  s.out = ImageView<Mem>(std::string(label) + "::out", in.extent(0), in.extent(1), in.extent(2));
  s.input = in;
  s.pb = nlm_detail::makeProblem(s.input, params);
  const Geometry g = noisy.geometry;
  const ImageView<Mem> out = s.out;
  s.w.problem = "noisy Shepp-Logan " + std::to_string(size) + "^2 (SNR 25), patch radius " +
                std::to_string(params.patchRadius) + ", search radius " +
                std::to_string(params.searchRadius) + ", h " + num(params.h);
  s.w.fence = [] { Exec().fence(); };
  s.w.result = [out, g] { return toHost(out, g); };
  return s;
}

Workload prepareNlm(int size) {
  NlmSetup s = prepareNlmProblem(size, "kortex::tune::nlm");
  s.w.launch = [input = s.input, out = s.out, pb = s.pb](Config const& c) {
    BoxSumConfig req;
    req.tx = configValue(c, "x");
    req.ty = configValue(c, "y");
    req.tz = 1;
    req.batch = configValue(c, "batch");
    nlm_detail::launchBoxSum<2>(Exec(), input, out, pb, req);
  };
  return s.w;
}

// ---- ct.nlm.scratch ------------------------------------------------------------------------------

// NLM ScratchTiled (2D) starting tile. Space: x in {8, ..., 128}, y in {2, ..., 64} (powers of two);
// kept when 32 <= x*y <= 1024 (at least a warp of outputs, at most a CUDA block's worth), the tile
// fits the image, and fitTile keeps it as requested (a tile whose apron exceeds the scratch limit
// would run as a smaller one, measured under another name).
CandidateSet enumerateNlmScratch(int size) {
  if (size < kNlmWindow) throw InvalidArgument("tuning ct.nlm.scratch: size must be at least the 17x17 window");
  CandidateSet s;
  nlm_detail::Problem pb;
  pb.nx = pb.ny = size;
  pb.dim = 2;
  pb.r = kNlmPatchRadius;
  pb.R = (kNlmWindow - 1) / 2;
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<Exec>>(0);
  for (int x = 8; x <= 128; x *= 2)
    for (int y = 2; y <= 64; y *= 2) {
      ++s.enumerated;
      if (x * y < 32 || x * y > 1024) {
        countPruned(s, "32 <= x*y <= 1024 outputs per team");
        continue;
      }
      if (x > size || y > size) {
        countPruned(s, "tile larger than the image");
        continue;
      }
      const auto c = nlm_detail::chooseTiledConfig<Exec>(pb, maxBytes, {x, y, 1});
      if (c.mode != nlm_detail::TiledMode::Apron || c.tile[0] != x || c.tile[1] != y) {
        countPruned(s, "apron exceeds scratch_size_max(0)");
        continue;
      }
      s.candidates.push_back({{"x", x}, {"y", y}});
    }
  const auto d = nlm_detail::defaultTiledTile(2);
  s.defaultConfig = {{"x", d[0]}, {"y", d[1]}};
  s.reference = Config{{"x", 16}, {"y", 16}};
  s.referenceName = "16x16 tile";
  return s;
}

Workload prepareNlmScratch(int size) {
  NlmSetup s = prepareNlmProblem(size, "kortex::tune::nlmScratch");
  s.w.launch = [input = s.input, out = s.out, pb = s.pb](Config const& c) {
    nlm_detail::launchScratchTiled<2>(Exec(), input, out, pb, {configValue(c, "x"), configValue(c, "y"), 1});
  };
  return s.w;
}

}  // namespace

void registerCtTuners() {
  Tuner b;
  b.name = "ct.bilateral.scratch";
  b.description = "bilateral ScratchTiled: tile x, y and outputs per work item (2D, radius 8)";
  b.defaultSize = 1024;
  b.dim = 2;
  // Every tile runs the same operations in the same order per output; only FMA contraction
  // differs between the fixed- and run-time-radius kernels (a few ulp of values in [0, 1]).
  b.agreement = 1e-5;
  b.enumerate = enumerateBilateral;
  b.prepare = prepareBilateral;
  registerTuner(std::move(b));

  Tuner n;
  n.name = "ct.nlm.boxsum";
  n.description = "NLM BoxSum (2D): tile x, y and offsets per batch (patch 7x7, window 17x17)";
  n.defaultSize = 1024;
  n.dim = 2;
  // The batch size changes how many weights are summed in float before each double update
  // (gpu/nlm/detail/NlmCommon.hpp: accumulation precision): float rounding of sums of <= 17 terms, ~1e-6.
  n.agreement = 1e-4;
  n.enumerate = enumerateNlm;
  n.prepare = prepareNlm;
  registerTuner(std::move(n));

  Tuner t;
  t.name = "ct.nlm.scratch";
  t.description = "NLM ScratchTiled (2D): starting tile x, y (patch 7x7, window 17x17)";
  t.defaultSize = 1024;
  t.dim = 2;
  t.agreement = 1e-5;  // the tile changes which team computes an output, never its arithmetic
  t.enumerate = enumerateNlmScratch;
  t.prepare = prepareNlmScratch;
  registerTuner(std::move(t));
}

}  // namespace kortex::pipeline::tune
