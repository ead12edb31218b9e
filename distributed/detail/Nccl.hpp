// NCCL loaded at run time (dlopen of libnccl.so.2, or $KORTEX_NCCL_LIBRARY): Kortex builds without
// NCCL's headers and runs without the library; the atlas's device-buffer sums use it where it is
// found (PyTorch's wheels carry it on the GPU machine). Only the entry points the atlas needs are
// declared, with the types of NCCL's public, stable C ABI (nccl.h, NCCL 2.x): a 128-byte unique
// id, an opaque communicator, ncclInt64 = 4, ncclSum = 0, ncclSuccess = 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kortex::distributed::detail {

class Nccl {
 public:
  static constexpr std::size_t kUniqueIdBytes = 128;
  struct UniqueId {
    char internal[kUniqueIdBytes];
  };

  // Loads the library (once per process); false with the loader's message in error().
  static bool load();
  static std::string const& error();
  static int version();  // e.g. 22703 for 2.27.3; 0 when not loaded

  static UniqueId uniqueId();  // throws on failure
  // A communicator of `ranks` processes on the current CUDA device.
  Nccl(int ranks, int rank, UniqueId const& id);
  ~Nccl();
  Nccl(Nccl const&) = delete;
  Nccl& operator=(Nccl const&) = delete;
  // In-place sum over the ranks of an int64 device buffer, enqueued on `stream` (a cudaStream_t;
  // null: the legacy default stream); the caller synchronises before reading `data`.
  void sumInt64(std::int64_t* data, std::size_t n, void* stream);

 private:
  void* comm_ = nullptr;
};

}  // namespace kortex::distributed::detail
