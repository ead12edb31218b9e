#include "core/Atlas.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/Errors.hpp"

namespace kortex {

void AtlasParams::validate() const { greedy.validate(); }

void AtlasParams::validateFor(Geometry const& g, int subjects) const {
  if (subjects < kMinSubjects)
    throw InvalidArgument("an atlas needs at least " + std::to_string(kMinSubjects) + " subjects, got " +
                          std::to_string(subjects));
  if (subjects > kMaxSubjects)
    throw InvalidArgument("an atlas takes at most " + std::to_string(kMaxSubjects) + " subjects, got " +
                          std::to_string(subjects) + " (the fixed-point template sums are sized for that many)");
  greedy.validateFor(g);
}

bool atlasKeepsVelocity(GreedySolver s) { return s != GreedySolver::Fft; }

int AtlasMemory::resident(int subjects, std::int64_t deviceBytes) const {
  if (total(subjects) <= deviceBytes) return subjects;
  const std::int64_t room = deviceBytes - shared - streamBuffers;
  if (room < 0) return -1;
  return int(std::min<std::int64_t>(subjects, room / std::max<std::int64_t>(perSubject, 1)));
}

AtlasCostModel::Prediction AtlasCostModel::predict(std::vector<int> const& subjectsPerRank) const {
  if (subjectsPerRank.size() != ranks.size())
    throw InvalidArgument("atlas cost model: " + std::to_string(subjectsPerRank.size()) + " subject counts for " +
                          std::to_string(ranks.size()) + " ranks");
  const std::size_t scales = iterations.size();
  if (networkS.size() != scales) throw InvalidArgument("atlas cost model: one network time per scale is needed");
  Prediction p;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    AtlasRankCost const& c = ranks[r];
    if (c.fixedS.size() != scales || c.perSubjectS.size() != scales)
      throw InvalidArgument("atlas cost model: rank " + std::to_string(r) + " has no cost for every scale");
    double gpu = 0.0;
    for (std::size_t s = 0; s < scales; ++s) gpu += iterations[s] * (c.fixedS[s] + subjectsPerRank[r] * c.perSubjectS[s]);
    p.gpu = std::max(p.gpu, gpu);
    p.cpu = std::max(p.cpu, subjectsPerRank[r] * c.setupPerSubjectS);
  }
  for (std::size_t s = 0; s < scales; ++s) p.network += iterations[s] * networkS[s];
  return p;
}

std::vector<int> atlasBalance(int subjects, std::vector<double> const& perSubjectSeconds) {
  const int k = int(perSubjectSeconds.size());
  if (k < 1) throw InvalidArgument("atlas balance: no rank");
  if (subjects < k)
    throw InvalidArgument("atlas balance: " + std::to_string(k) + " ranks for " + std::to_string(subjects) +
                          " subjects (every rank needs at least one)");
  std::vector<double> speed(std::size_t(k), 0.0);
  for (int r = 0; r < k; ++r) {
    const double t = perSubjectSeconds[std::size_t(r)];
    if (!(t > 0.0) || !std::isfinite(t))
      throw InvalidArgument("atlas balance: rank " + std::to_string(r) + " has no positive per-subject time");
    speed[std::size_t(r)] = 1.0 / t;
  }
  const double total = std::accumulate(speed.begin(), speed.end(), 0.0);
  // One subject each first, the rest by share (floor), then the largest remainders.
  const int rest = subjects - k;
  std::vector<int> n(static_cast<std::size_t>(k), 1);
  std::vector<double> frac(static_cast<std::size_t>(k));
  int given = 0;
  for (int r = 0; r < k; ++r) {
    const double share = rest * speed[std::size_t(r)] / total;
    const int whole = int(std::floor(share + 1e-9));
    n[std::size_t(r)] += whole;
    given += whole;
    frac[std::size_t(r)] = std::round((share - whole) * 1e9);  // equal speeds: equal remainders
  }
  std::vector<int> order(static_cast<std::size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return frac[std::size_t(a)] > frac[std::size_t(b)]; });
  for (int j = 0; given < rest; ++j, ++given) ++n[std::size_t(order[std::size_t(j % k)])];
  return n;
}

}  // namespace kortex
