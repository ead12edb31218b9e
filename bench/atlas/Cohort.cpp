// Atlas benchmark: the cohorts (IXI volumes or the phantom, each subject under its seeded smooth
// displacement), the template hash and the statistics of the atlas's iteration clock.
#include "bench/atlas/AtlasBench.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>

#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "io/ImageIO.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::bench::atlas {

namespace fs = std::filesystem;

// img resampled (trilinear, centre to centre, clamp) onto g.
HostImage resampleTo(HostImage const& img, Geometry const& g) {
  HostImage out("kortex::bench::resampled", g);
  const Geometry& s = img.geometry;
  const double fx = double(s.nx()) / double(g.nx()), fy = double(s.ny()) / double(g.ny()), fz = double(s.nz()) / double(g.nz());
  auto at = [&](Index z, Index y, Index x) {
    return img.data(std::clamp<Index>(z, 0, s.nz() - 1), std::clamp<Index>(y, 0, s.ny() - 1), std::clamp<Index>(x, 0, s.nx() - 1));
  };
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const double px = (x + 0.5) * fx - 0.5, py = (y + 0.5) * fy - 0.5, pz = (z + 0.5) * fz - 0.5;
        const Index x0 = Index(std::floor(px)), y0 = Index(std::floor(py)), z0 = Index(std::floor(pz));
        const double ax = px - x0, ay = py - y0, az = pz - z0;
        double v = 0.0;
        for (int c = 0; c < 8; ++c) {
          const double w = (c & 1 ? ax : 1 - ax) * (c & 2 ? ay : 1 - ay) * (c & 4 ? az : 1 - az);
          v += w * at(z0 + (c >> 2 & 1), y0 + (c >> 1 & 1), x0 + (c & 1));
        }
        out.data(z, y, x) = float(v);
      }
  return out;
}

// The base images: the IXI volumes (normalised, resampled to g) or one structured phantom.
std::vector<HostImage> baseImages(BenchOptions const& opt, Geometry const& g, std::string& source) {
  std::vector<HostImage> out;
  if (!opt.dataDir.empty()) {
    std::vector<fs::path> files;
    for (const char* sub : {"ixi_2mm", "ixi_2mm_more"}) {
      const fs::path d = fs::path(opt.dataDir) / "mri" / sub;
      if (!fs::is_directory(d)) continue;
      for (auto const& e : fs::recursive_directory_iterator(d)) {
        const std::string p = e.path().string();
        if (p.size() > 7 && p.substr(p.size() - 7) == ".nii.gz" && p.find("label") == std::string::npos)
          files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (auto const& f : files) out.push_back(resampleTo(normaliseIntensity(io::readImage(f), IntensityParams{}, f.string()), g));
    if (!out.empty()) {
      source = std::to_string(out.size()) + " IXI T1 volumes (normalised, resampled to " + describe(g) + ")";
      return out;
    }
  }
  out.push_back(structuredImage(g, 7));
  source = "the structured phantom (core/Phantom.hpp)";
  return out;
}

// Subject i: base[i mod B] under the seeded smooth diffeomorphic displacement of seed 1000 + i.
// The subjects `indices` (any order), built in parallel (each subject's result depends on i only).
std::vector<HostImage> subjects(std::vector<HostImage> const& base, std::vector<int> const& indices) {
  std::vector<HostImage> out(indices.size());
#pragma omp parallel for schedule(dynamic)
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const int i = indices[k];
    HostImage const& b = base[std::size_t(i) % base.size()];
    const auto u = smoothDisplacement(b.geometry, 3.0, 1000 + std::uint64_t(i));
    HostImage img("kortex::bench::subject", b.geometry);
    ref::warp(b.data, u.data, img.data);
    out[k] = img;
  }
  return out;
}

std::vector<HostImage> cohort(std::vector<HostImage> const& base, int n) {
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[std::size_t(i)] = i;
  return subjects(base, all);
}

// FNV-1a 64 of an image's bytes: equal templates from runs over different rank counts.
std::string fnv1a(HostImage const& img) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(img.data.data());
  for (std::size_t k = 0; k < img.data.size() * sizeof(float); ++k) h = (h ^ p[k]) * 1099511628211ull;
  std::ostringstream o;
  o << std::hex << std::setw(16) << std::setfill('0') << h;
  return o.str();
}

// Median seconds of one iteration at each scale (differences of the iteration clock).
std::vector<double> iterationSecondsPerScale(AtlasResult const& r, std::size_t scales) {
  std::vector<double> out(scales, 0.0);
  for (std::size_t s = 0; s < scales; ++s) {
    std::vector<double> d;
    for (std::size_t k = 1; k < r.history.size(); ++k)
      if (r.history[k].scale == int(s) && r.history[k - 1].scale == int(s)) d.push_back(r.history[k].seconds - r.history[k - 1].seconds);
    if (d.empty()) continue;
    std::sort(d.begin(), d.end());
    out[s] = d[d.size() / 2];
  }
  return out;
}

bool sameBits(HostImage const& a, HostImage const& b) {
  return std::equal(a.data.data(), a.data.data() + a.data.size(), b.data.data(),
                    [](float x, float y) { return x == y; });
}

// Per-iteration seconds: differences of the iteration clock, after the first iteration.
TimingStats iterationStats(AtlasResult const& r) {
  std::vector<double> ms;
  for (std::size_t k = 1; k < r.history.size(); ++k)
    if (r.history[k].scale == r.history[k - 1].scale) ms.push_back(1e3 * (r.history[k].seconds - r.history[k - 1].seconds));
  TimingStats t;
  if (ms.empty()) return t;
  t.samplesMs = ms;
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  t.medianMs = s[s.size() / 2];
  t.minMs = s.front();
  t.maxMs = s.back();
  t.repetitions = int(ms.size());
  return t;
}

}  // namespace kortex::bench::atlas
