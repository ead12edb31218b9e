// The atlas quality study of `kortex validate` (issue 15; needs the IXI data of
// mri/ixi_2mm_more: 33 T1 volumes with DLMUSE label maps). Every subject but the last is aligned
// once to the first (affine, NCC; the normalised images resampled on its grid); the last one is
// held out. Then, on the Kokkos back end (the default execution space):
//   random-permutation test (Lorenzen et al.; Ha et al. Figs 11, 12): for each cohort size l,
//           `repeats` cohorts of l subjects drawn without replacement (seeded), each giving the
//           greedy atlas (core/Atlas.hpp) and the plain average of the affinely aligned images.
//           Per template, over the head mask (the affine average of the whole pool > 0.1):
//             entropy   - sum_b p_b log2 p_b of its intensities in 64 bins over [0, 1];
//             variance  mean over the mask of (1/l) sum_i (J_i - T)^2, J_i the subject in template
//                       space (greedy: W_i = I_i o h_i; affine: the aligned image);
//             sharpness mean |grad T| (central differences, per voxel).
//   labels  on the first cohort of the largest size: every subject's labels carried to template
//           space (affine: nearest voxel of the affine map; greedy: then x -> x - u_i(x), nearest
//           voxel), the mean Dice over the labels of every pair of subjects there, affine vs greedy.
//   held-out the majority vote of those label maps (ties: the smaller label) carried onto the
//           held-out subject by registering the template to it (affine + greedy, pipeline
//           registerPair), Dice against its own labels; greedy template vs affine average.
//   Jacobians min det Dh_i over the subjects, SD of log det Dh_i over the mask (all subjects),
//           and the RMS norm of the mean displacement (the unbiased property).
// Pass: for every size the subjects lie closer to the greedy template (variance) than to the
// affine average, and at the largest size the greedy template is sharper (at 2 subjects the
// affine average keeps both subjects' edges, which mean |grad T| counts as sharpness: reported,
// not judged); the template-space Dice is higher; det Dh_i > 0.
// quick: images at 4 mm, single scale, sizes {2, 4}, 2 cohorts each, a pool of 5 subjects.
// A montage (middle axial slice: affine average | greedy template, one row per size) is written
// to montageDir as PNG where the build has image I/O (VTK), else as PGM.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "core/Atlas.hpp"

namespace kortex::validation {

struct AtlasStudyOptions {
  bool quick = false;
  std::string dataDir;
  AtlasParams params;                      // the atlas (quick: one scale, 15 iterations)
  std::vector<int> sizes{2, 4, 6, 8, 10, 12, 14};
  int repeats = 4;                         // cohorts per size
  std::uint64_t seed = 2010;
  std::string montageDir;                  // empty: no montage
  std::ostream* progress = nullptr;
};

struct AtlasTemplateStats {
  double entropy = 0.0, variance = 0.0, sharpness = 0.0;
};

struct AtlasSizeResult {
  int size = 0;
  std::vector<AtlasTemplateStats> affine, greedy;  // one per cohort
  double secondsAtlas = 0.0;                      // all cohorts of this size
  bool pass = false;
};

struct AtlasStudyReport {
  bool ran = false, pass = false;
  std::string note, montagePath;
  std::vector<AtlasSizeResult> sizes;
  nlohmann::json json;
  std::string markdown;
};

AtlasStudyReport runAtlasStudy(AtlasStudyOptions const& opt);

}  // namespace kortex::validation
