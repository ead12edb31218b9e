#include "core/Apply.hpp"

#include <algorithm>
#include <cmath>

#include "core/Errors.hpp"

namespace kortex {

namespace {

Matrix3 linearPart(Matrix4 const& m) {
  Matrix3 a{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) a[3 * i + j] = m[4 * i + j];
  return a;
}

bool singular(Matrix4 const& m) {
  const Matrix3 a = linearPart(m);
  double scale = 0.0;
  for (double v : a) scale = std::max(scale, std::fabs(v));
  return !(std::fabs(determinant3(a)) > kApplySingularDet * scale * scale * scale);
}

void validateAffine(ChainTransform const& t) {
  for (double v : t.matrix)
    if (!std::isfinite(v)) throw InvalidArgument(t.name + ": the affine matrix holds a NaN or infinite value");
  if (t.matrix[12] != 0.0 || t.matrix[13] != 0.0 || t.matrix[14] != 0.0 || t.matrix[15] != 1.0)
    throw InvalidArgument(t.name + ": the last row of an affine matrix must be 0 0 0 1");
  if (singular(t.matrix)) throw InvalidArgument(t.name + ": the affine matrix is singular (it maps space onto a plane)");
}

void validateField(ChainTransform const& t) {
  VectorField<Kokkos::HostSpace> const& f = t.field;
  const Geometry& g = f.geometry;
  try {
    g.validate();
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(t.name + ": invalid field grid: " + e.what());
  }
  if (g.dimension != 3) throw InvalidArgument(t.name + ": a displacement field for 3D images needs a 3D grid, got " + describe(g));
  if (!f.data.data() || f.components() != 3)
    throw InvalidArgument(t.name + ": a 3D displacement field has 3 components, got " +
                          std::to_string(f.data.data() ? f.components() : 0));
  if (f.data.extent(1) != std::size_t(g.nz()) || f.data.extent(2) != std::size_t(g.ny()) ||
      f.data.extent(3) != std::size_t(g.nx()))
    throw InvalidArgument(t.name + ": the field data does not match its grid (" + describe(g) + ")");
  const float* p = f.data.data();
  const std::size_t n = f.data.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) {
      const std::size_t v = i % std::size_t(g.numVoxels());
      throw InvalidArgument(t.name + ": the displacement field holds a NaN or infinite value (component " +
                            std::to_string(i / std::size_t(g.numVoxels())) + " at x=" + std::to_string(v % g.nx()) +
                            ", y=" + std::to_string(v / g.nx() % g.ny()) + ", z=" +
                            std::to_string(v / (g.nx() * g.ny())) + ")");
    }
}

}  // namespace

ApplyInterpolation parseApplyInterpolation(std::string const& s) {
  if (s == "linear") return ApplyInterpolation::Linear;
  if (s == "nearest") return ApplyInterpolation::Nearest;
  if (s == "label") return ApplyInterpolation::Label;
  throw InvalidArgument("unknown interpolation '" + s + "' (linear, nearest or label)");
}

const char* toString(ApplyInterpolation i) {
  switch (i) {
    case ApplyInterpolation::Linear: return "linear";
    case ApplyInterpolation::Nearest: return "nearest";
    case ApplyInterpolation::Label: return "label";
  }
  return "?";
}

void TransformChain::validate() const {
  if (transforms.empty()) throw InvalidArgument("no transform given: apply needs at least one transform");
  if (transforms.size() > std::size_t(kMaxApplyTransforms))
    throw InvalidArgument(std::to_string(transforms.size()) + " transforms; at most " +
                          std::to_string(kMaxApplyTransforms) + " are applied in one run");
  for (auto const& t : transforms) {
    if (t.kind == ChainKind::Affine)
      validateAffine(t);
    else
      validateField(t);
  }
}

std::int64_t TransformChain::fieldFloats() const {
  std::int64_t n = 0;
  for (auto const& t : transforms)
    if (t.kind == ChainKind::Field) n += std::int64_t(t.field.data.size());
  return n;
}

Matrix4 inverseAffine(Matrix4 const& m, std::string const& what) {
  if (singular(m)) throw InvalidArgument(what + ": the affine matrix is singular and has no inverse");
  const Matrix3 inv = inverse3(linearPart(m));
  Matrix4 r{};
  for (int i = 0; i < 3; ++i) {
    double off = 0.0;
    for (int j = 0; j < 3; ++j) {
      r[4 * i + j] = inv[3 * i + j];
      off -= inv[3 * i + j] * m[4 * j + 3];
    }
    r[4 * i + 3] = off;
  }
  r[15] = 1.0;
  return r;
}

AffineTransform inverseAffine(AffineTransform const& t, std::string const& what) {
  Matrix4 m{};
  for (int r = 0; r < 3; ++r) {
    double off = t.centre[std::size_t(r)] + t.translation[std::size_t(r)];
    for (int c = 0; c < 3; ++c) {
      m[std::size_t(4 * r + c)] = t.matrix[std::size_t(3 * r + c)];
      off -= t.matrix[std::size_t(3 * r + c)] * t.centre[std::size_t(c)];
    }
    m[std::size_t(4 * r + 3)] = off;
  }
  m[15] = 1.0;
  return affineOfMatrix(inverseAffine(m, what));
}

void requireIntegerLabels(HostImage const& img, std::string const& what) {
  const float* p = img.data.data();
  const std::size_t n = img.data.size();
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != std::nearbyint(p[i]) || !std::isfinite(p[i])) {
      const Index nx = img.geometry.nx(), ny = img.geometry.ny();
      throw InvalidArgument("label interpolation needs a label map of integer values; " + what + " holds " +
                            std::to_string(p[i]) + " at (x=" + std::to_string(Index(i) % nx) + ", y=" +
                            std::to_string(Index(i) / nx % ny) + ", z=" + std::to_string(Index(i) / (nx * ny)) +
                            "): use linear or nearest interpolation for intensities");
    }
}

ApplyChainCoeffs applyChainCoeffs(TransformChain const& chain, Geometry const& reference, Geometry const& input) {
  if (chain.transforms.size() > std::size_t(kMaxApplyTransforms))
    throw InvalidArgument("applyChainCoeffs: more than " + std::to_string(kMaxApplyTransforms) + " transforms");
  ApplyChainCoeffs c{};
  c.count = int(chain.transforms.size());
  c.referenceToWorld = affineCoeffs(indexToWorldTransform(reference));
  c.worldToInput = affineCoeffs(worldToIndexTransform(input));
  std::vector<std::int64_t> offsets;
  std::int64_t offset = 0;
  for (auto const& t : chain.transforms) {
    offsets.push_back(offset);
    if (t.kind == ChainKind::Field) offset += std::int64_t(t.field.data.size());
  }
  for (int k = 0; k < c.count; ++k) {
    const std::size_t listed = std::size_t(k);  // the first listed is applied to the point first
    ChainTransform const& t = chain.transforms[listed];
    ApplyStep& s = c.step[k];
    if (t.kind == ChainKind::Affine) {
      s.kind = 0;
      s.map = affineCoeffs(affineOfMatrix(t.matrix));
    } else {
      s.kind = 1;
      s.map = affineCoeffs(worldToIndexTransform(t.field.geometry));
      for (int a = 0; a < 3; ++a) s.n[a] = int(t.field.geometry.size[a]);
      s.offset = offsets[listed];
    }
  }
  return c;
}

}  // namespace kortex
