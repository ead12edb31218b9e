// Force variants of the Kokkos unbiased fluid registration: forceLaunchInfo chooses a variant's
// launch (tile, chunk, team size), computeForce runs it (f = -dE/du and E(u)). The variants
// specialise ForceKernel in detail/ForceNaive.hpp, ForceRecompute.hpp, ForceReuse.hpp and ForceTwoPass.hpp.
// Benchmarks and tests include this header to pick a variant and tile explicitly.
#pragma once

#include <string>

#include "core/Errors.hpp"
#include "core/Registration.hpp"
#include "gpu/registration/detail/ForceNaive.hpp"
#include "gpu/registration/detail/ForceRecompute.hpp"
#include "gpu/registration/detail/ForceReuse.hpp"
#include "gpu/registration/detail/ForceTwoPass.hpp"
#include "gpu/registration/detail/RegistrationKernels.hpp"

namespace kortex::gpu::registration_detail {

template <class Exec>
ForceLaunchInfo forceLaunchInfo(Exec const& exec, Extents const& e, RegistrationVariant v,
                                ForceTile const& requested = {}) {
  switch (v) {
    case RegistrationVariant::Naive:
      return ForceKernel<RegistrationVariant::Naive, Exec>::info(exec, e, requested);
    case RegistrationVariant::Recompute:
      return ForceKernel<RegistrationVariant::Recompute, Exec>::info(exec, e, requested);
    case RegistrationVariant::Reuse:
      return ForceKernel<RegistrationVariant::Reuse, Exec>::info(exec, e, requested);
    case RegistrationVariant::TwoPass:
      return ForceKernel<RegistrationVariant::TwoPass, Exec>::info(exec, e, requested);
  }
  throw InvalidArgument("registration: unknown force variant " +
                        std::to_string(static_cast<int>(v)));
}

template <class Exec>
ForceLaunchInfo forceLaunchInfo(Exec const& exec, Index nx, Index ny, Index nz,
                                RegistrationVariant v, ForceTile const& requested = {}) {
  return forceLaunchInfo(exec,
                         Extents{static_cast<int>(nx), static_cast<int>(ny), static_cast<int>(nz)},
                         v, requested);
}

template <class Exec>
bool fusesUpdate(RegistrationVariant v) {
  switch (v) {
    case RegistrationVariant::Naive: return ForceKernel<RegistrationVariant::Naive, Exec>::kFusesUpdate;
    case RegistrationVariant::Recompute: return ForceKernel<RegistrationVariant::Recompute, Exec>::kFusesUpdate;
    case RegistrationVariant::Reuse: return ForceKernel<RegistrationVariant::Reuse, Exec>::kFusesUpdate;
    case RegistrationVariant::TwoPass: return ForceKernel<RegistrationVariant::TwoPass, Exec>::kFusesUpdate;
  }
  return false;
}

// f = -dE/du and E(u) with the given launch (from forceLaunchInfo). No checks: callers check.
// With views.rate set: f and E at the candidate u + dt * rate, which is written to views.uOut (disjoint
// from u, rate and f); a variant whose kernel does not form it while loading (kFusesUpdate) gets it from
// update() first.
template <class Exec>
RegistrationEnergy computeForce(Exec const& exec,
                                ForceViews<typename Exec::memory_space> const& given,
                                Extents const& e, double lambda, ForceLaunchInfo const& info) {
  const float lam = static_cast<float>(lambda);
  ForceViews<typename Exec::memory_space> views = given;
  if (views.updating() && !fusesUpdate<Exec>(info.variant)) {
    update(exec, views.u, views.rate, views.dt, views.uOut);
    views.u = views.uOut;
    views.rate = {};
  }
  EnergySums s;
  switch (info.variant) {
    case RegistrationVariant::Naive:
      s = ForceKernel<RegistrationVariant::Naive, Exec>::launch(exec, views, e, lam, info);
      break;
    case RegistrationVariant::Recompute:
      s = ForceKernel<RegistrationVariant::Recompute, Exec>::launch(exec, views, e, lam, info);
      break;
    case RegistrationVariant::Reuse:
      s = ForceKernel<RegistrationVariant::Reuse, Exec>::launch(exec, views, e, lam, info);
      break;
    case RegistrationVariant::TwoPass:
      s = ForceKernel<RegistrationVariant::TwoPass, Exec>::launch(exec, views, e, lam, info);
      break;
    default:
      throw InvalidArgument("registration: unknown force variant " +
                            std::to_string(static_cast<int>(info.variant)));
  }
  return finishSums(s, lambda);
}

// Checks for registrationForce: images on one 3D grid, u and f fields on it, f disjoint from
// every input.
template <class Img, class U, class F>
Extents checkForceInputs(Img const& moving, Img const& fixed, U const& u, F const& f) {
  const char* what = "registration force";
  checkSameImage(moving, fixed, what, "moving image", "fixed image");
  const Extents e = checkGrid(fixed, what);
  checkField(u, e, what, "displacement u");
  checkField(f, e, what, "force f");
  checkNoOverlap(u, f, what, "displacement u", "force f");
  checkNoOverlap(moving, f, what, "moving image", "force f");
  checkNoOverlap(fixed, f, what, "fixed image", "force f");
  return e;
}

}  // namespace kortex::gpu::registration_detail
