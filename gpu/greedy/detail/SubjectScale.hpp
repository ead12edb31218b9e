// A subject's state on one scale grid of the greedy multi-scale rule (core/Greedy.hpp): its scale
// image I (the full-grid image blurred and down-sampled), I warped by its displacement (W), the
// displacement u and the velocity v, both carried from the previous scale (up-sampled). The
// greedy registration (gpu/greedy/Greedy.cpp) holds one for the moving image per scale, the atlas
// (gpu/atlas/Atlas.cpp) one per subject; each warps W by its own rule.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"
#include "gpu/greedy/Greedy.hpp"

namespace kortex::gpu::greedy_detail {

template <class Mem>
struct SubjectScale {
  ImageView<Mem> I, W;
  Field<Mem> u, v;  // v empty: the owner shares one velocity between its subjects
};

// How SubjectScale's Views are allocated: their labels (an empty label: that View is not
// allocated here) and whether they are zero-filled, images and fields apart.
struct SubjectScaleViews {
  std::string I, W, u, v;
  bool zeroImages = true, zeroFields = true;
};

template <class View, class... Extents>
View subjectView(std::string const& label, bool zero, Extents... n) {
  if (zero) return View(label, n...);
  return View(Kokkos::view_alloc(label, Kokkos::WithoutInitializing), n...);
}

// The Views of a subject on the scale grid `e`, allocated in the order I, W, u, v.
template <class Mem>
SubjectScale<Mem> allocateSubjectScale(GridExtents e, SubjectScaleViews const& views) {
  SubjectScale<Mem> s;
  if (!views.I.empty()) s.I = subjectView<ImageView<Mem>>(views.I, views.zeroImages, e.nz, e.ny, e.nx);
  if (!views.W.empty()) s.W = subjectView<ImageView<Mem>>(views.W, views.zeroImages, e.nz, e.ny, e.nx);
  if (!views.u.empty()) s.u = subjectView<Field<Mem>>(views.u, views.zeroFields, 3, e.nz, e.ny, e.nx);
  if (!views.v.empty()) s.v = subjectView<Field<Mem>>(views.v, views.zeroFields, 3, e.nz, e.ny, e.nx);
  return s;
}

// next.u (and next.v where `next` holds one) up-sampled from `prev`'s on the scale-`from` grid.
template <class Exec, class Mem = typename Exec::memory_space>
void carryFields(Exec const& exec, SubjectScale<Mem> const& prev, int from, int to, SubjectScale<Mem> const& next) {
  upsampleField(exec, ConstField<Mem>(prev.u), from, to, next.u);
  if (next.v.data() != nullptr) upsampleField(exec, ConstField<Mem>(prev.v), from, to, next.v);
}

// next.u and next.v zero (the first scale: nothing came before).
template <class Exec, class Mem = typename Exec::memory_space>
void zeroFields(Exec const& exec, SubjectScale<Mem> const& next) {
  Kokkos::deep_copy(exec, next.u, 0.0f);
  if (next.v.data() != nullptr) Kokkos::deep_copy(exec, next.v, 0.0f);
}

}  // namespace kortex::gpu::greedy_detail
