// Kokkos unbiased atlas construction on one device (specification: core/Atlas.hpp). Every subject's
// state stays on the device: its scale image I_i, warped image W_i, displacement u_i and velocity v_i
// (32 B per voxel and subject), plus the template, its double sum, the previous template, a force,
// a candidate field and the mean displacement (with its double sum) shared by all subjects. The
// per-subject step uses the greedy registration's entry points (force, fluid solve, max |v|,
// composition, min det, warp); the template and the mean displacement are summed by an n-ary pass
// over up to eight subjects at a time, in double and in subject order.
#pragma once

#include <Kokkos_Core.hpp>

#include <vector>

#include "core/Atlas.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

// sum (double) = (accumulate ? sum : 0) + w[0] + w[1] + ... (in that order), up to 8 images per
// call; then `out` = float(sum / n) when `out` is allocated. All views on one grid.
template <class Exec>
void atlasAccumulate(Exec const& exec, std::vector<ConstImageView<typename Exec::memory_space>> const& w,
                     Kokkos::View<double***, Kokkos::LayoutRight, typename Exec::memory_space> sum, bool accumulate,
                     int n, ImageView<typename Exec::memory_space> out);

// The whole atlas (images on the host, one grid, >= 2; copied to the device). `templ` receives the
// template, `fields[i]` the full-grid displacement of subject i. Extents and grids only are checked;
// parameters and NaN/Inf are the caller's (the job validates once).
template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields,
                       AtlasProgress const& progress = {});

}  // namespace kortex::gpu
