// Kokkos unbiased fluid registration: entry points (checks, variant dispatch), the
// FluidRegistration driver (the spec's iteration, core/Registration.hpp) and explicit
// instantiation for every enabled execution space. Kernels: gpu/registration/detail/RegistrationKernels.hpp and
// gpu/RegistrationForce*.hpp.
#include "gpu/registration/Registration.hpp"
#include "core/Timing.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/Errors.hpp"
#include "gpu/registration/detail/Force.hpp"

namespace kortex::gpu {

namespace ri = registration_detail;

namespace {

template <class Img>
ri::Extents imageExtents(Img const& img) {
  return ri::Extents{static_cast<int>(img.extent(2)), static_cast<int>(img.extent(1)),
                     static_cast<int>(img.extent(0))};
}

// Extents of a field (components, nz, ny, nx) as a grid; any number of components.
template <class F>
ri::Extents fieldGrid(F const& f) {
  return ri::Extents{static_cast<int>(f.extent(3)), static_cast<int>(f.extent(2)),
                     static_cast<int>(f.extent(1))};
}

template <class F>
void checkFieldIndexable(F const& f, const char* what) {
  if (f.data() == nullptr) throw InvalidArgument(std::string(what) + ": field is not allocated");
  if (f.size() == 0) throw InvalidArgument(std::string(what) + ": field is empty");
  for (int r = 1; r < 4; ++r)
    if (f.extent(r) > static_cast<std::size_t>(INT_MAX / 4))
      throw InvalidArgument(std::string(what) + ": field extents " + ri::fieldExtents(f) +
                            " are too large for 32-bit indexing");
}

template <class F>
void checkThreeComponents(F const& f, const char* what, const char* name) {
  if (f.extent(0) != 3)
    throw InvalidArgument(std::string(what) + ": " + name + " extents " + ri::fieldExtents(f) +
                          " must have 3 components (3, nz, ny, nx)");
}


}  // namespace

template <class Exec>
RegistrationEnergy registrationForce(Exec const& exec,
                                     ConstImageView<typename Exec::memory_space> moving,
                                     ConstImageView<typename Exec::memory_space> fixed,
                                     ConstField<typename Exec::memory_space> u,
                                     Field<typename Exec::memory_space> f,
                                     RegistrationParams const& params) {
  const ri::Extents e = ri::checkForceInputs(moving, fixed, u, f);
  const ri::ForceLaunchInfo info = ri::forceLaunchInfo(exec, e, params.variant);
  const auto samples = ri::buildSamples(exec, moving);
  return ri::computeForce(exec, ri::ForceViews<typename Exec::memory_space>{samples, fixed, u, f}, e,
                          params.lambda, info);
}

template <class Exec>
void gaussianSmooth(Exec const& exec, ConstField<typename Exec::memory_space> in,
                    Field<typename Exec::memory_space> out, Field<typename Exec::memory_space> tmp,
                    float sigma) {
  const char* what = "registration smoothing";
  checkFieldIndexable(in, what);
  ri::checkSameField(in, out, what, "input", "output");
  ri::checkSameField(in, tmp, what, "input", "temporary");
  ri::checkNoOverlap(in, out, what, "input", "output");
  ri::checkNoOverlap(tmp, out, what, "temporary", "output");
  ri::checkNoOverlap(in, tmp, what, "input", "temporary");
  const ri::GaussianTaps taps = ri::gaussianTaps(sigma);
  ri::smooth(exec, in, out, tmp, taps);
}

template <class Exec>
double updateRate(Exec const& exec, ConstField<typename Exec::memory_space> u,
                  ConstField<typename Exec::memory_space> v,
                  Field<typename Exec::memory_space> rate) {
  const char* what = "registration update rate";
  checkFieldIndexable(u, what);
  checkThreeComponents(u, what, "displacement u");
  ri::checkSameField(u, v, what, "displacement u", "velocity v");
  ri::checkSameField(u, rate, what, "displacement u", "rate");
  ri::checkNoOverlap(u, rate, what, "displacement u", "rate");
  ri::checkNoOverlap(v, rate, what, "velocity v", "rate");
  return ri::rate(exec, u, v, rate, fieldGrid(u));
}

template <class Exec>
void applyUpdate(Exec const& exec, ConstField<typename Exec::memory_space> u,
                 ConstField<typename Exec::memory_space> rate, float dt,
                 Field<typename Exec::memory_space> uOut) {
  // Element-wise: uOut may be u itself (in-place update).
  const char* what = "registration update";
  checkFieldIndexable(u, what);
  ri::checkSameField(u, rate, what, "displacement u", "rate");
  ri::checkSameField(u, uOut, what, "displacement u", "output");
  if (!std::isfinite(dt)) throw InvalidArgument("registration update: dt must be finite");
  ri::update(exec, u, rate, dt, uOut);
}

template <class Exec>
void jacobianDeterminant(Exec const& exec, ConstField<typename Exec::memory_space> u,
                         ImageView<typename Exec::memory_space> out) {
  const char* what = "registration Jacobian determinant";
  if (out.data() == nullptr || out.size() == 0)
    throw InvalidArgument("registration Jacobian determinant: output is not allocated");
  const ri::Extents e = imageExtents(out);
  checkFieldIndexable(u, what);
  ri::checkField(u, e, what, "displacement u");
  ri::checkNoOverlap(u, out, what, "displacement u", "output");
  Kokkos::parallel_for(
      "kortex::Registration::jacobian",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, e.voxels()),
      ri::JacobianFunctor<typename Exec::memory_space>{u, out, e});
}

// ---- FluidRegistration
// ---------------------------------------------------------------------------

template <class Exec>
FluidRegistration<Exec>::FluidRegistration(Exec const& exec, Geometry const& grid,
                                           RegistrationParams const& params)
    : exec_(exec), grid_(grid), params_(params) {
  // What sizes the workspace (the job validated the parameters): a 3D grid of at least
  // RegistrationParams::kMinExtent per axis, and taps the smoothing kernels hold.
  ri::checkGridShape(grid.nx(), grid.ny(), grid.nz(), "registration");
  ri::gaussianTaps(params.sigma);
  const Index nx = grid.nx(), ny = grid.ny(), nz = grid.nz();
  f_ = Field<memory_space>("kortex::Registration::force", 3, nz, ny, nx);
  v_ = Field<memory_space>("kortex::Registration::velocity", 3, nz, ny, nx);
  tmp_ = Field<memory_space>("kortex::Registration::scratchField", 3, nz, ny, nx);
  candidate_ = Field<memory_space>("kortex::Registration::candidate", 3, nz, ny, nx);
  if (params.variant == RegistrationVariant::TwoPass)
    stress_ = Field<memory_space>("kortex::Registration::stress", ri::kStressComponents, nz, ny, nx);
}

// The spec's iteration with four work fields and no copies per iteration:
//   F (force at the current u; after smoothing reused as the rate), T (force at the candidate; the
//   smoothing's temporary before), v_ (smoothed force, where the smoothing's radius has no fused
//   z-and-rate kernel), cand (candidate u).
// An accepted candidate swaps the handles (cur <-> cand, F <-> T): its force, already computed
// for the acceptance test, is the next iteration's force. The result is copied into the
// caller's `u` at the end when the last accepted field lives in the candidate buffer.
template <class Exec>
RegistrationResult FluidRegistration<Exec>::run(ConstImageView<memory_space> moving,
                                                ConstImageView<memory_space> fixed,
                                                Field<memory_space> u,
                                                RegistrationProgress const& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const char* what = "registration";
  const ri::Extents e = ri::checkForceInputs(moving, fixed, u, f_);
  if (e.nx != grid_.nx() || e.ny != grid_.ny() || e.nz != grid_.nz())
    throw InvalidArgument(std::string(what) + ": images (" + std::to_string(e.nx) + "x" +
                          std::to_string(e.ny) + "x" + std::to_string(e.nz) +
                          ") do not match the workspace grid (" + describe(grid_) + ")");
  for (auto const* w : {&f_, &v_, &tmp_, &candidate_})
    ri::checkNoOverlap(u, *w, what, "displacement u", "the registration workspace");

  const ri::ForceLaunchInfo info = ri::forceLaunchInfo(exec_, e, params_.variant);
  const ri::GaussianTaps taps = ri::gaussianTaps(params_.sigma);
  using Views = ri::ForceViews<memory_space>;

  Field<memory_space> cur = u, cand = candidate_, F = f_, T = tmp_;
  const auto samples = ri::buildSamples(exec_, moving);  // T is fixed: its gradient once
  RegistrationResult result;
  RegistrationEnergy E =
      ri::computeForce(exec_, Views{samples, fixed, cur, F, stress_}, e, params_.lambda, info);
  if (E.folded())
    throw InvalidArgument("registration: the initial displacement field folds (min det J = " +
                          std::to_string(E.minJacobian) + " <= 0)");
  result.initial = E;
  result.stop = StopReason::IterationCap;

  float delta = params_.maxStep;
  int streak = 0;
  bool stopped = false;
  for (int it = 1; it <= params_.iterations && !stopped; ++it) {
    const double m = ri::smoothRate(exec_, ConstField<memory_space>(F), cur, v_, F, T, taps, e);  // F now holds the rate
    if (!std::isfinite(m))
      throw std::runtime_error("registration: the update rate is not finite at iteration " +
                               std::to_string(it) + " (force overflow near a nearly folded voxel)");
    result.iterations = it;
    RegistrationIteration rec;
    rec.iteration = it;
    rec.energy = E;
    // The schedule caps the step: delta_k = min(delta, cap_k).
    const float cap = static_cast<float>(registrationStepSchedule(params_.maxStep, it, params_.iterations));
    delta = std::min(delta, cap);
    rec.step = delta;
    if (m == 0.0) {
      result.stop = StopReason::ZeroVelocity;
      stopped = true;
    } else {
      while (true) {
        const float dt = static_cast<float>(static_cast<double>(delta) / m);
        rec.step = delta;
        const RegistrationEnergy Ec =  // the candidate cur + dt * rate into cand, its force into T
            ri::computeForce(exec_, Views{samples, fixed, cur, T, stress_, F, dt, cand}, e, params_.lambda, info);
        if (Ec.minJacobian > 0.0f && Ec.total < E.total) {
          const double decrease = (E.total - Ec.total) / E.total;
          std::swap(cur, cand);
          std::swap(F, T);
          E = Ec;
          rec.accepted = true;
          rec.energy = E;
          ++result.accepted;
          delta = std::min(2.0f * delta, cap);  // regrowth up to the schedule (spec)
          streak = decrease < params_.tolerance ? streak + 1 : 0;
          if (streak >= params_.patience) {
            result.stop = StopReason::Converged;
            stopped = true;
          }
          break;
        }
        ++rec.rejected;
        ++result.rejected;
        delta *= 0.5f;
        if (delta < params_.minStep) {
          result.stop = StopReason::StepUnderflow;
          stopped = true;
          break;
        }
      }
    }
    rec.seconds = secondsSince(t0);
    result.history.push_back(rec);
    if (progress) progress(rec);
  }

  if (cur.data() != u.data()) Kokkos::deep_copy(exec_, u, cur);
  exec_.fence();
  result.final = E;
  result.seconds = secondsSince(t0);
  return result;
}

template <class Exec>
RegistrationResult fluidRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                                 VectorField<Kokkos::HostSpace>& u,
                                 RegistrationParams const& params,
                                 RegistrationProgress const& progress) {
  using Mem = typename Exec::memory_space;
  if (!moving.geometry.sameGrid(fixed.geometry))
    throw InvalidArgument("registration: the moving image (" + describe(moving.geometry) +
                          ") and the fixed image (" + describe(fixed.geometry) +
                          ") must be on the same grid");
  const Geometry& g = fixed.geometry;
  if (u.data.extent(0) != 3 || u.data.extent(1) != static_cast<std::size_t>(g.nz()) ||
      u.data.extent(2) != static_cast<std::size_t>(g.ny()) ||
      u.data.extent(3) != static_cast<std::size_t>(g.nx()))
    throw InvalidArgument("registration: the displacement field extents " +
                          ri::fieldExtents(u.data) + " must be (3," + std::to_string(g.nz()) + "," +
                          std::to_string(g.ny()) + "," + std::to_string(g.nx()) + ")");
  auto dMoving = Kokkos::create_mirror_view_and_copy(Mem(), moving.data);
  auto dFixed = Kokkos::create_mirror_view_and_copy(Mem(), fixed.data);
  auto dU = Kokkos::create_mirror_view_and_copy(Mem(), u.data);
  FluidRegistration<Exec> reg(exec, g, params);
  RegistrationResult r = reg.run(dMoving, dFixed, dU, progress);
  Kokkos::deep_copy(u.data, dU);
  return r;
}

#define KORTEX_INSTANTIATE_REGISTRATION(SPACE)                                                    \
  template RegistrationEnergy registrationForce<SPACE>(                                           \
      SPACE const&, ConstImageView<SPACE::memory_space>, ConstImageView<SPACE::memory_space>,     \
      ConstField<SPACE::memory_space>, Field<SPACE::memory_space>, RegistrationParams const&);    \
  template void gaussianSmooth<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,              \
                                      Field<SPACE::memory_space>, Field<SPACE::memory_space>,     \
                                      float);                                                     \
  template double updateRate<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,                \
                                    ConstField<SPACE::memory_space>, Field<SPACE::memory_space>); \
  template void applyUpdate<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,                 \
                                   ConstField<SPACE::memory_space>, float,                        \
                                   Field<SPACE::memory_space>);                                   \
  template void jacobianDeterminant<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,         \
                                           ImageView<SPACE::memory_space>);                       \
  template class FluidRegistration<SPACE>;                                                        \
  template RegistrationResult fluidRegister<SPACE>(                                               \
      SPACE const&, HostImage const&, HostImage const&, VectorField<Kokkos::HostSpace>&,          \
      RegistrationParams const&, RegistrationProgress const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_REGISTRATION(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_REGISTRATION(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_REGISTRATION(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_REGISTRATION(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_REGISTRATION

}  // namespace kortex::gpu
