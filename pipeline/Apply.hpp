// The apply job (`kortex apply`, Python kortex.apply): an image resampled onto a reference grid
// through a chain of transform files (affine ITK .txt/.tfm, ITK/ANTs .mat, displacement fields),
// antsApplyTransforms' order and conventions (core/Apply.hpp states them; docs/apply.md).
//
// Stages (each a kx::ScopedRegion "kortex::apply::<stage>"): check (files, before anything is
// read), read (input, reference, transforms), validate (the chain, the input, once, for either
// back end), resample (CPU reference or Kokkos), write (atomic; nothing is left on failure).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/Apply.hpp"
#include "core/Backend.hpp"
#include "core/Image.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/Qc.hpp"

namespace kortex::pipeline {

// One transform argument: a file, or ANTs' "[FILE,1]" for the inverse of an affine file ("[FILE,0]"
// is the file itself).
struct TransformSpec {
  std::filesystem::path path;
  bool inverse = false;
};
// Parses "FILE", "[FILE,0]" or "[FILE,1]"; InvalidArgument for another bracketed form.
TransformSpec parseTransformSpec(std::string const& text);

// Reads the files as a chain (listing order kept; an inverse is taken here). IoError for a file,
// InvalidArgument for the inverse of a field or of a singular affine.
TransformChain readTransformChain(std::vector<TransformSpec> const& specs);

struct ApplyResult {
  HostImage image;  // on the reference grid; the input's metadata
  QcReport qc;      // the job's QC report, when it asked for one
  Backend backend = Backend::Cpu;  // resolved
  std::string executionSpace;
  double seconds = 0.0;  // the resampling, device fenced
};

// In memory: validates (3D input and reference, at least 2 voxels per input axis, finite input,
// integer labels for Label, the chain) once, then resamples on the back end.
ApplyResult applyTransforms(HostImage const& input, Geometry const& reference, TransformChain const& chain,
                            ApplyInterpolation interpolation, Backend backend);

struct ApplyJob {
  ImageInput input, reference;          // files or images in memory (the reference: its grid)
  std::filesystem::path output;         // may be empty: nothing written (the result is returned)
  std::filesystem::path qc;             // may be empty: the QC report's folder (pipeline/Qc.hpp applyQc)
  std::vector<TransformSpec> transforms;  // as listed
  ApplyInterpolation interpolation = ApplyInterpolation::Linear;
  Backend backend = Backend::Auto;
};

// The description as JSON ({"job": "apply", "input", "reference", "output", "transforms" as
// "FILE" / "[FILE,1]", "interpolation", "backend"}) and back (unknown keys, wrong types and
// images in memory refused by name).
nlohmann::json toJson(ApplyJob const& job);
ApplyJob applyJobFromJson(nlohmann::json const& j);

// The job: files checked (readable inputs, supported extensions, a writable output distinct from
// every input file: requireDistinctFiles; a QC folder that is not a file) before anything is read;
// then read, validate, resample, the QC report, write (writeAllOrNone: the image and the report).
ApplyResult runApplyJob(ApplyJob const& job);

}  // namespace kortex::pipeline
