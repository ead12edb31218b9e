// CPU reference of the affine pre-alignment (specification: core/Affine.hpp): Eigen + OpenMP,
// double arithmetic, written independently of the Kokkos per-voxel code. It shares with gpu/ only
// the structs, the conventions of the spec and the host optimiser (affineOptimise), which it
// drives with its own metric.
#pragma once

#include <vector>

#include "core/Affine.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

// NCC, its gradient w.r.t. the 12 parameters and the overlap for `t` (index coordinates of these
// two grids). Throws InvalidArgument for non-3D views or an extent < 2.
// With masks (binary, on the images' grids; unallocated: none): core/Affine.hpp AffineMasks; the
// overlap is then relative to the fixed mask's voxels.
AffineMetric affineMetric(ConstImageView<Kokkos::HostSpace> moving, ConstImageView<Kokkos::HostSpace> fixed,
                          AffineTransform const& t, ConstImageView<Kokkos::HostSpace> movingMask = {},
                          ConstImageView<Kokkos::HostSpace> fixedMask = {});

// Mattes mutual information (core/Affine.hpp "Mutual information") with `bins` bins, its gradient
// and the overlap, likewise (InvalidArgument also for bins out of range).
AffineMetric affineMutualInformation(ConstImageView<Kokkos::HostSpace> moving, ConstImageView<Kokkos::HostSpace> fixed,
                                     AffineTransform const& t, int bins, ConstImageView<Kokkos::HostSpace> movingMask = {},
                                     ConstImageView<Kokkos::HostSpace> fixedMask = {});

// The whole registration (normalisation, start transform, pyramid, optimiser) with this metric.
// The result's transform maps fixed index coordinates to moving index coordinates of the given
// images. Throws InvalidArgument (see core/Affine.hpp and core/Intensity.hpp).
AffineResult affineRegister(HostImage const& moving, HostImage const& fixed, AffineParams const& params,
                            AffineProgress const& progress = {}, AffineMasks const& masks = {});

// moving resampled onto `fixedGrid`: trilinear inside the moving volume, 0 outside.
HostImage resampleAffine(HostImage const& moving, Geometry const& fixedGrid, AffineTransform const& t);
// Label map resampled with nearest neighbour (labels outside the moving volume: 0).
HostImage resampleAffineLabels(HostImage const& labels, Geometry const& fixedGrid, AffineTransform const& t);

// Dice overlap 2 |A n B| / (|A| + |B|) of the voxel sets A = {a in set}, B = {b in set}, where
// `set` lists the labels (values rounded to the nearest integer). Same grid required; 1 when both
// sets are empty.
double labelDice(HostImage const& a, HostImage const& b, std::vector<int> const& set);

}  // namespace kortex::ref
