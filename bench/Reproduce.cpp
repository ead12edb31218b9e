#include "bench/Reproduce.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "bench/Bench.hpp"
#include "bench/BenchRegistration.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "pipeline/JobFiles.hpp"
#include "validation/Suite.hpp"

namespace kortex::bench {
namespace fs = std::filesystem;

ReproduceResult runReproduceJob(ReproduceJob const& job, std::ostream& out, std::ostream* progress) {
  const fs::path dir(job.outDir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw IoError("reproduce: cannot create the output folder '" + job.outDir + "': " + ec.message());
  ReproduceResult r;
  r.reportPath = (dir / "report.md").string();
  r.jsonPath = (dir / "reproduce.json").string();
  io::requireWritableFile(r.reportPath, "report");
  io::requireWritableFile(r.jsonPath, "JSON report");

  out << "# Kortex reproduce" << (job.quick ? " (quick)" : "") << "\n\n"
      << "## 1. Validation: CPU reference vs every Kokkos variant, quality study\n\n";
  validation::ValidateJob validate;
  validate.suite.quick = job.quick;
  validate.suite.dataDir = job.dataDir;
  validate.suite.montageDir = (dir / "montages").string();
  validate.suite.progress = &out;
  const validation::ValidateResult suite = validation::runValidateJob(validate);
  out << "\n" << suite.markdown << "\n## 2. Paper tables (CT filters)\n\n";

  BenchOptions bo;
  bo.quick = job.quick;
  bo.progress = progress;
  const BenchReport ct = runCtBench(bo);
  out << ct.markdown << "\n## 3. Registration (Lee et al.: Table 1, Figs 1, 2a, 2b)\n\n";

  BenchOptions rbo;
  rbo.quick = job.quick;
  rbo.dataDir = job.dataDir;
  rbo.progress = progress;
  const BenchReport reg = runRegistrationBench(rbo);
  out << reg.markdown;

  r.validationPass = suite.report.pass;
  r.benchPass = ct.ok && reg.ok;
  nlohmann::json j;
  j["quick"] = job.quick;
  j["validation"] = validation::toJson(suite.report);
  j["bench_ct"] = ct.json;
  j["bench_register"] = reg.json;
  j["pass"] = r.pass();
  const std::string md = "# Kortex reproduce\n\n" + suite.markdown + "\n" + ct.markdown + "\n" + reg.markdown;
  pipeline::writeAllOrNone({{"JSON report", r.jsonPath, [&](fs::path const& t) { io::writeTextFileAtomic(t, j.dump(2) + "\n"); }},
                            {"report", r.reportPath, [&](fs::path const& t) { io::writeTextFileAtomic(t, md); }}});
  return r;
}

}  // namespace kortex::bench
