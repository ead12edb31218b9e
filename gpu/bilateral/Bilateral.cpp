// Kokkos bilateral filter: variant dispatch and explicit instantiation for every enabled
// execution space. Kernels: gpu/bilateral/detail/BilateralKernels.hpp.
#include "gpu/bilateral/Bilateral.hpp"

#include "core/Tuning.hpp"
#include "gpu/bilateral/detail/BilateralKernels.hpp"

namespace kortex::gpu {

namespace {

// ScratchTiled tile: the tuning database entry "ct.bilateral.scratch" for this device and size
// class (`kortex tune`, core/Tuning.hpp), else today's default (defaultTileFor: 32x16, 4 outputs
// per work item, adapted to small images on wide devices) with a one-line notice. Config keys:
// x, y (tile extents), per_thread (outputs per work item along y). Only 2D tiles are tuned (the
// tuner explores 2D shapes); 3D keeps its measured defaults. A tuned tile is still shrunk by
// fitTile where a larger radius needs more scratch than the tuning run did (radius 8).
template <class ExecSpace>
bilateral_detail::TileShape scratchTile(ExecSpace const& exec,
                                      ConstImageView<typename ExecSpace::memory_space> in,
                                      int radius) {
  const bilateral_detail::TileShape def = bilateral_detail::defaultTileFor(exec, in, radius);
  if (imageDimension(in) != 2) return def;
  const tuning::Config fallback{{"x", def.x}, {"y", def.y}, {"per_thread", def.perThread}};
  const std::string sizeClass = tuning::sizeClass(static_cast<Index>(in.extent(2)),
                                                  static_cast<Index>(in.extent(1)));
  const std::string device = tuning::deviceFor<ExecSpace>();
  std::string source;
  const tuning::Config c =
      tuning::lookupOn(device, "ct.bilateral.scratch", sizeClass, fallback, &source);
  if (source == "default") return def;
  auto get = [&](const char* key, int otherwise) {
    auto it = c.find(key);
    return it == c.end() ? otherwise : it->second;
  };
  bilateral_detail::TileShape t = def;
  t.x = get("x", def.x);
  t.y = get("y", def.y);
  t.perThread = get("per_thread", def.perThread);
  try {
    bilateral_detail::checkTile(t, 2);
  } catch (InvalidArgument const& e) {
    tuning::warnOnce("tuning entry ct.bilateral.scratch for " + device + " (" + sizeClass +
                     ", " + source + ") ignored: " + e.what() + "; using the default " +
                     tuning::toString(fallback));
    return def;
  }
  return t;
}

}  // namespace

template <class ExecSpace>
void bilateral(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
               ImageView<typename ExecSpace::memory_space> out, BilateralParams const& params) {
  // The variants check before anything is enqueued: a bad call leaves `out` untouched.
  switch (params.variant) {
    case BilateralVariant::Naive:
      bilateral_detail::naive(exec, in, out, params);
      return;
    case BilateralVariant::ScratchTiled:
      bilateral_detail::scratchTiled(exec, in, out, params, scratchTile(exec, in, params.radius));
      return;
  }
  throw InvalidArgument("bilateral: unknown variant " +
                        std::to_string(static_cast<int>(params.variant)));
}

#define KORTEX_INSTANTIATE_BILATERAL(SPACE)                                                    \
  template void bilateral<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,             \
                                 ImageView<SPACE::memory_space>, BilateralParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_BILATERAL(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_BILATERAL

}  // namespace kortex::gpu
