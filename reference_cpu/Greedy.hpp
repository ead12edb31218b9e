// CPU reference of greedy diffeomorphic registration (specification: core/Greedy.hpp; the fluid
// solves: reference_cpu/Fluid.hpp): double arithmetic where it accumulates, OpenMP loops, written
// independently of the Kokkos code. It reuses the reference warp (reference_cpu/ImageOps.hpp) and
// Jacobian determinant (det(I - grad u)), which implement the same conventions.
#pragma once

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "reference_cpu/Fluid.hpp"

namespace kortex::ref {

using ConstHostImageView = ConstImageView<Kokkos::HostSpace>;

// F = -(W - I1) grad W (clamped central differences).
void greedyForce(ConstHostImageView warped, ConstHostImageView fixed, HostField f);
// uOut(x) = u(x + eps v(x)) - eps v(x) (trilinear, clamp rule); uOut must not alias u or v.
void greedyCompose(ConstHostField u, ConstHostField v, float eps, HostField uOut);
// max_x |v(x)|.
double fieldMaxNorm(ConstHostField v);
// sqrt(mean (a - b)^2).
double imageRmse(ConstHostImageView a, ConstHostImageView b);

// The scale-f image of core/Greedy.hpp's multi-scale rule (blur sigma f/2, trilinear sample at
// f x + (f - 1)/2); factor 1 copies. Every extent must be divisible by the factor.
HostImage downsampleImage(HostImage const& in, int factor);
// u (or v) of the scale-`from` grid up-sampled to the scale-`to` grid (extents of `out`), rescaled.
void upsampleField(ConstHostField in, int from, int to, HostField out);

// The whole multi-scale registration. `u` receives the full-grid displacement (allocated here).
// Extents and grids only are checked (InvalidArgument); parameters and NaN/Inf are the caller's
// (pipeline/Register.hpp validates once).
GreedyResult greedyRegister(HostImage const& moving, HostImage const& fixed, VectorField<Kokkos::HostSpace>& u,
                            GreedyParams const& params, GreedyProgress const& progress = {});

}  // namespace kortex::ref
