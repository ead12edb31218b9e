#include "apps/Options.hpp"

#include <CLI/CLI.hpp>

#include <cctype>
#include <sstream>

#include "core/Errors.hpp"

namespace kortex::app {

std::vector<int> parseIntList(std::string const& text, const char* option) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (std::exception const&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      throw InvalidArgument(std::string(option) + " expects a comma-separated list of integers, got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) throw InvalidArgument(std::string(option) + " is empty");
  return out;
}

std::string joinIntList(std::vector<int> const& values) {
  std::string s;
  for (int v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

GreedyParams GreedyOptions::toParams() const {
  GreedyParams p = params;
  p.scales = parseIntList(scales, "--scales");
  p.iterations = parseIntList(iterations, iterationsFlag.c_str());
  p.solver = parseGreedySolver(solver);
  try {
    p.metric = parseGreedyMetric(metric);
  } catch (InvalidArgument const& e) {
    throw InvalidArgument(std::string("--metric: ") + e.what());
  }
  if (p.scales.size() != p.iterations.size())
    throw InvalidArgument("--scales has " + std::to_string(p.scales.size()) + " entries but " + iterationsFlag + " " +
                          std::to_string(p.iterations.size()) + " (one iteration count per scale)");
  return p;
}

void addGreedyOptions(CLI::App& cmd, GreedyOptions& o, GreedyFlags const& flags) {
  o.iterationsFlag = flags.iterations;
  // "Fluid operator: ..." after a prefix reads "Greedy study: fluid operator: ...".
  auto help = [&](std::string text) {
    if (!flags.helpPrefix.empty()) text[0] = char(std::tolower(static_cast<unsigned char>(text[0])));
    return flags.helpPrefix + text;
  };
  cmd.add_option("--alpha", o.params.fluid.alpha, help("Fluid operator: weight of -laplacian (> 0)"))->capture_default_str();
  cmd.add_option("--beta", o.params.fluid.beta, help("Fluid operator: weight of -grad div (>= 0; fft and cg solvers)"))
      ->capture_default_str();
  cmd.add_option("--gamma", o.params.fluid.gamma, help("Fluid operator: identity weight (> 0)"))->capture_default_str();
  cmd.add_option("--scales", o.scales, help("Down-sampling factors, coarse to fine, ending with 1"))->capture_default_str();
  cmd.add_option(flags.iterations, o.iterations, help("Iterations per scale"))->capture_default_str();
  cmd.add_option("--max-step", o.params.maxStep, help("Largest displacement per iteration, voxels of the scale"))
      ->capture_default_str();
  cmd.add_option("--solver", o.solver, help("Fluid solve: fft|sor|cg|hybrid-sor|hybrid-cg"))->capture_default_str();
  cmd.add_option("--metric", o.metric,
                 help("Image mismatch: ssd|lncc (local normalised cross-correlation)|mi (Mattes mutual information: "
                      "images of different contrasts)"))
      ->capture_default_str();
  cmd.add_option("--mi-bins", o.params.miBins,
                 help("Mutual information: histogram bins per image, " + std::to_string(kMinMiBins) + "-" +
                      std::to_string(kMaxMiBins)))
      ->capture_default_str();
  cmd.add_option("--lncc-radius", o.params.lnccRadius,
                 help("LNCC window radius R: (2R+1)^3 voxels at every scale, R in [1, " +
                      std::to_string(kMaxLnccRadius) + "]"))
      ->capture_default_str();
}

void addBackendOption(CLI::App& cmd, std::string& backend) {
  cmd.add_option("--backend", backend, "auto|cpu|kokkos (auto = Kokkos if it has a GPU backend)")->capture_default_str();
}

void addNoAffineFlag(CLI::App& cmd, bool& noAffine) {
  cmd.add_flag("--no-affine", noAffine, "Skip the affine alignment (header alignment only)");
}

}  // namespace kortex::app
