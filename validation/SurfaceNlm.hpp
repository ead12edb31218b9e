// Real-surface study of the level-set NLM surface denoising (issue 5), part of `kortex validate`
// with a data folder (`--only surface` runs it alone):
//   surfaces  the white matter of the ICBM152 2009a template (WM probability >= 0.5, 1 mm) and of
//             IXI DLMUSE label maps (cerebral WM labels 81-90 and 95, 2 mm);
//   noise     phi_noisy = phi_clean + N(0, 0.3 voxel) per voxel (phi_clean: exact signed distance
//             of the mask), so the zero level set moves: "surface noise";
//   metric    distance to the clean surface of a surface S: the zero crossings of S's phi along
//             every grid edge (linear interpolation), each scored by |phi_clean| trilinearly
//             interpolated there (phi_clean is a distance function); mean, p99 and max over the
//             crossings, before (noisy) and after denoising;
//   check     Kokkos (default execution space) against the CPU reference, max |dphi| over the band
//             <= 1/4 voxel (the paper's bound) and neighbour rows differing outside ties = 0: on
//             the whole surface when its band is small enough for the CPU budget, else on a
//             centred crop (stated);
//   pass      every check holds and the mean distance to the clean surface drops on every surface.
// quick (CI): one crop of each surface (bands of a few thousand elements).
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

namespace kortex::validation {

// Kokkos neighbour sets against the CPU reference's, row by row: a row is "reordered" when its
// indices differ only among candidates tied with its m-th distance (kSurfaceNlmTieRelative; the
// spec leaves their order open), "differing" when the sets below the m-th distance differ.
struct NeighbourComparison {
  int rowsReordered = 0;
  int rowsDiffering = 0;
  double maxDistanceRel = 0.0;  // max |D_kokkos - D_ref| / D_ref over all ranks
};
NeighbourComparison compareNeighbours(ref::SurfaceNeighbours const& reference,
                                      gpu::SurfaceNlmNeighbours<Kokkos::HostSpace> const& kokkos);

struct SurfaceStudyOptions {
  bool quick = false;
  std::string dataDir;
  std::ostream* progress = nullptr;
};

struct SurfaceStudyReport {
  bool ran = false, pass = false;
  std::string note;  // why it did not run
  std::string markdown;
  nlohmann::json json;
};

SurfaceStudyReport runSurfaceStudy(SurfaceStudyOptions const& opt);

}  // namespace kortex::validation
