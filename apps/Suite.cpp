// `kortex validate`, `kortex bench ct`, `kortex bench multires`, `kortex reproduce`: thin wrappers
// over the validation suite (validation/Suite.hpp), the CT benchmark (bench/Bench.hpp) and the
// multiresolution benchmark (bench/BenchMultires.hpp).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "apps/Commands.hpp"
#include "bench/Bench.hpp"
#include "bench/BenchMultires.hpp"
#include "bench/BenchRegistration.hpp"
#include "bench/BenchSurfaceNlm.hpp"
#include "core/Errors.hpp"
#include "io/Output.hpp"
#include "validation/Suite.hpp"

namespace fs = std::filesystem;

namespace kortex::app {


int cmdValidate(ValidateOptions const& o) {
  if (!o.jsonPath.empty()) io::requireWritableFile(o.jsonPath, "JSON report");
  if (!o.markdownPath.empty()) io::requireWritableFile(o.markdownPath, "Markdown report");
  validation::SuiteOptions so;
  so.quick = o.quick;
  so.dataDir = o.dataDir;
  so.progress = &std::cout;
  so.registrationOnly = o.registrationOnly;
  so.surfaceOnly = o.surfaceOnly;
  if (o.registrationOnly && o.surfaceOnly) throw InvalidArgument("--registration-only and --surface-only exclude each other");
  if (o.surfaceOnly && o.dataDir.empty())
    throw InvalidArgument("--surface-only needs --data (the ICBM152 template and the IXI label maps)");
  so.registration = o.registration;
  so.registrationPairs = o.pairs;
  if (o.registrationOnly && o.dataDir.empty())
    throw InvalidArgument("--registration-only needs --data (the IXI volumes and labels)");
  so.registration.validate();
  const auto report = validation::runValidationSuite(so);
  const std::string md = validation::toMarkdown(report);
  std::cout << "\n" << md;
  if (!o.jsonPath.empty()) io::writeTextFileAtomic(o.jsonPath, validation::toJson(report).dump(2) + "\n");
  if (!o.markdownPath.empty()) io::writeTextFileAtomic(o.markdownPath, md);
  if (!report.pass) {
    std::cerr << "kortex: error: validation failed (" << report.casesFailed
              << " case(s) outside their bounds"
              << (report.registration.ran && !report.registration.pass ? "; the registration study failed" : "")
              << (report.surface.ran && !report.surface.pass ? "; the surface study failed" : "")
              << ")" << std::endl;
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

int cmdBenchSurface(bench::BenchOptions o) {
  o.progress = &std::cerr;
  return finishBench(bench::runSurfaceBench(o));
}

int cmdReproduce(ReproduceOptions const& o) {
  const fs::path out(o.outDir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw IoError("cannot create output folder '" + o.outDir + "': " + ec.message());

  std::cout << "# Kortex reproduce" << (o.quick ? " (quick)" : "") << "\n\n"
            << "## 1. Validation: CPU reference vs every Kokkos variant, quality study\n\n";
  validation::SuiteOptions so;
  so.quick = o.quick;
  so.dataDir = o.dataDir;
  so.montageDir = (out / "montages").string();
  fs::create_directories(so.montageDir, ec);
  so.progress = &std::cout;
  const auto suite = validation::runValidationSuite(so);
  const std::string suiteMd = validation::toMarkdown(suite);
  std::cout << "\n" << suiteMd << "\n## 2. Paper tables (CT filters)\n\n";

  bench::BenchOptions bo;
  bo.quick = o.quick;
  bo.progress = &std::cerr;
  const auto benchReport = bench::runCtBench(bo);
  std::cout << benchReport.markdown << "\n## 3. Registration (Lee et al.: Table 1, Figs 1, 2a, 2b)\n\n";

  bench::BenchOptions rbo;
  rbo.quick = o.quick;
  rbo.dataDir = o.dataDir;
  rbo.progress = &std::cerr;
  const auto regReport = bench::runRegistrationBench(rbo);
  std::cout << regReport.markdown;

  nlohmann::json j;
  j["quick"] = o.quick;
  j["validation"] = validation::toJson(suite);
  j["bench_ct"] = benchReport.json;
  j["bench_register"] = regReport.json;
  j["pass"] = suite.pass && benchReport.ok && regReport.ok;
  io::writeTextFileAtomic(out / "reproduce.json", j.dump(2) + "\n");
  io::writeTextFileAtomic(out / "report.md", "# Kortex reproduce\n\n" + suiteMd + "\n" +
                                             benchReport.markdown + "\n" + regReport.markdown);
  std::cout << "\nReport: " << (out / "report.md").string() << ", JSON: "
            << (out / "reproduce.json").string() << "\n";
  if (!suite.pass || !benchReport.ok || !regReport.ok) {
    std::cerr << "kortex: error: reproduce failed: "
              << (!suite.pass ? "validation bounds violated" : "benchmark sanity check failed")
              << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace kortex::app
