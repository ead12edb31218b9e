// Surface denoise job (level-set NLM, core/SurfaceNlm.hpp): a signed distance phi from a mask or a
// closed mesh, then the denoised phi from the CPU reference or the Kokkos back end. The job checks
// once, before anything runs: the parameters, a 3D finite phi, a non-empty band of fewer than 2^31
// elements with more than m of them, and a search that fits in the memory available (device
// memory for Kokkos, MemAvailable for the CPU; SurfaceJob::maxBytes overrides), naming the size it
// needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/Backend.hpp"
#include "core/Image.hpp"
#include "core/SurfaceNlm.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "io/Mesh.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

namespace kortex::pipeline {

// phi from a mask volume: binary 0/1 as it is, or inside = voxels equal to `label`, or inside =
// voxels >= `threshold` (one of the two at most). Refuses a 2D volume, NaN voxels where a
// label or threshold selects, and (reference_cpu signedDistanceFromMask) a non-binary mask or
// one with no inside or no outside.
HostImage surfacePhiFromMask(HostImage mask, std::optional<double> label = std::nullopt,
                             std::optional<double> threshold = std::nullopt);
// phi from a closed, manifold mesh voxelised on an axis-aligned grid of `spacing` (world units)
// with a margin of band + patch radius + 2 voxels.
HostImage surfacePhiFromMesh(io::TriangleMesh const& mesh, double spacing, SurfaceNlmParams const& params);

struct SurfaceJob {
  SurfaceNlmParams params;
  Backend backend = Backend::Auto;
  std::int64_t maxBytes = 0;  // > 0: memory the search may use instead of what is reported free
  SurfaceNlmProgress progress;
};

struct SurfaceRun {
  Backend backend = Backend::Cpu;  // resolved
  std::string executionSpace;
  std::int64_t bandSize = 0;
  std::int64_t bytes = 0;       // what the search allocates
  double seconds = 0.0;         // the back end's run (Kokkos: with the transfers)
  double dt = 0.0;
  gpu::SurfaceNlmInfo kokkos;   // the Kokkos run's details
};

// The narrow band's size |phi| <= band (host count).
std::int64_t surfaceBandSize(HostImage const& phi, float band);

HostImage surfaceDenoise(HostImage const& phi, SurfaceJob const& job, SurfaceRun* run = nullptr);

}  // namespace kortex::pipeline
