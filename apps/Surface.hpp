// `kortex surface denoise IN OUT`: level-set NLM surface denoising (core/SurfaceNlm.hpp).
//
// Input (IN):
//   * a triangle mesh (.vtp .stl .obj; needs a VTK build): must be closed and manifold; it is
//     voxelised on an axis-aligned grid of --spacing (world units) with a margin of band + patch
//     radius + 2 voxels (io/Mesh.hpp meshToMask), then as a mask;
//   * an image, read as --input:
//       mask  (default) binary 0/1 volume; with --label L inside = voxels equal to L, with
//             --threshold T inside = voxels >= T (e.g. a white-matter probability map at 0.5);
//       phi   already a signed distance (phi < 0 inside), used as is.
//   A mask becomes phi by the exact Euclidean distance transform of the spec (CPU,
//   reference_cpu/SurfaceNlm.hpp signedDistanceFromMask).
// Outputs: OUT, the denoised phi on the same grid (any image format Kortex writes), and with
// --out-mesh FILE its zero level set (.vtp .stl .obj, VTK flying edges, world coordinates). Both
// paths are checked before any work; both are written all or none (pipeline/Surface.hpp
// SurfaceJob: a failure leaves the files that were there before).
// Refused with one message: a non-binary mask, a mask with no inside or no outside, an open or
// non-manifold mesh, an empty band, m >= N, and a band whose search does not fit in the memory
// available (device memory for Kokkos, MemAvailable for the CPU; --max-memory overrides), with
// the size it would need.
#pragma once

#include <cstdint>
#include <string>

#include "core/SurfaceNlm.hpp"

namespace kortex::app {

struct SurfaceOptions {
  std::string input, output, outMesh;
  std::string inputKind = "mask";   // mask | phi
  double label = 0.0;               // with labelGiven: inside = voxels equal to it
  double threshold = 0.0;           // with thresholdGiven: inside = voxels >= it (not with a label)
  bool labelGiven = false, thresholdGiven = false;
  double spacing = 1.0;             // mesh input: voxel size, world units
  std::string backend = "auto";
  std::string variant;              // empty: SurfaceNlmParams' default
  double maxMemoryMiB = 0.0;        // > 0: cap instead of what the device / host reports
  bool quiet = false;
  SurfaceNlmParams params;
};

int cmdSurfaceDenoise(SurfaceOptions const& o);

}  // namespace kortex::app
