// Kokkos affine pre-alignment (specification: core/Affine.hpp):
//   affineMetric   - NCC, its gradient w.r.t. the 12 parameters and the overlap: two team kernels
//                    whose sums of kAffineSumCount doubles have one fixed order (any team size)
//                    (detail/AffineKernels.hpp); the per-voxel maths are core/Affine.hpp's
//                    affineMap / affineSample / affineAccumulate. Fences `exec`.
//   resampleAffine - moving -> the grid of `out` (trilinear, 0 outside); enqueues and returns.
//   affinePyramid  - the levels' metric images, built on `exec` (the host's bits).
//   affineRegister - the spec's registration: the optimiser on the host (core/Affine.cpp
//                    affineOptimise), the images copied to `exec`'s memory space once and their
//                    pyramid built there (affinePyramid), every metric evaluation on `exec`.
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

// The metric's images of levels 0 .. levels-1 of `image` (core/Affine.hpp "Pyramid": reduced, then
// smoothed once more), built on exec from one copy of the image: what affineRegister's metric
// evaluates, the bits of the host's affineReduce / affineSmooth. Enqueued.
template <class Exec>
std::vector<ImageView<typename Exec::memory_space>> affinePyramid(Exec const& exec, HostImage const& image, int levels);

// `out`'s extents are the fixed grid of `t`.
template <class Exec>
void resampleAffine(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                    AffineTransform const& t, ImageView<typename Exec::memory_space> out);

template <class Exec>
AffineResult affineRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                            AffineParams const& params, AffineProgress const& progress = {},
                            AffineMasks const& masks = {});

}  // namespace kortex::gpu
