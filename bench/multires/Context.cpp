// `kortex bench multires`: the fixed problem (input, parameters, checks) and the Context every
// section measures through (bench/multires/MultiresBench.hpp).
#include "bench/multires/MultiresBench.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iterator>
#include <string>

#include "core/Phantom.hpp"
#include "core/Tuning.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "gpu/multires/MultiresPyramid.hpp"
#include "validation/Metrics.hpp"

namespace kortex::bench::multires {

namespace md = gpu::multires_detail;

common::Mode modeFor(BenchOptions const& o) {
  common::Mode m;
  if (o.tiny)
    m = {"tiny", 0.5, 1.0, 0.5, 1.0, 60.0, 1, 1, 2, 2, 0.6};
  else if (o.quick)
    m = {"quick", 1.5, 4.0, 1.5, 4.0, 200.0, 1, 3, 10, 3, 0.6};
  else
    m = {"full", 10.0, 30.0, 8.0, 45.0, 330.0, 2, 5, 30, 5, 0.5};
  if (o.deviceCaseBudgetS > 0) m.devBudget = m.devSingle = o.deviceCaseBudgetS;
  if (o.cpuCaseBudgetS > 0) m.cpuBudget = m.cpuSingle = o.cpuCaseBudgetS;
  if (o.totalBudgetS > 0) m.total = o.totalBudgetS;
  return m;
}

// ---- input ----------------------------------------------------------------------------------
std::unique_ptr<Input> makeInput(Index n) {
  auto in = std::make_unique<Input>();
  in->n = n;
  const HostImage unit = sheppLogan2D(n);
  in->clean = HostImage("kortex::bench::multires::clean", unit.geometry);
  const Index count = unit.numVoxels();
  const float* u = unit.data.data();
  float* c = in->clean.data.data();
  for (Index i = 0; i < count; ++i) c[i] = static_cast<float>(double(kMaxValue) * u[i]);
  in->sigma = noiseSigmaForSnr(in->clean, kQualitySnr);
  const HostImage raw = addGaussianNoise(in->clean, in->sigma, kNoiseSeed + static_cast<std::uint64_t>(n));
  in->noisy = HostImage("kortex::bench::multires::noisy", unit.geometry);
  in->noisy16 = HostU16("kortex::bench::multires::noisy16", 1, n, n);
  const float* r = raw.data.data();
  float* f = in->noisy.data.data();
  std::uint16_t* q = in->noisy16.data();
  for (Index i = 0; i < count; ++i) {
    const float v = std::min(std::max(std::nearbyint(r[i]), 0.0f), float(kMaxValue));
    f[i] = v;
    q[i] = static_cast<std::uint16_t>(v);
  }
  in->range = validation::dataRange(in->clean);
  if (!(in->range > 0.0)) in->range = kMaxValue;
  in->psnrNoisy = validation::psnr(in->noisy, in->clean, in->range);
  return in;
}

MultiresParams baseParams(double sigma, bool integer) {
  MultiresParams p;
  p.levels = kLevels;
  p.radius = kRadius;
  p.sigmaSpatial = kSigmaSpatial;
  p.sigmaRange = static_cast<float>(kSigmaRangePerNoise * sigma);
  p.bits = integer ? kBits : 0;
  p.filter = true;
  // Pyramid variant and level concurrency: the library's defaults (core/Multires.hpp), so Table 2
  // reports what gpu::multires runs (Table 2 also times concurrentLevels on and off).
  p.bilateral = integer ? MultiresBilateralVariant::ClosenessSimilarityLut : MultiresParams{}.bilateral;
  return p;
}

// ---- checks ---------------------------------------------------------------------------------
HostImage toFloat(HostU16 const& v) {
  HostImage out("kortex::bench::multires::as_float", Geometry::make2D(static_cast<Index>(v.extent(2)),
                                                                      static_cast<Index>(v.extent(1))));
  const std::uint16_t* p = v.data();
  float* q = out.data.data();
  for (std::size_t i = 0; i < v.size(); ++i) q[i] = p[i];
  return out;
}

std::string checkFinite(HostImage const& out, Input const& in, double* psnrOut) {
  if (!validation::allFinite(out)) return "non-finite output pixel";
  if (psnrOut) *psnrOut = validation::psnr(out, in.clean, in.range);
  return "";
}

HostImage copyOf(HostImage const& a) {
  HostImage c("kortex::bench::multires::kept_output", a.geometry);
  Kokkos::deep_copy(c.data, a.data);
  return c;
}

std::string checkClose(HostImage const& a, HostImage const& ref, double tolRel, std::string const& what) {
  const auto e = validation::compare(a, ref);
  if (e.nonFinite > 0) return what + ": " + std::to_string(e.nonFinite) + " non-finite pixels";
  if (!(e.maxRel <= tolRel))
    return what + ": max relative error " + validation::fmtSci(e.maxRel) + " > " + validation::fmtSci(tolRel);
  return "";
}

// ---- buffers --------------------------------------------------------------------------------
void makeFloatLayers(Context& ctx, Input const& in, FloatLayers& l) {
  const Index n = in.n;
  l.k = ctx.slots(2.0 * 4.0 * double(n) * double(n));
  Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
      in.noisy.data.data(), n, n);
  for (int s = 0; s < l.k; ++s) {
    l.in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_in"), Kokkos::WithoutInitializing), n, n);
    l.out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::layer_out"), Kokkos::WithoutInitializing), n, n);
    Kokkos::deep_copy(l.in.back(), h);
  }
  l.closeness = tableToDevice(multiresCloseness(kRadius, kSigmaSpatial), "kortex::bench::multires::closeness");
}

// ---- context --------------------------------------------------------------------------------
Context::Context(BenchOptions const& o, nlohmann::json peers)
    : opt_(o), mode_(modeFor(o)), budget_(mode_), peers_(std::move(peers)), t0_(Clock::now()),
      cache_(common::cacheBytes()), cpuThreads_(common::maxOmpThreads()) {}

void Context::progress(std::string const& s) const {
  if (opt_.progress) {
    *opt_.progress << s << "\n";
    opt_.progress->flush();
  }
}

void Context::measureCopyBandwidth() { copyGBs_ = common::measureCopyBandwidth(exec_, opt_.tiny); }

void Context::setSectionCap(int section) {
  double cum = 0.0;
  for (int s = 0; s <= section; ++s) cum += kSectionShare[s];
  budget_.setPhaseLimit(true, cum * mode_.total * mode_.deviceShare);
}

int Context::slots(double setBytes) {
  const int k = common::rotationSlots(setBytes, cache_, opt_.tiny ? 8 : 128);
  slotsUsedMax_ = std::max(slotsUsedMax_, k);
  return k;
}

Input& Context::input(Index n) {
  auto it = inputs_.find(n);
  if (it == inputs_.end()) {
    it = inputs_.emplace(n, makeInput(n)).first;
    noise_[n] = {it->second->sigma, it->second->psnrNoisy};
  }
  return *it->second;
}

void Context::releaseLargeInputs() {
  for (auto it = inputs_.begin(); it != inputs_.end();)
    it = it->first > 2048 ? inputs_.erase(it) : std::next(it);
}

TileInfo const& Context::tilesAt(Index n) {
  auto it = tiles_.find(n);
  if (it != tiles_.end()) return it->second;
  MultiresTiles mt;
  {
    MultiresParams p = baseParams(1.0, false);
    p.pyramid = PyramidVariant::FusedExpand;  // the variant that has a tile (whatever the default)
    gpu::MultiresPlan<Exec, float> plan(exec_, n, n, p);
    mt = plan.tiles();
  }
  return tiles_.emplace(n, withSources(n, mt)).first->second;
}

TileInfo Context::withSources(Index n, MultiresTiles const& mt) const {
  TileInfo t;
  t.bilateralX = mt.bilateralX;
  t.bilateralY = mt.bilateralY;
  t.pyramidX = mt.pyramidX;
  t.pyramidY = mt.pyramidY;
  auto source = [&](const char* kernel, int x, int y, int defX, int defY) {
    if (x <= 0 || y <= 0) return std::string("none (not a tiled kernel in this configuration)");
    std::string src;
    const tuning::Config c = tuning::lookup(kernel, tuning::sizeClass(n, n),
                                            tuning::Config{{"x", defX}, {"y", defY}}, &src);
    const auto cx = c.find("x"), cy = c.find("y");
    const bool same = cx != c.end() && cy != c.end() && cx->second == x && cy->second == y;
    if (!same) return std::string("default: the tuning entry was unusable");
    if (src == "default") return std::string("default: no tuning entry");
    return src + " tuning database, " + tuning::sizeClass(n, n);
  };
  t.bilateralSource = source(kBilateralKernel, t.bilateralX, t.bilateralY, md::kDefaultBilateralTile.x,
                             md::kDefaultBilateralTile.y);
  t.pyramidSource = source(kPyramidKernel, t.pyramidX, t.pyramidY, md::kDefaultPyramidTile.x,
                           md::kDefaultPyramidTile.y);
  return t;
}

void Context::measure(common::Measurement& m, std::string const& label, bool device, std::string const& key, double units,
                      std::function<Case()> const& build, std::function<double()> const& probeRate) {
  auto phase = budget_.clock(device);
  try {
    double est = -1.0;
    auto it = rate_.find(key);
    if (it == rate_.end() && probeRate) {
      const double r = probeRate();
      if (r > 0.0) it = rate_.emplace(key, r).first;
    }
    if (it != rate_.end()) est = it->second * units;
    if (!budget_.plan(m, est, device)) {
      ++skipped_;
      progress("  " + label + ": skipped (" + m.note + ")");
      return;
    }
    Case c = build();
    budget_.timeAdaptive(
        m, device, c.run,
        [&] {
          if (device) exec_.fence();
        },
        c.maxRepsCap);
    const std::string why = c.check ? c.check() : std::string();
    if (!why.empty()) {
      m.status = "check failed";
      m.note = why;
      ++failed_;
    } else {
      ++measured_;
      if (m.timing.medianMs > 0.0 && units > 0.0) rate_[key] = m.timing.medianMs / units;
    }
    progress("  " + label + (device ? std::string(" [") + Exec::name() + "]" : std::string()) + ": " +
             validation::fmtMs(m.timing.medianMs) + " ms (" + common::repsText(m) + ")" +
             (m.status == "check failed" ? "  CHECK FAILED: " + why : std::string()));
  } catch (std::exception const& e) {
    m.status = "error";
    m.note = e.what();
    ++failed_;
    progress("  " + label + ": ERROR " + e.what());
  }
}

}  // namespace kortex::bench::multires
