// Kokkos element-wise operators and gradient (specification: core/ImageOps.hpp). The n-ary fused
// operators are axpby, normaliseRange and average; scale, addScalar and add are the binary
// operators the Binary strategy composes them from (through caller-provided temporaries);
// minMax reduces (fences). gradient takes the strategy (GradientVariant); warp resamples an image
// through a displacement field. Images are float
// (nz, ny, nx) views of exec's memory space, all of equal extents; outputs may not overlap inputs
// except where noted. Explicitly instantiated for every enabled execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include <utility>
#include <vector>

#include "core/ImageOps.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

template <class Exec>
using ImageOf = ImageView<typename Exec::memory_space>;
template <class Exec>
using ConstImageOf = ConstImageView<typename Exec::memory_space>;

// Fused n-ary operators.
template <class Exec>
void axpby(Exec const& exec, float a, ConstImageOf<Exec> y, float b, ConstImageOf<Exec> z, ImageOf<Exec> out);
template <class Exec>
void normaliseRange(Exec const& exec, ConstImageOf<Exec> x, float lo, float hi, ImageOf<Exec> out);
// 1 <= inputs.size() <= kMaxAverageInputs.
template <class Exec>
void average(Exec const& exec, std::vector<ConstImageOf<Exec>> const& inputs, ImageOf<Exec> out);

// Binary operators (out may be x: in place).
template <class Exec>
void scale(Exec const& exec, float a, ConstImageOf<Exec> x, ImageOf<Exec> out);
template <class Exec>
void addScalar(Exec const& exec, ConstImageOf<Exec> x, float c, ImageOf<Exec> out);
template <class Exec>
void add(Exec const& exec, ConstImageOf<Exec> x, ConstImageOf<Exec> y, ImageOf<Exec> out);

// (min, max) of an image.
template <class Exec>
std::pair<float, float> minMax(Exec const& exec, ConstImageOf<Exec> x);

// out (3, nz, ny, nx) = clamped central-difference gradient of a.
template <class Exec>
void gradient(Exec const& exec, ConstImageOf<Exec> a, Field<typename Exec::memory_space> out, GradientVariant variant);

// out(x) = moving(x - u(x)): trilinear, clamp-extended (core/Registration.hpp regSampleTrilinear),
// u (3, nz, ny, nx) in voxels of the grid. The resampling step of every registration (greedy,
// atlas, unbiased) and of applying a field. out may not overlap moving or u.
template <class Exec>
void warp(Exec const& exec, ConstImageOf<Exec> moving, ConstField<typename Exec::memory_space> u, ImageOf<Exec> out);

}  // namespace kortex::gpu
