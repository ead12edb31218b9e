// The validation suite behind `kortex validate [--quick] [--data DIR] [--json FILE]` and the
// validation part of `kortex reproduce`:
//   1. correctness + speed: the harness (validation/Harness.hpp) on embedded phantoms -
//      Shepp-Logan 2D/3D with SNR-25 noise, uniform random, structured blocks - whose sizes are
//      not multiples of any tile, for both filters, 2D and 3D, several radii; with a data folder
//      also on a real head CT slice (HU). Every Kokkos variant on every enabled execution space
//      must stay within kMaxRelativeErrorTolerance of the CPU reference.
//      The multiresolution filter (issue 3) joins part 1 with float cases (tolerance as above) and
//      10-bit integer cases (exact), on odd sizes.
//   3. registration (issue 4, with the IXI data): validation/Registration.hpp runRegistrationStudy -
//      Dice affine vs affine + unbiased, CPU vs Kokkos end to end, inverse consistency.
//   4. surface (issue 5, with the data): validation/SurfaceNlm.hpp runSurfaceStudy - ICBM152 and
//      IXI white-matter surfaces with surface noise: distance to the clean surface before/after,
//      Kokkos vs CPU reference (max |dphi| <= 1/4 voxel, neighbour sets).
//   5. greedy registration (issue 14, with the data): validation/Greedy.hpp runGreedyStudy - Dice
//      affine vs greedy vs unbiased (vs elastix), CPU vs Kokkos end to end for both registrations.
//   6. atlas (issue 15, with the data): validation/Atlas.hpp runAtlasStudy - random-permutation
//      entropy / variance / sharpness of greedy atlases vs affine averages, template-space Dice,
//      held-out majority-vote labels, Jacobian statistics, a montage.
//   2. quality: the SNR-25 study (validation/Quality.hpp); both filters must raise the PSNR;
//      and the multires study (validation/QualityMultires.hpp): multires must raise the PSNR.
// quick: small sizes, seconds on 2 CPU cores; full: bigger images and radii (minutes there).
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "validation/Greedy.hpp"
#include "validation/Harness.hpp"
#include "validation/Atlas.hpp"
#include "validation/Quality.hpp"
#include "validation/QualityMultires.hpp"
#include "validation/Registration.hpp"
#include "validation/SurfaceNlm.hpp"

namespace kortex::validation {

struct SuiteOptions {
  bool quick = false;
  std::string dataDir;        // empty: embedded phantoms only
  std::string montageDir;     // quality montages (PNG); empty: none
  bool qualityStudy = true;   // run part 2
  bool timing = true;         // time reference and variants (false: correctness only)
  bool registrationStudy = true;  // part 3 (needs dataDir with the IXI volumes)
  bool registrationOnly = false;  // skip parts 1 and 2
  bool surfaceStudy = true;       // part 4 (needs dataDir: ICBM152 and IXI labels)
  bool surfaceOnly = false;       // only part 4
  RegistrationParams registration;  // part 3's fluid parameters
  int registrationPairs = 6;
  bool greedyStudy = true;          // part 5 (needs dataDir with ixi_2mm_more)
  bool greedyOnly = false;          // only part 5
  GreedyParams greedy;              // part 5's greedy parameters (the unbiased run uses `registration`)
  int greedyPairs = 10;
  int greedyCpuPairs = 1;
  bool greedyUnbiased = true;       // part 5 runs register unbiased beside the greedy registration
  std::string elastixDir;           // part 5: elastix's warped label maps (bench/peers/elastix_ixi.sh)
  bool atlasStudy = true;           // part 6 (needs dataDir with ixi_2mm_more)
  bool atlasOnly = false;           // only part 6
  AtlasStudyOptions atlas;          // part 6's sizes, repeats, parameters (quick, data, montages: from here)
  std::ostream* progress = nullptr;  // one line per finished case, when set
};

struct SuiteReport {
  bool pass = false;          // every harness case and every quality image passed
  bool quick = false;
  double wallSeconds = 0.0;
  int casesPassed = 0, casesFailed = 0;
  std::vector<CaseResult> cases;
  std::vector<QualityImageResult> quality;
  std::vector<MultiresQualityResult> multiresQuality;
  RegistrationStudyReport registration;  // part 3; .ran false without the IXI data
  SurfaceStudyReport surface;            // part 4; .ran false without the data
  GreedyStudyReport greedy;              // part 5; .ran false without the data
  AtlasStudyReport atlas;                // part 6; .ran false without the data
  std::vector<std::string> notes;  // inputs that were skipped, and why
  nlohmann::json environment;      // validation/Report.hpp environmentJson()
};

// Builds the case list of part 1 (exposed for tests and for `--list`-style use).
std::vector<Case> validationCases(bool quick, std::string const& dataDir = {},
                                  std::vector<std::string>* notes = nullptr);

// Runs the suite; throws only for unusable options (e.g. a data folder that does not exist).
SuiteReport runValidationSuite(SuiteOptions const& opt);

nlohmann::json toJson(SuiteReport const& r);
// Readable report: environment, tolerance, the harness table, the quality table, verdict.
std::string toMarkdown(SuiteReport const& r);

}  // namespace kortex::validation
