#include "gpu/gaussian/Gaussian.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "core/Boundary.hpp"
#include "core/Errors.hpp"
#include "gpu/Fields.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/detail/Spectral.hpp"

namespace kortex::gpu {
namespace {

// One recursive line per work item along `axis` (0 = x, 1 = y, 2 = z) of `img`.
template <class Mem>
struct RecursiveFunctor {
  ImageView<Mem> img;
  RecursiveGaussianFloat c;
  int axis;
  KOKKOS_INLINE_FUNCTION void operator()(long l) const {
    const long nz = long(img.extent(0)), ny = long(img.extent(1)), nx = long(img.extent(2));
    float* base = img.data();
    if (axis == 0) {
      recursiveGaussianLine(base + l * nx, 1, int(nx), c);
    } else if (axis == 1) {
      const long z = l / nx, x = l % nx;
      recursiveGaussianLine(base + z * nx * ny + x, nx, int(ny), c);
    } else {
      recursiveGaussianLine(base + l, nx * ny, int(nz), c);
    }
  }
};

// One output voxel of a separable pass along `axis`.
template <class Mem>
struct SeparableFunctor {
  ConstImageView<Mem> in;
  ImageView<Mem> out;
  Kokkos::View<const float*, Mem> taps;  // g[0..r]
  int axis;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const int r = int(taps.extent(0)) - 1;
    const int n = int(in.extent(2 - axis));
    const int i = axis == 0 ? x : (axis == 1 ? y : z);
    float s = taps(0) * in(z, y, x);
    for (int k = 1; k <= r; ++k) {
      const int m = clampIndex(i - k, n), p = clampIndex(i + k, n);
      const float a = axis == 0 ? in(z, y, m) : (axis == 1 ? in(z, m, x) : in(m, y, x));
      const float b = axis == 0 ? in(z, y, p) : (axis == 1 ? in(z, p, x) : in(p, y, x));
      s += taps(k) * (a + b);
    }
    out(z, y, x) = s;
  }
};

// Fft: the clamp-padded copy (pad r_a voxels per side on each axis of extent > 1).
template <class Mem>
struct PadFunctor {
  ConstImageView<Mem> in;
  Field<Mem> padded;  // (1, pz, py, px)
  int rx, ry, rz;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const int nz = int(in.extent(0)), ny = int(in.extent(1)), nx = int(in.extent(2));
    padded(0, z, y, x) = in(clampIndex(z - rz, nz), clampIndex(y - ry, ny), clampIndex(x - rx, nx));
  }
};

// Fft: spectrum *= H(kz) H(ky) H(kx) / (number of padded voxels).
template <class Mem>
struct MultiplyFunctor {
  Kokkos::View<Kokkos::complex<float>****, Kokkos::LayoutRight, Mem> spectrum;
  Kokkos::View<const float*, Mem> hx, hy, hz;
  float scale;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    spectrum(0, z, y, x) *= scale * hz(z) * hy(y) * hx(x);
  }
};

// Fft: crop the padded result back to out.
template <class Mem>
struct CropFunctor {
  Field<Mem> padded;
  ImageView<Mem> out;
  int rx, ry, rz;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const { out(z, y, x) = padded(0, z + rz, y + ry, x + rx); }
};

// The kernel's DFT on an axis of N padded samples, H(k) for k = 0..count-1 (double, then float).
template <class Mem>
Kokkos::View<const float*, Mem> kernelSpectrum(std::vector<double> const& g, int N, int count, bool identity) {
  Kokkos::View<float*, Mem> h("kortex::gaussian::fft_h", count);
  auto hh = Kokkos::create_mirror_view(h);
  const double pi = 3.14159265358979323846;
  for (int k = 0; k < count; ++k) {
    double v = g[0];
    for (std::size_t j = 1; j < g.size(); ++j) v += 2.0 * g[j] * std::cos(2.0 * pi * double(j) * double(k) / double(N));
    hh(k) = identity ? 1.0f : float(v);
  }
  Kokkos::deep_copy(h, hh);
  return h;
}

template <class Exec>
void fftBlur(Exec const& exec, ConstImageView<typename Exec::memory_space> in, ImageView<typename Exec::memory_space> out,
             double sigma) {
  using Mem = typename Exec::memory_space;
  const int nz = int(in.extent(0)), ny = int(in.extent(1)), nx = int(in.extent(2));
  const std::vector<double> g = gaussianTaps(sigma);
  const int r = int(g.size()) - 1;
  const int rx = nx > 1 ? r : 0, ry = ny > 1 ? r : 0, rz = nz > 1 ? r : 0;
  const int px = nx + 2 * rx, py = ny + 2 * ry, pz = nz + 2 * rz, ph = px / 2 + 1;
  Field<Mem> padded(Kokkos::view_alloc(std::string("kortex::gaussian::fft_padded"), Kokkos::WithoutInitializing), 1, pz,
                    py, px);
  using Plan = detail::SpectralPlan<Exec>;
  typename Plan::Spectrum spectrum(
      Kokkos::view_alloc(std::string("kortex::gaussian::fft_spectrum"), Kokkos::WithoutInitializing), 1, pz, py, ph);
  Plan plan(exec, pz, py, px, padded, spectrum);
  parallelForVoxels("kortex::gaussian::fft_pad", exec, pz, py, px, PadFunctor<Mem>{in, padded, rx, ry, rz});
  plan.forward(padded, spectrum);
  // Frequencies of the half-complex layout: k_x in [0, px/2], k_y in [0, py), k_z in [0, pz).
  const auto hx = kernelSpectrum<Mem>(g, px, ph, nx == 1), hy = kernelSpectrum<Mem>(g, py, py, ny == 1),
             hz = kernelSpectrum<Mem>(g, pz, pz, nz == 1);
  const float scale = float(1.0 / (double(px) * double(py) * double(pz)));
  parallelForVoxels("kortex::gaussian::fft_multiply", exec, pz, py, ph, MultiplyFunctor<Mem>{spectrum, hx, hy, hz, scale});
  plan.inverse(spectrum, padded);
  parallelForVoxels("kortex::gaussian::fft_crop", exec, nz, ny, nx, CropFunctor<Mem>{padded, out, rx, ry, rz});
  exec.fence();  // the plan and the temporaries go out of scope
}

}  // namespace

template <class Exec>
void gaussianBlur(Exec const& exec, ConstImageView<typename Exec::memory_space> in,
                  ImageView<typename Exec::memory_space> out, GaussianParams const& params) {
  using Mem = typename Exec::memory_space;
  if (in.data() == nullptr || out.data() == nullptr) throw InvalidArgument("gaussianBlur: view not allocated");
  for (int k = 0; k < 3; ++k)
    if (in.extent(k) != out.extent(k)) throw InvalidArgument("gaussianBlur: input and output extents differ");
  if (in.size() == 0) throw InvalidArgument("gaussianBlur: empty image");
  const int nz = int(in.extent(0)), ny = int(in.extent(1)), nx = int(in.extent(2));
  const int n[3] = {nx, ny, nz};
  if (params.variant == GaussianVariant::Fft) {
    fftBlur(exec, in, out, params.sigma);
    return;
  }
  if (params.variant == GaussianVariant::Recursive) {
    const RecursiveGaussianFloat c = toFloat(recursiveGaussianCoefficients(params.sigma));
    if (in.data() != out.data()) Kokkos::deep_copy(exec, out, in);
    const long total = long(nz) * ny * nx;
    for (int axis = 0; axis < 3; ++axis) {
      if (n[axis] == 1) continue;
      Kokkos::parallel_for("kortex::gaussian::recursive",
                           Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>(exec, 0, total / n[axis]),
                           RecursiveFunctor<Mem>{out, c, axis});
    }
    return;
  }
  const std::vector<double> g = gaussianTaps(params.sigma);
  Kokkos::View<float*, Mem> taps("kortex::gaussian::taps", g.size());
  auto h = Kokkos::create_mirror_view(taps);
  for (std::size_t k = 0; k < g.size(); ++k) h(k) = float(g[k]);
  Kokkos::deep_copy(exec, taps, h);
  ImageView<Mem> a("kortex::gaussian::tmp_a", nz, ny, nx), b("kortex::gaussian::tmp_b", nz, ny, nx);
  Kokkos::deep_copy(exec, a, in);
  for (int axis = 0; axis < 3; ++axis) {
    if (n[axis] == 1) continue;
    parallelForVoxels("kortex::gaussian::separable", exec, nz, ny, nx, SeparableFunctor<Mem>{a, b, taps, axis});
    std::swap(a, b);
  }
  Kokkos::deep_copy(exec, out, a);
  exec.fence();  // the host mirror of the taps and the temporaries go out of scope
}

#define KORTEX_INSTANTIATE_GAUSSIAN(SPACE)                                                          \
  template void gaussianBlur<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,            \
                                    ImageView<SPACE::memory_space>, GaussianParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_GAUSSIAN(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_GAUSSIAN(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_GAUSSIAN(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_GAUSSIAN(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_GAUSSIAN

}  // namespace kortex::gpu
