// CPU reference of applying a transform chain (specification: core/Apply.hpp): Eigen for the
// point maps, OpenMP over the reference grid, written from the specification independently of
// core/'s per-point functions (a bug there cannot hide behind a shared formula).
#pragma once

#include "core/Apply.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

// The input resampled onto `reference` through `chain` (validated; the input 3D with at least 2
// voxels per axis; integer values for Label). The result has reference's geometry, no metadata.
HostImage resample(HostImage const& input, Geometry const& reference, TransformChain const& chain,
                   ApplyInterpolation interpolation);

}  // namespace kortex::ref
