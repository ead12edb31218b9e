// Surface denoise job (level-set NLM, core/SurfaceNlm.hpp): a signed distance phi from a mask or a
// closed mesh, then the denoised phi from the CPU reference or the Kokkos back end. The job checks
// once, before anything runs: the parameters, a 3D finite phi, a non-empty band of fewer than 2^31
// elements with more than m of them, and a search that fits in the memory available (device
// memory for Kokkos, MemAvailable for the CPU; SurfaceJob::maxBytes overrides), naming the size it
// needs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/Backend.hpp"
#include "core/Image.hpp"
#include "core/SurfaceNlm.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "io/Mesh.hpp"
#include "pipeline/JobFiles.hpp"
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

// The surface denoise job (`kortex surface denoise`, Python surface_denoise): the input (an image
// file read as a mask or as phi, a closed mesh file, or phi / a mask in memory), the outputs (the
// denoised phi, optionally its zero level set as a mesh), the parameters. validate() once (files,
// the input kind, a Kokkos variant only with the Kokkos back end, the memory cap), then phi, the
// denoising (surfaceDenoise), the mesh, and the outputs written all or none (writeAllOrNone).
enum class SurfaceInputKind { Mask, Phi };  // an image input; a mesh path is a mesh
SurfaceInputKind parseSurfaceInputKind(std::string const& s);  // "mask" | "phi"
const char* toString(SurfaceInputKind k);

struct SurfaceJob {
  ImageInput input;                     // a file (image or mesh: .vtp .stl .obj) or an image in memory
  SurfaceInputKind inputKind = SurfaceInputKind::Mask;
  std::optional<double> label, threshold;  // a mask input: inside = voxels equal to label / >= threshold
  double meshSpacing = 1.0;             // a mesh input: the voxel size of its grid, world units
  std::filesystem::path output;         // the denoised phi (empty: not written; keepResult)
  std::filesystem::path outMesh;        // optional: its zero level set (.vtp .stl .obj)
  SurfaceNlmParams params;
  Backend backend = Backend::Auto;
  bool variantGiven = false;            // params.variant was chosen: refused with the CPU back end
  double maxMemoryMiB = 0.0;            // > 0: memory the search may use instead of what is reported free
  bool keepResult = false;              // the caller takes the image (Python): no output file is needed
  SurfaceNlmProgress progress;

  void validate() const;
};
nlohmann::json toJson(SurfaceJob const& job);
SurfaceJob surfaceJobFromJson(nlohmann::json const& j);

struct SurfaceJobResult {
  HostImage phi, image;      // the input's signed distance, the denoised one
  io::TriangleMesh mesh;     // with outMesh
  double secondsPhi = 0.0;   // input -> phi
  std::vector<std::filesystem::path> written;
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

// The job: check, phi, denoise, mesh, write.
SurfaceJobResult runSurfaceJob(SurfaceJob const& job, SurfaceRun* run = nullptr);

}  // namespace kortex::pipeline
