// `kortex apply`: an image resampled onto a reference grid through affine transform files and
// displacement fields, in antsApplyTransforms' order and conventions (pipeline/Apply.hpp runApplyJob;
// core/Apply.hpp states the conventions; docs/apply.md).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/Commands.hpp"
#include "apps/Options.hpp"
#include "core/Errors.hpp"
#include "pipeline/Apply.hpp"

namespace kortex::app {
namespace {

struct ApplyOptions {
  std::string input, reference, out, qc, interpolation = "linear", backend = "auto";
  std::vector<std::string> transforms;
  bool quiet = false;
};

int cmdApply(ApplyOptions const& o) {
  pipeline::ApplyJob job;
  job.input.path = o.input;
  job.reference.path = o.reference;
  job.output = o.out;
  job.qc = o.qc;
  try {
    job.interpolation = parseApplyInterpolation(o.interpolation);
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("--interpolation: ") + e.what());
  }
  job.backend = parseBackend(o.backend);
  for (auto const& t : o.transforms) job.transforms.push_back(pipeline::parseTransformSpec(t));
  const pipeline::ApplyResult r = pipeline::runApplyJob(job);
  if (!o.quiet)
    std::cout << "applied " << job.transforms.size() << " transform(s), " << toString(job.interpolation)
              << " interpolation, backend " << r.executionSpace << ", " << std::fixed << std::setprecision(3)
              << r.seconds << " s\nwrote " << o.out << " (" << describe(r.image.geometry)
              << ", the reference's grid)\n";
  if (!o.quiet && !o.qc.empty())
    std::cout << "wrote " << (std::filesystem::path(o.qc) / "index.html").string() << " (the QC report, "
              << r.qc.files.size() - 1 << " pictures beside it; " << std::fixed << std::setprecision(3) << r.qc.seconds
              << " s)\n";
  return 0;
}

const char* kApplyDescription =
    "Resample an image onto a reference grid through transforms (antsApplyTransforms' conventions): affine "
    "ITK transform files (.txt, .tfm; AffineTransform / MatrixOffsetTransformBase, double or float), ANTs/ITK "
    "affine .mat files and displacement fields (NIfTI vector images, world mm, LPS: a point x maps to x + d(x); "
    "the displacement is zero outside the field's grid, as ITK's DisplacementFieldTransform). Several "
    "--transform options compose as in antsApplyTransforms (ITK's CompositeTransform): the FIRST one listed takes the "
    "point first, so `--transform field.nii.gz --transform affine.txt` (ANTs' Warp then GenericAffine, or "
    "`kortex register`'s --out-field then --out-affine) samples the input at affine(x + d(x)). "
    "[FILE,1] applies the inverse of an affine file. Points outside the input's grid get 0.";

}  // namespace

void addApplyCommand(CLI::App& app, Action& action) {
  auto op = std::make_shared<ApplyOptions>();
  ApplyOptions& o = *op;
  auto* cmd = app.add_subcommand("apply", "Resample an image through transforms: fields and affines of kortex, ANTs "
                                          "and ITK, in antsApplyTransforms' order (the first listed takes the point first)");
  cmd->footer(kApplyDescription);
  cmd->add_option("--input", o.input, "Image to resample (the moving image)")->required();
  cmd->add_option("--reference", o.reference, "Image whose grid and geometry the output takes (the fixed image)")
      ->required();
  cmd->add_option("--transform", o.transforms,
                  "Transform file, repeatable: .txt/.tfm (ITK affine), .mat (ANTs/ITK affine), .nii/.nii.gz "
                  "(displacement field); [FILE,1]: the inverse of an affine file. The first listed takes the point first")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)  // one file per --transform, and "[FILE,1]" kept whole (not a CLI11 list)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--out", o.out, "Output image (written atomically; the input's metadata, the reference's grid)")
      ->required();
  cmd->add_option("--interpolation", o.interpolation,
                  "linear (trilinear, as register --out-warped), nearest, or label (each label a soft mask with "
                  "trilinear weights, the largest summed weight wins, ties to the smaller label; the input must "
                  "hold integer values, a float image is refused)")
      ->capture_default_str();
  cmd->add_option("--qc", o.qc,
                  "QC report: a folder with index.html and its pictures (the reference with the input's edges before "
                  "and after, a checkerboard, the numbers); docs/qc.md");
  addBackendOption(*cmd, o.backend);
  cmd->add_flag("--quiet", o.quiet, "Print nothing on success");
  cmd->callback([op, &action] { action = [op] { return cmdApply(*op); }; });
}

}  // namespace kortex::app
