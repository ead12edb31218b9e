// `kortex register unbiased` and `kortex register greedy` (apps/Register.cpp).
#pragma once

#include <string>

#include "apps/Options.hpp"
#include "core/Registration.hpp"

namespace kortex::app {

struct RegisterOptions {
  std::string fixed, moving;
  std::string outWarped, outField, outJacobian, outAffine, outInverseField, outReport;
  RegistrationParams fluid;  // unbiased: --lambda, --sigma, --iterations bind here (defaults: the struct's)
  GreedyOptions greedy{greedyRegistrationDefaults()};  // greedy: the greedy flags (apps/Options.hpp)
  bool noAffine = false;
  std::string backend = "auto";
  std::string variant;  // empty: RegistrationParams' default
  bool quiet = false;
};

int cmdRegisterUnbiased(RegisterOptions const& o);
int cmdRegisterGreedy(RegisterOptions const& o);

}  // namespace kortex::app
