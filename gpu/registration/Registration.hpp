// Kokkos unbiased fluid registration (specification: core/Registration.hpp). Every kernel is an
// entry point of its own, so that tests compare each with the CPU reference:
//   registrationForce - the spec's force f = f_data + lambda f_reg and E(u), variant from
//                       RegistrationParams::variant (Naive | Recompute | Reuse, see
//                       core/Registration.hpp and gpu/registration/detail/Force*.hpp); builds the
//                       template's interleaved samples per call (FluidRegistration::run: once);
//   gaussianSmooth    - separable Gaussian per component;
//   updateRate        - rate = v - (grad u) v and max |rate|;
//   applyUpdate       - u' = u + dt rate;
//   jacobianDeterminant.
// The warp T(x - u(x)) is gpu/imageops' `warp` (shared with the greedy and atlas modules).
// FluidRegistration allocates its workspace once and runs the spec's iteration. Functions that
// return a value fence `exec`; the others enqueue and return. Extents are checked at run time
// (InvalidArgument). Explicitly instantiated for every enabled execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "gpu/Fields.hpp"
#include "gpu/imageops/ImageOps.hpp"

namespace kortex::gpu {

template <class Exec>
RegistrationEnergy registrationForce(Exec const& exec,
                                     ConstImageView<typename Exec::memory_space> moving,
                                     ConstImageView<typename Exec::memory_space> fixed,
                                     ConstField<typename Exec::memory_space> u,
                                     Field<typename Exec::memory_space> f,
                                     RegistrationParams const& params);

// `tmp` has the extents of `in` (one intermediate pass); `out` may not alias `in` or `tmp`.
template <class Exec>
void gaussianSmooth(Exec const& exec, ConstField<typename Exec::memory_space> in,
                    Field<typename Exec::memory_space> out, Field<typename Exec::memory_space> tmp,
                    float sigma);

template <class Exec>
double updateRate(Exec const& exec, ConstField<typename Exec::memory_space> u,
                  ConstField<typename Exec::memory_space> v, Field<typename Exec::memory_space> rate);

template <class Exec>
void applyUpdate(Exec const& exec, ConstField<typename Exec::memory_space> u,
                 ConstField<typename Exec::memory_space> rate, float dt,
                 Field<typename Exec::memory_space> uOut);

template <class Exec>
void jacobianDeterminant(Exec const& exec, ConstField<typename Exec::memory_space> u,
                         ImageView<typename Exec::memory_space> out);

// Workspace (f, v, rate, candidate u, smoothing temporary) for one grid, allocated once.
template <class Exec>
class FluidRegistration {
 public:
  using memory_space = typename Exec::memory_space;
  FluidRegistration(Exec const& exec, Geometry const& grid, RegistrationParams const& params);
  // Runs the spec's iteration on `u` (initial field in, result out; on `exec`'s memory space).
  RegistrationResult run(ConstImageView<memory_space> moving, ConstImageView<memory_space> fixed,
                         Field<memory_space> u, RegistrationProgress const& progress = {});
  RegistrationParams const& params() const { return params_; }

 private:
  Exec exec_;
  Geometry grid_;
  RegistrationParams params_;
  Field<memory_space> f_, v_, tmp_, candidate_;
  Field<memory_space> stress_;  // the TwoPass force's stress field (9 components), else empty
};

// Convenience: copies host images to the device, runs, copies the field back into `u`.
template <class Exec>
RegistrationResult fluidRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                                 VectorField<Kokkos::HostSpace>& u, RegistrationParams const& params,
                                 RegistrationProgress const& progress = {});

}  // namespace kortex::gpu
