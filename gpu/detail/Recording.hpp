// A recording of the work a callable enqueues on an execution space instance, launched again without
// the host enqueueing it: on CUDA a graph captured from the instance's stream (this thread's calls
// only: cudaStreamCaptureModeThreadLocal), so that a block of small kernels costs one launch. What is
// recorded is fixed: the same kernels on the same buffers with the same arguments every launch, so the
// work must not read anything back, synchronise or allocate (a CUDA error or exception while recording
// makes record() return false, with nothing recorded and nothing run). Other back ends record nothing.
#pragma once

#include <Kokkos_Core.hpp>

#include <functional>
#include <memory>
#include <type_traits>

namespace kortex::gpu {

class Recording {
 public:
  // Whether Exec's instances can record (CUDA).
  template <class Exec>
  static constexpr bool supported() {
#ifdef KOKKOS_ENABLE_CUDA
    return std::is_same_v<Exec, Kokkos::Cuda>;
#else
    return false;
#endif
  }
  // Records what `enqueue` enqueues on exec; enqueue runs once on the host, its device work is recorded,
  // not run. False where Exec cannot record or the recording failed (then the caller puts back whatever
  // host state enqueue changed and runs the work itself).
  template <class Exec>
  bool record(Exec const& exec, std::function<void()> const& enqueue) {
    reset();
#ifdef KOKKOS_ENABLE_CUDA
    if constexpr (std::is_same_v<Exec, Kokkos::Cuda>) return recordOn(exec.cuda_stream(), enqueue);
#endif
    (void)exec;
    (void)enqueue;
    return false;
  }
  // Launches the recording on exec's queue (recorded() must hold).
  template <class Exec>
  void launch(Exec const& exec) const {
#ifdef KOKKOS_ENABLE_CUDA
    if constexpr (std::is_same_v<Exec, Kokkos::Cuda>) launchOn(exec.cuda_stream());
#endif
    (void)exec;
  }
  bool recorded() const { return graph_ != nullptr; }
  void reset() { graph_.reset(); }

 private:
  bool recordOn(void* stream, std::function<void()> const& enqueue);
  void launchOn(void* stream) const;
  std::shared_ptr<void> graph_;  // the instantiated graph (CUDA's cudaGraphExec_t), destroyed with its last copy
};

}  // namespace kortex::gpu
