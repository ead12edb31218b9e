// `kortex register unbiased` (apps/Register.cpp).
#pragma once

#include <string>

namespace kortex::app {

struct RegisterOptions {
  std::string fixed, moving;
  std::string outWarped, outField, outJacobian, outAffine;
  double lambda = 1.0;   // = RegistrationParams' defaults (core/Registration.hpp)
  float sigma = 2.0f;
  int iterations = 300;
  bool noAffine = false;
  std::string backend = "auto";
  std::string variant;  // empty: the default (reuse)
  bool quiet = false;
};

int cmdRegisterUnbiased(RegisterOptions const& o);

}  // namespace kortex::app
