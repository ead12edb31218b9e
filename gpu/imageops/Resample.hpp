// Kokkos resampling of an image through a transform chain onto a reference grid (specification:
// core/Apply.hpp): out(p) = input(q(p)) with q the chain's point map of reference voxel p and the
// chosen interpolation. The fields live on the device in one packed buffer (TransformChain's
// listing order, TransformChain::fieldFloats floats); the coefficients come from applyChainCoeffs.
// Explicitly instantiated for every enabled execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Apply.hpp"
#include "core/Image.hpp"

namespace kortex::gpu {

template <class Exec>
using PackedFieldsOf = Kokkos::View<const float*, typename Exec::memory_space>;

// input (nz, ny, nx): at least 2 voxels on every axis; out: the reference grid's extents (the grid
// of chain.referenceToWorld). `fields` holds every field of the chain (may be empty without
// fields). out may not overlap input or fields. Preconditions (pipeline/Apply.cpp validates them):
// a validated chain, and integer values in input for Label.
template <class Exec>
void resample(Exec const& exec, ConstImageView<typename Exec::memory_space> input, PackedFieldsOf<Exec> fields,
              ApplyChainCoeffs const& chain, ApplyInterpolation interpolation,
              ImageView<typename Exec::memory_space> out);

}  // namespace kortex::gpu
