// Kokkos unbiased atlas construction (specification: core/Atlas.hpp) for one process: this
// process's subjects stay on its device, the template and centring sums are reduced over the
// process group (AtlasRun::comm) as int64 fixed-point sums. Per subject on the device: the scale
// image I_i, warped image W_i, displacement u_i and, for the warm-started solvers, velocity v_i
// (atlasMemory in core/Atlas.hpp states the bytes); shared by all subjects: the template, its
// int64 sum, the previous template, a force, a velocity, a candidate field and the mean
// displacement with its sum. The per-subject step uses the greedy registration's entry points
// (force, fluid solve, max |v|, composition, min det, warp); the sums run over up to eight subjects
// per pass.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <vector>

#include "core/Atlas.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

template <class Mem>
using FixedSum = Kokkos::View<std::int64_t***, Kokkos::LayoutRight, Mem>;

// sum = (accumulate ? sum : 0) + q(w[0]) + q(w[1]) + ... (the fixed-point rule of core/Atlas.hpp),
// up to 8 images per call. All views on one grid.
template <class Exec>
void atlasAccumulate(Exec const& exec, std::vector<ConstImageView<typename Exec::memory_space>> const& w,
                     FixedSum<typename Exec::memory_space> sum, bool accumulate);

// out = the mean of n terms whose fixed-point values sum to `sum`.
template <class Exec>
void atlasMean(Exec const& exec, FixedSum<typename Exec::memory_space> sum, int n,
               ImageView<typename Exec::memory_space> out);

// Median seconds of one sum over the ranks of `comm` of an int64 device buffer of `count` values
// (the path of comm's reduction(); staged through host memory when the transport does not read
// device memory), for the run-time model's T_network. A collective call; 0 for one process.
template <class Exec>
double atlasSumSeconds(Exec const& exec, AtlasComm* comm, std::size_t count, int repetitions);

// The atlas of this process's `images` (on the host, one grid; subjects run.first .. of run.total).
// `templ` receives the template (the same on every rank), `fields[i]` the full-grid displacement
// of local subject i (none when run.returnFields is false: they stay on the device and go). Extents, grids and the partition only are checked; parameters and NaN/Inf
// are the caller's (the job validates once).
template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields,
                       AtlasRun const& run = {});

}  // namespace kortex::gpu
