// CPU reference of the unbiased fluid registration (specification: core/Registration.hpp):
// Eigen + OpenMP, double accumulation, written independently of the Kokkos code. It shares with
// gpu/ only the parameter struct, the result types and the conventions stated in the spec.
// Fields are VectorField views (3, nz, ny, nx), component 0 = x, in voxel units.
#pragma once

#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "reference_cpu/ImageOps.hpp"  // warp

namespace kortex::ref {

using HostField = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using ConstHostField = Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using ConstHostImageView = ConstImageView<Kokkos::HostSpace>;

// E(u) (energy only).
RegistrationEnergy registrationEnergy(ConstHostImageView moving, ConstHostImageView fixed,
                                      ConstHostField u, double lambda);
// f = -dE/du at u (data + lambda * regulariser, exact discrete gradient); returns E(u).
RegistrationEnergy registrationForce(ConstHostImageView moving, ConstHostImageView fixed,
                                     ConstHostField u, HostField f, double lambda);
// out = G_sigma * in per component (separable, radius ceil(3 sigma), clamp).
void gaussianSmooth(ConstHostField in, HostField out, float sigma);
// rate = v - (grad u) v; returns max_x |rate(x)|.
double updateRate(ConstHostField u, ConstHostField v, HostField rate);
// uOut = u + dt * rate.
void applyUpdate(ConstHostField u, ConstHostField rate, float dt, HostField uOut);
// out(x) = det(I - grad u)(x).
void jacobianDeterminant(ConstHostField u, ImageView<Kokkos::HostSpace> out);

// The whole registration of the spec's iteration. `u` holds the initial field (zero for a fresh
// start) and receives the result (always a field with det J > 0 everywhere when the initial one
// had it). Throws InvalidArgument on mismatched grids, non-3D input, NaN/Inf voxels, an initial
// field that is folded, or invalid parameters (params.variant is ignored).
RegistrationResult fluidRegister(HostImage const& moving, HostImage const& fixed,
                                 VectorField<Kokkos::HostSpace>& u, RegistrationParams const& params,
                                 RegistrationProgress const& progress = {});

}  // namespace kortex::ref
