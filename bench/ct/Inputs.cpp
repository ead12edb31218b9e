// Inputs of the CT benchmark: the noisy phantom of each (dim, n), built once, and the buffer
// pairs successive runs rotate over so that small images do not just measure cache.
#include <algorithm>

#include "bench/ct/CtBench.hpp"
#include "core/Phantom.hpp"
#include "core/QualitySettings.hpp"
#include "validation/Metrics.hpp"

namespace kortex::bench::ct {

namespace {
// Number of (input, output) buffer pairs so that successive runs touch > 2x the cache.
int rotationSlots(Index voxels, std::size_t cache, int maxSlots) {
  return common::rotationSlots(2.0 * 4.0 * static_cast<double>(voxels), cache, maxSlots);
}
}  // namespace

void InputSet::make() {
  if (made) return;
  HostImage clean = dim == 2 ? sheppLogan2D(n) : sheppLogan3D(n);
  sigma = noiseSigmaForSnr(clean, kQualitySnr);
  image = addGaussianNoise(clean, sigma, 0xC7B3ull + static_cast<std::uint64_t>(n * 10 + dim));
  lo = static_cast<float>(validation::minValue(image));
  hi = static_cast<float>(validation::maxValue(image));
  made = true;
}

InputSet& Inputs::get(int dim, Index n) {
  for (auto& s : sets_)
    if (s->dim == dim && s->n == n) return *s;
  sets_.push_back(std::make_unique<InputSet>(dim, n));
  return *sets_.back();
}

Transfer Inputs::allocateDevice(InputSet& in, DeviceExec const& exec) {
  in.make();
  const auto& h = in.image.data;
  const int k = rotationSlots(in.image.numVoxels(), cache_, tiny_ ? 8 : 128);
  slotsUsedMax_ = std::max(slotsUsedMax_, k);
  in.dIn.clear();
  in.dOut.clear();
  for (int s = 0; s < k; ++s) {
    in.dIn.emplace_back("kortex::bench::input", h.extent(0), h.extent(1), h.extent(2));
    in.dOut.emplace_back("kortex::bench::output", h.extent(0), h.extent(1), h.extent(2));
  }
  Kokkos::deep_copy(in.dIn[0], h);
  for (int s = 1; s < k; ++s) Kokkos::deep_copy(in.dIn[s], in.dIn[0]);
  Kokkos::fence();
  Transfer tr;
  tr.dim = in.dim;
  tr.n = in.n;
  tr.hostMemory = common::kDeviceIsHostMemory;
  if (!common::kDeviceIsHostMemory) {
    HostImage back("kortex::bench::download", in.image.geometry);
    const int reps = tiny_ ? 2 : 5;
    tr.uploadMs = timeMedian([&] { Kokkos::deep_copy(in.dIn[0], h); }, [&] { exec.fence(); }, 1, reps).medianMs;
    tr.downloadMs =
        timeMedian([&] { Kokkos::deep_copy(back.data, in.dIn[0]); }, [&] { exec.fence(); }, 1, reps).medianMs;
  }
  return tr;
}

void Inputs::allocateHost(InputSet& in) {
  in.make();
  const auto& h = in.image.data;
  const int k = rotationSlots(in.image.numVoxels(), std::size_t(32) << 20, 4);
  in.hIn.clear();
  in.hOut.clear();
  for (int s = 0; s < k; ++s) {
    in.hIn.emplace_back("kortex::bench::cpu_input", h.extent(0), h.extent(1), h.extent(2));
    in.hOut.emplace_back("kortex::bench::cpu_output", h.extent(0), h.extent(1), h.extent(2));
    Kokkos::deep_copy(in.hIn.back(), h);
  }
}

}  // namespace kortex::bench::ct
