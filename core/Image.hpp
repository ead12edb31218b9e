// Images and vector fields on Kokkos Views with physical metadata.
//
// Storage: one View<float***, LayoutRight> with extents (nz, ny, nx): x is the fastest index,
// so consecutive threads along x read consecutive addresses. A 2D image has nz == 1 and
// dimension == 2; a volume with a singleton third dimension IS a 2D image (filters use 2D
// windows on it).
//
// Physical space follows ITK's convention (LPS world coordinates):
//   world = origin + direction * diag(spacing) * (i, j, k)
// with direction a 3x3 matrix stored row-major whose COLUMNS are the unit axis directions.
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "core/Errors.hpp"

namespace kortex {

using Index = std::int64_t;

struct Geometry {
  int dimension = 3;                                  // 2 or 3
  std::array<Index, 3> size{1, 1, 1};                 // (nx, ny, nz); nz == 1 for 2D
  std::array<double, 3> spacing{1.0, 1.0, 1.0};       // mm
  std::array<double, 3> origin{0.0, 0.0, 0.0};        // mm, LPS
  std::array<double, 9> direction{1, 0, 0, 0, 1, 0, 0, 0, 1};  // row-major, columns = axes

  Index nx() const { return size[0]; }
  Index ny() const { return size[1]; }
  Index nz() const { return size[2]; }
  Index numVoxels() const { return size[0] * size[1] * size[2]; }

  // Same grid: sizes equal, spacing/origin/direction equal within `tol` (relative to spacing).
  bool sameGrid(Geometry const& other, double tol = 1e-6) const;
  // Throws InvalidArgument if sizes are non-positive, dimension is not 2/3, a 2D geometry
  // has nz != 1, spacing is not positive and finite, origin or direction has a non-finite
  // entry (requireFinitePlacement), or direction is singular.
  void validate() const;
  // The finiteness part of validate(), for a placement read before a Geometry is made (e.g. each
  // transform a NIfTI header declares): "image origin must be finite, got (nan, 0, 0)" /
  // "image direction must be finite, got (...)".
  static void requireFinitePlacement(std::array<double, 3> const& origin, std::array<double, 9> const& direction);

  static Geometry make2D(Index nx, Index ny);
  static Geometry make3D(Index nx, Index ny, Index nz);
  // A 3D size with nz == 1 is normalised to a 2D geometry.
  static Geometry fromSize(Index nx, Index ny, Index nz);
};

std::string describe(Geometry const& g);  // "2D 256x256, spacing 1x1 mm"
// World (LPS, mm) point of the continuous index p = (i, j, k): origin + direction diag(spacing) p.
std::array<double, 3> indexToWorld(Geometry const& g, std::array<double, 3> const& p);

// 3x3 matrices, row-major: the one place their determinant and inverse are written.
using Matrix3 = std::array<double, 9>;
Matrix3 indexToWorldMatrix(Geometry const& g);  // direction diag(spacing): index -> world, without the origin
double determinant3(Matrix3 const& a);
// The inverse by cofactors; the caller has checked that the determinant is non-zero and finite
// (each caller has its own singularity rule and message).
Matrix3 inverse3(Matrix3 const& a);

template <class MemorySpace = Kokkos::HostSpace>
using ImageView = Kokkos::View<float***, Kokkos::LayoutRight, MemorySpace>;
template <class MemorySpace = Kokkos::HostSpace>
using ConstImageView = Kokkos::View<const float***, Kokkos::LayoutRight, MemorySpace>;

// A scalar image: data + geometry + free-form metadata that readers fill and writers use
// (e.g. "nifti.qform_code", "dicom.modality").
template <class MemorySpace = Kokkos::HostSpace>
struct Image {
  using memory_space = MemorySpace;
  using view_type = ImageView<MemorySpace>;

  view_type data;
  Geometry geometry;
  std::map<std::string, std::string> metadata;

  Image() = default;
  Image(std::string const& label, Geometry const& g) : geometry(g) {
    g.validate();
    data = view_type(label, g.nz(), g.ny(), g.nx());
  }

  Index numVoxels() const { return geometry.numVoxels(); }
  int dimension() const { return geometry.dimension; }
};

using HostImage = Image<Kokkos::HostSpace>;

// The one NaN/Inf scan of a job's input (pipeline/ entries; the kernels assume finite values).
// Throws InvalidArgument naming `what` and the first non-finite voxel (x, y, z) in memory order.
void requireFinite(HostImage const& img, std::string const& what);

// Copy an image into another memory space (deep copy of the data, metadata kept).
template <class DstSpace, class SrcSpace>
Image<DstSpace> copyTo(Image<SrcSpace> const& src, std::string const& label) {
  Image<DstSpace> dst;
  dst.geometry = src.geometry;
  dst.metadata = src.metadata;
  dst.data = ImageView<DstSpace>(label, src.data.extent(0), src.data.extent(1), src.data.extent(2));
  Kokkos::deep_copy(dst.data, src.data);
  return dst;
}

// Vector field: ONE allocation, structure of arrays. Extents (ncomp, nz, ny, nx); component c
// starts at offset c * nz * ny * nx, and component(c) is a contiguous LayoutRight 3D View.
template <class MemorySpace = Kokkos::HostSpace>
struct VectorField {
  using memory_space = MemorySpace;
  using view_type = Kokkos::View<float****, Kokkos::LayoutRight, MemorySpace>;

  view_type data;
  Geometry geometry;

  VectorField() = default;
  VectorField(std::string const& label, Geometry const& g, int components = -1) : geometry(g) {
    g.validate();
    const int nc = components > 0 ? components : g.dimension;
    data = view_type(label, nc, g.nz(), g.ny(), g.nx());
  }

  int components() const { return static_cast<int>(data.extent(0)); }
  auto component(int c) const {
    return Kokkos::subview(data, c, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  }
};

}  // namespace kortex
