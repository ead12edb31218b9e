// CPU reference of unbiased atlas construction (specification: core/Atlas.hpp), built from the
// greedy reference's pieces (reference_cpu/Greedy.hpp, reference_cpu/Fluid.hpp) and written
// independently of the Kokkos code: the fixed-point sums written with llround, OpenMP loops inside
// the pieces. One process holds every subject.
#pragma once

#include <vector>

#include "core/Atlas.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

// Builds the atlas of `images` (one grid, >= 2 of them). `templ` receives the template on that grid,
// `fields[i]` the full-grid displacement of subject i (allocated here). Extents and grids only are
// checked (InvalidArgument); parameters and NaN/Inf are the caller's (the job validates once).
AtlasResult buildAtlas(std::vector<HostImage> const& images, AtlasParams const& params, HostImage& templ,
                       std::vector<VectorField<Kokkos::HostSpace>>& fields, AtlasProgress const& progress = {},
                       AtlasScaleTemplate const& scaleTemplate = {});

}  // namespace kortex::ref
