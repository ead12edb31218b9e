// `kortex validate`, `kortex bench ct`, `kortex bench multires`, `kortex reproduce`: thin wrappers
// over the validation suite (validation/Suite.hpp), the CT benchmark (bench/Bench.hpp) and the
// multiresolution benchmark (bench/BenchMultires.hpp).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include <memory>

#include "apps/Commands.hpp"
#include "bench/Bench.hpp"
#include "bench/BenchAtlas.hpp"
#include "bench/BenchGreedy.hpp"
#include "bench/BenchMultires.hpp"
#include "bench/BenchRegistration.hpp"
#include "bench/BenchSurfaceNlm.hpp"
#include "bench/Reproduce.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "distributed/ProcessGroup.hpp"
#include "validation/Suite.hpp"

namespace fs = std::filesystem;

namespace kortex::app {


int cmdValidate(ValidateOptions const& o) {
  validation::ValidateJob job;
  validation::SuiteOptions& so = job.suite;
  job.outJson = o.jsonPath;
  job.outMarkdown = o.markdownPath;
  so.quick = o.quick;
  so.dataDir = o.dataDir;
  so.progress = &std::cout;
  for (auto const* names : {&o.only, &o.onlyAliases})
    for (auto const& name : *names)
      if (std::find(so.only.begin(), so.only.end(), name) == so.only.end()) so.only.push_back(name);
  so.greedy = o.greedy.toParams();
  so.greedyPairs = o.greedyPairs;
  so.greedyFirstPair = o.greedyFirstPair;
  so.greedyCpuPairs = o.greedyCpuPairs;
  so.elastixDir = o.elastixDir;
  so.multimodalImagesDir = o.multimodalImagesDir;
  so.multimodalElastixDir = o.multimodalElastixDir;
  so.fireantsDir = o.fireantsDir;
  so.greedyUnbiased = !o.skipUnbiased;
  so.atlas.sizes = parseIntList(o.atlasSizes, "--atlas-sizes");
  so.atlas.repeats = o.atlasRepeats;
  try {
    so.atlas.params.greedy.metric = parseGreedyMetric(o.atlasMetric);
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("--atlas-metric: ") + e.what());
  }
  so.montageDir = o.montageDir;
  so.registration = o.registration;
  so.registrationPairs = o.pairs;
  const validation::ValidateResult result = validation::runValidateJob(job);
  validation::SuiteReport const& report = result.report;
  std::cout << "\n" << result.markdown;
  if (!report.pass) {
    std::cerr << "kortex: error: validation failed (" << report.casesFailed << " case(s) outside their bounds";
    for (auto const& s : report.studies)
      if (!s.pass && s.name != "harness") std::cerr << "; the " << s.name << " study failed";
    for (auto const& s : so.only)
      if (std::none_of(report.studies.begin(), report.studies.end(),
                       [&](validation::StudyOutcome const& r) { return r.name == s && r.ran; }))
        std::cerr << "; the " << s << " study did not run (see the notes)";
    std::cerr << ")" << std::endl;
    return 1;
  }
  return 0;
}

namespace {
// Prints a benchmark report; exit code 1 with one error line when it failed or measured nothing.
int finishBench(bench::BenchReport const& report) {
  std::cout << report.markdown;
  if (report.ok) return 0;
  if (report.failed == 0)
    std::cerr << "kortex: error: benchmark measured nothing (every case was skipped by its budget)" << std::endl;
  else
    std::cerr << "kortex: error: benchmark failed (" << report.failed << " check(s) failed, " << report.measured
              << " measured)" << std::endl;
  return 1;
}
}  // namespace

int cmdBenchCt(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runCtBench(o));
}

int cmdBenchMultires(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runMultiresBench(o));
}

int cmdBenchRegister(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runRegistrationBench(o));
}

int cmdBenchGreedy(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runGreedyBench(o));
}

int cmdBenchAtlas(bench::BenchOptions o) {
  // Under mpirun every rank runs the Scaling (or Sums over ranks) section; rank 0 reports and writes the files.
  auto& group = distributed::ProcessGroup::world();
  o.comm = group.communicator();
  if (group.rank() != 0) {
    o.jsonPath.clear();
    o.markdownPath.clear();
    const int rc = bench::runAtlasBench(o).ok ? 0 : 1;
    return rc;
  }
  o.progress = &std::cerr;
  return finishBench(bench::runAtlasBench(o));
}

int cmdBenchSurface(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runSurfaceBench(o));
}

int cmdReproduce(ReproduceOptions const& o) {
  bench::ReproduceJob job;
  job.quick = o.quick;
  job.dataDir = o.dataDir;
  job.outDir = o.outDir;
  const bench::ReproduceResult r = bench::runReproduceJob(job, std::cout, &std::cerr);
  std::cout << "\nReport: " << r.reportPath << ", JSON: " << r.jsonPath << "\n";
  if (!r.pass()) {
    std::cerr << "kortex: error: reproduce failed: "
              << (!r.validationPass ? "validation bounds violated" : "benchmark sanity check failed") << std::endl;
    return 1;
  }
  return 0;
}

void addValidateCommand(CLI::App& app, Action& action) {
  auto* validate = app.add_subcommand("validate", "Run the validation harness: CPU reference vs every Kokkos variant; non-zero exit if any bound fails");
  auto vop = std::make_shared<ValidateOptions>();
  ValidateOptions& vo = *vop;
  validate->add_flag("--quick", vo.quick, "Small sizes (seconds)");
  validate->add_option("--data", vo.dataDir, "Real data folder (e.g. ../shared/data)")->check(CLI::ExistingDirectory);
  validate->add_option("--json", vo.jsonPath, "Write the report as JSON");
  validate->add_option("--markdown", vo.markdownPath, "Write the report as Markdown");
  {
    std::string help = "Run only this study (repeatable: --only greedy --only atlas); the studies, in the order they run:";
    for (auto const& s : validation::validationStudies())
      help += std::string("\n  ") + s.name + ": " + s.description + (s.dataNeeded ? " (needs --data)" : "");
    validate->add_option("--only", vo.only, help)->delimiter(',')->type_name("STUDY");
    // The older spelling, kept for scripts: --NAME-only is --only NAME.
    for (const char* name : {"registration", "surface", "greedy", "atlas"})
      validate->add_flag_callback(
          std::string("--") + name + "-only", [vop, name] { vop->onlyAliases.push_back(name); },
          std::string("Alias of --only ") + name);
  }
  validate->add_option("--lambda", vo.registration.lambda, "Registration study: regulariser weight")
      ->capture_default_str();
  validate->add_option("--sigma", vo.registration.sigma, "Registration study: force smoothing sigma, voxels")
      ->capture_default_str();
  validate->add_option("--iterations", vo.registration.iterations,
                       "Registration study: iteration cap (--quick caps it further)")
      ->capture_default_str();
  validate->add_option("--pairs", vo.pairs, "Registration study: number of subject pairs")
      ->check(CLI::Range(1, vo.pairs))
      ->capture_default_str();
  addGreedyOptions(*validate, vo.greedy, {"--greedy-iterations", "Greedy study: "});
  validate->add_option("--greedy-pairs", vo.greedyPairs, "Greedy study: number of subject pairs (--quick: at most 2)")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  validate->add_option("--greedy-first-pair", vo.greedyFirstPair,
                       "Greedy study: the first moving subject (1 = the one after the fixed subject); a study split over "
                       "several runs takes 1, 1 + N, ... with --greedy-pairs N")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  validate->add_option("--greedy-cpu-pairs", vo.greedyCpuPairs,
                       "Greedy study: the first N pairs also run end to end on the CPU reference (greedy SSD, "
                       "LNCC, unbiased; the multi-modal study: greedy MI; -1: every pair; 0: none)")
      ->check(CLI::Range(-1, 32))
      ->capture_default_str();
  validate->add_flag("--skip-unbiased", vo.skipUnbiased,
                     "Greedy study: leave out the register-unbiased runs (Dice and CPU vs Kokkos)");
  validate->add_option("--atlas-sizes", vo.atlasSizes, "Atlas study: cohort sizes (--quick: 2,4)")->capture_default_str();
  validate->add_option("--atlas-repeats", vo.atlasRepeats, "Atlas study: random cohorts per size (--quick: 2)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  validate->add_option("--atlas-metric", vo.atlasMetric,
                       "Atlas study: the atlas's image mismatch, ssd|lncc|mi (the atlas's own schedule; `atlas build "
                       "--metric`)")
      ->capture_default_str();
  validate->add_option("--montages", vo.montageDir,
                       "Folder for the montages (quality studies, atlas study): PNG, or PGM in builds without VTK");
  validate->add_option("--elastix", vo.elastixDir,
                       "Greedy study: folder of elastix's warped label maps, times and fields (bench/peers/elastix_ixi.sh)");
  validate->add_option("--fireants", vo.fireantsDir,
                       "Greedy study: folder of FireANTs' warped label maps, times and fields "
                       "(bench/peers/fireants_ixi.py; the --elastix file convention)");
  validate->add_option("--multimodal-images", vo.multimodalImagesDir,
                       "Multimodal study: write each pair's moving image in its second contrast here "
                       "(<moving>_contrast.nii.gz), for peers");
  validate->add_option("--multimodal-elastix", vo.multimodalElastixDir,
                       "Multimodal study: folder of elastix's affine MI results on those images "
                       "(bench/peers/elastix_multimodal.sh; the --elastix file convention)");
  validate->callback([vop, &action] { action = [vop] { return cmdValidate(*vop); }; });
}

namespace {
// One `kortex bench NAME` subcommand: the options every benchmark takes (bench::BenchOptions),
// its help texts, and the action that runs it.
struct BenchHelp {
  const char* quick;
  const char* tiny;
  const char* only;
  const char* peers;
};
std::shared_ptr<bench::BenchOptions> addBench(CLI::App* bench, Action& action, const char* name, std::string const& what,
                                             BenchHelp const& help, int (*run)(bench::BenchOptions),
                                             CLI::App** sub = nullptr) {
  auto* cmd = bench->add_subcommand(name, what);
  auto o = std::make_shared<bench::BenchOptions>();
  cmd->add_flag("--quick", o->quick, help.quick);
  cmd->add_flag("--tiny", o->tiny, help.tiny);
  cmd->add_option("--json", o->jsonPath, "Write results as JSON");
  cmd->add_option("--markdown", o->markdownPath, "Write results as Markdown");
  cmd->add_option("--only", o->only, help.only);
  cmd->add_option("--peers", o->peersJsonPath, help.peers)->check(CLI::ExistingFile);
  cmd->callback([o, run, &action] { action = [o, run] { return run(*o); }; });
  if (sub) *sub = cmd;
  return o;
}
}  // namespace

void addBenchCommands(CLI::App& app, Action& action) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that reproduce the papers' tables");
  bench->require_subcommand(1);
  addBench(bench, action, "ct", "CT neighbourhood filters: Tables I and II (bilateral, NLM), 2D and 3D",
           {"Fewer sizes and repetitions", "Tiny sizes (smoke test)",
            "Only rows whose label contains this text, e.g. \"NLM 2D 1024^2 patch 7 window 17\"",
            "Merge peer timings from bench/peers/run_peers.py (JSON)"},
           &cmdBenchCt);
  addBench(bench, action, "multires",
           "Multiresolution filter: Figs 4-6 (bilateral variants, pyramid kernels, tile space) and Table 2 (FPS)",
           {"Smaller budgets (minutes on a CPU-only machine)", "Sizes 64^2 and 128^2 (smoke test)",
            "Only cases whose label contains this text, e.g. \"Table2 4096^2\", \"Fig6\", \"Fig5 512^2 float\"",
            "Merge peer timings from bench/peers/multires_opencv.py (JSON)"},
           &cmdBenchMultires);
  CLI::App* reg = nullptr;
  auto ro = addBench(bench, action, "register",
                     "Unbiased fluid registration: Table 1 (resources, occupancy), Fig 1 (force kernels), "
                     "Fig 2a/2b (iteration time, speedups, GFLOP/s, GB/s) and the targets",
                     {"Fewer sizes", "24^3 and 32^3 (smoke test)",
                      "Only cases whose label contains this text, e.g. \"Fig1\", \"Fig2 240^3\", \"IXI\"",
                      "Merge peer timings from bench/peers/registration_torch.py (JSON)"},
                     &cmdBenchRegister, &reg);
  reg->add_option("--data", ro->dataDir, "Real data folder (../shared/data): adds the IXI pair target")
      ->check(CLI::ExistingDirectory);
  CLI::App* greedy = nullptr;
  auto go = addBench(bench, action, "greedy",
                     "Greedy diffeomorphic registration (Ha et al. 2010): Helmholtz matvec GFLOP/s, solver comparison "
                     "(FFT, SOR, CG; cold and warm), one iteration at 144x192x160 vs PyTorch, gradient, Gaussian and "
                     "n-ary kernels, the IXI pair (multi-scale vs single scale), IXI pairs end to end and a cohort's pairs per second",
                     {"Smaller budgets", "Tiny grids (smoke test)",
                      "Only sections whose label contains this text (alternatives: \"Pair|Cohort\"): \"Matvec\", \"Solvers\", "
                      "\"Iteration\", \"Kernels\", \"IXI\", \"Pair\", \"Cohort\"",
                      "Merge peer timings from bench/peers/greedy_torch.py (JSON)"},
                     &cmdBenchGreedy, &greedy);
  greedy->add_option("--data", go->dataDir, "Real data folder (../shared/data): adds the IXI pair, the pairs and the cohort")
      ->check(CLI::ExistingDirectory);
  CLI::App* atlasBench = nullptr;
  auto ao = addBench(bench, action, "atlas",
                     "Unbiased atlas (Ha et al. 2010): one iteration over 315 subjects at 144x192x160 per solver vs "
                     "PyTorch, the whole multi-scale atlas, Fig 13 (single vs multi-scale), the CPU reference",
                     {"64 subjects instead of 315", "Tiny grid, 3 subjects (smoke test)",
                      "Only sections whose label contains this text: \"Iteration <solver>\" (\"Iteration fft\", ...; "
                      "\"Iteration\": every solver), \"Whole\", \"CPU\", \"Scaling\" and \"Sums over ranks\" (the sections "
                      "that run under mpirun: one rank per GPU)",
                      "Merge peer timings from bench/peers/atlas_torch.py or bench/peers/torch_step_peer.py (JSON)"},
                     &cmdBenchAtlas, &atlasBench);
  atlasBench->add_option("--data", ao->dataDir, "Real data folder (../shared/data): the cohort from the 40 IXI volumes")
      ->check(CLI::ExistingDirectory);
  atlasBench->add_option("--dump", ao->dumpDir, "Scaling: write each run's template here (float32, raw; rank 0)")
      ->check(CLI::ExistingDirectory);
  CLI::App* surf = nullptr;
  auto so = addBench(bench, action, "surface",
                     "Level-set NLM surface denoising: Fig 4 (time vs band size per storage variant), Fig 5 (speedup "
                     "vs the CPU reference at 2 and all threads, GB/s), CPU check and the 175k target",
                     {"Bands of 17.5k and 35k only", "Bands of ~1.5k and ~3k (smoke test)",
                      "Only variants / sizes whose label contains this text, e.g. \"Scratch\"",
                      "Merge the PyTorch kNN peer (bench/peers/surface_torch.py JSON)"},
                     &cmdBenchSurface, &surf);
  surf->add_option("--dump", so->dumpDir, "Write the largest case's records and exact neighbours here (for the peer)")
      ->check(CLI::ExistingDirectory);
}

void addReproduceCommand(CLI::App& app, Action& action) {
  auto* reproduce = app.add_subcommand("reproduce", "Main job: validation + every available paper table; readable report + JSON");
  auto rop = std::make_shared<ReproduceOptions>();
  ReproduceOptions& ro = *rop;
  reproduce->add_flag("--quick", ro.quick, "Small sizes (minutes on a laptop)");
  reproduce->add_option("--data", ro.dataDir, "Real data folder (e.g. ../shared/data)")->check(CLI::ExistingDirectory);
  reproduce->add_option("--out", ro.outDir, "Folder for the report, JSON and montages")->capture_default_str();
  reproduce->callback([rop, &action] { action = [rop] { return cmdReproduce(*rop); }; });
}

}  // namespace kortex::app
