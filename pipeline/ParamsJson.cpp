#include "pipeline/ParamsJson.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "pipeline/detail/JsonReader.hpp"

namespace kortex::pipeline {
namespace {

using nlohmann::json;

// "ScratchTiled" -> "scratch-tiled": the spelling the parse functions take.
std::string spelling(const char* name) {
  std::string s;
  for (const char* c = name; *c; ++c) {
    if (std::isupper(static_cast<unsigned char>(*c)) && c != name) s += '-';
    s += char(std::tolower(static_cast<unsigned char>(*c)));
  }
  return s;
}

using detail::JsonReader;
using detail::shown;

}  // namespace

json toJson(FluidParams const& p) { return {{"alpha", p.alpha}, {"beta", p.beta}, {"gamma", p.gamma}}; }

void fromJson(json const& j, FluidParams& result) {
  FluidParams out = result;  // result changes only when every key was read
  JsonReader(j, "fluid operator parameters").number("alpha", out.alpha).number("beta", out.beta).number("gamma", out.gamma).done();
  result = out;
}

json toJson(GreedyParams const& p) {
  json j = toJson(p.fluid);
  j.update({{"scales", p.scales},
            {"iterations", p.iterations},
            {"max_step", p.maxStep},
            {"min_step", p.minStep},
            {"solver", toString(p.solver)},
            {"cold_sweeps", p.coldSweeps},
            {"warm_sweeps", p.warmSweeps},
            {"cg_max_iterations", p.cgMaxIterations},
            {"cg_tolerance", p.cgTolerance},
            {"sor_variant", spelling(toString(p.sorVariant))},
            {"matvec_variant", spelling(toString(p.matvecVariant))},
            {"step_variant", spelling(toString(p.stepVariant))},
            {"record_residual", p.recordResidual},
            {"metric", toString(p.metric)},
            {"lncc_radius", p.lnccRadius},
            {"mi_bins", p.miBins}});
  return j;
}

void fromJson(json const& j, GreedyParams& result) {
  GreedyParams out = result;  // result changes only when every key was read
  JsonReader(j, "greedy parameters")
      .number("alpha", out.fluid.alpha)
      .number("beta", out.fluid.beta)
      .number("gamma", out.fluid.gamma)
      .integers("scales", out.scales)
      .integers("iterations", out.iterations)
      .number("max_step", out.maxStep)
      .number("min_step", out.minStep)
      .choice("solver", out.solver, parseGreedySolver)
      .integer("cold_sweeps", out.coldSweeps)
      .integer("warm_sweeps", out.warmSweeps)
      .integer("cg_max_iterations", out.cgMaxIterations)
      .number("cg_tolerance", out.cgTolerance)
      .choice("sor_variant", out.sorVariant, parseSorVariant)
      .choice("matvec_variant", out.matvecVariant, parseMatvecVariant)
      .choice("step_variant", out.stepVariant, parseGreedyStepVariant)
      .flag("record_residual", out.recordResidual)
      .choice("metric", out.metric, parseGreedyMetric)
      .integer("lncc_radius", out.lnccRadius)
      .integer("mi_bins", out.miBins)
      .done();
  result = out;
}

json toJson(AtlasParams const& p) { return {{"greedy", toJson(p.greedy)}}; }

void fromJson(json const& j, AtlasParams& result) {
  AtlasParams out = result;  // result changes only when every key was read
  JsonReader(j, "atlas parameters").object("greedy", out.greedy).done();
  result = out;
}

json toJson(IntensityParams const& p) { return {{"p_low", p.pLow}, {"p_high", p.pHigh}}; }

void fromJson(json const& j, IntensityParams& result) {
  IntensityParams out = result;  // result changes only when every key was read
  JsonReader(j, "intensity window parameters").number("p_low", out.pLow).number("p_high", out.pHigh).done();
  result = out;
}

json toJson(AffineParams const& p) {
  return {{"dof", toString(p.dof)},
          {"metric", toString(p.metric)},
          {"mi_bins", p.miBins},
          {"levels", p.levels},
          {"iterations_per_level", p.iterationsPerLevel},
          {"max_step", p.maxStep},
          {"min_step", p.minStep},
          {"centre_of_mass", p.centreOfMass},
          {"normalise", p.normalise},
          {"intensity", toJson(p.intensity)}};
}

void fromJson(json const& j, AffineParams& result) {
  AffineParams out = result;  // result changes only when every key was read
  JsonReader(j, "affine parameters")
      .choice("dof", out.dof, parseAffineDof)
      .choice("metric", out.metric, parseAffineMetric)
      .integer("mi_bins", out.miBins)
      .integer("levels", out.levels)
      .integer("iterations_per_level", out.iterationsPerLevel)
      .number("max_step", out.maxStep)
      .number("min_step", out.minStep)
      .flag("centre_of_mass", out.centreOfMass)
      .flag("normalise", out.normalise)
      .object("intensity", out.intensity)
      .done();
  result = out;
}

json toJson(RegistrationParams const& p) {
  return {{"lambda", p.lambda},       {"sigma", p.sigma},         {"iterations", p.iterations},
          {"max_step", p.maxStep},    {"min_step", p.minStep},    {"tolerance", p.tolerance},
          {"patience", p.patience},   {"variant", spelling(toString(p.variant))}};
}

void fromJson(json const& j, RegistrationParams& result) {
  RegistrationParams out = result;  // result changes only when every key was read
  JsonReader(j, "registration parameters")
      .number("lambda", out.lambda)
      .number("sigma", out.sigma)
      .integer("iterations", out.iterations)
      .number("max_step", out.maxStep)
      .number("min_step", out.minStep)
      .number("tolerance", out.tolerance)
      .integer("patience", out.patience)
      .choice("variant", out.variant, parseRegistrationVariant)
      .done();
  result = out;
}

namespace {
json numberOrInf(double v) { return std::isinf(v) && v > 0 ? json("inf") : json(v); }
}  // namespace

json toJson(BilateralParams const& p) {
  return {{"radius", p.radius}, {"sigma_spatial", p.sigmaSpatial}, {"sigma_range", numberOrInf(p.sigmaRange)},
          {"variant", spelling(toString(p.variant))}};
}

void fromJson(json const& j, BilateralParams& result) {
  BilateralParams out = result;
  JsonReader(j, "bilateral parameters")
      .integer("radius", out.radius)
      .number("sigma_spatial", out.sigmaSpatial)
      .numberOrInf("sigma_range", out.sigmaRange)
      .choice("variant", out.variant, parseBilateralVariant)
      .done();
  result = out;
}

json toJson(NlmParams const& p) {
  return {{"patch_radius", p.patchRadius}, {"search_radius", p.searchRadius}, {"h", p.h},
          {"variant", spelling(toString(p.variant))}};
}

void fromJson(json const& j, NlmParams& result) {
  NlmParams out = result;
  JsonReader(j, "NLM parameters")
      .integer("patch_radius", out.patchRadius)
      .integer("search_radius", out.searchRadius)
      .number("h", out.h)
      .choice("variant", out.variant, parseNlmVariant)
      .done();
  result = out;
}

json toJson(MultiresParams const& p) {
  return {{"levels", p.levels},
          {"radius", p.radius},
          {"sigma_spatial", p.sigmaSpatial},
          {"sigma_range", numberOrInf(p.sigmaRange)},
          {"bits", p.bits},
          {"filter", p.filter},
          {"concurrent_levels", p.concurrentLevels},
          {"pyramid", spelling(toString(p.pyramid))},
          {"bilateral", spelling(toString(p.bilateral))}};
}

void fromJson(json const& j, MultiresParams& result) {
  MultiresParams out = result;
  JsonReader(j, "multiresolution parameters")
      .integer("levels", out.levels)
      .integer("radius", out.radius)
      .number("sigma_spatial", out.sigmaSpatial)
      .numberOrInf("sigma_range", out.sigmaRange)
      .integer("bits", out.bits)
      .flag("filter", out.filter)
      .flag("concurrent_levels", out.concurrentLevels)
      .choice("pyramid", out.pyramid, parsePyramidVariant)
      .choice("bilateral", out.bilateral, parseMultiresBilateralVariant)
      .done();
  result = out;
}

json toJson(SurfaceNlmParams const& p) {
  return {{"band", p.band},     {"patch", p.patch},           {"neighbors", p.neighbors},
          {"c1", p.c1},         {"c2", p.c2},                 {"iterations", p.iterations},
          {"variant", spelling(toString(p.variant))}, {"pass_candidates", p.passCandidates}};
}

void fromJson(json const& j, SurfaceNlmParams& result) {
  SurfaceNlmParams out = result;
  JsonReader(j, "surface NLM parameters")
      .number("band", out.band)
      .integer("patch", out.patch)
      .integer("neighbors", out.neighbors)
      .number("c1", out.c1)
      .number("c2", out.c2)
      .integer("iterations", out.iterations)
      .choice("variant", out.variant, parseSurfaceNlmVariant)
      .integer("pass_candidates", out.passCandidates)
      .done();
  result = out;
}

}  // namespace kortex::pipeline
