#include "gpu/detail/Recording.hpp"

#include <exception>
#include <stdexcept>
#include <string>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace kortex::gpu {

#ifdef KOKKOS_ENABLE_CUDA
bool Recording::recordOn(void* stream, std::function<void()> const& enqueue) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  bool ok = true;
  try {
    enqueue();
  } catch (std::exception const&) {
    ok = false;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (ended != cudaSuccess || graph == nullptr || !ok) {
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess || exec == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  graph_ = std::shared_ptr<void>(static_cast<void*>(exec), [](void* g) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g)); });
  return true;
}

void Recording::launchOn(void* stream) const {
  const cudaError_t e = cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_.get()), static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) throw std::runtime_error(std::string("launching a recorded block of work: ") + cudaGetErrorString(e));
}
#else
bool Recording::recordOn(void*, std::function<void()> const&) { return false; }
void Recording::launchOn(void*) const {}
#endif

}  // namespace kortex::gpu
