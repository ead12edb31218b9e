// Applying transforms (core/Apply.hpp, pipeline/Apply.hpp): the Kokkos resampling
// (gpu/imageops/Resample.hpp) on every execution space and the CPU reference
// (reference_cpu/Resample.hpp) against closed forms (affine, field, compositions), against each
// other for every interpolation, the label and nearest properties, the transform-file readers
// (ITK text, ITK/ANTs level-4 .mat, NIfTI fields) and the refusals; and end to end: the field
// written by the greedy registration, applied to the moving image, gives its warped image.
#define BOOST_TEST_MODULE tstApply
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "core/Apply.hpp"
#include "gpu/imageops/Resample.hpp"
#include "io/ImageIO.hpp"
#include "io/Transform.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/Register.hpp"
#include "pipeline/RegisterJob.hpp"
#include "reference_cpu/Resample.hpp"

using namespace kortex;
namespace fs = std::filesystem;


namespace {

using V3 = std::array<double, 3>;

// Trilinear interpolation reproduces a function linear in the index exactly; what remains is the
// float32 storage of the samples (a convex combination: <= 0.5 ulp of the largest) and the float32
// result (0.5 ulp): 2 ulps of the largest magnitude leaves room for the double arithmetic.
double ulps2(double maxAbs) { return 2.0 * maxAbs * std::ldexp(1.0, -23); }
// Points closer than this (input voxels) to an inside/outside boundary are not judged: rounding in
// the chain (~1e-13 voxel) may put them on either side.
constexpr double kBoundaryMargin = 1e-6;

Geometry obliqueGrid(Index nx, Index ny, Index nz, V3 spacing, V3 origin, double angle) {
  Geometry g = Geometry::make3D(nx, ny, nz);
  g.spacing = spacing;
  g.origin = origin;
  const double c = std::cos(angle), s = std::sin(angle);
  g.direction = {c, -s, 0, s, c, 0, 0, 0, 1};  // a rotation about z; columns = axes
  return g;
}

V3 worldOf(Geometry const& g, V3 p) { return indexToWorld(g, p); }

// Continuous index of a world point (independent of the code under test: solves by Cramer).
V3 indexOf(Geometry const& g, V3 w) {
  double m[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) m[3 * i + j] = g.direction[3 * i + j] * g.spacing[j];
  const V3 r{w[0] - g.origin[0], w[1] - g.origin[1], w[2] - g.origin[2]};
  auto det = [](const double* a) {
    return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
  };
  const double d = det(m);
  V3 p{};
  for (int c = 0; c < 3; ++c) {
    double mc[9];
    std::copy(m, m + 9, mc);
    for (int i = 0; i < 3; ++i) mc[3 * i + c] = r[i];
    p[c] = det(mc) / d;
  }
  return p;
}

// f(w) = a . w + b, linear in world (and so in the index of any grid).
double linearF(V3 w) { return 0.7 * w[0] - 0.4 * w[1] + 0.25 * w[2] + 3.0; }

HostImage sampled(Geometry const& g, std::function<double(V3)> const& f) {
  HostImage img("kortex::test::apply::image", g);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) img.data(z, y, x) = float(f(worldOf(g, {double(x), double(y), double(z)})));
  return img;
}

Matrix4 affineMatrix(double angle, double scale, V3 t) {
  const double c = std::cos(angle) * scale, s = std::sin(angle) * scale;
  return {c, 0, s, t[0], 0, scale * 1.05, 0, t[1], -s, 0, c, t[2], 0, 0, 0, 1};
}

V3 applyM(Matrix4 const& m, V3 x) {
  V3 y{};
  for (int i = 0; i < 3; ++i) y[i] = m[4 * i] * x[0] + m[4 * i + 1] * x[1] + m[4 * i + 2] * x[2] + m[4 * i + 3];
  return y;
}

ChainTransform affineStep(Matrix4 const& m, std::string const& name = "affine") {
  ChainTransform t;
  t.kind = ChainKind::Affine;
  t.matrix = m;
  t.name = name;
  return t;
}

// A field on grid g sampled from d(world).
ChainTransform fieldStep(Geometry const& g, std::function<V3(V3)> const& d) {
  ChainTransform t;
  t.kind = ChainKind::Field;
  t.name = "field";
  t.field = VectorField<Kokkos::HostSpace>("kortex::test::apply::field", g, 3);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const V3 v = d(worldOf(g, {double(x), double(y), double(z)}));
        for (int c = 0; c < 3; ++c) t.field.data(c, z, y, x) = float(v[c]);
      }
  return t;
}

// ITK's field rule, closed form for a field that is linear in world: the continuous index clamped
// to the grid inside the half-voxel box, zero outside.
V3 fieldClosedForm(Geometry const& g, std::function<V3(V3)> const& d, V3 x) {
  V3 c = indexOf(g, x);
  for (int a = 0; a < 3; ++a)
    if (!(c[a] >= -0.5 && c[a] < double(g.size[a]) - 0.5)) return {0, 0, 0};
  for (int a = 0; a < 3; ++a) c[a] = std::min(std::max(c[a], 0.0), double(g.size[a] - 1));
  return d(worldOf(g, c));
}

V3 linearD(V3 w) { return {0.05 * w[0] - 0.02 * w[2] + 0.6, 0.03 * w[1] - 0.4, -0.04 * w[0] + 0.01 * w[2] + 0.2}; }

// Runs one back end: Space's Kokkos resampling or (Cpu = true) the CPU reference.
template <class Space>
HostImage runKokkos(HostImage const& input, Geometry const& reference, TransformChain const& chain, ApplyInterpolation interp) {
  using Mem = typename Space::memory_space;
  Space exec;
  auto dIn = test::toSpace<Space>(input);
  Kokkos::View<float*, Mem> fields("kortex::test::apply::fields", std::size_t(chain.fieldFloats()));
  std::size_t off = 0;
  for (auto const& t : chain.transforms)
    if (t.kind == ChainKind::Field) {
      auto h = Kokkos::create_mirror_view(fields);
      Kokkos::deep_copy(h, fields);
      std::copy(t.field.data.data(), t.field.data.data() + t.field.data.size(), h.data() + off);
      Kokkos::deep_copy(fields, h);
      off += t.field.data.size();
    }
  ImageView<Mem> dOut("kortex::test::apply::out", reference.nz(), reference.ny(), reference.nx());
  gpu::resample(exec, ConstImageView<Mem>(dIn), Kokkos::View<const float*, Mem>(fields),
                applyChainCoeffs(chain, reference, input.geometry), interp, dOut);
  exec.fence();
  HostImage out("kortex::test::apply::host", reference);
  Kokkos::deep_copy(out.data, dOut);
  return out;
}

// Compares `got` with f(y(x)) where y = map(world(x)) is inside the input's closed box (with the
// margin), and with 0 where it is outside; returns the number of voxels judged inside.
Index checkClosedForm(HostImage const& got, Geometry const& input, std::function<V3(V3)> const& map, double tol,
                      std::string const& what) {
  const Geometry& g = got.geometry;
  Index inside = 0, bad = 0;
  double worst = 0.0;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const V3 w = map(worldOf(g, {double(x), double(y), double(z)}));
        const V3 q = indexOf(input, w);
        bool in = true, near = false;
        for (int a = 0; a < 3; ++a) {
          in = in && q[a] >= 0.0 && q[a] <= double(input.size[a] - 1);
          near = near || std::fabs(q[a]) < kBoundaryMargin || std::fabs(q[a] - double(input.size[a] - 1)) < kBoundaryMargin;
        }
        if (near) continue;
        const double want = in ? linearF(w) : 0.0;
        const double err = std::fabs(double(got.data(z, y, x)) - want);
        worst = std::max(worst, err);
        if (err > tol) ++bad;
        inside += in ? 1 : 0;
      }
  BOOST_TEST_INFO(what << ": worst error " << worst << ", tolerance " << tol);
  BOOST_TEST(bad == 0);
  return inside;
}

struct Scene {
  Geometry input = obliqueGrid(14, 12, 10, {1.2, 0.9, 1.5}, {-6.0, 2.0, -3.0}, 0.3);
  Geometry reference = obliqueGrid(13, 11, 9, {1.0, 1.1, 1.3}, {-5.0, 1.5, -2.0}, -0.2);
  HostImage image = sampled(input, linearF);
  double maxAbs() const {
    double m = 0;
    for (std::size_t i = 0; i < image.data.size(); ++i) m = std::max(m, std::fabs(double(image.data.data()[i])));
    return m;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(analytic_affine_and_field, Space, test::ExecutionSpaces) {
  Scene s;
  const Matrix4 a = affineMatrix(0.15, 0.95, {0.8, -0.6, 0.4});
  const double tol = ulps2(s.maxAbs() * 1.5);
  TransformChain affine;
  affine.transforms = {affineStep(a)};
  affine.validate();
  for (bool cpu : {true, false}) {
    const HostImage out = cpu ? ref::resample(s.image, s.reference, affine, ApplyInterpolation::Linear)
                              : runKokkos<Space>(s.image, s.reference, affine, ApplyInterpolation::Linear);
    const Index inside = checkClosedForm(out, s.input, [&](V3 x) { return applyM(a, x); }, tol, cpu ? "affine cpu" : "affine kokkos");
    BOOST_TEST(inside > s.reference.numVoxels() / 3);  // the case tests interpolation, not only zeros
  }
  // A field on a grid of its own that covers part of the reference: ITK's rule (clamped in the
  // half-voxel band, zero beyond).
  const Geometry fg = obliqueGrid(9, 8, 7, {1.4, 1.3, 1.2}, {-4.0, 2.5, -1.0}, 0.1);
  TransformChain field;
  field.transforms = {fieldStep(fg, linearD)};
  field.validate();
  const double tolField = ulps2(s.maxAbs() * 1.5) + 1e-5;  // + float32 storage of d (<= 1 mm: 6e-8 mm) x |grad f| (< 1)
  for (bool cpu : {true, false}) {
    const HostImage out = cpu ? ref::resample(s.image, s.reference, field, ApplyInterpolation::Linear)
                              : runKokkos<Space>(s.image, s.reference, field, ApplyInterpolation::Linear);
    auto map = [&](V3 x) {
      const V3 d = fieldClosedForm(fg, linearD, x);
      return V3{x[0] + d[0], x[1] + d[1], x[2] + d[2]};
    };
    checkClosedForm(out, s.input, map, tolField, cpu ? "field cpu" : "field kokkos");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(composition_order, Space, test::ExecutionSpaces) {
  Scene s;
  // a1 rotates about y, a2 about z: they do not commute.
  const Matrix4 a1 = affineMatrix(0.2, 1.0, {1.0, 0.0, -0.5});
  const Matrix4 a2{0.95, -0.2, 0.0, 0.0, 0.2, 0.95, 0.0, 0.7, 0.0, 0.0, 0.9, 0.3, 0, 0, 0, 1};
  const Geometry fg = obliqueGrid(16, 15, 13, {1.2, 1.2, 1.2}, {-9.0, -3.0, -6.0}, 0.0);
  const double tol = ulps2(s.maxAbs() * 1.5) + 1e-5;
  // The order matters for these transforms (else the test could not fail).
  double orderGap = 0.0;
  for (V3 corner : {V3{0, 0, 0}, V3{12, 10, 8}, V3{12, 0, 8}, V3{0, 10, 0}}) {
    const V3 probe = worldOf(s.reference, corner);
    const V3 ab = applyM(a1, applyM(a2, probe)), ba = applyM(a2, applyM(a1, probe));
    orderGap = std::max(orderGap, std::fabs(linearF(ab) - linearF(ba)));
  }
  BOOST_TEST(orderGap > 0.1);
  struct Case {
    const char* what;
    std::vector<ChainTransform> listed;
    std::function<V3(V3)> map;
  };
  auto plusField = [&](V3 x) {
    const V3 d = fieldClosedForm(fg, linearD, x);
    return V3{x[0] + d[0], x[1] + d[1], x[2] + d[2]};
  };
  // The first listed transform takes the point first (ITK's CompositeTransform as antsApplyTransforms
  // builds it; see itk_composite_rules below for the rule itself).
  const std::vector<Case> cases = {
      {"[a1, a2]: a2(a1(x))", {affineStep(a1), affineStep(a2)}, [&](V3 x) { return applyM(a2, applyM(a1, x)); }},
      {"[a2, a1]: a1(a2(x))", {affineStep(a2), affineStep(a1)}, [&](V3 x) { return applyM(a1, applyM(a2, x)); }},
      {"[field, a1]: a1(F(x))", {fieldStep(fg, linearD), affineStep(a1)}, [&](V3 x) { return applyM(a1, plusField(x)); }},
      {"[a1, field]: F(a1(x))", {affineStep(a1), fieldStep(fg, linearD)}, [&](V3 x) { return plusField(applyM(a1, x)); }},
  };
  for (auto const& c : cases) {
    TransformChain chain;
    chain.transforms = c.listed;
    chain.validate();
    for (bool cpu : {true, false}) {
      const HostImage out = cpu ? ref::resample(s.image, s.reference, chain, ApplyInterpolation::Linear)
                                : runKokkos<Space>(s.image, s.reference, chain, ApplyInterpolation::Linear);
      const Index inside = checkClosedForm(out, s.input, c.map, tol, std::string(c.what) + (cpu ? " cpu" : " kokkos"));
      BOOST_TEST(inside > s.reference.numVoxels() / 4);
    }
  }
}

// ITK's CompositeTransform, modelled here on its own terms: AddTransform appends to a queue and
// TransformPoint runs the queue from its LAST element to its first ("first in, last applied").
// antsRegistration adds its stages in the order it runs them (the affine stage, then SyN) and
// tells users to apply the result as `-t <stage 1> -t <stage 0>` (Warp.nii.gz, then
// GenericAffine.mat); the listed chain must reproduce the composite. The inverse, as ANTs lists
// it (`-t [<stage 0>,1] -t <stage 1's inverse>`), must bring every point back.
struct ItkComposite {
  std::vector<std::function<V3(V3)>> queue;
  void add(std::function<V3(V3)> t) { queue.push_back(std::move(t)); }
  V3 transformPoint(V3 x) const {
    for (auto it = queue.rbegin(); it != queue.rend(); ++it) x = (*it)(x);
    return x;
  }
};

BOOST_AUTO_TEST_CASE_TEMPLATE(itk_composite_rules, Space, test::ExecutionSpaces) {
  Scene s;
  // Stage 0: a scale by 0.8 about the world origin; stage 1: a 3 mm shift along x. Their order
  // matters: scale(shift(x)) and shift(scale(x)) differ by 0.6 mm along x (0.42 in the image).
  const Matrix4 scale{0.8, 0, 0, 0, 0, 0.8, 0, 0, 0, 0, 0.8, 0, 0, 0, 0, 1};
  const Matrix4 shift{1, 0, 0, 3.0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  ItkComposite registration;
  registration.add([&](V3 x) { return applyM(scale, x); });  // stage 0, added first
  registration.add([&](V3 x) { return applyM(shift, x); });  // stage 1, added last: takes the point first
  const V3 probe{1.0, 2.0, 3.0};
  const V3 viaItk = registration.transformPoint(probe);
  BOOST_TEST(std::fabs(viaItk[0] - 0.8 * (1.0 + 3.0)) < 1e-12);  // the rule itself, on one point
  const double tol = ulps2(s.maxAbs() * 1.5) + 1e-5;
  TransformChain listed;  // as ANTs prints it: the last stage first
  listed.transforms = {affineStep(shift, "stage 1"), affineStep(scale, "stage 0")};
  listed.validate();
  // The inverse as ANTs lists it: [stage 0, 1] then [stage 1, 1].
  TransformChain inverse;
  inverse.transforms = {affineStep(inverseAffine(scale, "stage 0"), "[stage 0,1]"),
                        affineStep(inverseAffine(shift, "stage 1"), "[stage 1,1]")};
  inverse.validate();
  for (bool cpu : {true, false}) {
    const HostImage out = cpu ? ref::resample(s.image, s.reference, listed, ApplyInterpolation::Linear)
                              : runKokkos<Space>(s.image, s.reference, listed, ApplyInterpolation::Linear);
    const Index inside = checkClosedForm(out, s.input, [&](V3 x) { return registration.transformPoint(x); }, tol,
                                         cpu ? "ITK composite cpu" : "ITK composite kokkos");
    BOOST_TEST(inside > s.reference.numVoxels() / 4);
    const HostImage back = cpu ? ref::resample(s.image, s.reference, inverse, ApplyInterpolation::Linear)
                               : runKokkos<Space>(s.image, s.reference, inverse, ApplyInterpolation::Linear);
    const Index insideBack = checkClosedForm(
        back, s.input,
        [&](V3 y) {
          const V3 x = applyM(inverseAffine(shift, "t"), applyM(inverseAffine(scale, "t"), y));
          const V3 again = registration.transformPoint(x);  // the forward map undoes it
          for (int a = 0; a < 3; ++a) BOOST_TEST(std::fabs(again[std::size_t(a)] - y[std::size_t(a)]) < 1e-9);
          return x;
        },
        tol, cpu ? "ITK inverse cpu" : "ITK inverse kokkos");
    BOOST_TEST(insideBack > 0);
  }
}

namespace {

// A smooth random-ish chain: an affine and a field with sinusoidal displacements of ~1 voxel.
TransformChain mixedChain(Geometry const& fg) {
  TransformChain chain;
  chain.transforms.push_back(affineStep(affineMatrix(0.12, 1.02, {0.3, -0.2, 0.5})));
  chain.transforms.push_back(fieldStep(fg, [](V3 w) {
    return V3{1.1 * std::sin(0.3 * w[1] + 0.2), 0.8 * std::cos(0.25 * w[0] - 0.1 * w[2]), 0.6 * std::sin(0.2 * w[2] + 0.3 * w[0])};
  }));
  return chain;
}

HostImage labelImage(Geometry const& g, unsigned seed) {
  // Blocks of random labels 0..5 (2x2x2 voxels each) so that cells hold ties and mixtures.
  HostImage img("kortex::test::apply::labels", g);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 5);
  std::vector<float> block(std::size_t((g.nx() / 2 + 1) * (g.ny() / 2 + 1) * (g.nz() / 2 + 1)));
  for (auto& b : block) b = float(pick(rng));
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x)
        img.data(z, y, x) = block[std::size_t(((z / 2) * (g.ny() / 2 + 1) + y / 2) * (g.nx() / 2 + 1) + x / 2)];
  return img;
}

std::set<float> valuesOf(HostImage const& img) {
  return std::set<float>(img.data.data(), img.data.data() + img.data.size());
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(cpu_reference_vs_kokkos, Space, test::ExecutionSpaces) {
  Scene s;
  const Geometry fg = obliqueGrid(12, 12, 10, {1.3, 1.3, 1.4}, {-7.0, -1.0, -4.0}, 0.2);
  const TransformChain chain = mixedChain(fg);
  chain.validate();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  HostImage noise("kortex::test::apply::noise", s.input);
  for (std::size_t i = 0; i < noise.data.size(); ++i) noise.data.data()[i] = u(rng);
  const HostImage labels = labelImage(s.input, 11);
  // Linear: both evaluate the chain and the trilinear sum in double; they differ by the rounding
  // of the world <-> index inverses (~1e-15 voxel) times the slope (<= 4 per voxel), far below
  // the float32 result's 0.5 ulp of 2 (1.2e-7), which 2e-6 bounds with room.
  constexpr double kLinearTol = 2e-6;
  for (ApplyInterpolation interp : {ApplyInterpolation::Linear, ApplyInterpolation::Nearest, ApplyInterpolation::Label}) {
    const HostImage& in = interp == ApplyInterpolation::Label ? labels : noise;
    const HostImage a = ref::resample(in, s.reference, chain, interp);
    const HostImage b = runKokkos<Space>(in, s.reference, chain, interp);
    double worst = 0.0;
    Index nonzero = 0;
    for (std::size_t i = 0; i < a.data.size(); ++i) {
      worst = std::max(worst, std::fabs(double(a.data.data()[i]) - double(b.data.data()[i])));
      nonzero += a.data.data()[i] != 0.0f;
    }
    BOOST_TEST_INFO(toString(interp) << ": worst |cpu - kokkos| " << worst);
    // Nearest and label pick a voxel / a label: identical unless a point lies within ~1e-15 of a
    // decision boundary, which these smooth transforms do not produce.
    BOOST_TEST(worst <= (interp == ApplyInterpolation::Linear ? kLinearTol : 0.0));
    BOOST_TEST(nonzero > Index(a.data.size() / 3));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(label_and_nearest_properties, Space, test::ExecutionSpaces) {
  Scene s;
  const HostImage labels = labelImage(s.input, 3);
  const std::set<float> inputLabels = valuesOf(labels);
  // Identity on the input's own grid: label and nearest reproduce the image exactly.
  TransformChain identity;
  identity.transforms = {affineStep({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})};
  for (bool cpu : {true, false}) {
    for (ApplyInterpolation interp : {ApplyInterpolation::Label, ApplyInterpolation::Nearest}) {
      const HostImage& in = interp == ApplyInterpolation::Label ? labels : s.image;
      const HostImage out = cpu ? ref::resample(in, s.input, identity, interp) : runKokkos<Space>(in, s.input, identity, interp);
      Index differ = 0;
      for (std::size_t i = 0; i < out.data.size(); ++i) differ += out.data.data()[i] != in.data.data()[i];
      BOOST_TEST_INFO(toString(interp) << (cpu ? " cpu" : " kokkos"));
      BOOST_TEST(differ == 0);
    }
    // A rotation + field: only labels of the input (and 0 outside) appear, and not all voxels are 0.
    const Geometry fg = obliqueGrid(12, 12, 10, {1.3, 1.3, 1.4}, {-7.0, -1.0, -4.0}, 0.2);
    const TransformChain chain = mixedChain(fg);
    const HostImage out = cpu ? ref::resample(labels, s.reference, chain, ApplyInterpolation::Label)
                              : runKokkos<Space>(labels, s.reference, chain, ApplyInterpolation::Label);
    const std::set<float> got = valuesOf(out);
    for (float l : got) BOOST_TEST((l == 0.0f || inputLabels.count(l) == 1), "label " << l << " is new");
    BOOST_TEST(got.size() >= 3u);
  }
  // The tie rule: halfway between labels 2 and 5 along x (weights 1/2 each) gives 2, the smaller.
  HostImage two("kortex::test::apply::tie", Geometry::make3D(2, 2, 2));
  for (Index z = 0; z < 2; ++z)
    for (Index y = 0; y < 2; ++y) two.data(z, y, 0) = 5.0f, two.data(z, y, 1) = 2.0f;
  TransformChain shift;
  shift.transforms = {affineStep({1, 0, 0, 0.5, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})};
  for (bool cpu : {true, false}) {
    const HostImage out = cpu ? ref::resample(two, two.geometry, shift, ApplyInterpolation::Label)
                              : runKokkos<Space>(two, two.geometry, shift, ApplyInterpolation::Label);
    BOOST_TEST(out.data(0, 0, 0) == 2.0f);
    BOOST_TEST(out.data(1, 1, 0) == 2.0f);
  }
}

// ---- transform files ----------------------------------------------------------------------------

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("kortex-tstApply-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(std::string const& n) const { return path / n; }
};

void writeText(fs::path const& p, std::string const& s) {
  std::ofstream(p, std::ios::binary) << s;
}

const double kParams[12] = {0.98, -0.12, 0.05, 0.11, 1.02, -0.03, -0.04, 0.02, 0.97, 2.5, -1.25, 3.75};
const double kCentre[3] = {10.0, -20.0, 5.5};

std::string itkText(std::string const& type, std::string const& extra = "") {
  std::ostringstream os;
  os.precision(17);
  os << "#Insight Transform File V1.0\n#Transform 0\nTransform: " << type << "\nParameters:";
  for (double v : kParams) os << ' ' << v;
  os << "\nFixedParameters: " << kCentre[0] << ' ' << kCentre[1] << ' ' << kCentre[2] << '\n' << extra;
  return os.str();
}

// One variable of a MATLAB level-4 file as vnl_matlab_write lays it out: five int32 (type, rows,
// cols = 1, imag = 0, namlen), the name with its NUL, the values (float64, or float32 for type 10),
// in the byte order `big` (type + 1000).
void appendMatVariable(std::string& out, std::string const& name, std::vector<double> const& v, bool single, bool big) {
  auto put = [&](const void* p, int n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (int i = 0; i < n; ++i) out.push_back(char(big ? b[n - 1 - i] : b[i]));
  };
  const std::int32_t header[5] = {(big ? 1000 : 0) + (single ? 10 : 0), std::int32_t(v.size()), 1, 0,
                                  std::int32_t(name.size() + 1)};
  for (std::int32_t h : header) put(&h, 4);
  out.append(name);
  out.push_back('\0');
  for (double x : v) {
    if (single) {
      const float f = float(x);
      put(&f, 4);
    } else {
      put(&x, 8);
    }
  }
}

std::string matFile(std::string const& type, bool single, bool big) {
  std::string b;
  appendMatVariable(b, type, std::vector<double>(kParams, kParams + 12), single, big);
  appendMatVariable(b, "fixed", std::vector<double>(kCentre, kCentre + 3), single, big);
  return b;
}

void expectMatrix(Matrix4 const& m, double tol, std::string const& what) {
  // y = A (x - c) + t + c, checked on three points.
  for (V3 x : {V3{0, 0, 0}, V3{10, -3, 7}, V3{-4, 8, 1}}) {
    const V3 y = applyM(m, x);
    for (int i = 0; i < 3; ++i) {
      double want = kParams[9 + i] + kCentre[i];
      for (int j = 0; j < 3; ++j) want += kParams[3 * i + j] * (x[j] - kCentre[j]);
      BOOST_TEST_INFO(what);
      BOOST_TEST(std::fabs(y[i] - want) <= tol);
    }
  }
}

template <class F>
void expectRefused(F&& f, std::string const& needle) {
  try {
    f();
    BOOST_ERROR("not refused: expected a message with '" << needle << "'");
  } catch (std::exception const& e) {
    BOOST_TEST_INFO(e.what());
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos);
  }
}

// A NIfTI-1 vector image header + data by hand (dim[0] = 5, intent 1007, float32): for fields the
// writer refuses to produce (2 components, a 2D grid).
void writeRawField(fs::path const& p, int nx, int ny, int nz, int nc) {
  std::string h(352, '\0');
  auto i32 = [&](int at, std::int32_t v) { std::memcpy(&h[std::size_t(at)], &v, 4); };
  auto i16 = [&](int at, std::int16_t v) { std::memcpy(&h[std::size_t(at)], &v, 2); };
  auto f32 = [&](int at, float v) { std::memcpy(&h[std::size_t(at)], &v, 4); };
  i32(0, 348);
  const std::int16_t dim[8] = {5, std::int16_t(nx), std::int16_t(ny), std::int16_t(nz), 1, std::int16_t(nc), 1, 1};
  for (int k = 0; k < 8; ++k) i16(40 + 2 * k, dim[k]);
  i16(68, 1007);
  i16(70, 16);
  i16(72, 32);
  for (int k = 0; k < 8; ++k) f32(76 + 4 * k, 1.0f);
  f32(108, 352.0f);
  f32(112, 1.0f);
  h[123] = 2;
  std::memcpy(&h[344], "n+1\0", 4);
  h.append(std::size_t(nx) * ny * nz * nc * 4, '\0');
  writeText(p, h);
}

}  // namespace

BOOST_AUTO_TEST_CASE(itk_text_reader) {
  TempDir d;
  // 17 significant digits: the doubles back exactly; the float type's file carries the same text.
  for (std::string type : {"AffineTransform_double_3_3", "AffineTransform_float_3_3", "MatrixOffsetTransformBase_double_3_3",
                           "MatrixOffsetTransformBase_float_3_3"}) {
    writeText(d / "t.txt", itkText(type));
    const io::TransformFile t = io::readTransform(d / "t.txt");
    BOOST_TEST(t.type == type);
    expectMatrix(t.matrix, 1e-12, type);
  }
  // Kortex's own --out-affine text reads back to the same matrix.
  const Matrix4 m = affineMatrix(0.3, 1.1, {4, -5, 6});
  writeText(d / "k.tfm", itkTransformText(m));
  const io::TransformFile k = io::readTransform(d / "k.tfm");
  for (int i = 0; i < 16; ++i) BOOST_TEST(std::fabs(k.matrix[std::size_t(i)] - m[std::size_t(i)]) <= 1e-15 * 10);
  // Refusals, each naming what it found.
  writeText(d / "euler.txt", itkText("Euler3DTransform_double_3_3"));
  expectRefused([&] { io::readTransform(d / "euler.txt"); }, "Euler3DTransform_double_3_3");
  writeText(d / "comp.txt", "#Insight Transform File V1.0\n#Transform 0\nTransform: CompositeTransform_double_3_3\n" +
                                itkText("AffineTransform_double_3_3").substr(29));
  expectRefused([&] { io::readTransform(d / "comp.txt"); }, "composite");
  writeText(d / "two.txt", itkText("AffineTransform_double_3_3") + "#Transform 1\nTransform: AffineTransform_double_3_3\n");
  expectRefused([&] { io::readTransform(d / "two.txt"); }, "2 transforms");
  std::string eleven = itkText("AffineTransform_double_3_3");
  eleven.replace(eleven.find(" 3.75"), 5, "");
  writeText(d / "eleven.txt", eleven);
  expectRefused([&] { io::readTransform(d / "eleven.txt"); }, "11 numbers");
  std::string nan = itkText("AffineTransform_double_3_3");
  nan.replace(nan.find(" 3.75"), 5, " nan");
  writeText(d / "nan.txt", nan);
  expectRefused([&] { io::readTransform(d / "nan.txt"); }, "not finite");
  writeText(d / "junk.txt", "hello\n");
  expectRefused([&] { io::readTransform(d / "junk.txt"); }, "not an ITK transform file");
  expectRefused([&] { io::readTransform(d / "missing.txt"); }, "no such file");
  writeText(d / "t.xfm", itkText("AffineTransform_double_3_3"));
  expectRefused([&] { io::readTransform(d / "t.xfm"); }, "unknown transform file extension");
}

BOOST_AUTO_TEST_CASE(ants_mat_reader) {
  TempDir d;
  struct Case {
    std::string type;
    bool single, big;
    double tol;  // float32 parameters: rounding of values up to ~20 (|c|) times the matrix (~1)
  };
  for (Case const& c : {Case{"AffineTransform_double_3_3", false, false, 1e-12}, Case{"AffineTransform_float_3_3", true, false, 2e-5},
                        Case{"MatrixOffsetTransformBase_double_3_3", false, true, 1e-12}}) {
    writeText(d / "a.mat", matFile(c.type, c.single, c.big));
    const io::TransformFile t = io::readTransform(d / "a.mat");
    BOOST_TEST(t.type == c.type);
    expectMatrix(t.matrix, c.tol, c.type);
  }
  // The same transform from a .mat and from ITK text: the same matrix.
  writeText(d / "a.txt", itkText("AffineTransform_double_3_3"));
  writeText(d / "a.mat", matFile("AffineTransform_double_3_3", false, false));
  const Matrix4 fromText = io::readTransform(d / "a.txt").matrix, fromMat = io::readTransform(d / "a.mat").matrix;
  for (int i = 0; i < 16; ++i) BOOST_TEST(std::fabs(fromText[std::size_t(i)] - fromMat[std::size_t(i)]) <= 1e-12);
  // Refusals.
  writeText(d / "e.mat", matFile("Euler3DTransform_double_3_3", false, false));
  expectRefused([&] { io::readTransform(d / "e.mat"); }, "Euler3DTransform_double_3_3");
  const std::string whole = matFile("AffineTransform_double_3_3", false, false);
  writeText(d / "cut.mat", whole.substr(0, whole.size() - 5));
  expectRefused([&] { io::readTransform(d / "cut.mat"); }, "truncated");
  writeText(d / "v5.mat", "MATLAB 5.0 MAT-file, Platform: GLNXA64" + std::string(100, ' '));
  expectRefused([&] { io::readTransform(d / "v5.mat"); }, "MATLAB 5");
  std::string nanMat;
  std::vector<double> p(kParams, kParams + 12);
  p[4] = std::nan("");
  appendMatVariable(nanMat, "AffineTransform_double_3_3", p, false, false);
  appendMatVariable(nanMat, "fixed", {0, 0, 0}, false, false);
  writeText(d / "nan.mat", nanMat);
  expectRefused([&] { io::readTransform(d / "nan.mat"); }, "not finite");
  writeText(d / "empty.mat", "");
  expectRefused([&] { io::readTransform(d / "empty.mat"); }, "empty");
}

BOOST_AUTO_TEST_CASE(field_files_and_chain_refusals) {
  TempDir d;
  writeRawField(d / "two.nii", 4, 4, 4, 2);
  expectRefused([&] { io::readTransform(d / "two.nii"); }, "2");
  writeRawField(d / "flat.nii", 4, 4, 1, 3);
  expectRefused([&] { io::readTransform(d / "flat.nii"); }, "2D");
  // A field written by writeDisplacementField reads back as a field transform.
  const Geometry g = obliqueGrid(5, 4, 3, {1, 1, 1}, {0, 0, 0}, 0.0);
  ChainTransform f = fieldStep(g, linearD);
  io::writeDisplacementField(f.field, d / "f.nii.gz");
  const io::TransformFile t = io::readTransform(d / "f.nii.gz");
  BOOST_TEST((t.kind == io::TransformFileKind::Field));
  BOOST_TEST(t.field.data(1, 2, 3, 4) == f.field.data(1, 2, 3, 4));

  // The chain: every refusal of validate().
  TransformChain empty;
  expectRefused([&] { empty.validate(); }, "no transform");
  TransformChain singular;
  singular.transforms = {affineStep({1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1}, "transform 1 ('s.txt')")};
  expectRefused([&] { singular.validate(); }, "singular");
  TransformChain nanAffine;
  nanAffine.transforms = {affineStep({1, 0, 0, std::nan(""), 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})};
  expectRefused([&] { nanAffine.validate(); }, "NaN");
  TransformChain nanField;
  nanField.transforms = {fieldStep(g, linearD)};
  nanField.transforms[0].field.data(2, 1, 1, 1) = std::numeric_limits<float>::infinity();
  expectRefused([&] { nanField.validate(); }, "NaN or infinite");
  TransformChain twoComponents;
  ChainTransform two;
  two.kind = ChainKind::Field;
  two.name = "field";
  two.field = VectorField<Kokkos::HostSpace>("two", g, 2);
  twoComponents.transforms = {two};
  expectRefused([&] { twoComponents.validate(); }, "3 components");
  expectRefused([&] { inverseAffine(singular.transforms[0].matrix, "s"); }, "singular");
  // inverseAffine: A^-1 (A x + a) - A^-1 a == x.
  const Matrix4 a = affineMatrix(0.4, 1.3, {2, 3, -4}), ai = inverseAffine(a, "a");
  const V3 x{1.5, -2.0, 7.0}, back = applyM(ai, applyM(a, x));
  for (int i = 0; i < 3; ++i) BOOST_TEST(std::fabs(back[std::size_t(i)] - x[std::size_t(i)]) <= 1e-12);

  // The job's refusals in memory: label on a float image, a 2D input, no transform.
  Scene s;
  TransformChain id;
  id.transforms = {affineStep({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})};
  expectRefused([&] { pipeline::applyTransforms(s.image, s.reference, id, ApplyInterpolation::Label, Backend::Cpu); },
                "integer values");
  HostImage flat("flat", Geometry::make2D(8, 8));
  expectRefused([&] { pipeline::applyTransforms(flat, s.reference, id, ApplyInterpolation::Linear, Backend::Cpu); }, "3D");
  expectRefused([&] { pipeline::applyTransforms(s.image, s.reference, empty, ApplyInterpolation::Linear, Backend::Kokkos); },
                "no transform");
  HostImage nanImage = sampled(s.input, linearF);
  nanImage.data(2, 3, 4) = std::nanf("");
  expectRefused([&] { pipeline::applyTransforms(nanImage, s.reference, id, ApplyInterpolation::Linear, Backend::Cpu); },
                "NaN or Inf");

  // ANTs' [FILE,1]: the inverse of an affine; a field's inverse is refused.
  BOOST_TEST(pipeline::parseTransformSpec("[a.mat,1]").inverse);
  BOOST_TEST(pipeline::parseTransformSpec("[a.mat,1]").path == fs::path("a.mat"));
  BOOST_TEST(!pipeline::parseTransformSpec("[a.mat,0]").inverse);
  BOOST_TEST(pipeline::parseTransformSpec("a.mat").path == fs::path("a.mat"));
  expectRefused([&] { pipeline::parseTransformSpec("[a.mat,2]"); }, "0 (as is) or 1");
  writeText(d / "a.txt", itkText("AffineTransform_double_3_3"));
  const TransformChain inv = pipeline::readTransformChain({{d / "a.txt", true}});
  const Matrix4 fwd = io::readTransform(d / "a.txt").matrix;
  const V3 y = applyM(inv.transforms[0].matrix, applyM(fwd, x));
  for (int i = 0; i < 3; ++i) BOOST_TEST(std::fabs(y[std::size_t(i)] - x[std::size_t(i)]) <= 1e-12);
  expectRefused([&] { pipeline::readTransformChain({{d / "f.nii.gz", true}}); }, "inverse of a displacement field");
}

// ---- end to end: register greedy's field reproduces its warped image ---------------------------------

namespace {

HostImage blob(Geometry const& g, V3 centre, double radius) {
  return sampled(g, [&](V3 w) {
    double r2 = 0;
    for (int a = 0; a < 3; ++a) r2 += (w[a] - centre[a]) * (w[a] - centre[a]);
    return 100.0 * std::exp(-r2 / (2 * radius * radius)) + 10.0 * std::sin(0.3 * w[0]) + 20.0;
  });
}

// Two blobs on grids of different spacing, origin and orientation, so that the fields' world
// conversion matters.
struct ObliquePair {
  Geometry fixedGrid = obliqueGrid(16, 16, 16, {1.0, 1.0, 1.0}, {-8.0, -8.0, -8.0}, 0.0);
  Geometry movingGrid = obliqueGrid(15, 17, 14, {1.1, 0.95, 1.15}, {-7.5, -8.5, -7.0}, 0.05);
  HostImage fixed = blob(fixedGrid, {0.5, -0.5, 0.0}, 3.5), moving = blob(movingGrid, {-0.5, 0.8, 0.6}, 3.0);
};

}  // namespace

BOOST_AUTO_TEST_CASE(register_field_reproduces_warped) {
  const ObliquePair pair;
  Geometry const& fixedGrid = pair.fixedGrid;
  Geometry const& movingGrid = pair.movingGrid;
  HostImage const &fixed = pair.fixed, &moving = pair.moving;
  pipeline::RegistrationPipelineOptions opt;
  opt.method = pipeline::RegistrationMethod::Greedy;
  opt.backend = Backend::Cpu;
  opt.useAffine = false;
  opt.greedy.iterations = {5, 5};
  const pipeline::RegistrationPipelineResult r = pipeline::registerPair(moving, fixed, opt);
  const HostImage warped = pipeline::warpedMoving(r, moving);
  // ANTs' order: the deformable field (register --out-field) takes the point first, then the
  // affine (--out-affine; here the header alignment of the two grids, not the identity).
  TransformChain chain;
  ChainTransform t;
  t.kind = ChainKind::Field;
  t.name = "register field";
  t.field = pipeline::deformableWorldDisplacement(r);
  chain.transforms.push_back(t);
  chain.transforms.push_back(affineStep(toWorldMatrix(r.affine, r.fixedGrid, r.movingGrid), "register affine"));
  // Tolerance: the field is stored in float32, so the point it gives differs from the registration's
  // by <= 2^-24 |d| mm (+ double rounding); the trilinear interpolant moves by at most its slope,
  // <= 3 x (the moving image's range) per voxel, over that distance in voxels (smallest spacing);
  // plus 2 ulps of the values for the float32 results.
  double maxD = 0, lo = 1e30, hi = -1e30;
  for (std::size_t i = 0; i < t.field.data.size(); ++i) maxD = std::max(maxD, double(std::fabs(t.field.data.data()[i])));
  for (std::size_t i = 0; i < moving.data.size(); ++i)
    lo = std::min(lo, double(moving.data.data()[i])), hi = std::max(hi, double(moving.data.data()[i]));
  const double tol = 3.0 * (hi - lo) * (maxD * std::ldexp(1.0, -24) + 1e-12) / 0.95 + ulps2(std::max(std::fabs(lo), std::fabs(hi)));
  BOOST_TEST(maxD > 0.3);  // the registration moved something
  for (Backend b : {Backend::Cpu, Backend::Kokkos}) {
    const HostImage got = pipeline::applyTransforms(moving, fixedGrid, chain, ApplyInterpolation::Linear, b).image;
    Index judged = 0, bad = 0;
    double worst = 0;
    for (Index z = 0; z < 16; ++z)
      for (Index y = 0; y < 16; ++y)
        for (Index x = 0; x < 16; ++x) {
          const auto q = pipeline::mapPoint(r, x, y, z);
          bool near = false;
          for (int a = 0; a < 3; ++a)
            near = near || std::fabs(q[std::size_t(a)]) < 1e-5 || std::fabs(q[std::size_t(a)] - double(movingGrid.size[a] - 1)) < 1e-5;
          if (near) continue;  // the float32 field may put such a point on the other side of the box
          ++judged;
          const double err = std::fabs(double(got.data(z, y, x)) - double(warped.data(z, y, x)));
          worst = std::max(worst, err);
          bad += err > tol;
        }
    BOOST_TEST_INFO("backend " << toString(b) << ": worst " << worst << ", tolerance " << tol);
    BOOST_TEST(bad == 0);
    BOOST_TEST(judged > 16 * 16 * 16 * 9 / 10);
  }
}

// --out-composite: the whole map as one field. Applied alone it maps every fixed point where the
// field then the affine (ANTs' `-t field -t affine`) map it, within 1e-4 moving voxel (both fields are
// float32: their rounding is ~1e-6 mm here), and `kortex apply` gives the same image within the
// interpolant's slope over that distance.
BOOST_AUTO_TEST_CASE(composite_field_is_field_then_affine) {
  const ObliquePair pair;
  Geometry const& fixedGrid = pair.fixedGrid;
  Geometry const& movingGrid = pair.movingGrid;
  HostImage const &fixed = pair.fixed, &moving = pair.moving;
  pipeline::RegistrationPipelineOptions opt;
  opt.method = pipeline::RegistrationMethod::Greedy;
  opt.backend = Backend::Cpu;
  opt.greedy.iterations = {5, 5};
  const pipeline::RegistrationPipelineResult r = pipeline::registerPair(moving, fixed, opt);
  const auto composite = pipeline::worldDisplacement(r), field = pipeline::deformableWorldDisplacement(r);
  const Matrix4 a = toWorldMatrix(r.affine, r.fixedGrid, r.movingGrid);
  constexpr double kPointTolVoxels = 1e-4;  // the bound; float32 storage of both fields is ~1e-6 mm
  double worst = 0, moved = 0;
  for (Index z = 0; z < 16; ++z)
    for (Index y = 0; y < 16; ++y)
      for (Index x = 0; x < 16; ++x) {
        const V3 w = worldOf(fixedGrid, {double(x), double(y), double(z)});
        V3 viaField{}, viaComposite{};
        for (int c = 0; c < 3; ++c) {
          viaField[std::size_t(c)] = w[std::size_t(c)] + field.data(c, z, y, x);
          viaComposite[std::size_t(c)] = w[std::size_t(c)] + composite.data(c, z, y, x);
        }
        const V3 p = indexOf(movingGrid, applyM(a, viaField)), q = indexOf(movingGrid, viaComposite);
        for (int c = 0; c < 3; ++c) {
          worst = std::max(worst, std::fabs(p[std::size_t(c)] - q[std::size_t(c)]));
          moved = std::max(moved, double(std::fabs(field.data(c, z, y, x))));
        }
      }
  BOOST_TEST_INFO("worst point difference " << worst << " moving voxel");
  BOOST_TEST(worst <= kPointTolVoxels);
  BOOST_TEST(moved > 0.1);  // the deformable part is not the identity
  TransformChain alone, chain;
  ChainTransform t;
  t.kind = ChainKind::Field;
  t.name = "composite";
  t.field = composite;
  alone.transforms.push_back(t);
  t.name = "field";
  t.field = field;
  chain.transforms = {t, affineStep(a, "affine")};
  for (Backend b : {Backend::Cpu, Backend::Kokkos}) {
    const HostImage one = pipeline::applyTransforms(moving, fixedGrid, alone, ApplyInterpolation::Linear, b).image;
    const HostImage two = pipeline::applyTransforms(moving, fixedGrid, chain, ApplyInterpolation::Linear, b).image;
    double lo = 1e30, hi = -1e30, diff = 0;
    for (std::size_t i = 0; i < moving.data.size(); ++i)
      lo = std::min(lo, double(moving.data.data()[i])), hi = std::max(hi, double(moving.data.data()[i]));
    for (Index i = 0; i < one.numVoxels(); ++i)
      diff = std::max(diff, double(std::fabs(one.data.data()[i] - two.data.data()[i])));
    // The trilinear interpolant moves by at most 3 x the range per voxel over the points' distance,
    // plus 2 ulps of the values.
    BOOST_TEST_INFO("backend " << toString(b) << ": " << diff);
    BOOST_TEST(diff <= 3.0 * (hi - lo) * kPointTolVoxels + ulps2(std::max(std::fabs(lo), std::fabs(hi))));
  }
}
