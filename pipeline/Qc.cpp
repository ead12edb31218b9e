// The QC report of a registration (pipeline/Qc.hpp states it).
#include "pipeline/Qc.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <tuple>

#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/Atlas.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/RegisterCohort.hpp"
#include "pipeline/RegisterJob.hpp"

namespace kortex::pipeline {

namespace {

using Vec3 = std::array<double, 3>;
using Rgb = std::array<std::uint8_t, 3>;

constexpr double kHeadFraction = 0.1;   // of the 99.5th percentile: the head
constexpr double kBoxMarginMm = 4.0;
constexpr double kPanelPixels = 240.0;  // the head box's longest side
constexpr double kLevels[3] = {0.35, 0.5, 0.65};
constexpr int kGap = 4;                 // pixels between panels
constexpr int kChecker = 20;
constexpr double kEdgeFraction = 0.25;  // of the panel's 98th percentile of the gradient magnitude
constexpr std::size_t kPercentileSamples = 200000;

// ---- the image's values ----------------------------------------------------------------------------

double percentileOf(std::vector<float> v, double q) {
  if (v.empty()) return 0.0;
  const std::size_t k = std::min(v.size() - 1, std::size_t(q / 100.0 * double(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

// Every voxel, or an even subsample of at most kPercentileSamples.
std::vector<float> samples(HostImage const& img, float above = -INFINITY) {
  const Index n = img.numVoxels();
  const Index stride = std::max<Index>(1, n / Index(kPercentileSamples));
  std::vector<float> v;
  for (Index i = 0; i < n; i += stride)
    if (img.data.data()[i] > above) v.push_back(img.data.data()[i]);
  return v;
}

double headThreshold(HostImage const& img) { return kHeadFraction * percentileOf(samples(img), 99.5); }

struct Window {
  double lo = 0.0, hi = 1.0;
};

// The samples of one image on the frames it was drawn on, kept: the fixed image of a report is drawn
// on each of its nine frames by four or five pictures. Thread-safe: the first thread to ask for a
// frame samples it, the others wait for that result.
class FrameMemo {
 public:
  std::vector<float> const& get(QcFrame const& f, HostImage const& img);

 private:
  using Key = std::tuple<int, double, double, double, int, int>;
  std::mutex mutex_;
  std::map<Key, std::shared_future<std::vector<float>>> frames_;
};

// An image as shown: its head threshold and grey window, found once, and its samples per frame.
struct Shown {
  HostImage const* img = nullptr;
  double head = 0.0;
  Window window;
  std::shared_ptr<FrameMemo> memo = std::make_shared<FrameMemo>();
  std::vector<float> const& on(QcFrame const& f) const { return memo->get(f, *img); }
};

Shown shown(HostImage const& img) {
  Shown s{&img, headThreshold(img), {}};
  const auto head = samples(img, float(s.head));
  s.window = {percentileOf(head, 1.0), percentileOf(head, 99.5)};
  if (!(s.window.hi > s.window.lo)) s.window.hi = s.window.lo + 1.0;
  return s;
}

// ---- world sampling --------------------------------------------------------------------------------

// World (LPS, mm) -> continuous index of an image's grid, and whether a point lies within half a
// voxel of it.
struct Sampler {
  HostImage const& img;
  Matrix3 toIndex;
  Vec3 origin;
  explicit Sampler(HostImage const& i) : img(i), toIndex(inverse3(indexToWorldMatrix(i.geometry))), origin(i.geometry.origin) {}
  Vec3 index(Vec3 const& w) const {
    const Vec3 d{w[0] - origin[0], w[1] - origin[1], w[2] - origin[2]};
    Vec3 p{};
    for (int r = 0; r < 3; ++r) p[r] = toIndex[3 * r] * d[0] + toIndex[3 * r + 1] * d[1] + toIndex[3 * r + 2] * d[2];
    return p;
  }
  bool inside(Vec3 const& p) const {
    auto const& g = img.geometry;
    return p[0] > -0.5 && p[1] > -0.5 && p[2] > -0.5 && p[0] < g.nx() - 0.5 && p[1] < g.ny() - 0.5 && p[2] < g.nz() - 0.5;
  }
};

// An image sampled on every pixel of a frame (row-major; NaN outside the image): trilinear or the
// nearest voxel. The index point moves by a constant step per pixel (the frame is affine in world space).
std::vector<float> sampleFrame(QcFrame const& f, HostImage const& img, bool nearest = false) {
  const Sampler s(img);
  auto const& g = img.geometry;
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  const Vec3 p0 = s.index(f.origin);
  Vec3 di{}, dj{};
  for (int r = 0; r < 3; ++r) {
    di[std::size_t(r)] = s.toIndex[std::size_t(3 * r)] * f.right[0] + s.toIndex[std::size_t(3 * r + 1)] * f.right[1] +
                         s.toIndex[std::size_t(3 * r + 2)] * f.right[2];
    dj[std::size_t(r)] = s.toIndex[std::size_t(3 * r)] * f.down[0] + s.toIndex[std::size_t(3 * r + 1)] * f.down[1] +
                         s.toIndex[std::size_t(3 * r + 2)] * f.down[2];
  }
  const float* v = img.data.data();
  std::vector<float> out(std::size_t(f.width) * f.height, NAN);
  for (int j = 0; j < f.height; ++j)
    for (int i = 0; i < f.width; ++i) {
      const Vec3 p{p0[0] + i * di[0] + j * dj[0], p0[1] + i * di[1] + j * dj[1], p0[2] + i * di[2] + j * dj[2]};
      if (!s.inside(p)) continue;
      float& o = out[std::size_t(j) * f.width + i];
      if (nearest) {
        const Index x = std::clamp<Index>(std::lround(p[0]), 0, nx - 1), y = std::clamp<Index>(std::lround(p[1]), 0, ny - 1),
                    z = std::clamp<Index>(std::lround(p[2]), 0, nz - 1);
        o = v[(z * ny + y) * nx + x];
        continue;
      }
      const double cx = std::clamp(p[0], 0.0, double(nx - 1)), cy = std::clamp(p[1], 0.0, double(ny - 1)),
                   cz = std::clamp(p[2], 0.0, double(nz - 1));
      const Index x0 = std::min<Index>(Index(cx), nx - 1), y0 = std::min<Index>(Index(cy), ny - 1),
                  z0 = std::min<Index>(Index(cz), nz - 1);
      const Index x1 = std::min<Index>(x0 + 1, nx - 1), y1 = std::min<Index>(y0 + 1, ny - 1), z1 = std::min<Index>(z0 + 1, nz - 1);
      const double fx = cx - double(x0), fy = cy - double(y0), fz = cz - double(z0);
      auto at = [&](Index x, Index y, Index z) { return double(v[(z * ny + y) * nx + x]); };
      const double c00 = at(x0, y0, z0) + fx * (at(x1, y0, z0) - at(x0, y0, z0));
      const double c10 = at(x0, y1, z0) + fx * (at(x1, y1, z0) - at(x0, y1, z0));
      const double c01 = at(x0, y0, z1) + fx * (at(x1, y0, z1) - at(x0, y0, z1));
      const double c11 = at(x0, y1, z1) + fx * (at(x1, y1, z1) - at(x0, y1, z1));
      const double c0 = c00 + fy * (c10 - c00), c1 = c01 + fy * (c11 - c01);
      o = float(c0 + fz * (c1 - c0));
    }
  return out;
}

std::vector<float> const& FrameMemo::get(QcFrame const& f, HostImage const& img) {
  const Key key{int(f.plane), f.origin[0], f.origin[1], f.origin[2], f.width, f.height};
  std::promise<std::vector<float>> mine;
  std::shared_future<std::vector<float>> result;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = frames_.find(key);
    if (it == frames_.end()) {
      result = mine.get_future().share();
      frames_.emplace(key, result);
      first = true;
    } else {
      result = it->second;
    }
  }
  if (first) mine.set_value(sampleFrame(f, img));
  return result.get();
}

// The head box in world (LPS) coordinates: the index box of the head voxels, its 8 corners mapped.
struct Box {
  Vec3 lo{}, hi{};
};

Box headBox(Shown const& s) {
  HostImage const& img = *s.img;
  auto const& g = img.geometry;
  const float t = float(s.head);
  Index lo[3] = {g.nx(), g.ny(), g.nz()}, hi[3] = {-1, -1, -1};
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x)
        if (img.data.data()[(z * g.ny() + y) * g.nx() + x] > t) {
          const Index p[3] = {x, y, z};
          for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], p[a]), hi[a] = std::max(hi[a], p[a]);
        }
  if (hi[0] < 0)
    for (int a = 0; a < 3; ++a) lo[a] = 0, hi[a] = g.size[std::size_t(a)] - 1;
  Box b{{INFINITY, INFINITY, INFINITY}, {-INFINITY, -INFINITY, -INFINITY}};
  for (int c = 0; c < 8; ++c) {
    const Vec3 w = indexToWorld(g, {double(c & 1 ? hi[0] : lo[0]), double(c & 2 ? hi[1] : lo[1]), double(c & 4 ? hi[2] : lo[2])});
    for (int a = 0; a < 3; ++a) b.lo[a] = std::min(b.lo[a], w[a] - kBoxMarginMm), b.hi[a] = std::max(b.hi[a], w[a] + kBoxMarginMm);
  }
  return b;
}

// The plane's axes in LPS (neurological: the patient's left on the picture's left).
struct Axes {
  int right, down, normal;      // world axes
  double rightSign, downSign;   // +1: along +world axis
  const char *leftText, *rightText, *topText, *bottomText;
};

Axes axesOf(QcPlane p) {
  switch (p) {
    case QcPlane::Axial: return {0, 1, 2, -1, +1, "L", "R", "A", "P"};
    case QcPlane::Coronal: return {0, 2, 1, -1, -1, "L", "R", "S", "I"};
    default: return {1, 2, 0, -1, -1, "P", "A", "S", "I"};
  }
}

QcFrame frameAt(Box const& b, QcPlane plane, double normalCoordinate) {
  const Axes a = axesOf(plane);
  const double px = std::max({b.hi[0] - b.lo[0], b.hi[1] - b.lo[1], b.hi[2] - b.lo[2]}) / kPanelPixels;
  QcFrame f;
  f.plane = plane;
  f.origin[std::size_t(a.right)] = a.rightSign > 0 ? b.lo[std::size_t(a.right)] : b.hi[std::size_t(a.right)];
  f.origin[std::size_t(a.down)] = a.downSign > 0 ? b.lo[std::size_t(a.down)] : b.hi[std::size_t(a.down)];
  f.origin[std::size_t(a.normal)] = normalCoordinate;
  f.right[std::size_t(a.right)] = a.rightSign * px;
  f.down[std::size_t(a.down)] = a.downSign * px;
  f.width = int(std::ceil((b.hi[std::size_t(a.right)] - b.lo[std::size_t(a.right)]) / px)) + 1;
  f.height = int(std::ceil((b.hi[std::size_t(a.down)] - b.lo[std::size_t(a.down)]) / px)) + 1;
  return f;
}

// ---- drawing ---------------------------------------------------------------------------------------

void put(io::Picture& p, int x, int y, Rgb const& c) {
  if (x < 0 || y < 0 || x >= p.width || y >= p.height) return;
  std::copy(c.begin(), c.end(), p.at(x, y));
}

// 5 x 7 glyphs of the orientation letters (a row per byte, bit 4 the leftmost column).
const std::uint8_t* glyph(char c) {
  static const std::uint8_t A[7] = {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11}, I[7] = {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e},
                            L[7] = {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f}, P[7] = {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10},
                            R[7] = {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11}, S[7] = {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e};
  switch (c) {
    case 'A': return A;
    case 'I': return I;
    case 'L': return L;
    case 'P': return P;
    case 'R': return R;
    default: return S;
  }
}

// A letter at twice its size, white on a black shadow, its top-left corner at (x, y).
void letter(io::Picture& p, char c, int x, int y) {
  const std::uint8_t* g = glyph(c);
  for (int pass = 0; pass < 2; ++pass)
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (g[r] & (0x10 >> col))
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx)
              put(p, x + 2 * col + dx + (pass == 0), y + 2 * r + dy + (pass == 0), pass == 0 ? Rgb{0, 0, 0} : Rgb{255, 255, 255});
}

void orientationLetters(io::Picture& p, QcPlane plane) {
  const Axes a = axesOf(plane);
  letter(p, a.leftText[0], 2, p.height / 2 - 7);
  letter(p, a.rightText[0], p.width - 13, p.height / 2 - 7);
  letter(p, a.topText[0], p.width / 2 - 5, 2);
  letter(p, a.bottomText[0], p.width / 2 - 5, p.height - 16);
}

// Samples through a window as grey (0 below lo, 255 above hi, rounded), times dim and truncated; 0
// for NaN (outside the image). In float: the pictures' hot loop.
io::Picture greyPanel(QcFrame const& f, std::vector<float> const& v, Window const& w, double dim = 1.0) {
  io::Picture p(f.width, f.height, 3);
  const float lo = float(w.lo), scale = float(255.0 / (w.hi - w.lo > 0 ? w.hi - w.lo : 1.0)), d = float(dim);
  std::uint8_t* px = p.pixels.data();
  for (std::size_t k = 0; k < v.size(); ++k) {
    const float g = std::clamp((v[k] - lo) * scale, 0.0f, 255.0f);
    px[3 * k] = px[3 * k + 1] = px[3 * k + 2] = std::isnan(v[k]) ? 0 : std::uint8_t(d * std::floor(g + 0.5f));
  }
  return p;
}

io::Picture greyPanel(QcFrame const& f, HostImage const& img, Window const& w, double dim = 1.0) {
  return greyPanel(f, sampleFrame(f, img), w, dim);
}

// Thin edges of `img` on the frame: |grad| above kEdgeFraction of its 98th percentile, and a
// maximum along the gradient's nearest of four directions.
std::vector<char> edgesOf(QcFrame const& f, std::vector<float> const& sampled) {
  const int w = f.width, h = f.height;
  const std::size_t n = std::size_t(w) * h, W = std::size_t(w);
  // Central differences on the frame (NaN outside the image read as 0) and the squared gradient
  // magnitude; the threshold is compared squared (no root per pixel).
  std::vector<float> v(n), gx(n, 0.0f), gy(n, 0.0f), m2(n, 0.0f);
  for (std::size_t k = 0; k < n; ++k) v[k] = std::isnan(sampled[k]) ? 0.0f : sampled[k];
  std::vector<float> mags;
  mags.reserve(n);
  for (int j = 1; j + 1 < h; ++j)
    for (int i = 1; i + 1 < w; ++i) {
      const std::size_t k = std::size_t(j) * W + std::size_t(i);
      gx[k] = 0.5f * (v[k + 1] - v[k - 1]);
      gy[k] = 0.5f * (v[k + W] - v[k - W]);
      m2[k] = gx[k] * gx[k] + gy[k] * gy[k];
      if (m2[k] > 0) mags.push_back(m2[k]);
    }
  std::vector<char> e(n, 0);
  const double t = kEdgeFraction * kEdgeFraction * percentileOf(std::move(mags), 98.0);
  if (!(t > 0)) return e;
  // Non-maximum suppression across the edge: the gradient's direction to the nearest 45 degrees
  // (tan 22.5 deg = sqrt(2) - 1): along x, along y, or a diagonal by the signs of gx and gy.
  const float tan22 = float(std::sqrt(2.0) - 1.0);
  for (int j = 1; j + 1 < h; ++j)
    for (int i = 1; i + 1 < w; ++i) {
      const std::size_t k = std::size_t(j) * W + std::size_t(i);
      if (m2[k] <= t) continue;
      const float ax = std::fabs(gx[k]), ay = std::fabs(gy[k]);
      const std::size_t d = ay <= tan22 * ax ? 1 : ax <= tan22 * ay ? W : (gx[k] > 0) == (gy[k] > 0) ? W + 1 : W - 1;
      if (m2[k] >= m2[k - d] && m2[k] >= m2[k + d]) e[k] = 1;
    }
  return e;
}

io::Picture mosaic(std::vector<io::Picture> const& panels) {
  int w = 0, h = 0;
  for (auto const& p : panels) w += p.width + (w > 0 ? kGap : 0), h = std::max(h, p.height);
  io::Picture out(w, h, 3);
  std::fill(out.pixels.begin(), out.pixels.end(), std::uint8_t(32));
  int x0 = 0;
  for (auto const& p : panels) {
    for (int j = 0; j < p.height; ++j) std::copy(p.at(0, j), p.at(0, j) + 3 * p.width, out.at(x0, j));
    x0 += p.width + kGap;
  }
  return out;
}

}  // namespace

// ---- frames and panels -----------------------------------------------------------------------------

namespace {

QcFrame frameAtLevel(Box const& b, QcPlane plane, double level) {
  const int n = axesOf(plane).normal;
  // Along the normal: inferior -> superior (+z), posterior -> anterior (-y), right -> left (+x).
  const double c = plane == QcPlane::Coronal ? b.hi[std::size_t(n)] - level * (b.hi[std::size_t(n)] - b.lo[std::size_t(n)])
                                             : b.lo[std::size_t(n)] + level * (b.hi[std::size_t(n)] - b.lo[std::size_t(n)]);
  return frameAt(b, plane, c);
}

}  // namespace

QcFrame qcFrame(HostImage const& fixed, QcPlane plane, double level) { return frameAtLevel(headBox(shown(fixed)), plane, level); }

QcFrame qcFrameThrough(HostImage const& fixed, QcPlane plane, std::array<double, 3> const& through) {
  return frameAt(headBox(shown(fixed)), plane, through[std::size_t(axesOf(plane).normal)]);
}

std::array<int, 2> qcPixel(QcFrame const& f, std::array<double, 3> const& w) {
  const Vec3 d{w[0] - f.origin[0], w[1] - f.origin[1], w[2] - f.origin[2]};
  auto proj = [&](Vec3 const& a) { return (d[0] * a[0] + d[1] * a[1] + d[2] * a[2]) / (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]); };
  return {int(std::lround(proj(f.right))), int(std::lround(proj(f.down)))};
}

namespace {

io::Picture edgePanel(QcFrame const& f, Shown const& fixed, std::vector<float> const& moving) {
  io::Picture p = greyPanel(f, fixed.on(f), fixed.window);
  const auto e = edgesOf(f, moving);
  for (int j = 0; j < f.height; ++j)
    for (int i = 0; i < f.width; ++i)
      if (e[std::size_t(j) * f.width + i]) put(p, i, j, kQcEdgeColour);
  orientationLetters(p, f.plane);
  return p;
}

io::Picture checkerPanel(QcFrame const& f, Shown const& fixed, Shown const& moving) {
  io::Picture a = greyPanel(f, fixed.on(f), fixed.window);
  const io::Picture b = greyPanel(f, moving.on(f), moving.window);
  for (int j = 0; j < f.height; ++j)
    for (int i = 0; i < f.width; ++i)
      if (((i / kChecker) + (j / kChecker)) % 2 == 1) std::copy(b.at(i, j), b.at(i, j) + 3, a.at(i, j));
  orientationLetters(a, f.plane);
  return a;
}

io::Picture jacobianPanel(QcFrame const& f, Shown const& fixed, HostImage const& det) {
  std::vector<float> const& fv = fixed.on(f);
  const std::vector<float> dv = sampleFrame(f, det, true);
  io::Picture p = greyPanel(f, fv, fixed.window, 0.6);
  for (int j = 0; j < f.height; ++j)
    for (int i = 0; i < f.width; ++i) {
      const std::size_t k = std::size_t(j) * f.width + i;
      const double d = dv[k], v = fv[k];
      if (std::isnan(d)) continue;
      if (!(d > 0.0)) {
        put(p, i, j, kQcFoldColour);
        continue;
      }
      if (std::isnan(v) || v <= fixed.head) continue;
      const double t = std::clamp(std::log2(d), -1.0, 1.0);
      const auto fade = [&](double c) { return std::uint8_t(std::lround(255.0 - (255.0 - c) * std::fabs(t))); };
      put(p, i, j, t < 0 ? Rgb{fade(40), fade(90), fade(220)} : Rgb{fade(220), fade(40), fade(40)});
    }
  orientationLetters(p, f.plane);
  return p;
}

// The fixed image with the outlines of a label map on its grid (nearest voxel): a pixel whose label
// differs from its right or lower neighbour's, one of them non-zero.
io::Picture labelPanel(QcFrame const& f, Shown const& fixed, HostImage const& labels) {
  io::Picture p = greyPanel(f, fixed.on(f), fixed.window);
  const std::vector<float> lv = sampleFrame(f, labels, true);
  std::vector<long> l(lv.size());
  for (std::size_t k = 0; k < lv.size(); ++k) l[k] = std::isnan(lv[k]) ? 0 : std::lround(lv[k]);
  for (int j = 0; j + 1 < f.height; ++j)
    for (int i = 0; i + 1 < f.width; ++i) {
      const std::size_t k = std::size_t(j) * f.width + i;
      if ((l[k] != l[k + 1] && (l[k] || l[k + 1])) || (l[k] != l[k + std::size_t(f.width)] && (l[k] || l[k + std::size_t(f.width)])))
        put(p, i, j, kQcLabelColour);
    }
  orientationLetters(p, f.plane);
  return p;
}

}  // namespace

io::Picture qcEdgePanel(QcFrame const& f, HostImage const& fixed, HostImage const& moving) {
  return edgePanel(f, shown(fixed), sampleFrame(f, moving));
}

io::Picture qcCheckerPanel(QcFrame const& f, HostImage const& fixed, HostImage const& moving) {
  return checkerPanel(f, shown(fixed), shown(moving));
}

io::Picture qcJacobianPanel(QcFrame const& f, HostImage const& fixed, HostImage const& det) {
  return jacobianPanel(f, shown(fixed), det);
}

// ---- the report ------------------------------------------------------------------------------------

namespace {

const char* planeName(QcPlane p) { return p == QcPlane::Axial ? "axial" : p == QcPlane::Coronal ? "coronal" : "sagittal"; }
constexpr QcPlane kPlanes[3] = {QcPlane::Axial, QcPlane::Coronal, QcPlane::Sagittal};

std::string html(std::string const& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string num(double v, int digits = 4) {
  std::ostringstream s;
  s << std::setprecision(digits) << v;
  return s.str();
}

// One picture of a page: its file, its alt text and how it is drawn.
struct PictureSpec {
  std::string name, alt;
  std::function<io::Picture()> draw;
};
// A section of a page: its heading and text (HTML), then its pictures.
struct Section {
  std::string head;
  std::vector<PictureSpec> pictures;
};

struct Page {
  std::vector<QcFile> files;
  std::map<std::string, std::array<int, 2>> sizes;
  std::ostringstream body;
  // Draws and encodes every picture of every section concurrently (a thread each: they only read
  // the images), then writes the sections in order.
  void draw(std::vector<Section> const& sections) {
    using Drawn = std::pair<io::Picture, std::vector<std::uint8_t>>;
    std::vector<std::vector<std::future<Drawn>>> done(sections.size());
    for (std::size_t k = 0; k < sections.size(); ++k)
      for (auto const& p : sections[k].pictures)
        done[k].push_back(std::async(std::launch::async, [&p] {
          io::Picture pic = p.draw();
          auto bytes = io::encodePng(pic);
          return Drawn(std::move(pic), std::move(bytes));
        }));
    for (std::size_t k = 0; k < sections.size(); ++k) {
      body << sections[k].head;
      for (std::size_t j = 0; j < done[k].size(); ++j) {
        auto [pic, bytes] = done[k][j].get();
        auto const& spec = sections[k].pictures[j];
        files.push_back({spec.name, std::move(bytes)});
        sizes[spec.name] = {pic.width, pic.height};
        body << "<img src=\"" << spec.name << "\" width=\"" << pic.width << "\" height=\"" << pic.height
             << "\" alt=\"" << escape(spec.alt) << "\">\n";
      }
    }
  }
  // The whole page: title, numbers (table rows), body, the job's JSON folded.
  std::string page(std::string const& title, std::string const& rows, nlohmann::json const& report) const {
    std::ostringstream d;
    d << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Kortex " << title << "</title>\n"
      << "<style>body{font-family:sans-serif;margin:16px;background:#fafafa}img{display:block;margin:6px 0;"
         "image-rendering:pixelated}th{text-align:left;padding-right:12px;vertical-align:top}pre{font-size:11px;"
         "background:#eee;padding:8px;overflow:auto}</style></head><body>\n<h1>" << title << "</h1>\n"
      << "<table>\n" << rows << "</table>\n" << body.str()
      << "<h2>The report</h2>\n<details><summary>JSON (the job and its stages)</summary><pre>" << escape(report.dump(2))
      << "</pre></details>\n</body></html>\n";
    return d.str();
  }
  static std::string escape(std::string const& s) { return kortex::pipeline::html(s); }
  // The report: the page (index.html) first, then the pictures; its time since t0.
  QcReport report(std::string const& title, std::string const& rows, nlohmann::json const& json,
                  std::chrono::steady_clock::time_point t0) {
    QcReport rep;
    const std::string text = page(title, rows, json);
    rep.files.push_back({"index.html", std::vector<std::uint8_t>(text.begin(), text.end())});
    for (auto& f : files) rep.files.push_back(std::move(f));
    files.clear();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
  }
};

// Table rows of the numbers.
struct Rows {
  std::ostringstream s;
  void operator()(std::string const& k, std::string const& v) { s << "<tr><th>" << html(k) << "</th><td>" << v << "</td></tr>\n"; }
};

constexpr const char* kConventionText =
    "Neurological convention: the patient's left on the left (axial, coronal); anterior at the right (sagittal). "
    "Levels at 35, 50 and 65 % through the fixed (reference) image's head.";

// The pictures of one kind over the three planes: `draw(frame)` per level, plus `extra(plane)` panels.
std::vector<PictureSpec> planes(std::string const& stem, std::string const& what, Box const& box,
                                std::function<io::Picture(QcFrame const&)> draw,
                                std::function<std::vector<io::Picture>(QcPlane)> extra = {}) {
  std::vector<PictureSpec> out;
  for (QcPlane pl : kPlanes)
    out.push_back({stem + planeName(pl) + ".png", what + ", " + planeName(pl), [=] {
                     std::vector<std::future<io::Picture>> levels;  // a thread per panel
                     for (double lv : kLevels)
                       levels.push_back(std::async(std::launch::async, [&draw, &box, pl, lv] { return draw(frameAtLevel(box, pl, lv)); }));
                     std::vector<io::Picture> panels;
                     for (auto& l : levels) panels.push_back(l.get());
                     if (extra)
                       for (auto& p : extra(pl)) panels.push_back(std::move(p));
                     return mosaic(panels);
                   }});
  return out;
}

// The misfit per iteration: a polyline per scale, refused steps as red dots, the scales' borders dashed.
std::string convergencePlot(std::vector<std::array<double, 3>> const& pts, std::string const& yLabel) {
  // pts: (scale, misfit, refused)
  const int W = 640, H = 240, L = 60, B = 30, T = 10, R = 10;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" role=\"img\" aria-label=\"convergence\">"
    << "<rect width=\"" << W << "\" height=\"" << H << "\" fill=\"white\"/>";
  if (pts.empty()) return s.str() + "<text x=\"20\" y=\"40\">no iterations</text></svg>";
  double lo = INFINITY, hi = -INFINITY;
  for (auto const& p : pts) lo = std::min(lo, p[1]), hi = std::max(hi, p[1]);
  if (!(hi > lo)) hi = lo + 1.0;
  const double n = double(std::max<std::size_t>(pts.size() - 1, 1));
  auto X = [&](std::size_t i) { return L + (W - L - R) * double(i) / n; };
  auto Y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };
  s << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>"
    << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>"
    << "<text x=\"" << L - 4 << "\" y=\"" << T + 10 << "\" text-anchor=\"end\" font-size=\"11\">" << num(hi) << "</text>"
    << "<text x=\"" << L - 4 << "\" y=\"" << H - B << "\" text-anchor=\"end\" font-size=\"11\">" << num(lo) << "</text>"
    << "<text x=\"" << (L + W) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\" font-size=\"11\">iteration (" << pts.size()
    << ")</text><text x=\"12\" y=\"" << (T + H - B) / 2 << "\" font-size=\"11\" transform=\"rotate(-90 12 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">" << html(yLabel) << "</text>";
  static const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};
  std::size_t i = 0;
  while (i < pts.size()) {
    std::size_t j = i;
    s << "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" << colours[std::size_t(pts[i][0]) % 5] << "\" points=\"";
    for (; j < pts.size() && pts[j][0] == pts[i][0]; ++j) s << num(X(j), 6) << "," << num(Y(pts[j][1]), 6) << " ";
    s << "\"/>";
    if (i > 0)
      s << "<line x1=\"" << num(X(i), 6) << "\" y1=\"" << T << "\" x2=\"" << num(X(i), 6) << "\" y2=\"" << H - B
        << "\" stroke=\"grey\" stroke-dasharray=\"4 3\"/>";
    i = j;
  }
  for (std::size_t k = 0; k < pts.size(); ++k)
    if (pts[k][2] > 0) s << "<circle cx=\"" << num(X(k), 6) << "\" cy=\"" << num(Y(pts[k][1]), 6) << "\" r=\"3\" fill=\"red\"/>";
  return s.str() + "</svg>";
}

std::string jacobianLegend() {
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"420\" height=\"44\" role=\"img\" aria-label=\"det legend\">"
       "<defs><linearGradient id=\"detg\"><stop offset=\"0\" stop-color=\"rgb(40,90,220)\"/>"
       "<stop offset=\"0.5\" stop-color=\"white\"/><stop offset=\"1\" stop-color=\"rgb(220,40,40)\"/></linearGradient></defs>"
       "<rect x=\"10\" y=\"4\" width=\"300\" height=\"16\" fill=\"url(#detg)\" stroke=\"black\"/>"
       "<text x=\"10\" y=\"36\" font-size=\"11\">&#8804; 0.5</text><text x=\"160\" y=\"36\" font-size=\"11\" "
       "text-anchor=\"middle\">1</text><text x=\"310\" y=\"36\" font-size=\"11\" text-anchor=\"end\">&#8805; 2</text>"
       "<rect x=\"330\" y=\"4\" width=\"16\" height=\"16\" fill=\"rgb(255,230,0)\" stroke=\"black\"/>"
       "<text x=\"352\" y=\"16\" font-size=\"11\">fold (det &#8804; 0)</text></svg>";
  return s.str();
}

std::string buildText() {
  const BuildInfo bi = buildInfo();
  return html(versionText()) + ", " + html(bi.device);
}

std::string inputText(ImageInput const& in, HostImage const& img) {
  const std::uint64_t h = in.inMemory() ? contentHash(img.data.data(), std::size_t(img.numVoxels()) * sizeof(float))
                                        : fileHash(in.path, "input");
  return (in.inMemory() ? std::string("(array in memory)") : html(in.path.string())) + ", " + describe(img.geometry) +
         ", hash " + hex64(h) + (in.inMemory() ? " (of its voxels)" : " (of the file)");
}

}  // namespace

namespace {

// det J over the grid: min (and where), max, folded voxels.
struct DetStats {
  float min = INFINITY, max = -INFINITY;
  long folds = 0;
  Vec3 minAt{};  // world LPS
};

DetStats detStats(HostImage const& J) {
  DetStats d;
  Index argmin = 0;
  for (Index i = 0; i < J.numVoxels(); ++i) {
    const float v = J.data.data()[i];
    if (v < d.min) d.min = v, argmin = i;
    d.max = std::max(d.max, v);
    if (!(v > 0.0f)) ++d.folds;
  }
  auto const& g = J.geometry;
  d.minAt = indexToWorld(g, {double(argmin % g.nx()), double((argmin / g.nx()) % g.ny()), double(argmin / (g.nx() * g.ny()))});
  return d;
}

// The correlation of two images on one grid over the voxels where `a` is above its head threshold.
double headCorrelation(Shown const& a, HostImage const& b) {
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0, n = 0;
  for (Index i = 0; i < a.img->numVoxels(); ++i) {
    const double x = a.img->data.data()[i], y = b.data.data()[i];
    if (!(x > a.head)) continue;
    sa += x, sb += y, saa += x * x, sbb += y * y, sab += x * y, n += 1;
  }
  if (n < 2) return 0.0;
  const double cov = sab - sa * sb / n, va = saa - sa * sa / n, vb = sbb - sb * sb / n;
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0.0;
}

std::vector<Section> registrationSections(RegisterJobResult const& r, Shown const& f, Shown const& warped, Box const& box,
                                          DetStats const& det, HostImage const& warpedLabels) {
  HostImage const& before = r.pair.movingResampled;
  HostImage const& J = r.jacobian;
  std::vector<Section> sections;
  const std::string intro = std::string("<h2>Fixed image with the moving image's edges</h2>\n<p>Red: edges of the moving "
                                        "image. ") + kConventionText + "</p>\n";
  if (before.data.data() != nullptr)
    sections.push_back({intro + "<h3>Before: the affine stage alone</h3>\n",
                        planes("before_", "before", box, [&](QcFrame const& fr) { return edgePanel(fr, f, sampleFrame(fr, before)); })});
  sections.push_back({(before.data.data() != nullptr ? std::string() : intro) + "<h3>After: the whole map</h3>\n",
                      planes("after_", "after", box, [&](QcFrame const& fr) { return edgePanel(fr, f, warped.on(fr)); })});
  if (warpedLabels.data.data() != nullptr)
    sections.push_back({"<h3>The moving image's labels through the whole map</h3>\n<p>Cyan: the outlines of the "
                        "moving label map, warped (nearest voxel), over the fixed image.</p>\n",
                        planes("labels_", "labels", box, [&](QcFrame const& fr) { return labelPanel(fr, f, warpedLabels); })});
  sections.push_back({"<h2>Checkerboard</h2>\n<p>Squares of the fixed image and the warped moving image in turn.</p>\n",
                      planes("checker_", "checkerboard", box, [&](QcFrame const& fr) { return checkerPanel(fr, f, warped); })});
  std::ostringstream jh;
  jh << "<h2>Jacobian determinant of the deformable part</h2>\n" << jacobianLegend() << "\n<p>min " << num(det.min)
     << ", max " << num(det.max) << ", " << det.folds << " folded voxel(s); the fourth panel passes through the smallest "
     << "det (world LPS " << num(det.minAt[0]) << ", " << num(det.minAt[1]) << ", " << num(det.minAt[2]) << " mm).</p>\n";
  sections.push_back({jh.str(), planes("jacobian_", "det J", box, [&](QcFrame const& fr) { return jacobianPanel(fr, f, J); },
                                       [&](QcPlane pl) {
                                         return std::vector<io::Picture>{jacobianPanel(
                                             frameAt(box, pl, det.minAt[std::size_t(axesOf(pl).normal)]), f, J)};
                                       })});
  return sections;
}

std::string convergenceSection(RegistrationPipelineResult const& pair) {
  std::vector<std::array<double, 3>> pts;
  std::string yLabel;
  if (pair.method == RegistrationMethod::Greedy) {
    for (auto const& it : pair.greedy.history) pts.push_back({double(it.scale), it.rmse, double(it.refused)});
    yLabel = "misfit (RMSE)";
  } else {
    for (auto const& it : pair.fluid.history) pts.push_back({0.0, it.energy.total, double(it.rejected)});
    yLabel = "energy";
  }
  return "<h2>Convergence</h2>\n<p>A line per scale (coarse first), refused steps as red dots.</p>\n" +
         convergencePlot(pts, yLabel) + "\n";
}

std::string registrationRows(RegisterJobResult const& r, HostImage const& fixed, HostImage const& moving,
                             DetStats const& det, double ncc, LabelDice const* dice, double seconds) {
  auto const& pair = r.pair;
  Rows row;
  row("method", html(toString(r.job.method)) + (r.job.method == RegistrationMethod::Greedy
                                                     ? std::string(", metric ") + toString(r.job.greedy.metric) +
                                                           ", transform " + toString(r.job.transform)
                                                     : std::string()));
  row("affine metric", toString(r.job.affineMetric));
  row("parameters", "<code>" +
                        html(r.job.method == RegistrationMethod::Greedy ? toJson(r.job.greedy).dump() : toJson(r.job.fluid).dump()) +
                        "</code>");
  row("back end", html(toString(pair.backend)) + " (" + html(pair.executionSpace) + ")");
  row("fixed image", inputText(r.job.fixed, r.job.fixed.inMemory() ? r.job.fixed.image : fixed));
  row("moving image", inputText(r.job.moving, moving));
  if (!pair.greedy.history.empty())
    row("misfit (RMSE)", "last scale: " + num(pair.greedy.scales.empty() ? 0.0 : pair.greedy.scales.back().rmseStart) +
                             " -> " + num(pair.greedy.history.back().rmse) + " in " + std::to_string(pair.greedy.iterations) +
                             " iterations over " + std::to_string(pair.greedy.scales.size()) + " scale(s), " +
                             std::to_string(pair.greedy.refused) + " fold-refused step(s)");
  else if (!pair.fluid.history.empty())
    row("energy", num(pair.fluid.initial.total) + " -> " + num(pair.fluid.final.total) + " in " +
                      std::to_string(pair.fluid.iterations) + " iterations");
  row("det J", "min " + num(det.min) + ", max " + num(det.max) + ", folded voxels " + std::to_string(det.folds));
  row("correlation (fixed head)", num(ncc) + " (the fixed and the warped moving image over the fixed image's head)");
  if (dice)
    row("label Dice", num(dice->mean) + " (mean over the fixed label map's " + std::to_string(dice->labels) +
                          " labels, the moving label map warped by the nearest voxel)");
  if (r.inverse)
    row("inverse consistency (head)", "mean " + num(r.consistency.mean) + ", p99 " + num(r.consistency.p99) + ", max " +
                                          num(r.consistency.max) + " voxel (fixed grid), " +
                                          std::to_string(r.consistency.voxels) + " voxels");
  row("times (s)", "normalise " + num(pair.secondsNormalise, 3) + ", affine " + num(pair.secondsAffine, 3) + ", resample " +
                       num(pair.secondsResample, 3) + ", deformable " + num(pair.secondsFluid, 3) + ", total " +
                       num(pair.secondsTotal, 3) + "; this report " + num(seconds, 3));
  row("build", buildText());
  return row.s.str();
}

}  // namespace

QcReport registrationQc(RegisterJobResult const& r, HostImage const& moving, QcLabels const& labels) {
  kx::ScopedRegion region("kortex::register::qc");
  const auto t0 = std::chrono::steady_clock::now();
  if (r.warped.data.data() == nullptr || r.jacobian.data.data() == nullptr)
    throw InvalidArgument("QC report: the warped image and the Jacobian map were not formed");
  HostImage const& fixed = r.pair.fixedNormalised;
  if (fixed.data.data() == nullptr || !fixed.geometry.sameGrid(r.warped.geometry, 1e-6))
    throw InvalidArgument("QC report: the registration kept no fixed image on the fixed grid");
  // The numbers, concurrently: the fixed image's window, head box and correlation; the warped image's
  // window; det J's statistics.
  auto fixedPart = std::async(std::launch::async, [&] {
    const Shown f = shown(fixed);
    return std::make_tuple(f, headBox(f), headCorrelation(f, r.warped));
  });
  auto warpedPart = std::async(std::launch::async, [&] { return shown(r.warped); });
  const DetStats det = detStats(r.jacobian);
  const auto [f, box, ncc] = fixedPart.get();
  const Shown warped = warpedPart.get();
  const HostImage warpedL = labels.moving.data.data() ? warpedLabels(r.pair, labels.moving) : HostImage();
  std::optional<LabelDice> dice;
  if (labels.fixed.data.data()) dice = meanLabelDice(labels.fixed, warpedL);
  Page page;
  page.draw(registrationSections(r, f, warped, box, det, warpedL));
  page.body << convergenceSection(r.pair);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto thumb = page.sizes["after_axial.png"];
  QcReport rep = page.report(
      "Registration QC", registrationRows(r, fixed, moving, det, ncc, dice ? &*dice : nullptr, seconds), toJson(r), t0);
  rep.ncc = ncc;
  rep.dice = dice ? dice->mean : -1.0;
  rep.folds = det.folds;
  rep.minDet = det.min;
  rep.maxDet = det.max;
  rep.thumbWidth = thumb[0];
  rep.thumbHeight = thumb[1];
  return rep;
}

QcReport applyQc(ApplyJob const& job, HostImage const& input, HostImage const& reference, ApplyResult const& r) {
  kx::ScopedRegion region("kortex::apply::qc");
  const auto t0 = std::chrono::steady_clock::now();
  const Shown ref = shown(reference), out = shown(r.image);
  const Box box = headBox(ref);
  const std::string intro = std::string("<h2>Reference image with the input's edges</h2>\n<p>Red: edges of the input. ") +
                            kConventionText + "</p>\n";
  std::vector<Section> sections;
  sections.push_back({intro + "<h3>Before: the input where its header puts it</h3>\n",
                      planes("before_", "before", box, [&](QcFrame const& fr) { return edgePanel(fr, ref, sampleFrame(fr, input)); })});
  sections.push_back({"<h3>After: through the transforms</h3>\n",
                      planes("after_", "after", box, [&](QcFrame const& fr) { return edgePanel(fr, ref, out.on(fr)); })});
  sections.push_back({"<h2>Checkerboard</h2>\n<p>Squares of the reference image and the result in turn.</p>\n",
                      planes("checker_", "checkerboard", box, [&](QcFrame const& fr) { return checkerPanel(fr, ref, out); })});
  Page page;
  page.draw(sections);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Rows row;
  row("input", inputText(job.input, input));
  row("reference", inputText(job.reference, reference));
  for (std::size_t k = 0; k < job.transforms.size(); ++k)
    row("transform " + std::to_string(k + 1), html(job.transforms[k].path.string()) +
                                                  (job.transforms[k].inverse ? " (inverted)" : "") + ", hash " +
                                                  hex64(fileHash(job.transforms[k].path, "transform")) + " (of the file)");
  row("interpolation", toString(job.interpolation));
  row("back end", html(toString(r.backend)) + " (" + html(r.executionSpace) + ")");
  row("times (s)", "resample " + num(r.seconds, 3) + "; this report " + num(seconds, 3));
  row("build", buildText());
  return page.report("Apply QC", row.s.str(), toJson(job), t0);
}

namespace {

// |u| in mm from 0 (black) through red and yellow to white at `top`.
io::Picture displacementPanel(QcFrame const& f, Shown const& templ, HostImage const& mm, double top) {
  std::vector<float> const& tv = templ.on(f);
  const std::vector<float> mv = sampleFrame(f, mm);
  io::Picture p = greyPanel(f, tv, templ.window, 0.5);
  for (int j = 0; j < f.height; ++j)
    for (int i = 0; i < f.width; ++i) {
      const std::size_t k = std::size_t(j) * f.width + i;
      const double v = tv[k], d = mv[k];
      if (std::isnan(v) || v <= templ.head || std::isnan(d)) continue;
      const double t = std::clamp(d / (top > 0 ? top : 1.0), 0.0, 1.0);
      auto c = [](double x) { return std::uint8_t(std::lround(255.0 * std::clamp(x, 0.0, 1.0))); };
      put(p, i, j, {c(3 * t), c(3 * t - 1), c(3 * t - 2)});
    }
  orientationLetters(p, f.plane);
  return p;
}

std::string displacementLegend(double top) {
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"420\" height=\"44\" role=\"img\" aria-label=\"|u| legend\">"
       "<defs><linearGradient id=\"ug\"><stop offset=\"0\" stop-color=\"black\"/><stop offset=\"0.33\" "
       "stop-color=\"red\"/><stop offset=\"0.67\" stop-color=\"yellow\"/><stop offset=\"1\" stop-color=\"white\"/>"
       "</linearGradient></defs><rect x=\"10\" y=\"4\" width=\"300\" height=\"16\" fill=\"url(#ug)\" stroke=\"black\"/>"
       "<text x=\"10\" y=\"36\" font-size=\"11\">0 mm</text><text x=\"310\" y=\"36\" font-size=\"11\" "
       "text-anchor=\"end\">&#8805; " << num(top, 3) << " mm</text></svg>";
  return s.str();
}

io::Picture greyOnly(QcFrame const& f, Shown const& img) {
  io::Picture p = greyPanel(f, img.on(f), img.window);
  orientationLetters(p, f.plane);
  return p;
}

}  // namespace

std::string atlasQcThumbnailName(std::string const& subject) { return "subject_" + subject + ".png"; }

struct AtlasQcTemplate::Impl {
  Shown t;
  QcFrame thumbFrame;
};

AtlasQcTemplate::AtlasQcTemplate(HostImage const& templ) {
  const Shown t = shown(templ);
  impl_ = std::make_shared<const Impl>(Impl{t, frameAtLevel(headBox(t), QcPlane::Axial, 0.5)});
}

AtlasQcSubject AtlasQcTemplate::subject(std::string const& name, HostImage const& warped, HostImage const& det,
                                        HostImage const& displacementMm) const {
  AtlasQcSubject s;
  s.name = name;
  auto const& t = impl_->t;
  s.ncc = headCorrelation(t, warped);
  const DetStats d = detStats(det);
  s.folds = d.folds;
  s.minDet = d.min;
  double sum = 0, n = 0;
  for (Index i = 0; i < t.img->numVoxels(); ++i)
    if (t.img->data.data()[i] > t.head) sum += displacementMm.data.data()[i], n += 1;
  s.meanDisplacementMm = n > 0 ? sum / n : 0.0;
  const io::Picture p = edgePanel(impl_->thumbFrame, t, sampleFrame(impl_->thumbFrame, warped));
  s.thumbWidth = p.width;
  s.thumbHeight = p.height;
  s.thumbnail = {atlasQcThumbnailName(name), io::encodePng(p)};
  return s;
}

QcReport atlasQc(AtlasJobResult const& r, std::vector<AtlasQcSubject> const& subjects, HostImage const& meanU,
                 HostImage const& meanDet, std::vector<std::pair<int, HostImage>> const& scaleTemplates) {
  kx::ScopedRegion region("kortex::atlas::qc");
  const auto t0 = std::chrono::steady_clock::now();
  const Shown t = shown(r.templateImage);
  const Box box = headBox(t);
  double top = 0.0;
  for (Index i = 0; i < meanU.numVoxels(); ++i) top = std::max(top, double(meanU.data.data()[i]));
  std::vector<Section> sections;
  sections.push_back({std::string("<h2>Template</h2>\n<p>") + kConventionText + "</p>\n",
                      planes("template_", "template", box, [&](QcFrame const& fr) { return greyOnly(fr, t); })});
  if (!scaleTemplates.empty()) {
    Section sc{"<h3>The template at each scale's end</h3>\n<p>A row per scale, coarse first (axial, coronal, sagittal "
               "at 50 %; each on its scale's grid).</p>\n", {}};
    for (auto const& [factor, img] : scaleTemplates) {
      sc.pictures.push_back({"template_scale_" + std::to_string(factor) + ".png", "template at scale x" + std::to_string(factor),
                             [&, img = &img] {
                               const Shown s = shown(*img);
                               std::vector<io::Picture> panels;
                               for (QcPlane pl : kPlanes) panels.push_back(greyOnly(frameAtLevel(box, pl, 0.5), s));
                               return mosaic(panels);
                             }});
    }
    sections.push_back(std::move(sc));
  }
  sections.push_back({"<h2>Mean displacement |u| over the subjects</h2>\n" + displacementLegend(top) + "\n",
                      planes("mean_u_", "mean |u|", box, [&](QcFrame const& fr) { return displacementPanel(fr, t, meanU, top); })});
  sections.push_back({"<h2>Mean det J over the subjects</h2>\n" + jacobianLegend() + "\n",
                      planes("mean_det_", "mean det J", box, [&](QcFrame const& fr) { return jacobianPanel(fr, t, meanDet); })});
  Page page;
  page.draw(sections);
  std::vector<std::array<double, 3>> pts;
  for (auto const& it : r.atlas.history) pts.push_back({double(it.scale), it.mismatch, double(it.refused)});
  page.body << "<h2>Convergence</h2>\n<p>The mismatch (RMS of W_i - T over subjects and voxels) per iteration, a line "
               "per scale (coarse first), refused steps as red dots.</p>\n"
            << convergencePlot(pts, "mismatch (RMS)") << "\n";
  std::vector<AtlasQcSubject const*> order;
  for (auto const& s : subjects) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](AtlasQcSubject const* a, AtlasQcSubject const* b) {
    if ((a->folds > 0) != (b->folds > 0)) return a->folds > 0;
    return a->folds != b->folds ? a->folds > b->folds : a->ncc < b->ncc;
  });
  page.body << "<h2>Subjects, worst first</h2>\n<p>Folded voxels first (most first), then by the correlation of the "
               "template and the subject warped into template space over the template's head (lowest first). The "
               "thumbnail: the template with the warped subject's edges (axial, 50 %).</p>\n<table>\n<tr><th>#</th>"
               "<th>subject</th><th>correlation</th><th>mean |u| (mm)</th><th>folded voxels</th><th>min det J</th>"
               "<th>edges</th></tr>\n";
  int k = 0;
  for (auto const* s : order)
    page.body << "<tr><td>" << ++k << "</td><td>" << html(s->name) << "</td><td>" << num(s->ncc) << "</td><td>"
              << num(s->meanDisplacementMm, 3) << "</td><td>" << s->folds << "</td><td>" << num(s->minDet) << "</td><td><img "
              << "style=\"height:120px;width:auto\" src=\"" << html(atlasQcThumbnailName(s->name)) << "\" width=\""
              << s->thumbWidth << "\" height=\"" << s->thumbHeight << "\" alt=\"" << html(s->name) << "\"></td></tr>\n";
  page.body << "</table>\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Rows row;
  row("subjects", std::to_string(r.subjects) + " over " + std::to_string(r.ranks) + " process(es)");
  row("back end", html(toString(r.backend)) + " (" + html(r.executionSpace) + ")");
  row("template grid", html(describe(r.referenceGrid)) + "; the atlas on " + html(describe(r.atlasGrid)));
  row("min det J", num(r.atlas.minJacobian) + " (over subjects, final fields)");
  row("times (s)", "read " + num(r.secondsRead, 3) + ", prepare " + num(r.secondsPrepare, 3) + ", atlas " +
                       num(r.secondsAtlas, 3) + "; this report " + num(seconds, 3));
  row("build", buildText());
  return page.report("Atlas QC", row.s.str(), toJson(r), t0);
}

std::string cohortQcPage(RegisterCohortResult const& r) {
  struct Row {
    CohortSubject const* s;
    int rank;  // 0 failed, 1 folded, 2 the rest
    double key;
  };
  std::vector<Row> rows;
  for (auto const& s : r.subjects) {
    if (s.status == CohortStatus::Failed) {
      rows.push_back({&s, 0, 0.0});
    } else if (s.status == CohortStatus::Registered && s.report.contains("qc")) {
      auto const& q = s.report["qc"];
      const long folds = q.value("folds", 0L);
      rows.push_back({&s, folds > 0 ? 1 : 2, folds > 0 ? -double(folds) : q.value("ncc", 0.0)});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](Row const& a, Row const& b) { return a.rank != b.rank ? a.rank < b.rank : a.key < b.key; });
  std::ostringstream d;
  d << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Kortex cohort QC</title>\n"
    << "<style>body{font-family:sans-serif;margin:16px;background:#fafafa}td,th{padding:4px 10px;text-align:left;"
       "vertical-align:middle}tr:nth-child(even){background:#eee}.bad{color:#b00;font-weight:bold}"
       "img.thumb{height:80px;width:auto}</style></head><body>\n<h1>Cohort QC</h1>\n<p>"
    << r.subjects.size() << " subject(s) registered to " << html(toJson(r.job.fixed).dump())
    << ", worst first: failed subjects, then those with folds (most first), then by the correlation of the "
       "fixed and the warped moving image over the fixed image's head (lowest first).</p>\n<table>\n<tr><th>#</th>"
       "<th>subject</th><th>status</th><th>correlation</th><th>folded voxels</th><th>min det J</th><th>seconds</th>"
       "<th>after (axial)</th></tr>\n";
  int k = 0;
  for (auto const& row : rows) {
    auto const& s = *row.s;
    const std::string link = s.stem + "_qc/index.html";
    d << "<tr><td>" << ++k << "</td><td>";
    if (row.rank == 0) {
      d << html(s.moving) << "</td><td class=\"bad\">failed: " << html(s.error) << "</td><td></td><td></td><td></td><td></td><td></td></tr>\n";
      continue;
    }
    auto const& q = s.report["qc"];
    d << "<a href=\"" << html(link) << "\">" << html(s.stem) << "</a></td><td>registered</td><td>" << num(q.value("ncc", 0.0))
      << "</td><td" << (row.rank == 1 ? " class=\"bad\"" : "") << ">" << q.value("folds", 0L) << "</td><td>"
      << num(q.value("min_det", 1.0)) << "</td><td>" << num(s.seconds, 3) << "</td><td><a href=\"" << html(link)
      << "\"><img class=\"thumb\" src=\"" << html(s.stem) << "_qc/after_axial.png\" width=\"" << q.value("thumb_width", 0)
      << "\" height=\"" << q.value("thumb_height", 0) << "\" alt=\"" << html(s.stem) << "\"></a></td></tr>\n";
  }
  d << "</table>\n</body></html>\n";
  return d.str();
}

}  // namespace kortex::pipeline
