// The JSON form of the algorithms' parameter structs: one toJson / fromJson per struct, used by
// every writer and reader of parameters (atlas checkpoints, the validation and bench reports, the
// Python package), so that a field is named once.
//
// Keys are the fields in snake_case; enums are written with the spelling their parse function
// takes ("fft", "scratch-tiled", "recompute"); GreedyParams is flat (its fluid operator's alpha,
// beta, gamma beside the schedule), AffineParams holds its "intensity" object, AtlasParams its
// "greedy" object.
//
// fromJson reads what toJson writes into `out`: a key that is absent keeps out's value (start from
// the defaults), an unknown key or a value of the wrong type (a string for a number, 2.5 for an
// integer, a number for a flag, a misspelt enum) throws InvalidArgument with one message naming
// the key ("greedy parameters: unknown key 'alpah' (known: alpha, beta, ...)"). An infinite
// sigma_range (bilateral, multires) is written as the string "inf". Values are not
// validated here: the job's validate() does that where it starts.
#pragma once

#include <nlohmann/json.hpp>

#include "core/Affine.hpp"
#include "core/Atlas.hpp"
#include "core/Bilateral.hpp"
#include "core/Multires.hpp"
#include "core/Nlm.hpp"
#include "core/Fluid.hpp"
#include "core/Greedy.hpp"
#include "core/Intensity.hpp"
#include "core/Registration.hpp"
#include "core/SurfaceNlm.hpp"

namespace kortex::pipeline {

nlohmann::json toJson(FluidParams const& p);
nlohmann::json toJson(GreedyParams const& p);
nlohmann::json toJson(AtlasParams const& p);
nlohmann::json toJson(IntensityParams const& p);
nlohmann::json toJson(AffineParams const& p);
nlohmann::json toJson(RegistrationParams const& p);
nlohmann::json toJson(BilateralParams const& p);
nlohmann::json toJson(NlmParams const& p);
nlohmann::json toJson(MultiresParams const& p);
nlohmann::json toJson(SurfaceNlmParams const& p);  // the user's parameters (tiles come from the tuning database)

void fromJson(nlohmann::json const& j, FluidParams& out);
void fromJson(nlohmann::json const& j, GreedyParams& out);
void fromJson(nlohmann::json const& j, AtlasParams& out);
void fromJson(nlohmann::json const& j, IntensityParams& out);
void fromJson(nlohmann::json const& j, AffineParams& out);
void fromJson(nlohmann::json const& j, RegistrationParams& out);
void fromJson(nlohmann::json const& j, BilateralParams& out);
void fromJson(nlohmann::json const& j, NlmParams& out);
void fromJson(nlohmann::json const& j, MultiresParams& out);
void fromJson(nlohmann::json const& j, SurfaceNlmParams& out);

// The struct's defaults overridden by j.
template <class Params>
Params paramsFromJson(nlohmann::json const& j) {
  Params p;
  fromJson(j, p);
  return p;
}

}  // namespace kortex::pipeline
