// The CLI's option groups shared by several commands: each group is bound to a command once here
// (flag names, defaults from the params structs, help texts), and its text values (lists, enum
// names) are parsed once, so that `register greedy`, `atlas build` and `validate`'s greedy study
// take the same flags with the same meaning. Messages name the flags (the library's do not).
#pragma once

#include <string>
#include <vector>

#include "core/Greedy.hpp"

namespace CLI {
class App;
}

namespace kortex::app {

// "2,1" -> {2, 1}; InvalidArgument naming `option` otherwise.
std::vector<int> parseIntList(std::string const& text, const char* option);
// {2, 1} -> "2,1".
std::string joinIntList(std::vector<int> const& values);

// The greedy flags: --alpha, --beta, --gamma, --max-step, --lncc-radius bind into `params`;
// --scales, --iterations (or another name, see GreedyFlags), --solver and --metric are text,
// parsed by toParams().
// The defaults are those given: GreedyParams{} (atlas build) or greedyRegistrationDefaults()
// (register greedy, the validate greedy study).
struct GreedyOptions {
  explicit GreedyOptions(GreedyParams const& defaults = GreedyParams{})
      : params(defaults),
        scales(joinIntList(defaults.scales)),
        iterations(joinIntList(defaults.iterations)),
        solver(toString(defaults.solver)),
        metric(toString(defaults.metric)) {}
  GreedyParams params;
  std::string scales;
  std::string iterations;
  std::string solver;
  std::string metric;
  std::string iterationsFlag = "--iterations";  // set by addGreedyOptions, for messages

  // The parameters the flags give: lists parsed, one iteration count per scale, the solver's name
  // read; not validated (the caller or the job does that once).
  GreedyParams toParams() const;
};

struct GreedyFlags {
  std::string iterations = "--iterations";  // validate names it --greedy-iterations
  std::string helpPrefix;                   // e.g. "Greedy study: "
};

void addGreedyOptions(CLI::App& cmd, GreedyOptions& o, GreedyFlags const& flags = {});

// --backend auto|cpu|kokkos (default: the string's value, "auto").
void addBackendOption(CLI::App& cmd, std::string& backend);

// --no-affine: the affine stage skipped, the images aligned through their headers only.
void addNoAffineFlag(CLI::App& cmd, bool& noAffine);

}  // namespace kortex::app
