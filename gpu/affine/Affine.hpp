// Kokkos affine pre-alignment (specification: core/Affine.hpp):
//   affineMetric   - NCC, its gradient w.r.t. the 12 parameters and the overlap: two team kernels
//                    whose sums of kAffineSumCount doubles have one fixed order (any team size)
//                    (detail/AffineKernels.hpp); the per-voxel maths are core/Affine.hpp's
//                    affineMap / affineSample / affineAccumulate. Fences `exec`.
//   resampleAffine - moving -> the grid of `out` (trilinear, 0 outside); enqueues and returns.
//   affineRegister - the spec's registration: host normalisation, pyramid and optimiser
//                    (core/Affine.cpp affineOptimise), each level copied to `exec`'s memory space
//                    once, every metric evaluation on `exec`.
// Extents are checked at run time (InvalidArgument). Explicitly instantiated for every enabled
// execution space in gpu/affine/Affine.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include <vector>

#include "core/Affine.hpp"
#include "core/Image.hpp"

namespace kortex::gpu {

template <class Exec>
AffineMetric affineMetric(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                          ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t);

// NCC of up to kAffineSpeculation transforms, each exactly what affineMetric gives it, read back once (the
// optimiser's speculative candidates, core/Affine.hpp "Speculation"). Fences `exec`.
template <class Exec>
std::vector<AffineMetric> affineMetrics(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                        ConstImageView<typename Exec::memory_space> fixed,
                                        std::vector<AffineTransform> const& ts);

// Mattes MI with `bins` bins (core/Affine.hpp, "Mutual information"): a fixed-point histogram (the
// same bits in any order), p, MI and log ratios on the host, then the gradient's sums in the metric's
// fixed order. Fences `exec`.
template <class Exec>
AffineMetric affineMutualInformation(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                     ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t, int bins);

// `out`'s extents are the fixed grid of `t`.
template <class Exec>
void resampleAffine(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                    AffineTransform const& t, ImageView<typename Exec::memory_space> out);

template <class Exec>
AffineResult affineRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                            AffineParams const& params, AffineProgress const& progress = {},
                            AffineMasks const& masks = {});

}  // namespace kortex::gpu
