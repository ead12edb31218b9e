// CPU reference of the 3D Gaussian blur (specification: core/Gaussian.hpp): double arithmetic,
// OpenMP over lines. The recursive variant takes its coefficients B, a1..a3 from core (the
// specification's formula) but handles the clamp boundary on its own: each line is padded with its
// end values far enough for the filter's slowest pole to decay below 1e-13 (found from the roots of
// the characteristic polynomial), run with steady-state starts, and cropped; it never uses the
// closed-form matrix M of the Kokkos code.
#pragma once

#include "core/Gaussian.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

// out = G_sigma * in (variant from params; Fft is the Separable operator, computed here directly);
// out may be in. Extents equal (InvalidArgument).
void gaussianBlur(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out, GaussianParams const& params);

// Padding length of the recursive reference (samples), for tests and docs.
int recursivePadding(double sigma);

}  // namespace kortex::ref
