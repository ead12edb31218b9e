// The inverse of a registration (register greedy / unbiased, atlas fields): the map
// Phi(p) = A(p - u(p)) of a RegistrationPipelineResult inverted on the moving grid (core/Inverse.hpp
// states the method and why it runs at the end), on the result's back end; the ITK/ANTs field of the
// inverse; and the inverse consistency |p - Phi^-1(Phi(p))|.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Image.hpp"
#include "core/Inverse.hpp"
#include "pipeline/Register.hpp"

namespace kortex::pipeline {

struct InverseMap {
  VectorField<Kokkos::HostSpace> preimage;  // on r.movingGrid: the fixed index p with Phi(p) = q
  InverseStats stats;
  double seconds = 0.0;
};

// Throws InvalidArgument when the affine stage is singular. Runs on r.backend (Kokkos: the default
// execution space).
InverseMap invertRegistration(RegistrationPipelineResult const& r, InverseParams const& params = {});

// The inverse as an ITK/ANTs displacement field (world mm, LPS) on the moving grid: the moving point
// y maps to the fixed point y + e(y) (the forward field's convention with the roles swapped).
VectorField<Kokkos::HostSpace> inverseWorldDisplacement(RegistrationPipelineResult const& r, InverseMap const& inv);

// |p - Phi^-1(Phi(p))| in voxels of the fixed grid (Phi^-1 sampled trilinearly from the preimage
// field) over the fixed voxels whose Phi(p) lies inside the moving grid and, with a mask (fixed
// grid), where mask > 0.
struct InverseConsistency {
  double mean = 0.0, p99 = 0.0, max = 0.0;
  long voxels = 0;
};
InverseConsistency inverseConsistency(RegistrationPipelineResult const& r, InverseMap const& inv,
                                      HostImage const* mask = nullptr);

}  // namespace kortex::pipeline
