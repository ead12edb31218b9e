// Triangle meshes for the level-set surface denoising (issue 5, core/SurfaceNlm.hpp): reading a
// closed surface, turning it into a binary mask (from which ref::signedDistanceFromMask or the
// Kokkos code builds phi), and writing the zero level set of a (denoised) phi back as a mesh.
//
// Formats (chosen from the file name's extension, case-insensitive):
//   .vtp  VTK XML poly data (read: polygons and triangle strips, triangulated; write: double
//         coordinates, appended binary, zlib);
//   .stl  STL (read: ASCII or binary; write: binary, so coordinates become float32);
//   .obj  Wavefront OBJ (read: faces, triangulated; write: "v" lines in full double precision
//         and "f" lines).
// Precision: .vtp round-trips doubles exactly; VTK's STL and OBJ readers return float32
// coordinates (so .stl and .obj round trips agree to float precision).
// Reading, writing and zeroLevelSet go through VTK: they exist only in builds with VTK
// (<kortex/Config.hpp> KORTEX_HAVE_VTK == 1) and throw kortex::Unsupported otherwise.
// isMeshPath, requireClosed and meshToMask are plain C++ and work in every build.
// VTK is an implementation detail of kortex_io and never appears in this header.
//
// Errors: IoError naming the file for anything about files (missing, unknown extension, corrupt,
// no triangles, unwritable target); InvalidArgument for a mesh or image that is not acceptable
// (open surface, bad index, empty level set, grid too large). Writes are atomic as in
// io/ImageIO.hpp: the file is written into a private temporary directory next to the target and
// renamed into place, so a failed write leaves neither a partial nor a temporary file.
// All calls that use VTK take kortex_io's internal lock (thread-safe, not concurrent).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "core/Image.hpp"

namespace kortex::io {

struct TriangleMesh {
  std::vector<std::array<double, 3>> points;           // world coordinates as stored in the file
  std::vector<std::array<std::int64_t, 3>> triangles;  // indices into points
};

// True for .vtp, .stl and .obj (case-insensitive), in every build (with or without VTK).
bool isMeshPath(std::filesystem::path const& path);

// Reads a surface mesh. Polygons and strips are triangulated; vertices and lines are ignored;
// points are returned as stored (STL readers merge exactly coincident vertices). Throws IoError
// naming the file (missing, unknown extension, corrupt, no triangles); Unsupported without VTK.
TriangleMesh readMesh(std::filesystem::path const& path);

// Throws InvalidArgument
//   "mesh '<name>' is not closed: <b> boundary edges, <n> non-manifold edges (a surface needs a
//    closed, manifold triangle mesh)"
// unless every edge is shared by exactly two triangles, after merging points with exactly equal
// coordinates. Also refuses an empty mesh (no triangles), a triangle index out of range, a
// non-finite point, and a degenerate triangle (two corners at the same merged point).
void requireClosed(TriangleMesh const& mesh, std::string const& name);

// Binary mask (float 0/1) of the inside of a closed mesh on an axis-aligned grid:
//   direction = identity, spacing = `spacing` on every axis (world units of the mesh),
//   per axis a: n_a = ceil((max_a - min_a) / spacing) + 1 + 2 marginVoxels voxels, centred on the
//   bounding box of the points the triangles use: origin_a = (min_a + max_a) / 2
//   - (n_a - 1) / 2 * spacing. So the voxel centres cover the bounds plus marginVoxels on each side.
// Inside rule (even-odd parity, independent of triangle orientation): for each (j, k) line of voxel
// centres a ray is cast along +x; the voxel centre (x, y, z) is inside iff an odd number of the
// ray's triangle crossings lie at x' <= x. Crossings are found robustly by simulation of
// simplicity: the ray's (y, z) is moved by (+eps, +eps^2), so a ray through an edge or a vertex is
// counted in exactly one of the triangles that share it, and a triangle parallel to x never
// counts. Edge tests use the edge's endpoints in a fixed (coordinate) order, so two triangles
// sharing an edge compute bit-identical values. Consequences: the mask is exact wherever a centre
// is not within rounding of the surface; a centre exactly on the surface follows the perturbation
// (an axis-aligned box whose faces pass through voxel centres gives the half-open box [min, max)
// on each axis, i.e. its volume in voxels).
// The mesh must be closed (requireClosed); a line with an odd number of crossings throws
// InvalidArgument. Also throws InvalidArgument if spacing <= 0 (or not finite), marginVoxels < 0,
// the mesh is empty or has an index out of range or a non-finite point, or the grid would need more
// than maxVoxels voxels (the message says how many). Kokkos must be initialised.
HostImage meshToMask(TriangleMesh const& mesh, double spacing, int marginVoxels,
                     std::int64_t maxVoxels = 512LL * 512 * 512);

// The zero level set of phi (phi < 0 inside, as in core/SurfaceNlm.hpp) as a triangle mesh in
// WORLD coordinates of phi's geometry: the contour at value 0 (vtkFlyingEdges3D, linear
// interpolation along grid edges) is computed in index space and each point p mapped to
// origin + direction * diag(spacing) * p, as everywhere in io/. Coincident points are merged and
// degenerate triangles dropped. Triangles are oriented with outward normals (right-hand rule,
// pointing from phi < 0 towards phi > 0; reflections in the direction matrix are accounted for).
// The mesh is closed when phi > 0 on the grid's boundary voxels. Throws InvalidArgument for a 2D
// or malformed phi, a non-finite value, or an empty zero level set; Unsupported without VTK.
TriangleMesh zeroLevelSet(HostImage const& phi);

// Writes .vtp, .stl (binary) or .obj, atomically. Throws IoError naming the file (unknown
// extension, unwritable target, writer failure), InvalidArgument for an empty mesh, an index out
// of range or a non-finite point; Unsupported without VTK (for a mesh extension).
void writeMesh(TriangleMesh const& mesh, std::filesystem::path const& path);

}  // namespace kortex::io
