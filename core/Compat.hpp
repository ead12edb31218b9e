// Kokkos 3.4 / 4.x compatibility: the few spellings that differ between the Debian
// package (3.4.01, Serial) used by CI and the Kokkos 4.x CUDA builds used on GPUs.
// Everything else in Kortex is written against the API both versions share.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <vector>

#if KOKKOS_VERSION >= 40000
#define KORTEX_KOKKOS_4 1
#else
#define KORTEX_KOKKOS_4 0
#endif

// Full unrolling of a loop with a compile-time trip count in device code (register arrays stay in
// registers only when every index is a constant); KORTEX_NO_UNROLL keeps a loop rolled where nvcc
// would unroll it. Nothing on host compilers, which unroll such short constant loops on their own.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define KORTEX_UNROLL _Pragma("unroll")
#define KORTEX_NO_UNROLL _Pragma("unroll 1")
#else
#define KORTEX_UNROLL
#define KORTEX_NO_UNROLL
#endif

// Reducer join signatures: Kokkos 3.4 joins volatile values, Kokkos 4 removed the volatile
// overloads. Write `void join(KORTEX_JOIN_VOLATILE T& dst, const KORTEX_JOIN_VOLATILE T& src)`.
#if KORTEX_KOKKOS_4
#define KORTEX_JOIN_VOLATILE
#else
#define KORTEX_JOIN_VOLATILE volatile
#endif

// Per-kernel CUDA resource queries (gpu/Resources.hpp) rely on Kokkos 4.6 internals.
#if defined(KOKKOS_ENABLE_CUDA) && KOKKOS_VERSION >= 40600
#define KORTEX_CUDA_KERNEL_RESOURCES 1
#else
#define KORTEX_CUDA_KERNEL_RESOURCES 0
#endif

namespace kortex::kx {

// Math: Kokkos 4 has Kokkos::exp etc.; 3.4 has them in Kokkos::Experimental.
#if KORTEX_KOKKOS_4
namespace math = ::Kokkos;
#else
namespace math = ::Kokkos::Experimental;
#endif

KOKKOS_INLINE_FUNCTION float exp(float x) { return math::exp(x); }
KOKKOS_INLINE_FUNCTION double exp(double x) { return math::exp(x); }
// exp2: one special-function instruction (plus denormal fix-up) on CUDA, where expf needs a
// range reduction around it; callers fold log2(e) into their coefficients.
KOKKOS_INLINE_FUNCTION float exp2(float x) { return math::exp2(x); }
KOKKOS_INLINE_FUNCTION double exp2(double x) { return math::exp2(x); }
KOKKOS_INLINE_FUNCTION double log(double x) { return math::log(x); }
KOKKOS_INLINE_FUNCTION float sqrt(float x) { return math::sqrt(x); }
KOKKOS_INLINE_FUNCTION double sqrt(double x) { return math::sqrt(x); }
KOKKOS_INLINE_FUNCTION float fabs(float x) { return math::fabs(x); }
KOKKOS_INLINE_FUNCTION double fabs(double x) { return math::fabs(x); }
KOKKOS_INLINE_FUNCTION bool isfinite(float x) { return math::isfinite(x); }

// Scratch limit of a team policy type at a level, in bytes (static in both versions).
template <class Policy>
inline std::size_t scratchSizeMax(int level) {
  return static_cast<std::size_t>(Policy::scratch_size_max(level));
}

// Number of threads an execution space instance runs with.
template <class Exec>
inline int concurrency(Exec const& exec) {
  return static_cast<int>(exec.concurrency());
}

// Execution-space instances for independent work that may overlap (the multires filter runs
// its pyramid levels on them): true where kx::partitionSpace gives distinct instances that run
// concurrently, i.e. Kokkos 4 device backends (CUDA: one new stream per instance). Kokkos 3.4
// has no portable partition_space, and new host instances (Serial, OpenMP) would not overlap.
template <class Exec>
inline constexpr bool hasConcurrentInstances =
    KORTEX_KOKKOS_4 && !Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

// n instances for independent work: Kokkos::Experimental::partition_space(exec, {1, ..., 1})
// where hasConcurrentInstances<Exec> (create them once and keep them: each owns a stream), else
// n copies of `exec` (the work then runs in order on `exec`). Work enqueued on the new instances
// is not ordered with `exec`: fence `exec` before and the instances after.
template <class Exec>
inline std::vector<Exec> partitionSpace(Exec const& exec, int n) {
#if KORTEX_KOKKOS_4
  if constexpr (hasConcurrentInstances<Exec>) {
    return Kokkos::Experimental::partition_space(exec, std::vector<int>(static_cast<std::size_t>(n), 1));
  }
#endif
  return std::vector<Exec>(static_cast<std::size_t>(n), exec);
}

// Host memory that stages copies to and from Exec's memory: page-locked where Exec is a device (the
// copies then run asynchronously on the instance's stream), plain HostSpace on host back ends.
namespace detail {
template <class Exec, bool Device = !Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible>
struct PinnedHost {
  using type = Kokkos::HostSpace;
};
#if KORTEX_KOKKOS_4
template <class Exec>
struct PinnedHost<Exec, true> {
  using type = Kokkos::SharedHostPinnedSpace;
};
#elif defined(KOKKOS_ENABLE_CUDA)
template <class Exec>
struct PinnedHost<Exec, true> {
  using type = Kokkos::CudaHostPinnedSpace;
};
#endif
}  // namespace detail
template <class Exec>
using PinnedHostSpace = typename detail::PinnedHost<Exec>::type;

// A named region of a job's timeline for kokkos-tools and Nsight Systems (NVTX through the
// Kokkos connector) while it lives: Kokkos::Profiling::ScopedRegion of Kokkos 4, which 3.4 lacks.
class ScopedRegion {
 public:
  explicit ScopedRegion(std::string const& name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(ScopedRegion const&) = delete;
  ScopedRegion& operator=(ScopedRegion const&) = delete;
};

// Short human-readable name of an execution space type.
template <class Exec>
inline const char* spaceName() {
  return Exec::name();
}

}  // namespace kortex::kx
