// Kokkos non-local means: the entry point and its explicit instantiations for every enabled
// execution space. The variants live in gpu/nlm/detail/NlmNaive.hpp, gpu/nlm/detail/NlmScratchTiled.hpp and
// gpu/nlm/detail/NlmBoxSum.hpp.
#include "gpu/nlm/Nlm.hpp"

#include <array>
#include <limits>
#include <string>

#include "core/Tuning.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/nlm/detail/NlmBoxSum.hpp"
#include "gpu/nlm/detail/NlmCommon.hpp"
#include "gpu/nlm/detail/NlmNaive.hpp"
#include "gpu/nlm/detail/NlmScratchTiled.hpp"

namespace kortex::gpu {

namespace {

// BoxSum tile and batch: the tuning database entry "ct.nlm.boxsum" for this device and size
// class (`kortex tune`, core/Tuning.hpp), else today's default (chooseBoxSum2DConfig's preference
// list) with a one-line notice. Config keys: x, y (tile), batch (offsets per pass pair). Tuned
// kernel: the 2D two-pass kernel (patch radius 1..3, BoxSum2DKernel); other radii and 3D keep
// their measured defaults and consult nothing. The tuned batch is clamped to what fits the
// scratch at this problem's radii (the tuning run used r = 3, R = 8); a tuned tile that fits no
// batch at all is ignored with a warning. Returns the request for launchBoxSum ({} = default).
template <int PR, class ExecSpace>
nlm_detail::BoxSumConfig boxSum2DRequest(nlm_detail::Problem const& pb) {
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<ExecSpace>>(0);
  nlm_detail::BoxSumConfig def;
  if (!nlm_detail::chooseBoxSum2DConfig<PR, ExecSpace>(pb, maxBytes, {}, def)) return {};
  const tuning::Config fallback{{"x", def.tx}, {"y", def.ty}, {"batch", def.batch}};
  const std::string sizeClass = tuning::sizeClass(pb.nx, pb.ny);
  const std::string device = tuning::deviceFor<ExecSpace>();
  std::string source;
  const tuning::Config c = tuning::lookupOn(device, "ct.nlm.boxsum", sizeClass, fallback, &source);
  if (source == "default") return {};
  auto get = [&](const char* key, int otherwise) {
    auto it = c.find(key);
    return it == c.end() ? otherwise : it->second;
  };
  nlm_detail::BoxSumConfig req;
  req.tx = get("x", def.tx);
  req.ty = get("y", def.ty);
  req.tz = 1;
  req.batch = get("batch", def.batch);
  using Shape = nlm_detail::BoxSum2DShape<PR>;
  nlm_detail::BoxSumConfig used;
  std::string why;
  if (req.tx % Shape::L1 != 0 || req.ty % Shape::K2 != 0 || req.tx > 1024 || req.ty > 1024)
    why = "the tile must be a multiple of " + std::to_string(Shape::L1) + "x" +
          std::to_string(Shape::K2) + " and at most 1024x1024";
  else if (!nlm_detail::chooseBoxSum2DConfig<PR, ExecSpace>(pb, maxBytes, req, used))
    why = "the tile does not fit this execution space's team scratch";
  if (!why.empty()) {
    tuning::warnOnce("tuning entry ct.nlm.boxsum for " + device + " (" + sizeClass + ", " +
                     source + ") ignored: " + tuning::toString(c) + ": " + why +
                     "; using the default " + tuning::toString(fallback));
    return {};
  }
  return req;
}

template <class ExecSpace>
nlm_detail::BoxSumConfig boxSumRequest(nlm_detail::Problem const& pb) {
  if (pb.dim != 2) return {};
  switch (pb.r) {
    case 1: return boxSum2DRequest<1, ExecSpace>(pb);
    case 2: return boxSum2DRequest<2, ExecSpace>(pb);
    case 3: return boxSum2DRequest<3, ExecSpace>(pb);
    default: return {};
  }
}

// ScratchTiled starting tile (2D): the tuning database entry "ct.nlm.scratch" (keys x, y) for this
// device and size class, else the default (defaultTiledTile) with a one-line notice. 3D keeps its
// default. fitTile still shrinks a tuned tile to the scratch this problem's radii need.
template <class ExecSpace>
std::array<int, 3> scratchTiledRequest(nlm_detail::Problem const& pb) {
  if (pb.dim != 2) return {0, 0, 0};
  const auto def = nlm_detail::defaultTiledTile(2);
  const tuning::Config fallback{{"x", def[0]}, {"y", def[1]}};
  const std::string sizeClass = tuning::sizeClass(pb.nx, pb.ny);
  const std::string device = tuning::deviceFor<ExecSpace>();
  std::string source;
  const tuning::Config c = tuning::lookupOn(device, "ct.nlm.scratch", sizeClass, fallback, &source);
  if (source == "default") return {0, 0, 0};
  const auto x = c.find("x"), y = c.find("y");
  if (x == c.end() || y == c.end() || x->second < 1 || y->second < 1 || x->second > 1024 ||
      y->second > 1024 || x->second * y->second > 4096) {
    tuning::warnOnce("tuning entry ct.nlm.scratch for " + device + " (" + sizeClass + ", " + source +
                     ") ignored: " + tuning::toString(c) +
                     ": needs x, y in [1, 1024], at most 4096 outputs; using the default " +
                     tuning::toString(fallback));
    return {0, 0, 0};
  }
  return {x->second, y->second, 1};
}

}  // namespace

template <class ExecSpace>
void nlm(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
         ImageView<typename ExecSpace::memory_space> out, NlmParams const& params) {
  checkSameExtents(in, out, "kortex::gpu::nlm");
  const Index nz = static_cast<Index>(in.extent(0));
  const Index ny = static_cast<Index>(in.extent(1));
  const Index nx = static_cast<Index>(in.extent(2));
  requireRadius("kortex::gpu::nlm", params.patchRadius, NlmParams::kMaxRadius);
  requireRadius("kortex::gpu::nlm", params.searchRadius, NlmParams::kMaxRadius);
  // Coordinates are ints inside the kernels (linear indices are 64-bit).
  constexpr Index kMaxExtent = std::numeric_limits<int>::max() / 4;
  if (nx > kMaxExtent || ny > kMaxExtent || nz > kMaxExtent)
    throw InvalidArgument("kortex::gpu::nlm: image extent above " + std::to_string(kMaxExtent));

  const nlm_detail::Problem pb = nlm_detail::makeProblem(in, params);
  const nlm_detail::InputView<typename ExecSpace::memory_space> input = in;
  switch (params.variant) {
    case NlmVariant::Naive:
      if (pb.dim == 2)
        nlm_detail::launchNaive<2>(exec, input, out, pb);
      else
        nlm_detail::launchNaive<3>(exec, input, out, pb);
      break;
    case NlmVariant::ScratchTiled:
      if (pb.dim == 2)
        nlm_detail::launchScratchTiled<2>(exec, input, out, pb, scratchTiledRequest<ExecSpace>(pb));
      else
        nlm_detail::launchScratchTiled<3>(exec, input, out, pb);
      break;
    case NlmVariant::BoxSum:
      if (pb.dim == 2)
        nlm_detail::launchBoxSum<2>(exec, input, out, pb, boxSumRequest<ExecSpace>(pb));
      else
        nlm_detail::launchBoxSum<3>(exec, input, out, pb);
      break;
    default:
      throw InvalidArgument("kortex::gpu::nlm: unknown variant");
  }
}

#define KORTEX_INSTANTIATE_NLM(SPACE)                                                    \
  template void nlm<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,            \
                           ImageView<SPACE::memory_space>, NlmParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_NLM(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_NLM(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_NLM(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_NLM(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_NLM

}  // namespace kortex::gpu
