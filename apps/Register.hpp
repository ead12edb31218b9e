// `kortex register unbiased` (apps/Register.cpp).
#pragma once

#include <string>

#include "core/Registration.hpp"

namespace kortex::app {

struct RegisterOptions {
  std::string fixed, moving;
  std::string outWarped, outField, outJacobian, outAffine;
  RegistrationParams fluid;  // --lambda, --sigma, --iterations bind here (defaults: the struct's)
  bool noAffine = false;
  std::string backend = "auto";
  std::string variant;  // empty: RegistrationParams' default
  bool quiet = false;
};

int cmdRegisterUnbiased(RegisterOptions const& o);

}  // namespace kortex::app
