#include "gpu/imageops/ImageOps.hpp"

#include <cstdint>
#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/imageops/detail/GradientTiled.hpp"
#include "gpu/imageops/detail/Warp.hpp"

namespace kortex::gpu {
namespace {

template <class A, class B>
void requireSame(A const& a, B const& b, const char* who) {
  if (a.data() == nullptr || b.data() == nullptr) throw InvalidArgument(std::string(who) + ": image not allocated");
  for (int k = 0; k < 3; ++k)
    if (a.extent(k) != b.extent(k)) throw InvalidArgument(std::string(who) + ": images of different extents");
}

template <class Exec>
Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>> flatPolicy(Exec const& exec, std::size_t n) {
  return Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>(exec, 0, long(n));
}

template <class Mem>
struct AxpbyFunctor {
  const float* y;
  const float* z;
  float* out;
  float a, b;
  KOKKOS_INLINE_FUNCTION void operator()(long i) const { out[i] = axpbyValue(a, y[i], b, z[i]); }
};

template <class Mem>
struct NormaliseFunctor {
  const float* x;
  float* out;
  float lo, inv;
  KOKKOS_INLINE_FUNCTION void operator()(long i) const { out[i] = normaliseValue(x[i], lo, inv); }
};

// Sum of k inputs in order, times 1/k (the Binary strategy's add chain + scale, in one pass).
template <class Mem>
struct AverageFunctor {
  const float* in[kMaxAverageInputs];
  float* out;
  int k;
  float inv;
  KOKKOS_INLINE_FUNCTION void operator()(long i) const {
    float s = in[0][i];
    for (int j = 1; j < k; ++j) s = s + in[j][i];
    out[i] = s * inv;
  }
};

struct MinMaxValue {
  float lo, hi;
};
struct MinMaxFunctor {
  using value_type = MinMaxValue;
  const float* x;
  KOKKOS_INLINE_FUNCTION void operator()(long i, value_type& v) const {
    v.lo = x[i] < v.lo ? x[i] : v.lo;
    v.hi = x[i] > v.hi ? x[i] : v.hi;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const {
    v.lo = 3.4e38f;
    v.hi = -3.4e38f;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.lo = s.lo < d.lo ? s.lo : d.lo;
    d.hi = s.hi > d.hi ? s.hi : d.hi;
  }
};

template <class Mem>
struct GradientNaiveFunctor {
  ConstImageView<Mem> a;
  Field<Mem> out;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float g[3];
    centralGradient(a, z, y, x, g);
    out(0, z, y, x) = g[0];
    out(1, z, y, x) = g[1];
    out(2, z, y, x) = g[2];
  }
};

}  // namespace

template <class Exec>
void axpby(Exec const& exec, float a, ConstImageOf<Exec> y, float b, ConstImageOf<Exec> z, ImageOf<Exec> out) {
  requireSame(y, z, "axpby");
  requireSame(y, out, "axpby");
  Kokkos::parallel_for("kortex::imageops::axpby", flatPolicy(exec, y.size()),
                       AxpbyFunctor<typename Exec::memory_space>{y.data(), z.data(), out.data(), a, b});
}

template <class Exec>
void normaliseRange(Exec const& exec, ConstImageOf<Exec> x, float lo, float hi, ImageOf<Exec> out) {
  requireSame(x, out, "normaliseRange");
  if (!(hi > lo)) throw InvalidArgument("normaliseRange: the range needs hi > lo");
  Kokkos::parallel_for("kortex::imageops::normalise", flatPolicy(exec, x.size()),
                       NormaliseFunctor<typename Exec::memory_space>{x.data(), out.data(), lo, 1.0f / (hi - lo)});
}

template <class Exec>
void average(Exec const& exec, std::vector<ConstImageOf<Exec>> const& inputs, ImageOf<Exec> out) {
  if (inputs.empty() || int(inputs.size()) > kMaxAverageInputs)
    throw InvalidArgument("average: between 1 and " + std::to_string(kMaxAverageInputs) + " images, got " +
                          std::to_string(inputs.size()));
  AverageFunctor<typename Exec::memory_space> f{};
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    requireSame(inputs[j], out, "average");
    f.in[j] = inputs[j].data();
  }
  f.out = out.data();
  f.k = int(inputs.size());
  f.inv = 1.0f / float(inputs.size());
  Kokkos::parallel_for("kortex::imageops::average", flatPolicy(exec, out.size()), f);
}

template <class Exec>
void scale(Exec const& exec, float a, ConstImageOf<Exec> x, ImageOf<Exec> out) {
  requireSame(x, out, "scale");
  const float* px = x.data();
  float* po = out.data();
  Kokkos::parallel_for("kortex::imageops::scale", flatPolicy(exec, x.size()), KOKKOS_LAMBDA(long i) { po[i] = a * px[i]; });
}

template <class Exec>
void addScalar(Exec const& exec, ConstImageOf<Exec> x, float c, ImageOf<Exec> out) {
  requireSame(x, out, "addScalar");
  const float* px = x.data();
  float* po = out.data();
  Kokkos::parallel_for("kortex::imageops::add_scalar", flatPolicy(exec, x.size()), KOKKOS_LAMBDA(long i) { po[i] = px[i] + c; });
}

template <class Exec>
void add(Exec const& exec, ConstImageOf<Exec> x, ConstImageOf<Exec> y, ImageOf<Exec> out) {
  requireSame(x, y, "add");
  requireSame(x, out, "add");
  const float* px = x.data();
  const float* py = y.data();
  float* po = out.data();
  Kokkos::parallel_for("kortex::imageops::add", flatPolicy(exec, x.size()), KOKKOS_LAMBDA(long i) { po[i] = px[i] + py[i]; });
}

template <class Exec>
std::pair<float, float> minMax(Exec const& exec, ConstImageOf<Exec> x) {
  if (x.size() == 0) throw InvalidArgument("minMax: empty image");
  MinMaxValue v{0.0f, 0.0f};
  Kokkos::parallel_reduce("kortex::imageops::min_max", flatPolicy(exec, x.size()), MinMaxFunctor{x.data()}, v);
  return {v.lo, v.hi};
}

template <class Exec>
void gradient(Exec const& exec, ConstImageOf<Exec> a, Field<typename Exec::memory_space> out, GradientVariant variant) {
  using Mem = typename Exec::memory_space;
  if (a.data() == nullptr || out.data() == nullptr) throw InvalidArgument("gradient: view not allocated");
  if (out.extent(0) != 3 || out.extent(1) != a.extent(0) || out.extent(2) != a.extent(1) || out.extent(3) != a.extent(2))
    throw InvalidArgument("gradient: the output must be a 3-component field on the image grid");
  if (spansOverlap(a, out)) throw InvalidArgument("gradient: the output overlaps the input");
  const int nz = int(a.extent(0)), ny = int(a.extent(1)), nx = int(a.extent(2));
  if (variant == GradientVariant::Naive) {
    parallelForVoxels("kortex::imageops::gradient_naive", exec, nz, ny, nx, GradientNaiveFunctor<Mem>{a, out});
    return;
  }
  using F = imageops_detail::GradientTiledFunctor<Exec>;
  const int tilesX = (nx + F::kTileX - 1) / F::kTileX, tilesY = (ny + F::kTileY - 1) / F::kTileY;
  Kokkos::TeamPolicy<Exec> policy(exec, tilesX * tilesY * ((nz + F::kChunkZ - 1) / F::kChunkZ), Kokkos::AUTO);
  if (F::scratchBytes() > std::size_t(policy.scratch_size_max(0)))
    throw InvalidArgument("gradient: the tile needs " + std::to_string(F::scratchBytes()) +
                          " B of team scratch, the back end offers " + std::to_string(policy.scratch_size_max(0)) + " B");
  Kokkos::parallel_for("kortex::imageops::gradient_tiled", policy.set_scratch_size(0, Kokkos::PerTeam(F::scratchBytes())),
                       F{a, out, tilesX, tilesY});
}

template <class Exec>
void warp(Exec const& exec, ConstImageOf<Exec> moving, ConstField<typename Exec::memory_space> u, ImageOf<Exec> out) {
  using Mem = typename Exec::memory_space;
  requireSame(moving, out, "warp");
  if (moving.size() == 0) throw InvalidArgument("warp: image is empty");
  if (u.data() == nullptr || u.extent(0) != 3 || u.extent(1) != moving.extent(0) || u.extent(2) != moving.extent(1) ||
      u.extent(3) != moving.extent(2))
    throw InvalidArgument("warp: the displacement must be a 3-component field on the image grid");
  for (int k = 0; k < 3; ++k)
    if (moving.extent(k) > std::size_t(2147483647 / 4)) throw InvalidArgument("warp: extents too large for 32-bit indexing");
  if (spansOverlap(out, moving) || spansOverlap(out, u)) throw InvalidArgument("warp: the output overlaps an input");
  const int nz = int(moving.extent(0)), ny = int(moving.extent(1)), nx = int(moving.extent(2));
  Kokkos::parallel_for("kortex::imageops::warp",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, std::int64_t(nz) * ny * nx),
                       imageops_detail::WarpFunctor<Mem>{moving, u, out, nx, ny});
}

#define KORTEX_INSTANTIATE_IMAGEOPS(SPACE)                                                                       \
  template void axpby<SPACE>(SPACE const&, float, ConstImageOf<SPACE>, float, ConstImageOf<SPACE>, ImageOf<SPACE>); \
  template void normaliseRange<SPACE>(SPACE const&, ConstImageOf<SPACE>, float, float, ImageOf<SPACE>);          \
  template void average<SPACE>(SPACE const&, std::vector<ConstImageOf<SPACE>> const&, ImageOf<SPACE>);          \
  template void scale<SPACE>(SPACE const&, float, ConstImageOf<SPACE>, ImageOf<SPACE>);                         \
  template void addScalar<SPACE>(SPACE const&, ConstImageOf<SPACE>, float, ImageOf<SPACE>);                     \
  template void add<SPACE>(SPACE const&, ConstImageOf<SPACE>, ConstImageOf<SPACE>, ImageOf<SPACE>);            \
  template std::pair<float, float> minMax<SPACE>(SPACE const&, ConstImageOf<SPACE>);                            \
  template void gradient<SPACE>(SPACE const&, ConstImageOf<SPACE>, Field<SPACE::memory_space>, GradientVariant);   \
  template void warp<SPACE>(SPACE const&, ConstImageOf<SPACE>, ConstField<SPACE::memory_space>, ImageOf<SPACE>);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_IMAGEOPS(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_IMAGEOPS(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_IMAGEOPS(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_IMAGEOPS(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_IMAGEOPS

}  // namespace kortex::gpu
