// Kokkos kernels of the affine pre-alignment (entry points: gpu/affine/Affine.hpp). Functors keep only
// four Views (two images, two masks), the transform (AffineCoeffs, 120 B) and the extents: under the
// 512 B closure limit of CUDA.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "core/Affine.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"

namespace kortex::gpu::affine_detail {

template <class View>
void checkVolume(View const& v, const char* who) {
  if (v.data() == nullptr) throw InvalidArgument(std::string(who) + ": view is not allocated");
  for (int r = 0; r < 3; ++r)
    if (v.extent(r) < 2)
      throw InvalidArgument(std::string(who) + ": needs 3D images with every extent >= 2, got extents (" +
                            std::to_string(v.extent(0)) + "," + std::to_string(v.extent(1)) + "," +
                            std::to_string(v.extent(2)) + ")");
}

// Array reduction of kAffineSumCount doubles (value_type double[] + value_count: the form both
// Kokkos 3.4 and 4.x accept; join's volatile overload only where 3.4 needs it).
template <class Mem>
struct MetricFunctor {
  using value_type = double[];
  unsigned value_count = kAffineSumCount;

  ConstImageView<Mem> moving, fixed;
  ConstImageView<Mem> movingMask, fixedMask;  // binary; unallocated: every voxel counts
  AffineCoeffs a;
  int nx, ny, mx, my, mz;  // fixed x, y extents; moving extents
  bool useMovingMask = false, useFixedMask = false;

  KOKKOS_INLINE_FUNCTION void operator()(const Index i, value_type sums) const {
    const int x = static_cast<int>(i % nx);
    const Index r = i / nx;
    const int y = static_cast<int>(r % ny);
    const int z = static_cast<int>(r / ny);
    if (useFixedMask && fixedMask(z, y, x) == 0.0f) return;
    const double pf[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
    double q[3], p[3];
    affineMap(a, pf, q, p);
    if (!affineInside(p, mx, my, mz)) return;
    if (useMovingMask && !affineMaskHolds(movingMask, p)) return;
    const double w = affineEdgeWeight(p, mx, my, mz);
    double g[3];
    const double m = affineSample(moving, p, g);
    affineAccumulate(sums, w, static_cast<double>(fixed(z, y, x)), m, g, q, true);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type sums) const {
    for (unsigned k = 0; k < value_count; ++k) sums[k] = 0.0;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type dst,
                                   const KORTEX_JOIN_VOLATILE value_type src) const {
    for (unsigned k = 0; k < value_count; ++k) dst[k] += src[k];
  }
};

template <class Mem>
struct ResampleFunctor {
  ConstImageView<Mem> moving;
  ImageView<Mem> out;
  AffineCoeffs a;
  int nx, ny, mx, my, mz;

  KOKKOS_INLINE_FUNCTION void operator()(const Index i) const {
    const int x = static_cast<int>(i % nx);
    const Index r = i / nx;
    const int y = static_cast<int>(r % ny);
    const int z = static_cast<int>(r / ny);
    const double pf[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
    double p[3];
    affineMap(a, pf, p);
    out(z, y, x) = affineInside(p, mx, my, mz)
                      ? static_cast<float>(affineSample(moving, p, static_cast<double*>(nullptr)))
                      : 0.0f;
  }
};

// The metric; with masks (binary, on the images' grids) only the voxels they hold count, and
// `fixedVoxels` is the fixed mask's count (0: every fixed voxel).
template <class Exec>
AffineMetric metric(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                    ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t,
                    ConstImageView<typename Exec::memory_space> movingMask = {},
                    ConstImageView<typename Exec::memory_space> fixedMask = {}, Index fixedVoxels = 0) {
  using Mem = typename Exec::memory_space;
  checkVolume(moving, "affineMetric (moving)");
  checkVolume(fixed, "affineMetric (fixed)");
  MetricFunctor<Mem> f;
  f.moving = moving;
  f.fixed = fixed;
  f.movingMask = movingMask;
  f.fixedMask = fixedMask;
  f.useMovingMask = movingMask.data() != nullptr;
  f.useFixedMask = fixedMask.data() != nullptr;
  f.a = affineCoeffs(t);
  f.nx = static_cast<int>(fixed.extent(2));
  f.ny = static_cast<int>(fixed.extent(1));
  f.mx = static_cast<int>(moving.extent(2));
  f.my = static_cast<int>(moving.extent(1));
  f.mz = static_cast<int>(moving.extent(0));
  const Index n = static_cast<Index>(fixed.size());
  double sums[kAffineSumCount] = {};
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(sums, kAffineSumCount);
  Kokkos::parallel_reduce("kortex::Affine::metric",
                          Kokkos::RangePolicy<Exec, Kokkos::IndexType<Index>>(exec, 0, n), f, result);
  exec.fence();
  return affineMetricFromSums(sums, fixedVoxels > 0 ? fixedVoxels : n);
}

template <class Exec>
void resample(Exec const& exec, ConstImageView<typename Exec::memory_space> moving, AffineTransform const& t,
              ImageView<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  checkVolume(moving, "resampleAffine (moving)");
  if (out.data() == nullptr || out.size() == 0)
    throw InvalidArgument("resampleAffine: output view is not allocated");
  const auto* a = reinterpret_cast<const char*>(moving.data());
  const auto* b = reinterpret_cast<const char*>(out.data());
  if (a < b + out.span() * sizeof(float) && b < a + moving.span() * sizeof(float))
    throw InvalidArgument("resampleAffine: input and output views must not overlap");
  ResampleFunctor<Mem> f;
  f.moving = moving;
  f.out = out;
  f.a = affineCoeffs(t);
  f.nx = static_cast<int>(out.extent(2));
  f.ny = static_cast<int>(out.extent(1));
  f.mx = static_cast<int>(moving.extent(2));
  f.my = static_cast<int>(moving.extent(1));
  f.mz = static_cast<int>(moving.extent(0));
  Kokkos::parallel_for("kortex::Affine::resample",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<Index>>(exec, 0, static_cast<Index>(out.size())), f);
}

// The optimiser's metric on `Exec`: each level's images copied once.
template <class Exec>
class Backend final : public AffineMetricBackend {
 public:
  using Mem = typename Exec::memory_space;
  explicit Backend(Exec const& exec) : exec_(exec) {}
  // Copies on exec_'s queue (no device-wide fence: pairs may run concurrently on other instances).
  void setImages(AffineLevelImages const& level) override {
    moving_ = onDevice(level.moving, "kortex::Affine::moving");
    fixed_ = onDevice(level.fixed, "kortex::Affine::fixed");
    movingMask_ = onDevice(level.movingMask, "kortex::Affine::movingMask");
    fixedMask_ = onDevice(level.fixedMask, "kortex::Affine::fixedMask");
    fixedVoxels_ = level.fixedVoxels;
    exec_.fence();
  }
  AffineMetric evaluate(AffineTransform const& t) override {
    return metric(exec_, moving_, fixed_, t, movingMask_, fixedMask_, fixedVoxels_);
  }

 private:
  // A copy on exec_'s memory space (unallocated for an empty image).
  ImageView<Mem> onDevice(HostImage const& img, const char* label) const {
    if (img.data.data() == nullptr) return {};
    ImageView<Mem> d(Kokkos::view_alloc(exec_, Kokkos::WithoutInitializing, std::string(label)), img.data.extent(0),
                     img.data.extent(1), img.data.extent(2));
    Kokkos::deep_copy(exec_, d, img.data);
    return d;
  }

  Exec exec_;
  ImageView<Mem> moving_, fixed_, movingMask_, fixedMask_;
  Index fixedVoxels_ = 0;
};

}  // namespace kortex::gpu::affine_detail
