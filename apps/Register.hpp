// `kortex register unbiased` and `kortex register greedy` (apps/Register.cpp).
#pragma once

#include <string>
#include <vector>

#include "apps/Options.hpp"
#include "core/Registration.hpp"
#include "pipeline/RegisterCohort.hpp"

namespace kortex::app {

struct RegisterOptions {
  std::string fixed, fixedMask, movingMask;  // greedy: the affine stage's masks
  std::vector<std::string> moving;  // greedy: several make a cohort (pipeline/RegisterCohort.hpp)
  std::string outWarped, outField, outJacobian, outAffine, outInverseField, outComposite, outReport;
  std::string qcDir;  // --qc: the QC report's folder
  std::string qcLabels, qcFixedLabels;  // --qc-labels, --qc-fixed-labels: label maps the report draws
  // Greedy cohorts: --list, --out-dir, --keep-going, --max-memory; which outputs were asked for
  // (the output flags without a file name: named after each moving image in --out-dir).
  std::string list, outDir;
  bool keepGoing = false;
  double maxMemoryMiB = 0.0;
  pipeline::CohortOutputs asked;  // the output flags given, with or without a file name
  RegistrationParams fluid;  // unbiased: --lambda, --sigma, --iterations bind here (defaults: the struct's)
  GreedyOptions greedy{greedyRegistrationDefaults()};  // greedy: the greedy flags (apps/Options.hpp)
  bool noAffine = false;
  std::string transform = "deformable";  // greedy: rigid|similarity|affine|deformable
  bool symmetric = false;                // greedy: --symmetric
  std::string affineMetric = "ncc";      // the affine stage's metric: ncc|mi
  int miBins = 32;                       // its MI bins
  double biasCorrectMm = 0.0;            // --bias-correct: both images bias-corrected first; 0: not
  std::string backend = "auto";
  std::string variant;  // empty: RegistrationParams' default
  bool quiet = false;
};

int cmdRegisterUnbiased(RegisterOptions const& o);
int cmdRegisterGreedy(RegisterOptions const& o);

}  // namespace kortex::app
