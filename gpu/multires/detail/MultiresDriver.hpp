// MultiresPlan (gpu/multires/Multires.hpp): the pyramid's storage, device tables, resolved tiles and the
// three phases. Internal header: gpu/multires/Multires.cpp instantiates it for every enabled execution
// space. No Eigen, no OpenMP pragmas, no VTK here.
//
// Storage (T = float: float levels; T = uint16: int16 levels), allocated once per plan:
//   g[k], k = 1..L      reduce outputs (the input image itself is g_0); reconstruct writes g'_k
//                       over g[k] (k = 1..L-1), g'_0 goes to `out`
//   lap[k], k = 0..L-1  Laplacian layers l_k
//   filt[k], k = 0..L   filtered layers l'_k and g'_L (params.filter only; FilterSchedule::InReconstruct:
//                       g'_L only, reconstruct forms each l'_k where it expands it)
//   Unfused temporaries sized for level 0 (gpu/multires/MultiresPyramid.hpp)
//   tables              float: closeness (ClosenessLut); integer: closenessQ and similarityQ
//                       (maxDiff = 2 (2^bits - 1): the largest |difference| of two layer values)
// Each phase reads only what an earlier phase wrote and never its own inputs, so the phases
// can be repeated (benchmarks time them one by one): reconstruct reads lap/filt and g[L] and
// writes g[1..L-1] and `out`; filterLayers reads lap and g[L] and writes filt.
//
// Level filtering on concurrent instances (params.concurrentLevels): small levels underfill a
// big GPU, so each of the L + 1 layers gets its own execution-space instance, created once here
// by kx::partitionSpace (Kokkos 4 device backends: one CUDA stream each). filterLayers then
// fences `exec` (the instances must see the decomposition), enqueues layer k on instance k
// (l_0 first: the largest starts at once and the small ones fill the SMs it leaves idle), and
// fences every instance before returning, so reconstruct on `exec` sees the filtered layers.
// Kokkos 3.4 and host backends filter every layer on `exec` in order, without fences.
// Float layers with the Reuse bilateral (the default) and no concurrent instances: every layer in one
// launch (bilateralLayers, up to kMaxBatchLayers layers per launch), l_0's tiles first.
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstdint>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Multires.hpp"
#include "core/Tuning.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/multires/Multires.hpp"
#include "gpu/multires/MultiresBilateral.hpp"
#include "gpu/multires/MultiresPyramid.hpp"
#include "gpu/multires/detail/MultiresFilterReconstruct.hpp"

namespace kortex::gpu {

namespace multires_detail {

// Tuning-database kernel names (core/Tuning.hpp; `kortex tune --kernel NAME`).
inline constexpr const char* kBilateralKernel = "multires.bilateral";
inline constexpr const char* kPyramidKernel = "multires.pyramid";

struct TileChoice {
  int x = 0, y = 0;
  bool explicitTile = false;  // both extents from the params (else database / default)
};

// The layer bilateral's largest tile (outputs per team: one per thread of a CUDA block; it
// refuses larger ones, gpu/multires/detail/MultiresBilateralKernels.hpp).
inline constexpr int kMaxBilateralTileOutputs = 1024;

// params' (x, y) where both are > 0, else the tuning database's entry for this kernel, device and
// size class (a one-line notice when there is none), else the default (defX, defY); an extent
// given in the params overrides the database's. Database tiles with an extent outside
// [1, maxExtent] or more than maxOutputs pixels fall back to the default with a one-line warning
// (a bad entry must not stop a run).
// The database key is the device of ExecSpace (tuning::deviceFor: the GPU for device spaces,
// the CPU model for host spaces), so a host space of a CUDA build never takes the GPU's tile.
template <class ExecSpace>
TileChoice resolveTile(const char* kernel, int px, int py, int defX, int defY, int maxExtent,
                       int maxOutputs, Index nx, Index ny) {
  if (px > 0 && py > 0) return TileChoice{px, py, true};
  const tuning::Config c = tuning::lookupOn(tuning::deviceFor<ExecSpace>(), kernel, tuning::sizeClass(nx, ny),
                                            tuning::Config{{"x", defX}, {"y", defY}});
  auto get = [&](const char* key, int def) {
    const auto it = c.find(key);
    return it == c.end() ? def : it->second;
  };
  TileChoice t{px > 0 ? px : get("x", defX), py > 0 ? py : get("y", defY), false};
  if (t.x < 1 || t.y < 1 || t.x > maxExtent || t.y > maxExtent ||
      static_cast<long long>(t.x) * t.y > maxOutputs) {
    std::cerr << "kortex: warning: tuning entry for " << kernel << " gives tile " << t.x << "x" << t.y
              << " (extents must be in [1, " << maxExtent << "], at most " << maxOutputs
              << " pixels); using the default " << defX << "x" << defY << std::endl;
    t = TileChoice{defX, defY, false};
  }
  return t;
}

template <class T, class Mem>
Kokkos::View<T*, Mem> tableToDevice(std::vector<T> const& host, std::string const& label) {
  Kokkos::View<T*, Mem> d(Kokkos::view_alloc(label, Kokkos::WithoutInitializing), host.size());
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(),
                                                                                        host.size());
  Kokkos::deep_copy(d, h);
  return d;
}

template <class View>
std::size_t viewBytes(View const& v) {
  return v.data() == nullptr ? 0 : v.span() * sizeof(typename View::value_type);
}

template <class View>
void checkImage(View const& v, Index nx, Index ny, const char* what) {
  if (v.extent(0) != 1 || static_cast<Index>(v.extent(1)) != ny || static_cast<Index>(v.extent(2)) != nx)
    throw InvalidArgument(std::string("kortex::gpu::multires: ") + what + " extents (" +
                          std::to_string(v.extent(0)) + "," + std::to_string(v.extent(1)) + "," +
                          std::to_string(v.extent(2)) + ") differ from the plan's (1," +
                          std::to_string(ny) + "," + std::to_string(nx) + ")");
  if (v.data() == nullptr)
    throw InvalidArgument(std::string("kortex::gpu::multires: ") + what + " view is not allocated");
}

}  // namespace multires_detail

template <class ExecSpace, class T>
struct MultiresPlan<ExecSpace, T>::Impl {
  using Mem = typename ExecSpace::memory_space;
  static constexpr bool kInteger = std::is_same_v<T, std::uint16_t>;
  static_assert(kInteger || std::is_same_v<T, float>, "MultiresPlan: T is float or std::uint16_t");
  using LayerT = std::conditional_t<kInteger, std::int16_t, float>;
  using LevelV = multires_detail::Level<LayerT, Mem>;
  using ConstLevelV = multires_detail::ConstLevel<LayerT, Mem>;

  ExecSpace exec;
  MultiresParams params;
  Index nx = 0, ny = 0;
  int L = 0;
  std::vector<LevelSize> sizes;
  std::vector<LevelV> g, lap, filt;
  multires_detail::UnfusedBuffers<LayerT, Mem> tmp;
  Kokkos::View<float*, Mem> closeness;
  Kokkos::View<std::int32_t*, Mem> closenessQ, similarityQ;
  int tableBits = 0;  // integer: bit depth the similarity table holds (0: none yet)
  std::vector<ExecSpace> instances;  // concurrent level filtering; empty: every layer on exec
  multires_detail::PyramidConfig pyramid;
  multires_detail::LayerTile bilateralTile;
  FilterSchedule schedule = FilterSchedule::Separate;
  bool decomposed = false;

  Impl(ExecSpace const& e, Index nx_, Index ny_, MultiresParams const& p, FilterSchedule requested)
      : exec(e), params(p), nx(nx_), ny(ny_), L(p.levels) {
    using namespace multires_detail;
    // What sizes the buffers and picks the kernels (the job validated the parameters).
    if (params.levels < 1 || !levelsFit(nx, ny, params.levels))
      throw InvalidArgument("kortex::gpu::multires: a " + std::to_string(nx) + "x" + std::to_string(ny) +
                            " image has no " + std::to_string(params.levels) + "-level pyramid");
    requireRadius("kortex::gpu::multires", params.radius, MultiresParams::kMaxRadius);
    params.validateVariants(kInteger);
    if (nx > INT_MAX / 4 || ny > INT_MAX / 4)
      throw InvalidArgument("kortex::gpu::multires: image extent too large for 32-bit indexing (" +
                            std::to_string(nx) + "x" + std::to_string(ny) + ")");
    sizes = levelSizes(nx, ny, L);

    // Tiles: params, else the tuning database, else the documented defaults.
    pyramid.variant = params.pyramid;
    if (params.pyramid == PyramidVariant::FusedExpand) {
      const TileChoice t = resolveTile<ExecSpace>(kPyramidKernel, params.tiles.pyramidX, params.tiles.pyramidY,
                                       kDefaultPyramidTile.x, kDefaultPyramidTile.y,
                                       kMaxPyramidTileExtent, kMaxPyramidTileExtent * kMaxPyramidTileExtent,
                                       nx, ny);
      pyramid.tile = PyramidTile{t.x, t.y};
      const std::size_t maxScratch = pyramidScratchMax<ExecSpace>();
      if (t.explicitTile) {
        checkPyramidTile(pyramid.tile, maxScratch);  // the caller's tile: refuse, never change it
      } else if (pyramidScratchBytes(pyramid.tile) > maxScratch) {
        std::cerr << "kortex: warning: tuned multires.pyramid tile " << describe(pyramid.tile)
                  << " needs more team scratch than this execution space offers; using the default "
                  << describe(kDefaultPyramidTile) << std::endl;
        pyramid.tile = kDefaultPyramidTile;
      }
    }
    if (params.filter) {
      const TileChoice t = resolveTile<ExecSpace>(kBilateralKernel, params.tiles.bilateralX, params.tiles.bilateralY,
                                       kDefaultBilateralTile.x, kDefaultBilateralTile.y, kMaxBilateralTileOutputs,
                                       kMaxBilateralTileOutputs, nx, ny);
      bilateralTile = LayerTile{t.x, t.y};
    }
    if constexpr (kInteger) {
      if (params.bits > 0) pyramid.maxValue = (1 << params.bits) - 1;
    }

    // Levels and temporaries (written before they are read: no initialisation).
    auto alloc = [](std::string const& label, LevelSize const& s) {
      return LevelV(Kokkos::view_alloc(label, Kokkos::WithoutInitializing), static_cast<std::size_t>(s.ny),
                    static_cast<std::size_t>(s.nx));
    };
    g.resize(static_cast<std::size_t>(L) + 1);
    lap.resize(static_cast<std::size_t>(L));
    for (int k = 1; k <= L; ++k) g[k] = alloc("kortex::Multires::g" + std::to_string(k), sizes[k]);
    for (int k = 0; k < L; ++k) lap[k] = alloc("kortex::Multires::l" + std::to_string(k), sizes[k]);
    schedule = resolveSchedule(requested);
    if (params.filter) {  // InReconstruct stores g'_L only
      filt.resize(static_cast<std::size_t>(L) + 1);
      for (int k = schedule == FilterSchedule::InReconstruct ? L : 0; k <= L; ++k)
        filt[k] = alloc("kortex::Multires::filtered" + std::to_string(k), sizes[k]);
    }
    if (params.pyramid == PyramidVariant::Unfused) tmp = allocateUnfusedBuffers<LayerT, Mem>(nx, ny);

    // Tables, copied to the device once (the integer similarity table once the bit depth is
    // known: at construction for params.bits > 0, else at the first decompose).
    if (params.filter) {
      if constexpr (kInteger) {
        closenessQ = tableToDevice<std::int32_t, Mem>(multiresClosenessQ(params.radius, params.sigmaSpatial),
                                                       "kortex::Multires::closenessQ");
        if (params.bits > 0) updateSimilarityTable(params.bits);
      } else {
        closeness = tableToDevice<float, Mem>(multiresCloseness(params.radius, params.sigmaSpatial),
                                              "kortex::Multires::closeness");
      }
      if (concurrentFiltering()) instances = kx::partitionSpace(exec, L + 1);
    }
  }

  // Whether the layers are filtered on concurrent instances (params.concurrentLevels where the backend has them).
  bool concurrentFiltering() const { return params.concurrentLevels && kx::hasConcurrentInstances<ExecSpace>; }

  // FilterSchedule (gpu/multires/Multires.hpp): InReconstruct for float layers with the Reuse bilateral,
  // a FusedDirect-reconstruct pyramid and the layers filtered in order; a request it does not apply to
  // is refused.
  FilterSchedule resolveSchedule(FilterSchedule requested) const {
    const bool applies = !kInteger && params.filter && params.bilateral == MultiresBilateralVariant::Reuse &&
                         (params.pyramid == PyramidVariant::FusedDirect || params.pyramid == PyramidVariant::FusedReduce) &&
                         !concurrentFiltering();
    if (requested == FilterSchedule::InReconstruct && !applies)
      throw InvalidArgument("kortex::gpu::multires: filtering in reconstruct needs float layers, a filter with the "
                            "reuse bilateral, the fused or fused-reduce pyramid and the layers filtered in order");
    if (requested == FilterSchedule::Separate) return FilterSchedule::Separate;
    return applies ? FilterSchedule::InReconstruct : FilterSchedule::Separate;
  }

  void updateSimilarityTable(int bits) {
    if (!params.filter || bits == tableBits) return;
    similarityQ = multires_detail::tableToDevice<std::int32_t, Mem>(
        multiresSimilarityQ(params.sigmaRange, 2 * ((1 << bits) - 1)), "kortex::Multires::similarityQ");
    tableBits = bits;
  }

  // Integer input: the device max-reduction, then the bit depth (params.bits or the smallest
  // holding the maximum) and the range check; nothing has been written when this throws.
  void checkValues(typename MultiresPlan::in_view const& in) {
    if constexpr (kInteger) {
      const std::uint32_t m = multires_detail::maxValue(exec, in);
      int bits = params.bits;
      if (bits == 0) {
        bits = bitsFor(m);
        if (bits > MultiresParams::kMaxBits)
          throw InvalidArgument("kortex::gpu::multires: input value " + std::to_string(m) + " needs " +
                                std::to_string(bits) + " bits; the integer pipeline holds at most " +
                                std::to_string(MultiresParams::kMaxBits) + "-bit data (values <= " +
                                std::to_string((1 << MultiresParams::kMaxBits) - 1) + ")");
      } else if (m > static_cast<std::uint32_t>((1 << bits) - 1)) {
        throw InvalidArgument("kortex::gpu::multires: input value " + std::to_string(m) + " exceeds " +
                              std::to_string((1 << bits) - 1) + ", the largest " + std::to_string(bits) +
                              "-bit value (bits = " + std::to_string(bits) + ")");
      }
      pyramid.maxValue = (1 << bits) - 1;
      updateSimilarityTable(bits);
    } else {
      (void)in;
    }
  }

  void decompose(typename MultiresPlan::in_view const& in) {
    using namespace multires_detail;
    checkImage(in, nx, ny, "input");
    checkValues(in);
    const ConstLevel<T, Mem> g0 = Kokkos::subview(in, 0, Kokkos::ALL, Kokkos::ALL);
    decomposeLevel<ExecSpace, T, LayerT>(exec, g0, g[1], lap[0], pyramid, tmp);
    for (int k = 1; k < L; ++k) decomposeLevel<ExecSpace, LayerT, LayerT>(exec, g[k], g[k + 1], lap[k], pyramid, tmp);
    decomposed = true;
  }

  void filterLayers() {
    using namespace multires_detail;
    if (!decomposed) throw InvalidArgument("MultiresPlan::filterLayers: call decompose first");
    if (!params.filter) return;  // reconstruct then reads the unfiltered layers
    const bool concurrent = !instances.empty();
    if constexpr (!kInteger) {
      if (schedule == FilterSchedule::InReconstruct) {  // l'_k are formed by reconstruct
        bilateralTile = bilateralLayers(exec, std::vector<ConstLevelV>{g[L]}, std::vector<LevelV>{filt[L]}, params,
                                        bilateralTile);
        return;
      }
      if (!concurrent && params.bilateral == MultiresBilateralVariant::Reuse) {
        // Every layer in one launch (bilateralLayers): the small levels' tiles fill the device beside l_0's.
        std::vector<ConstLevelV> ins;
        std::vector<LevelV> outs;
        for (int k = 0; k <= L; ++k) {
          ins.push_back(k < L ? ConstLevelV(lap[k]) : ConstLevelV(g[L]));
          outs.push_back(filt[k]);
        }
        bilateralTile = bilateralLayers(exec, ins, outs, params, bilateralTile);
        return;
      }
    }
    if (concurrent) exec.fence();
    for (int k = 0; k <= L; ++k) {
      ExecSpace const& e = concurrent ? instances[k] : exec;
      const ConstLevelV in = k < L ? lap[k] : g[L];
      LayerTile used;
      if constexpr (kInteger)
        used = bilateralLayer(e, in, filt[k], closenessQ, similarityQ, params, bilateralTile);
      else
        used = bilateralLayer(e, in, filt[k], closeness, params, bilateralTile);
      if (k == 0) bilateralTile = used;
    }
    if (concurrent)
      for (auto& inst : instances) inst.fence();
  }

  void reconstruct(typename MultiresPlan::out_view const& out) {
    using namespace multires_detail;
    checkImage(out, nx, ny, "output");
    if (!decomposed) throw InvalidArgument("MultiresPlan::reconstruct: call decompose first");
    auto layer = [&](int k) -> ConstLevelV { return params.filter ? filt[k] : lap[k]; };
    const ConstLevelV top = params.filter ? filt[L] : g[L];
    auto coarse = [&](int k) -> ConstLevelV { return k + 1 == L ? top : ConstLevelV(g[k + 1]); };
    const Level<T, Mem> out0 = Kokkos::subview(out, 0, Kokkos::ALL, Kokkos::ALL);
    if constexpr (!kInteger) {
      if (schedule == FilterSchedule::InReconstruct) {  // l'_k = BF(l_k) formed where it is expanded
        for (int k = L - 1; k >= 1; --k) filterReconstructLevel<ExecSpace, LayerT>(exec, lap[k], coarse(k), g[k], params);
        filterReconstructLevel<ExecSpace, T>(exec, lap[0], coarse(0), out0, params);
        return;
      }
    }
    for (int k = L - 1; k >= 1; --k)
      reconstructLevel<ExecSpace, LayerT, LayerT>(exec, layer(k), coarse(k), g[k], pyramid, tmp);
    reconstructLevel<ExecSpace, LayerT, T>(exec, layer(0), coarse(0), out0, pyramid, tmp);
  }

  std::size_t bytes() const {
    using multires_detail::viewBytes;
    std::size_t b = viewBytes(tmp.upsampled) + viewBytes(tmp.lowpass) + viewBytes(closeness) +
                    viewBytes(closenessQ) + viewBytes(similarityQ);
    for (auto const& v : g) b += viewBytes(v);
    for (auto const& v : lap) b += viewBytes(v);
    for (auto const& v : filt) b += viewBytes(v);
    return b;
  }

  MultiresTiles tiles() const {
    MultiresTiles t;
    if (params.filter) {
      t.bilateralX = bilateralTile.x;
      t.bilateralY = bilateralTile.y;
    }
    if (params.pyramid == PyramidVariant::FusedExpand) {
      t.pyramidX = pyramid.tile.x;
      t.pyramidY = pyramid.tile.y;
    }
    return t;
  }
};

template <class ExecSpace, class T>
MultiresPlan<ExecSpace, T>::MultiresPlan(ExecSpace const& exec, Index nx, Index ny, MultiresParams const& params,
                                         FilterSchedule schedule)
    : impl_(std::make_unique<Impl>(exec, nx, ny, params, schedule)) {}
template <class ExecSpace, class T>
MultiresPlan<ExecSpace, T>::~MultiresPlan() = default;
template <class ExecSpace, class T>
MultiresPlan<ExecSpace, T>::MultiresPlan(MultiresPlan&&) noexcept = default;
template <class ExecSpace, class T>
MultiresPlan<ExecSpace, T>& MultiresPlan<ExecSpace, T>::operator=(MultiresPlan&&) noexcept = default;

template <class ExecSpace, class T>
void MultiresPlan<ExecSpace, T>::run(in_view in, out_view out) {
  checkSameExtents(in, out, "kortex::gpu::multires");
  impl_->decompose(in);
  impl_->filterLayers();
  impl_->reconstruct(out);
}
template <class ExecSpace, class T>
void MultiresPlan<ExecSpace, T>::decompose(in_view in) {
  impl_->decompose(in);
}
template <class ExecSpace, class T>
void MultiresPlan<ExecSpace, T>::filterLayers() {
  impl_->filterLayers();
}
template <class ExecSpace, class T>
void MultiresPlan<ExecSpace, T>::reconstruct(out_view out) {
  impl_->reconstruct(out);
}
template <class ExecSpace, class T>
MultiresParams const& MultiresPlan<ExecSpace, T>::params() const {
  return impl_->params;
}
template <class ExecSpace, class T>
FilterSchedule MultiresPlan<ExecSpace, T>::schedule() const {
  return impl_->schedule;
}
template <class ExecSpace, class T>
MultiresTiles MultiresPlan<ExecSpace, T>::tiles() const {
  return impl_->tiles();
}
template <class ExecSpace, class T>
std::size_t MultiresPlan<ExecSpace, T>::bytes() const {
  return impl_->bytes();
}

}  // namespace kortex::gpu
