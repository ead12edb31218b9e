// CPU reference of the level-set non-local-means surface denoising (specification:
// core/SurfaceNlm.hpp): OpenMP over band elements, double arithmetic, exact all-pairs search,
// written independently of the Kokkos code. It shares with gpu/ only the parameter struct and the
// conventions of the spec (band order, patch order, tie-breaking).
#pragma once

#include <cstdint>
#include <vector>

#include "core/Image.hpp"
#include "core/SurfaceNlm.hpp"

namespace kortex::ref {

// Exact squared Euclidean distance transform over a (nz, ny, nx) grid in x-fastest order:
// out[i] = min over voxels v with feature[v] != 0 of |x_i - x_v|^2 (index space), +inf when there
// is no feature voxel.
std::vector<double> squaredDistanceTransform(std::vector<std::uint8_t> const& feature, Index nx, Index ny,
                                             Index nz);

// phi of the spec from a binary mask (every voxel 0 or 1). Throws InvalidArgument for a mask with
// another value ("not binary"), NaN, or without an inside or an outside voxel.
HostImage signedDistanceFromMask(HostImage const& mask);

// Band of the spec: linear voxel indices with |phi| <= band, increasing.
std::vector<std::int64_t> narrowBand(HostImage const& phi, float band);

// Patch records: N x n^3 floats, row j = P(ids[j]) in the spec's order.
std::vector<float> bandPatches(HostImage const& phi, std::vector<std::int64_t> const& ids, int patch);

// Exact neighbours: for each element j, its m candidates in the spec's order (row j of `index`
// and `distance`, N x m). Throws InvalidArgument when m >= N.
struct SurfaceNeighbours {
  int m = 0;
  std::vector<std::int32_t> index;  // band indices
  std::vector<double> distance;     // D(j, index)
};
SurfaceNeighbours surfaceNeighbours(std::vector<float> const& patches, std::int64_t n, int patchVoxels, int m);

// The whole method on phi (grid unchanged; voxels outside the band copied): band, records,
// neighbours, weights, K Jacobi iterations. `neighbours` (optional) receives the neighbour sets.
struct SurfaceDenoiseInfo {
  std::int64_t bandSize = 0;
  double dt = 0.0;        // 1 / max_j s_j
  double maxWeightSum = 0.0;
};
// Bytes surfaceDenoise allocates for a band of n elements (records, neighbour sets, weights, phi twice).
std::int64_t surfaceDenoiseBytes(std::int64_t n, SurfaceNlmParams const& params);
HostImage surfaceDenoise(HostImage const& phi, SurfaceNlmParams const& params, SurfaceDenoiseInfo* info = nullptr,
                         SurfaceNeighbours* neighbours = nullptr);

}  // namespace kortex::ref
