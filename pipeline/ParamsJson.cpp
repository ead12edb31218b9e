#include "pipeline/ParamsJson.hpp"

#include <cctype>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/Errors.hpp"

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

std::string shown(json const& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + s;
}

// Reads the keys of one object into a struct; every key read is known, done() refuses the rest.
class Reader {
 public:
  Reader(json const& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) throw InvalidArgument(what_ + " must be a JSON object, got " + shown(j_));
  }

  template <class T>
  Reader& number(const char* key, T& out) {
    if (json const* v = find(key)) {
      if (!v->is_number()) wrongType(key, "a number", *v);
      out = static_cast<T>(v->get<double>());
    }
    return *this;
  }
  Reader& integer(const char* key, int& out) {
    if (json const* v = find(key)) out = toInt(key, *v, "an integer");
    return *this;
  }
  Reader& integers(const char* key, std::vector<int>& out) {
    if (json const* v = find(key)) {
      if (!v->is_array()) wrongType(key, "a list of integers", *v);
      std::vector<int> r;
      for (json const& e : *v) r.push_back(toInt(key, e, "a list of integers"));
      out = std::move(r);
    }
    return *this;
  }
  Reader& flag(const char* key, bool& out) {
    if (json const* v = find(key)) {
      if (!v->is_boolean()) wrongType(key, "true or false", *v);
      out = v->get<bool>();
    }
    return *this;
  }
  template <class E, class Parse>
  Reader& choice(const char* key, E& out, Parse parse) {
    if (json const* v = find(key)) {
      if (!v->is_string()) wrongType(key, "a string", *v);
      try {
        out = parse(v->get<std::string>());
      } catch (InvalidArgument const& e) {
        throw InvalidArgument(what_ + ": '" + key + "': " + e.what());
      }
    }
    return *this;
  }
  template <class Params>
  Reader& object(const char* key, Params& out) {
    if (json const* v = find(key)) {
      if (!v->is_object()) wrongType(key, "a JSON object", *v);
      fromJson(*v, out);
    }
    return *this;
  }
  void done() const {
    for (auto const& item : j_.items()) {
      if (known_.count(item.key())) continue;
      std::string list;
      for (auto const& k : known_) list += (list.empty() ? "" : ", ") + k;
      throw InvalidArgument(what_ + ": unknown key '" + item.key() + "' (known: " + list + ")");
    }
  }

 private:
  json const* find(const char* key) {
    known_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  [[noreturn]] void wrongType(const char* key, const char* want, json const& v) const {
    throw InvalidArgument(what_ + ": '" + key + "' must be " + want + ", got " + shown(v));
  }
  int toInt(const char* key, json const& v, const char* want) const {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<int>::max())) wrongType(key, want, v);
      return int(v.get<std::uint64_t>());
    }
    if (!v.is_number_integer()) wrongType(key, want, v);
    const std::int64_t i = v.get<std::int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) wrongType(key, want, v);
    return int(i);
  }

  json const& j_;
  std::string what_;
  std::set<std::string> known_;
};

}  // namespace

json toJson(FluidParams const& p) { return {{"alpha", p.alpha}, {"beta", p.beta}, {"gamma", p.gamma}}; }

void fromJson(json const& j, FluidParams& result) {
  FluidParams out = result;  // result changes only when every key was read
  Reader(j, "fluid operator parameters").number("alpha", out.alpha).number("beta", out.beta).number("gamma", out.gamma).done();
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
            {"lncc_radius", p.lnccRadius}});
  return j;
}

void fromJson(json const& j, GreedyParams& result) {
  GreedyParams out = result;  // result changes only when every key was read
  Reader(j, "greedy parameters")
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
      .done();
  result = out;
}

json toJson(AtlasParams const& p) { return {{"greedy", toJson(p.greedy)}}; }

void fromJson(json const& j, AtlasParams& result) {
  AtlasParams out = result;  // result changes only when every key was read
  Reader(j, "atlas parameters").object("greedy", out.greedy).done();
  result = out;
}

json toJson(IntensityParams const& p) { return {{"p_low", p.pLow}, {"p_high", p.pHigh}}; }

void fromJson(json const& j, IntensityParams& result) {
  IntensityParams out = result;  // result changes only when every key was read
  Reader(j, "intensity window parameters").number("p_low", out.pLow).number("p_high", out.pHigh).done();
  result = out;
}

json toJson(AffineParams const& p) {
  return {{"levels", p.levels},
          {"iterations_per_level", p.iterationsPerLevel},
          {"max_step", p.maxStep},
          {"min_step", p.minStep},
          {"centre_of_mass", p.centreOfMass},
          {"normalise", p.normalise},
          {"intensity", toJson(p.intensity)}};
}

void fromJson(json const& j, AffineParams& result) {
  AffineParams out = result;  // result changes only when every key was read
  Reader(j, "affine parameters")
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
  Reader(j, "registration parameters")
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

}  // namespace kortex::pipeline
