#include "pipeline/MultiresTileSpace.hpp"

#include <string>

#include "core/Errors.hpp"
#include "gpu/multires/MultiresBilateral.hpp"

namespace kortex::pipeline::tune {

namespace {

constexpr const char* kRuleUnderWarp = "x*y < 32 outputs per team (under a warp)";
constexpr const char* kRuleBlockLimit = "x*y > 1024 outputs per team (CUDA block limit)";
constexpr const char* kRuleShortRows = "rows shorter than 16 elements (x < 16, uncoalesced)";
constexpr const char* kRuleLargerThanImage = "tile wider or taller than the image";

int prunedBy(CandidateSet const& s, std::string const& rule) {
  for (auto const& p : s.pruned)
    if (p.first == rule) return p.second;
  return 0;
}

}  // namespace

CandidateSet multiresBilateralCandidates(int size) {
  if (size < 1) throw InvalidArgument("multires tile candidates: the image size must be >= 1");
  CandidateSet s;
  // Rules are checked in order so every rule appears in the list, even with a zero count.
  for (const char* r : {kRuleUnderWarp, kRuleBlockLimit, kRuleShortRows}) s.pruned.emplace_back(r, 0);
  if (size < 1024) s.pruned.emplace_back(kRuleLargerThanImage, 0);
  for (int x = 1; x <= 1024; x *= 2)
    for (int y = 1; y <= 1024; y *= 2) {
      ++s.enumerated;
      const long long outputs = static_cast<long long>(x) * y;
      if (outputs < 32)
        tune::countPruned(s, kRuleUnderWarp);
      else if (outputs > 1024)
        tune::countPruned(s, kRuleBlockLimit);
      else if (x < 16)
        tune::countPruned(s, kRuleShortRows);
      else if (x > size || y > size)
        tune::countPruned(s, kRuleLargerThanImage);
      else
        s.candidates.push_back(tune::Config{{"x", x}, {"y", y}});
    }
  const auto def = gpu::multires_detail::kDefaultBilateralTile;
  s.defaultConfig = tune::Config{{"x", def.x}, {"y", def.y}};
  s.reference = tune::Config{{"x", 16}, {"y", 16}};
  s.referenceName = "16x16 (the paper's assumed optimum)";
  return s;
}

MultiresTileSpaceCounts multiresBilateralCounts(CandidateSet const& s) {
  MultiresTileSpaceCounts c;
  c.grid = s.enumerated;
  c.inSpace = s.enumerated - prunedBy(s, kRuleUnderWarp) - prunedBy(s, kRuleBlockLimit);
  c.candidates = static_cast<int>(s.candidates.size());
  return c;
}

const char* multiresBilateralPruningRule() {
  return "tiles x*y with x, y powers of two in 1..1024 (121 shapes); the space keeps 32 <= x*y <= 1024 "
         "(a warp to the CUDA block limit, one output per thread; the same list on host backends); "
         "pruned to rows of at least 16 elements (x >= 16, the paper's coalescing rule) and, below "
         "1024^2, to tiles no wider or taller than the image";
}

}  // namespace kortex::pipeline::tune
