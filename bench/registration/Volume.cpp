// Registration benchmark: the inputs (the 3D Shepp-Logan phantom and the same under a smooth
// displacement) and their device copies.
#include "bench/registration/RegistrationBench.hpp"

#include "core/Phantom.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::bench::registration {

Volume makeVolume(Index n) {
  Volume v;
  v.fixed = sheppLogan3D(n);
  const auto uTrue = smoothDisplacement(v.fixed.geometry, 3.0, 1234 + n);
  v.moving = HostImage("kortex::bench::moving", v.fixed.geometry);
  // moving(x) = fixed(x + u(x)) so that registering moving to fixed recovers ... any smooth map:
  // the content only has to give the force kernels real work.
  VectorField<Kokkos::HostSpace> neg("kortex::bench::neg", v.fixed.geometry, 3);
  for (std::size_t i = 0; i < neg.data.size(); ++i) neg.data.data()[i] = -uTrue.data.data()[i];
  ref::warp(v.fixed.data, neg.data, v.moving.data);
  v.uMid = VectorField<Kokkos::HostSpace>("kortex::bench::uMid", v.fixed.geometry, 3);
  for (std::size_t i = 0; i < neg.data.size(); ++i) v.uMid.data.data()[i] = 0.5f * uTrue.data.data()[i];
  return v;
}

DeviceVolume upload(Volume const& h) {
  DeviceVolume d;
  d.moving = Kokkos::create_mirror_view_and_copy(Mem(), h.moving.data);
  d.samples = ri::buildSamples(Exec(), ConstImageView<Mem>(d.moving));
  Kokkos::fence();
  d.fixed = Kokkos::create_mirror_view_and_copy(Mem(), h.fixed.data);
  d.u = Kokkos::create_mirror_view_and_copy(Mem(), h.uMid.data);
  const auto& g = h.fixed.geometry;
  d.f = gpu::Field<Mem>("kortex::bench::f", 3, g.nz(), g.ny(), g.nx());
  d.v = gpu::Field<Mem>("kortex::bench::v", 3, g.nz(), g.ny(), g.nx());
  d.tmp = gpu::Field<Mem>("kortex::bench::tmp", 3, g.nz(), g.ny(), g.nx());
  d.u2 = gpu::Field<Mem>("kortex::bench::u2", 3, g.nz(), g.ny(), g.nx());
  d.e = ri::Extents{int(g.nx()), int(g.ny()), int(g.nz())};
  return d;
}

ri::ForceViews<Mem> forceViews(DeviceVolume& d, RegistrationVariant v) {
  if (v == RegistrationVariant::TwoPass && d.stress.extent(0) != std::size_t(ri::kStressComponents))
    d.stress = gpu::Field<Mem>("kortex::bench::stress", ri::kStressComponents, d.e.nz, d.e.ny, d.e.nx);
  return ri::ForceViews<Mem>{d.samples, d.fixed, d.u, d.f, d.stress};
}

}  // namespace kortex::bench::registration
