// The validation suite behind `kortex validate [--quick] [--data DIR] [--json FILE] [--only STUDY]...`
// and the validation part of `kortex reproduce`. Its studies are the rows of validationStudies(),
// run in the order 1 to 6; the quoted names are those `--only` takes:
//   1. "harness", correctness + speed: the harness (validation/Harness.hpp) on embedded phantoms -
//      Shepp-Logan 2D/3D with SNR-25 noise, uniform random, structured blocks - whose sizes are
//      not multiples of any tile, for both filters, 2D and 3D, several radii; with a data folder
//      also on a real head CT slice (HU). Every Kokkos variant on every enabled execution space
//      must stay within kMaxRelativeErrorTolerance of the CPU reference.
//      The multiresolution filter (issue 3) joins part 1 with float cases (tolerance as above) and
//      10-bit integer cases (exact), on odd sizes.
//   3. "registration" (issue 4, with the IXI data): validation/Registration.hpp runRegistrationStudy -
//      Dice affine vs affine + unbiased, CPU vs Kokkos end to end, inverse consistency.
//   4. "surface" (issue 5, with the data): validation/SurfaceNlm.hpp runSurfaceStudy - ICBM152 and
//      IXI white-matter surfaces with surface noise: distance to the clean surface before/after,
//      Kokkos vs CPU reference (max |dphi| <= 1/4 voxel, neighbour sets).
//   5. "greedy" registration (issue 14, with the data): validation/Greedy.hpp runGreedyStudy - Dice
//      affine vs greedy vs unbiased (vs elastix), CPU vs Kokkos end to end for both registrations.
//   6. "multimodal" (issue 41, with the data): validation/Multimodal.hpp runMultimodalStudy - the
//      greedy study's pairs with the moving subject in a second contrast made from its labels: Dice
//      of affine NCC / affine MI / greedy MI against the T1 pair's greedy LNCC.
//   7. "lesion" (issue 41, with the data): validation/Lesion.hpp runLesionStudy - a synthetic lesion
//      in each moving T1 of the greedy study's pairs: Dice outside it lesion-free, unmasked and with the
//      lesion's moving mask.
//   8. "symmetric" (issue 41, with the data): validation/Symmetric.hpp runSymmetricStudy - the greedy
//      study's pairs both ways, default mode against --symmetric: Dice and inverse consistency.
//   9. "atlas" (issue 15, with the data): validation/Atlas.hpp runAtlasStudy - random-permutation
//      entropy / variance / sharpness of greedy atlases vs affine averages, template-space Dice,
//      held-out majority-vote labels, Jacobian statistics, a montage.
//   2. "quality": the SNR-25 study (validation/Quality.hpp); both filters must raise the PSNR;
//      and the multires study (validation/QualityMultires.hpp): multires must raise the PSNR.
// quick: small sizes, seconds on 2 CPU cores; full: bigger images and radii (minutes there).
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "validation/Greedy.hpp"
#include "validation/Harness.hpp"
#include "validation/Lesion.hpp"
#include "validation/Multimodal.hpp"
#include "validation/Symmetric.hpp"
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
  bool timing = true;         // time reference and variants (false: correctness only)
  // The studies to run, by name (validationStudies(); `kortex validate --only NAME`); empty: every
  // study. A study that needs the data folder is left out without one; a study named here must run
  // (its data found) for the suite to pass.
  std::vector<std::string> only;
  RegistrationParams registration;  // part 3's fluid parameters
  int registrationPairs = 6;
  GreedyParams greedy = greedyRegistrationDefaults();  // part 5 (the unbiased run uses `registration`)
  int greedyPairs = 20;
  int greedyFirstPair = 1;          // the first moving subject of the greedy study
  int greedyCpuPairs = -1;          // pairs also run on the CPU reference; -1: every pair
  bool greedyUnbiased = true;       // part 5 runs register unbiased beside the greedy registration
  std::string elastixDir;           // part 5: elastix's warped label maps (bench/peers/elastix_ixi.sh)
  std::string multimodalImagesDir;  // part 6: where the second-contrast images are written (empty: not written)
  std::string multimodalElastixDir; // part 6: elastix's affine MI results (bench/peers/elastix_multimodal.sh)
  std::string fireantsDir;          // part 5: FireANTs' (bench/peers/fireants_ixi.py)
  AtlasStudyOptions atlas;          // part 6's sizes, repeats, parameters (quick, data, montages: from here)
  std::ostream* progress = nullptr;  // one line per finished case, when set
};

// What one study reports to the suite: whether it ran (a study that needs data it did not find
// does not run, and says why in the notes) and whether it passed (a study that did not run passes
// unless it was named in SuiteOptions::only).
struct StudyOutcome {
  std::string name;
  bool ran = false, pass = true;
};

struct SuiteReport {
  bool pass = false;          // every study run passed, and every study named in `only` ran
  bool quick = false;
  double wallSeconds = 0.0;
  int casesPassed = 0, casesFailed = 0;
  std::vector<CaseResult> cases;
  std::vector<QualityImageResult> quality;
  std::vector<MultiresQualityResult> multiresQuality;
  RegistrationStudyReport registration;  // part 3; .ran false without the IXI data
  SurfaceStudyReport surface;            // part 4; .ran false without the data
  GreedyStudyReport greedy;              // part 5; .ran false without the data
  MultimodalStudyReport multimodal;      // part 6; .ran false without the data
  LesionStudyReport lesion;              // part 7; .ran false without the data
  SymmetricStudyReport symmetric;        // part 8; .ran false without the data
  AtlasStudyReport atlas;                // part 9; .ran false without the data
  std::vector<StudyOutcome> studies;     // the studies selected, in the order they ran
  std::vector<std::string> notes;  // inputs that were skipped, and why
  nlohmann::json environment;      // validation/Report.hpp environmentJson()
};

// One study of the suite: `kortex validate --only NAME` runs it (repeatable). The studies run in
// the order of validationStudies(); a new study is one row there (validation/Suite.cpp).
struct Study {
  const char* name;         // "harness", "quality", "registration", "surface", "greedy", "atlas"
  const char* description;  // one line, for --help
  const char* dataNeeded;   // what it reads from the data folder; nullptr: runs without one
  StudyOutcome (*run)(SuiteOptions const&, SuiteReport&);
};
std::vector<Study> const& validationStudies();
// The study of that name; nullptr when there is none.
Study const* findStudy(std::string const& name);

// Builds the case list of part 1 (exposed for tests and for `--list`-style use).
std::vector<Case> validationCases(bool quick, std::string const& dataDir = {},
                                  std::vector<std::string>* notes = nullptr);

// Runs the suite; throws only for unusable options (e.g. a data folder that does not exist).
SuiteReport runValidationSuite(SuiteOptions const& opt);

nlohmann::json toJson(SuiteReport const& r);
// Readable report: environment, tolerance, the harness table, the quality table, verdict.
std::string toMarkdown(SuiteReport const& r);

// `kortex validate` as a job (the pipeline's job shape): the suite's options and its report files,
// checked once, before any study runs; the reports written all or none.
struct ValidateJob {
  SuiteOptions suite;
  std::string outJson, outMarkdown;  // empty: none
  // InvalidArgument for the first bad part: an unknown study (the known ones listed), a study named
  // without the data folder it needs, unusable study parameters, a peer's results folder that is not
  // a folder, an atlas cohort size outside [AtlasParams::kMinSubjects, 32], a report that cannot be
  // written, a montage folder that cannot be made.
  void validate() const;
};
struct ValidateResult {
  SuiteReport report;
  std::string markdown;  // toMarkdown(report)
};
ValidateResult runValidateJob(ValidateJob const& job);

}  // namespace kortex::validation
