// Host vector fields (3, nz, ny, nx) for the fluid and greedy tests: random fields, norms and
// copies to and from an execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "gpu/Fields.hpp"

namespace kortex::test {

using HostField = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

// Components uniform in [-amp, amp].
inline HostField randomField(int nz, int ny, int nx, unsigned seed, float amp = 1.0f) {
  HostField v("random", 3, nz, ny, nx);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-amp, amp);
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = d(rng);
  return v;
}

inline double maxAbs(HostField const& a) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a.data()[i])));
  return m;
}

// max |a - b| over all components.
inline double maxDiff(HostField const& a, HostField const& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a.data()[i]) - b.data()[i]));
  return m;
}

template <class Space>
gpu::Field<typename Space::memory_space> toDevice(HostField const& h) {
  gpu::Field<typename Space::memory_space> d("d", h.extent(0), h.extent(1), h.extent(2), h.extent(3));
  Kokkos::deep_copy(d, h);
  return d;
}

template <class View>
HostField toHostField(View const& d) {
  HostField h("h", d.extent(0), d.extent(1), d.extent(2), d.extent(3));
  Kokkos::deep_copy(h, d);
  return h;
}

}  // namespace kortex::test
