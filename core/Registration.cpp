#include "core/Registration.hpp"

#include <cmath>
#include <limits>

#include "core/Errors.hpp"

namespace kortex {

RegistrationVariant parseRegistrationVariant(std::string const& s) {
  if (s == "naive") return RegistrationVariant::Naive;
  if (s == "recompute") return RegistrationVariant::Recompute;
  if (s == "reuse") return RegistrationVariant::Reuse;
  if (s == "two-pass") return RegistrationVariant::TwoPass;
  throw InvalidArgument("unknown registration variant '" + s + "' (expected naive|recompute|reuse|two-pass)");
}

const char* toString(RegistrationVariant v) {
  switch (v) {
    case RegistrationVariant::Naive: return "Naive";
    case RegistrationVariant::Recompute: return "Recompute";
    case RegistrationVariant::Reuse: return "Reuse";
    case RegistrationVariant::TwoPass: return "TwoPass";
  }
  return "?";
}

int smoothingRadius(float sigma) { return static_cast<int>(std::ceil(3.0 * double(sigma))); }

void RegistrationParams::validate() const {
  if (!(lambda >= 0.0) || !std::isfinite(lambda))
    throw InvalidArgument("registration lambda must be finite and >= 0, got " + std::to_string(lambda));
  if (!(sigma > 0.0f) || !std::isfinite(sigma) || smoothingRadius(sigma) > kMaxRadius)
    throw InvalidArgument("registration sigma must be in (0, " + std::to_string(kMaxRadius / 3) +
                          "] voxels, got " + std::to_string(sigma));
  if (iterations < 0 || iterations > kMaxIterations)
    throw InvalidArgument("registration iterations must be in [0, " + std::to_string(kMaxIterations) + "], got " +
                          std::to_string(iterations));
  if (!(maxStep > 0.0f) || !std::isfinite(maxStep) || maxStep > 4.0f)
    throw InvalidArgument("registration max step must be in (0, 4] voxels, got " + std::to_string(maxStep));
  if (!(minStep > 0.0f) || !(minStep <= maxStep))
    throw InvalidArgument("registration min step must be in (0, max step], got " + std::to_string(minStep));
  if (!(tolerance >= 0.0) || !std::isfinite(tolerance))
    throw InvalidArgument("registration tolerance must be finite and >= 0, got " + std::to_string(tolerance));
  if (patience < 1)
    throw InvalidArgument("registration patience must be >= 1, got " + std::to_string(patience));
}

void RegistrationParams::validateFor(Geometry const& g) const {
  validate();
  if (g.dimension != 3)
    throw InvalidArgument("registration needs 3D images, got " + describe(g));
  for (int a = 0; a < 3; ++a)
    if (g.size[a] < kMinExtent)
      throw InvalidArgument("registration needs every extent >= " + std::to_string(kMinExtent) +
                            ", got " + describe(g));
}

RegistrationEnergy finishEnergy(double data, double reg, float minJacobian, double lambda) {
  RegistrationEnergy e;
  e.data = data;
  e.reg = reg;
  e.minJacobian = minJacobian;
  const double total = data + lambda * reg;
  e.total = (e.folded() || !std::isfinite(total)) ? std::numeric_limits<double>::infinity() : total;
  return e;
}

double registrationStepSchedule(float maxStep, int k, int K) {
  const double pi = 3.14159265358979323846;
  return 0.5 * double(maxStep) * (1.0 + std::cos(pi * double(k - 1) / double(K > 0 ? K : 1)));
}

const char* toString(StopReason r) {
  switch (r) {
    case StopReason::Converged: return "converged";
    case StopReason::IterationCap: return "iteration-cap";
    case StopReason::StepUnderflow: return "step-underflow";
    case StopReason::ZeroVelocity: return "zero-velocity";
  }
  return "?";
}

std::string explain(StopReason r) {
  switch (r) {
    case StopReason::Converged:
      return "converged: the relative energy decrease stayed below the tolerance";
    case StopReason::IterationCap:
      return "stopped at the iteration cap (raise the iteration cap to continue)";
    case StopReason::StepUnderflow:
      return "stopped: no step down to the minimum step lowered the energy without folding the "
             "Jacobian; the last valid field (det J > 0 everywhere) is kept";
    case StopReason::ZeroVelocity:
      return "converged: the smoothed force is zero everywhere";
  }
  return "?";
}

}  // namespace kortex
