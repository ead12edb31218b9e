// Applying transforms (`kortex apply`, pipeline/Apply.hpp): the specification every back end
// implements, the transform chain, and the per-point maths shared by every Kokkos variant. The CPU
// reference (reference_cpu/Resample.cpp) implements this text on its own.
//
// ---- Points and transforms ---------------------------------------------------------------------
// World points are LPS, mm (core/Image.hpp: world = O + D diag(s) p for index p). A transform maps
// a point x of the reference (fixed) space to the point of the input (moving) space whose value it
// takes, as ITK's registration transforms and antsApplyTransforms do:
//   affine   y = A x + a (Matrix4, row-major, last row 0 0 0 1; io/Transform.hpp reads ITK's
//            y = A (x - c) + t + c into it);
//   field    y = x + d(x), d a world displacement (mm, LPS) on the field's own grid G_d,
//            evaluated at the continuous index c = (D_d diag(s_d))^-1 (x - O_d):
//            inside  -0.5 <= c_a < n_a - 0.5 on every axis a: the trilinear interpolant of the
//                    three components, each of the 8 corners' indices clamped to [0, n_a - 1];
//            outside d = 0 (the identity).
//            This is itk::DisplacementFieldTransform::TransformPoint with its default
//            VectorLinearInterpolateImageFunction: IsInsideBuffer accepts continuous indices in
//            [-0.5, n - 0.5) and the interpolator repeats the edge samples there; outside it
//            returns the input point. The field need not lie on the reference grid.
// Order (antsApplyTransforms, ITK's CompositeTransform): transforms T_1, ..., T_m as listed; the
// point goes through the FIRST listed first:
//   y(x) = T_m(... T_2(T_1(x))),  x = world(p) for each voxel p of the reference grid,
// and the input is sampled at its continuous index q = (D_in diag(s_in))^-1 (y - O_in).
// (antsApplyTransforms pushes each listed transform to the front of an ITK CompositeTransform,
// which maps a point through its last-added transform first; "the last listed is applied first"
// in ANTs' help speaks of the image, not the point. So ANTs' `-t Warp.nii.gz -t Affine.mat`
// samples the moving image at A(x + d(x)): the warp lives on the fixed grid.)
//
// ---- Interpolation of the input at q (index units of the input, x first) -------------------------
//   Linear   inside the closed box 0 <= q_a <= n_a - 1: trilinear in the cell with lower corner
//            min(floor(q_a), n_a - 2) (core/Affine.hpp affineInside / affineSample, double; the
//            closed-box rule of core/Trilinear.hpp): exactly
//            the sampling of `register --out-warped`, so applying the field it writes reproduces
//            the warped image (docs/apply.md: to float32 rounding of the stored field). Outside: 0.
//   Nearest  inside -0.5 <= q_a < n_a - 0.5: the value of voxel k_a = floor(q_a + 0.5) (the rule of
//            the registration's label warp); outside: 0.
//   Label    inside -0.5 <= q_a < n_a - 0.5: each label as a soft mask with trilinear weights: the
//            8 corners k of the cell (floor(q_a), floor(q_a) + 1, each clamped to [0, n_a - 1]) with
//            weights w_k = prod_a (1 - t_a or t_a), t_a = q_a - floor(q_a); per distinct label L the
//            sum S_L of w_k over the corners holding L, added in corner order (x fastest, then y,
//            then z); the result is the L with the largest S_L, and on a tie the SMALLER label.
//            Only labels present at the corners can result (no new labels, no blending);
//            at a grid point (weight 1 on one corner) the label there. Outside: 0.
//            The input must hold integer values (requireIntegerLabels).
// Sizes: the input needs at least 2 voxels along every axis (Linear's cell); 3D images only.
// Precision: the point chain, the field interpolation and the input interpolation in double; the
// fields and images are float32.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/Affine.hpp"
#include "core/Boundary.hpp"
#include "core/Image.hpp"
#include "core/Trilinear.hpp"

namespace kortex {

enum class ApplyInterpolation { Linear, Nearest, Label };
ApplyInterpolation parseApplyInterpolation(std::string const& s);  // "linear"|"nearest"|"label"
const char* toString(ApplyInterpolation i);

// ---- the chain (host) --------------------------------------------------------------------------

enum class ChainKind { Affine, Field };

struct ChainTransform {
  ChainKind kind = ChainKind::Affine;
  Matrix4 matrix{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // Affine
  VectorField<Kokkos::HostSpace> field;                            // Field (3 components, 3D grid)
  std::string name;  // the source, for messages ("transform 2 ('a.mat')")
};

// The transforms in antsApplyTransforms' order: transforms.front() is applied to the point first.
struct TransformChain {
  std::vector<ChainTransform> transforms;

  // Throws InvalidArgument: no transform, more than kMaxApplyTransforms, an affine that is not
  // finite or singular (|det A| <= kApplySingularDet max|A_ij|^3, or last row not 0 0 0 1), a field
  // that is not a 3D grid of 3 components matching its data or holds NaN/Inf.
  void validate() const;
  // Floats of all fields, packed in listing order (the device buffer of the Kokkos back end).
  std::int64_t fieldFloats() const;
};

inline constexpr int kMaxApplyTransforms = 16;
// Relative determinant below which an affine counts as singular (a double matrix of rounding
// error ~1e-16 keeps |det| / max|A|^3 far above it unless it is degenerate).
inline constexpr double kApplySingularDet = 1e-12;

// Inverse of an affine (y = A x + a -> x = A^-1 (y - a)); InvalidArgument when singular.
Matrix4 inverseAffine(Matrix4 const& m, std::string const& what);
// The same for an AffineTransform (y = M (x - c) + c + t = M x + (c + t - M c)): the map with
// centre 0 of inverseAffine's result.
AffineTransform inverseAffine(AffineTransform const& t, std::string const& what);

// Throws InvalidArgument unless every voxel of `img` holds an integer value ("label interpolation
// needs a label map of integer values; <what> holds 0.5 at (x, y, z)").
void requireIntegerLabels(HostImage const& img, std::string const& what);

// ---- device coefficients -----------------------------------------------------------------------

struct ApplyStep {
  int kind;           // 0: affine `map`; 1: field, `map` = world -> its continuous index
  AffineCoeffs map;   // centre 0
  int n[3];           // field: (nx, ny, nz)
  std::int64_t offset;  // field: first float of its component 0 in the packed buffer
};

struct ApplyChainCoeffs {
  int count;  // steps, in application order (= listing order: step[0] = the first listed transform)
  ApplyStep step[kMaxApplyTransforms];
  AffineCoeffs referenceToWorld, worldToInput;
};

// The coefficients of a validated chain for a reference grid and an input grid; fields packed in
// listing order (TransformChain::fieldFloats).
ApplyChainCoeffs applyChainCoeffs(TransformChain const& chain, Geometry const& reference, Geometry const& input);

// ---- per-point maths (shared by every Kokkos variant) ---------------------------------------------

// floor for |v| well inside int range (callers check the box first).
KOKKOS_INLINE_FUNCTION int applyFloor(double v) {
  int i = static_cast<int>(v);
  if (static_cast<double>(i) > v) --i;
  return i;
}

// Inside the nearest-voxel box -0.5 <= q_a < n_a - 0.5 (false for NaN).
KOKKOS_INLINE_FUNCTION bool applyInsideHalf(const double* q, int nx, int ny, int nz) {
  return q[0] >= -0.5 && q[0] < nx - 0.5 && q[1] >= -0.5 && q[1] < ny - 0.5 && q[2] >= -0.5 && q[2] < nz - 0.5;
}

// The displacement d(x) of a field step at the world point x (spec above); `fields` is the packed buffer.
KOKKOS_INLINE_FUNCTION void applyFieldDisplacement(const float* fields, ApplyStep const& s, const double* x, double* d) {
  double c[3];
  affineMap(s.map, x, c);
  d[0] = d[1] = d[2] = 0.0;
  if (!applyInsideHalf(c, s.n[0], s.n[1], s.n[2])) return;
  const TrilinearCell<double> k = trilinearCell(c[0], c[1], c[2], s.n[0], s.n[1], s.n[2]);
  const std::int64_t nx = s.n[0], ny = s.n[1], plane = nx * ny, comp = plane * s.n[2];
  for (int cz = 0; cz < 2; ++cz)
    for (int cy = 0; cy < 2; ++cy)
      for (int cx = 0; cx < 2; ++cx) {
        const double w = trilinearWeight(k.t, cx, cy, cz);
        const std::int64_t at =
            s.offset + (cz ? k.hi[2] : k.lo[2]) * plane + (cy ? k.hi[1] : k.lo[1]) * nx + (cx ? k.hi[0] : k.lo[0]);
        d[0] += w * fields[at];
        d[1] += w * fields[at + comp];
        d[2] += w * fields[at + 2 * comp];
      }
}

// The input's continuous index q of reference voxel (x, y, z) through the chain.
KOKKOS_INLINE_FUNCTION void applyChainPoint(ApplyChainCoeffs const& c, const float* fields, int x, int y, int z,
                                            double* q) {
  const double p[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
  double w[3], v[3];
  affineMap(c.referenceToWorld, p, w);
  for (int k = 0; k < c.count; ++k) {
    ApplyStep const& s = c.step[k];
    if (s.kind == 0) {
      affineMap(s.map, w, v);
      w[0] = v[0], w[1] = v[1], w[2] = v[2];
    } else {
      applyFieldDisplacement(fields, s, w, v);
      w[0] += v[0], w[1] += v[1], w[2] += v[2];
    }
  }
  affineMap(c.worldToInput, w, q);
}

// Linear: register's sampling (core/Affine.hpp), 0 outside the closed box.
template <class View>
KOKKOS_INLINE_FUNCTION float applySampleLinear(View const& img, const double* q) {
  const int nz = static_cast<int>(img.extent(0)), ny = static_cast<int>(img.extent(1)), nx = static_cast<int>(img.extent(2));
  if (!affineInside(q, nx, ny, nz)) return 0.0f;
  return static_cast<float>(affineSample(img, q, nullptr));
}

template <class View>
KOKKOS_INLINE_FUNCTION float applySampleNearest(View const& img, const double* q) {
  const int nz = static_cast<int>(img.extent(0)), ny = static_cast<int>(img.extent(1)), nx = static_cast<int>(img.extent(2));
  if (!applyInsideHalf(q, nx, ny, nz)) return 0.0f;
  return img(clampIndex(applyFloor(q[2] + 0.5), nz), clampIndex(applyFloor(q[1] + 0.5), ny),
             clampIndex(applyFloor(q[0] + 0.5), nx));
}

template <class View>
KOKKOS_INLINE_FUNCTION float applySampleLabel(View const& img, const double* q) {
  const int n[3] = {static_cast<int>(img.extent(2)), static_cast<int>(img.extent(1)), static_cast<int>(img.extent(0))};
  if (!applyInsideHalf(q, n[0], n[1], n[2])) return 0.0f;
  const TrilinearCell<double> c = trilinearCell(q[0], q[1], q[2], n[0], n[1], n[2]);
  float label[8];
  double weight[8];
  trilinearCorners(img, c.lo, c.hi, label);
  for (int k = 0; k < 8; ++k) weight[k] = trilinearWeight(c.t, k & 1, (k >> 1) & 1, (k >> 2) & 1);
  float best = label[0];
  double bestSum = -1.0;
  for (int i = 0; i < 8; ++i) {
    double s = 0.0;
    for (int j = 0; j < 8; ++j)
      if (label[j] == label[i]) s += weight[j];
    if (s > bestSum || (s == bestSum && label[i] < best)) {
      best = label[i];
      bestSum = s;
    }
  }
  return best;
}

}  // namespace kortex
