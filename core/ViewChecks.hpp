// The one overlap test of the entry points (gpu/, reference_cpu/): two views alias when their
// memory spans [data(), data() + span()) share a byte. Unallocated views never overlap.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kortex {

template <class A, class B>
bool spansOverlap(A const& a, B const& b) {
  if (a.data() == nullptr || b.data() == nullptr) return false;
  const auto aBegin = reinterpret_cast<std::uintptr_t>(a.data());
  const auto aEnd = aBegin + a.span() * sizeof(typename A::value_type);
  const auto bBegin = reinterpret_cast<std::uintptr_t>(b.data());
  const auto bEnd = bBegin + b.span() * sizeof(typename B::value_type);
  return aBegin < bEnd && bBegin < aEnd;
}

}  // namespace kortex
