// Displacement fields: NIfTI vector images in the ITK/ANTs convention (io/ImageIO.hpp says which,
// with its sources), and the index <-> world conversion of Kortex's registration field.
#include <array>
#include <mutex>
#include <string>

#include "io/ImageIO.hpp"
#include "io/IoDetail.hpp"

namespace kortex::io {

namespace {

using namespace detail;

constexpr int kComponents = 3;

void requireNiftiName(fs::path const& path, bool write) {
  const std::string ext = extensionOf(path);
  if (isNiftiExtension(ext)) return;
  const std::string what = "displacement fields are " + std::string(write ? "written" : "read") +
                           " as NIfTI (.nii, .nii.gz or a .hdr/.img pair), the format ITK and "
                           "ANTs use; got " +
                           (ext.empty() ? std::string("no extension") : "'" + ext + "'");
  if (write) writeError(path, what);
  readError(path, what);
}

// Why `f` cannot be a 3D, 3-component field on `g` (empty message: it can). dataMismatch: the
// data extents disagree with the geometry (InvalidArgument for writers, as for images).
struct FieldProblem {
  std::string message;
  bool dataMismatch = false;
};

FieldProblem fieldProblem(VectorField<Kokkos::HostSpace> const& f, Geometry const& g) {
  try {
    g.validate();
  } catch (InvalidArgument const& e) {
    return {std::string("invalid geometry: ") + e.what()};
  }
  if (g.dimension != 3)
    return {"Kortex displacement fields are 3D; the geometry is " + describe(g)};
  if (!f.data.data()) return {"the field has no data", true};
  if (f.components() != kComponents)
    return {"a 3D displacement field has 3 components (x, y, z); this one has " +
            std::to_string(f.components())};
  if (f.data.extent(1) != static_cast<std::size_t>(g.nz()) ||
      f.data.extent(2) != static_cast<std::size_t>(g.ny()) ||
      f.data.extent(3) != static_cast<std::size_t>(g.nx()))
    return {"field data (" + std::to_string(f.data.extent(3)) + "x" +
                std::to_string(f.data.extent(2)) + "x" + std::to_string(f.data.extent(1)) +
                ") does not match the geometry (" + describe(g) + ")",
            true};
  return {};
}


// out(x) = m * in(x) at every voxel (double arithmetic, float storage).
VectorField<Kokkos::HostSpace> applyMatrix(VectorField<Kokkos::HostSpace> const& in,
                                           Geometry const& g, std::array<double, 9> const& m,
                                           const char* label) {
  VectorField<Kokkos::HostSpace> out(label, g, kComponents);
  const std::size_t n = static_cast<std::size_t>(g.numVoxels());
  const float* src = in.data.data();
  float* dst = out.data.data();
  for (std::size_t i = 0; i < n; ++i) {
    const double v[3] = {src[i], src[n + i], src[2 * n + i]};
    for (int r = 0; r < 3; ++r)
      dst[r * n + i] =
          static_cast<float>(m[r * 3 + 0] * v[0] + m[r * 3 + 1] * v[1] + m[r * 3 + 2] * v[2]);
  }
  return out;
}

}  // namespace

void writeDisplacementField(VectorField<Kokkos::HostSpace> const& field,
                            std::filesystem::path const& path) {
  std::unique_lock<std::recursive_mutex> lock(ioMutex());
  requireNiftiName(path, true);
  const FieldProblem p = fieldProblem(field, field.geometry);
  if (p.dataMismatch) throw InvalidArgument("cannot write '" + path.string() + "': " + p.message);
  if (!p.message.empty()) writeError(path, p.message);
  AtomicOutput out(path);
  lock.unlock();  // held around the library's calls only (io/Nifti.cpp), as writeImage's NIfTI files
  out.commit(writeNiftiField(field, out));
}

VectorField<Kokkos::HostSpace> readDisplacementField(std::filesystem::path const& path) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  requireReadableFile(path);
  requireNiftiName(path, false);
  if (fileSize(path) == 0) readError(path, "the file is empty (0 bytes)");
  return readNiftiField(path);
}

VectorField<Kokkos::HostSpace> indexDisplacementToWorld(VectorField<Kokkos::HostSpace> const& u,
                                                        Geometry const& geometry) {
  const FieldProblem p = fieldProblem(u, geometry);
  if (!p.message.empty()) throw InvalidArgument("indexDisplacementToWorld: " + p.message);
  // d = -D diag(s) u: world(p - u) - world(p) for world(p) = origin + D diag(s) p.
  std::array<double, 9> m = indexToWorldMatrix(geometry);
  for (double& v : m) v = -v;
  return applyMatrix(u, geometry, m, "kortex::io::worldDisplacement");
}

VectorField<Kokkos::HostSpace> worldDisplacementToIndex(VectorField<Kokkos::HostSpace> const& d,
                                                        Geometry const& geometry) {
  const FieldProblem p = fieldProblem(d, geometry);
  if (!p.message.empty()) throw InvalidArgument("worldDisplacementToIndex: " + p.message);
  // u = -(D diag(s))^-1 d (validate() has checked that D is invertible).
  std::array<double, 9> m = inverse3(indexToWorldMatrix(geometry));
  for (double& v : m) v = -v;
  return applyMatrix(d, geometry, m, "kortex::io::indexDisplacement");
}

}  // namespace kortex::io
