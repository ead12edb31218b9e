// Triangle meshes: closedness check and mesh -> mask voxelisation (plain C++, every build), and the
// dispatch of mesh reading, writing and zero-level-set extraction to VTK (VtkFormats.cpp).
//
// This file is compiled with floating-point contraction off (io/CMakeLists.txt): the edge tests of
// meshToMask rely on a * b - b * a being exactly 0, which a fused multiply-add would break.
#include "io/Mesh.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <sstream>
#include <utility>

#include <kortex/Config.hpp>

#include "io/IoDetail.hpp"

namespace kortex::io {

namespace {

using namespace detail;

constexpr bool kHaveVtk = KORTEX_HAVE_VTK != 0;

bool isMeshExtension(std::string const& ext) {
  return ext == ".vtp" || ext == ".stl" || ext == ".obj";
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

// Index range and finiteness of the points the triangles use. `what` starts the message.
void checkMesh(TriangleMesh const& mesh, std::string const& what) {
  if (mesh.triangles.empty())
    throw InvalidArgument(what + " is empty (no triangles); a surface needs a closed, manifold "
                                 "triangle mesh");
  const auto np = static_cast<std::int64_t>(mesh.points.size());
  for (std::size_t t = 0; t < mesh.triangles.size(); ++t)
    for (std::int64_t v : mesh.triangles[t]) {
      if (v < 0 || v >= np)
        throw InvalidArgument(what + ": triangle " + std::to_string(t) + " refers to point " +
                              std::to_string(v) + ", but the mesh has " + std::to_string(np) +
                              " points");
      auto const& p = mesh.points[static_cast<std::size_t>(v)];
      if (!std::isfinite(p[0]) || !std::isfinite(p[1]) || !std::isfinite(p[2]))
        throw InvalidArgument(what + ": point " + std::to_string(v) +
                              " has a non-finite coordinate");
    }
}

// ---- meshToMask: even-odd parity along x with simulation of simplicity -----------------------

struct P2 {
  double y, z;
};

// Side of the perturbed point p + (eps, eps^2) relative to the directed edge u -> v (projected on
// the yz plane): +1 left, -1 right, 0 only for a degenerate (zero-length) edge. `value` receives
// the unperturbed edge function. The endpoints are put in lexicographic (y, z) order first, so
// the two triangles sharing an edge compute bit-identical values (negated for the other
// direction), and at p equal to an endpoint the value is exactly 0.
inline int edgeSide(P2 u, P2 v, P2 p, double& value) {
  const bool swap = v.y < u.y || (v.y == u.y && v.z < u.z);
  const P2 a = swap ? v : u;
  const P2 b = swap ? u : v;
  const double dy = b.y - a.y, dz = b.z - a.z;
  const double lhs = dy * (p.z - a.z);
  const double rhs = dz * (p.y - a.y);
  double e = lhs - rhs;
  int s;
  if (e > 0) {
    s = 1;
  } else if (e < 0) {
    s = -1;
  } else {
    // e(p + (eps, eps^2)) = e - dz eps + dy eps^2.
    if (dz != 0)
      s = dz > 0 ? -1 : 1;
    else
      s = dy > 0 ? 1 : (dy < 0 ? -1 : 0);
    e = 0.0;
  }
  if (swap) {
    s = -s;
    e = -e;
  }
  value = e;
  return s;
}

}  // namespace

bool isMeshPath(std::filesystem::path const& path) { return isMeshExtension(extensionOf(path)); }

void requireClosed(TriangleMesh const& mesh, std::string const& name) {
  const std::string what = "mesh '" + name + "'";
  checkMesh(mesh, what);
  // Merge points with exactly equal coordinates.
  const std::size_t np = mesh.points.size();
  std::vector<std::int64_t> order(np);
  for (std::size_t i = 0; i < np; ++i) order[i] = static_cast<std::int64_t>(i);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return mesh.points[a] < mesh.points[b] || (mesh.points[a] == mesh.points[b] && a < b);
  });
  std::vector<std::int64_t> canon(np);
  for (std::size_t r = 0; r < np; ++r) {
    const std::int64_t i = order[r];
    canon[i] = (r > 0 && mesh.points[order[r - 1]] == mesh.points[i]) ? canon[order[r - 1]] : i;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> edges;
  edges.reserve(mesh.triangles.size() * 3);
  std::size_t degenerate = 0;
  for (auto const& t : mesh.triangles) {
    const std::int64_t a = canon[t[0]], b = canon[t[1]], c = canon[t[2]];
    if (a == b || b == c || c == a) {
      ++degenerate;
      continue;
    }
    edges.emplace_back(std::min(a, b), std::max(a, b));
    edges.emplace_back(std::min(b, c), std::max(b, c));
    edges.emplace_back(std::min(c, a), std::max(c, a));
  }
  if (degenerate > 0)
    throw InvalidArgument(what + " has " + std::to_string(degenerate) +
                          " degenerate triangles (two corners at the same point); a surface "
                          "needs a closed, manifold triangle mesh");
  std::sort(edges.begin(), edges.end());
  std::size_t boundary = 0, nonManifold = 0;
  for (std::size_t i = 0; i < edges.size();) {
    std::size_t j = i + 1;
    while (j < edges.size() && edges[j] == edges[i]) ++j;
    const std::size_t count = j - i;
    if (count == 1) ++boundary;
    if (count > 2) ++nonManifold;
    i = j;
  }
  if (boundary > 0 || nonManifold > 0)
    throw InvalidArgument(what + " is not closed: " + std::to_string(boundary) +
                          " boundary edges, " + std::to_string(nonManifold) +
                          " non-manifold edges (a surface needs a closed, manifold triangle mesh)");
}

HostImage meshToMask(TriangleMesh const& mesh, double spacing, int marginVoxels,
                     std::int64_t maxVoxels) {
  if (!(spacing > 0) || !std::isfinite(spacing))
    throw InvalidArgument("meshToMask: the voxel spacing must be positive and finite (got " +
                          num(spacing) + ")");
  if (marginVoxels < 0)
    throw InvalidArgument("meshToMask: the margin must be >= 0 voxels (got " +
                          std::to_string(marginVoxels) + ")");
  checkMesh(mesh, "meshToMask: the mesh");

  // Bounds of the points the triangles use.
  std::array<double, 3> lo{}, hi{};
  lo.fill(std::numeric_limits<double>::infinity());
  hi.fill(-std::numeric_limits<double>::infinity());
  for (auto const& t : mesh.triangles)
    for (std::int64_t v : t)
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], mesh.points[v][a]);
        hi[a] = std::max(hi[a], mesh.points[v][a]);
      }
  std::array<double, 3> nd{};
  double total = 1.0;
  for (int a = 0; a < 3; ++a) {
    nd[a] = std::ceil((hi[a] - lo[a]) / spacing) + 1.0 + 2.0 * marginVoxels;
    total *= nd[a];
  }
  if (!(total <= static_cast<double>(maxVoxels)))
    throw InvalidArgument("meshToMask: a grid of spacing " + num(spacing) +
                          " covering the mesh would need " + num(nd[0]) + "x" + num(nd[1]) + "x" +
                          num(nd[2]) + " = " + num(total) + " voxels, more than the limit of " +
                          std::to_string(maxVoxels) + "; use a larger spacing");
  const Index nx = static_cast<Index>(nd[0]), ny = static_cast<Index>(nd[1]),
              nz = static_cast<Index>(nd[2]);
  Geometry g = Geometry::make3D(nx, ny, nz);
  g.spacing = {spacing, spacing, spacing};
  for (int a = 0; a < 3; ++a) g.origin[a] = 0.5 * (lo[a] + hi[a]) - 0.5 * (nd[a] - 1.0) * spacing;

  // Voxel-centre coordinates, computed once so that every triangle sees the same values.
  std::vector<double> xc(nx), yc(ny), zc(nz);
  for (Index i = 0; i < nx; ++i) xc[i] = g.origin[0] + static_cast<double>(i) * spacing;
  for (Index j = 0; j < ny; ++j) yc[j] = g.origin[1] + static_cast<double>(j) * spacing;
  for (Index k = 0; k < nz; ++k) zc[k] = g.origin[2] + static_cast<double>(k) * spacing;

  // Lines of voxel centres [lo, hi] in which a coordinate range can fall (one line of slack on
  // each side: the exact test below decides).
  auto lineRange = [&](double cmin, double cmax, int axis, Index n, Index& first, Index& last) {
    first = static_cast<Index>(std::floor((cmin - g.origin[axis]) / spacing)) - 1;
    last = static_cast<Index>(std::ceil((cmax - g.origin[axis]) / spacing)) + 1;
    first = std::max<Index>(first, 0);
    last = std::min<Index>(last, n - 1);
  };

  std::vector<std::vector<double>> crossings(static_cast<std::size_t>(ny * nz));
  for (auto const& t : mesh.triangles) {
    auto const& A = mesh.points[t[0]];
    auto const& B = mesh.points[t[1]];
    auto const& C = mesh.points[t[2]];
    const P2 a{A[1], A[2]}, b{B[1], B[2]}, c{C[1], C[2]};
    Index j0, j1, k0, k1;
    lineRange(std::min({a.y, b.y, c.y}), std::max({a.y, b.y, c.y}), 1, ny, j0, j1);
    lineRange(std::min({a.z, b.z, c.z}), std::max({a.z, b.z, c.z}), 2, nz, k0, k1);
    for (Index k = k0; k <= k1; ++k)
      for (Index j = j0; j <= j1; ++j) {
        const P2 p{yc[j], zc[k]};
        double wc, wa, wb;
        const int sc = edgeSide(a, b, p, wc);  // opposite C
        if (sc == 0) continue;
        const int sa = edgeSide(b, c, p, wa);  // opposite A
        if (sa != sc) continue;
        const int sb = edgeSide(c, a, p, wb);  // opposite B
        if (sb != sc) continue;
        // Barycentric weights of the (unperturbed) point: all of one sign or zero.
        // Clamped to the triangle's x range, so a face of constant x crosses exactly there.
        const double w = wa + wb + wc;
        double x = w != 0 ? (wa * A[0] + wb * B[0] + wc * C[0]) / w : (A[0] + B[0] + C[0]) / 3.0;
        x = std::min(std::max(x, std::min({A[0], B[0], C[0]})), std::max({A[0], B[0], C[0]}));
        crossings[static_cast<std::size_t>(k * ny + j)].push_back(x);
      }
  }

  HostImage mask("kortex::io::meshToMask", g);  // zero-initialised
  float* out = mask.data.data();
  for (Index k = 0; k < nz; ++k)
    for (Index j = 0; j < ny; ++j) {
      auto& xs = crossings[static_cast<std::size_t>(k * ny + j)];
      if (xs.empty()) continue;
      if (xs.size() % 2 != 0)
        throw InvalidArgument(
            "meshToMask: the ray along x through voxel line (y " + std::to_string(j) + ", z " +
            std::to_string(k) + ") crosses the surface " + std::to_string(xs.size()) +
            " times (an odd number): the mesh is not closed (see requireClosed)");
      std::sort(xs.begin(), xs.end());
      std::size_t before = 0;  // crossings at x' <= x
      float* row = out + (k * ny + j) * nx;
      for (Index i = 0; i < nx; ++i) {
        while (before < xs.size() && xs[before] <= xc[i]) ++before;
        row[i] = (before % 2 == 1) ? 1.0f : 0.0f;
      }
    }
  return mask;
}

TriangleMesh readMesh(std::filesystem::path const& path) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  requireReadableFile(path);
  const std::string ext = extensionOf(path);
  if (!isMeshExtension(ext))
    readError(path, (ext.empty() ? std::string("no file extension")
                                 : "unknown mesh extension '" + ext + "'") +
                        "; Kortex reads meshes from .vtp, .stl, .obj");
  if (!kHaveVtk)
    throw Unsupported("cannot read '" + path.string() + "': mesh input (" + ext +
                      ") needs a Kortex build with VTK and this one has none");
  if (fileSize(path) == 0) readError(path, "the file is empty (0 bytes)");
#if KORTEX_HAVE_VTK
  TriangleMesh mesh = readMeshVtk(path, ext);
  if (mesh.triangles.empty()) readError(path, "the file holds no triangles (no polygons)");
  return mesh;
#else
  return {};
#endif
}

void writeMesh(TriangleMesh const& mesh, std::filesystem::path const& path) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  const std::string ext = extensionOf(path);
  if (!isMeshExtension(ext))
    writeError(path, (ext.empty() ? std::string("no file extension")
                                  : "unknown mesh extension '" + ext + "'") +
                         "; Kortex writes meshes as .vtp, .stl, .obj");
  if (!kHaveVtk)
    throw Unsupported("cannot write '" + path.string() + "': mesh output (" + ext +
                      ") needs a Kortex build with VTK and this one has none");
  checkMesh(mesh, "cannot write '" + path.string() + "': the mesh");
  AtomicOutput out(path);
  const std::string name = path.filename().string();
#if KORTEX_HAVE_VTK
  writeMeshVtk(mesh, out.temporary(name), path, ext);
  out.commit({name});
#endif
}

namespace {

// Trilinear interpolation of phi at index-space point p, clamped to the grid.
[[maybe_unused]] double sampleTrilinear(float const* v, Index nx, Index ny, Index nz, double x, double y, double z) {
  auto clampc = [](double c, Index n) { return std::min(std::max(c, 0.0), double(n - 1)); };
  x = clampc(x, nx);
  y = clampc(y, ny);
  z = clampc(z, nz);
  const Index i0 = std::min<Index>(static_cast<Index>(x), std::max<Index>(nx - 2, 0));
  const Index j0 = std::min<Index>(static_cast<Index>(y), std::max<Index>(ny - 2, 0));
  const Index k0 = std::min<Index>(static_cast<Index>(z), std::max<Index>(nz - 2, 0));
  const Index i1 = std::min(i0 + 1, nx - 1), j1 = std::min(j0 + 1, ny - 1),
              k1 = std::min(k0 + 1, nz - 1);
  const double fx = x - i0, fy = y - j0, fz = z - k0;
  auto at = [&](Index i, Index j, Index k) { return double(v[(k * ny + j) * nx + i]); };
  const double c00 = at(i0, j0, k0) * (1 - fx) + at(i1, j0, k0) * fx;
  const double c10 = at(i0, j1, k0) * (1 - fx) + at(i1, j1, k0) * fx;
  const double c01 = at(i0, j0, k1) * (1 - fx) + at(i1, j0, k1) * fx;
  const double c11 = at(i0, j1, k1) * (1 - fx) + at(i1, j1, k1) * fx;
  const double c0 = c00 * (1 - fy) + c10 * fy;
  const double c1 = c01 * (1 - fy) + c11 * fy;
  return c0 * (1 - fz) + c1 * fz;
}

[[maybe_unused]] double det3(std::array<double, 9> const& m) {
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
         m[2] * (m[3] * m[7] - m[4] * m[6]);
}

}  // namespace

TriangleMesh zeroLevelSet(HostImage const& phi) {
  const Geometry& g = phi.geometry;
  try {
    g.validate();
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("zeroLevelSet: invalid geometry of phi: ") + e.what());
  }
  if (g.dimension != 3 || g.nz() < 2)
    throw InvalidArgument("zeroLevelSet: phi must be a 3D image (got " + describe(g) + ")");
  if (!phi.data.data() || phi.data.extent(0) != static_cast<std::size_t>(g.nz()) ||
      phi.data.extent(1) != static_cast<std::size_t>(g.ny()) ||
      phi.data.extent(2) != static_cast<std::size_t>(g.nx()))
    throw InvalidArgument("zeroLevelSet: phi's data does not match its geometry (" + describe(g) +
                          ")");
  const float* v = phi.data.data();
  for (Index i = 0; i < g.numVoxels(); ++i)
    if (!std::isfinite(v[i]))
      throw InvalidArgument("zeroLevelSet: phi has a non-finite value at voxel " +
                            std::to_string(i));
  if (!kHaveVtk)
    throw Unsupported(
        "zeroLevelSet: extracting the zero level set needs a Kortex build with VTK and this one "
        "has none");
#if KORTEX_HAVE_VTK
  TriangleMesh m;
  {
    std::lock_guard<std::recursive_mutex> lock(ioMutex());
    m = contourZeroIndexSpace(phi);
  }
  if (m.triangles.empty())
    throw InvalidArgument("zeroLevelSet: phi has an empty zero level set (no sign change between "
                          "neighbouring voxels; " +
                          describe(g) + ")");
  // Orientation: outward = along grad phi (phi < 0 inside). Vote over the triangles with the
  // gradient of the trilinear interpolant at each centroid (central differences, step 1/2).
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  double vote = 0.0;
  for (auto const& t : m.triangles) {
    auto const& a = m.points[t[0]];
    auto const& b = m.points[t[1]];
    auto const& c = m.points[t[2]];
    const double u[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
    const double w[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
    const double n[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2],
                         u[0] * w[1] - u[1] * w[0]};
    const double p[3] = {(a[0] + b[0] + c[0]) / 3, (a[1] + b[1] + c[1]) / 3,
                         (a[2] + b[2] + c[2]) / 3};
    constexpr double h = 0.5;
    double grad[3];
    for (int d = 0; d < 3; ++d) {
      double q0[3] = {p[0], p[1], p[2]}, q1[3] = {p[0], p[1], p[2]};
      q0[d] -= h;
      q1[d] += h;
      grad[d] = (sampleTrilinear(v, nx, ny, nz, q1[0], q1[1], q1[2]) -
                 sampleTrilinear(v, nx, ny, nz, q0[0], q0[1], q0[2])) /
                (2 * h);
    }
    vote += n[0] * grad[0] + n[1] * grad[1] + n[2] * grad[2];
  }
  // A reflection in the direction matrix reverses the orientation in world space.
  const bool flip = (vote < 0) != (det3(g.direction) < 0);
  if (flip)
    for (auto& t : m.triangles) std::swap(t[1], t[2]);
  // Index -> world: origin + direction * diag(spacing) * p.
  const auto& D = g.direction;
  for (auto& p : m.points) {
    const double s[3] = {p[0] * g.spacing[0], p[1] * g.spacing[1], p[2] * g.spacing[2]};
    for (int r = 0; r < 3; ++r)
      p[r] = g.origin[r] + D[r * 3 + 0] * s[0] + D[r * 3 + 1] * s[1] + D[r * 3 + 2] * s[2];
  }
  return m;
#else
  return {};
#endif
}

}  // namespace kortex::io
