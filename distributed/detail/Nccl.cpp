#include "distributed/detail/Nccl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace kortex::distributed::detail {
namespace {

// nccl.h's C ABI (NCCL 2.x).
using Result = int;  // ncclResult_t: ncclSuccess = 0
constexpr int kInt64 = 4;  // ncclInt64
constexpr int kSum = 0;    // ncclSum
using GetVersionFn = Result (*)(int*);
using GetUniqueIdFn = Result (*)(Nccl::UniqueId*);
using CommInitRankFn = Result (*)(void**, int, Nccl::UniqueId, int);
using AllReduceFn = Result (*)(const void*, void*, std::size_t, int, int, void*, void*);
using CommDestroyFn = Result (*)(void*);
using GetErrorStringFn = const char* (*)(Result);

struct Api {
  bool loaded = false;
  std::string error;
  int version = 0;
  GetUniqueIdFn getUniqueId = nullptr;
  CommInitRankFn commInitRank = nullptr;
  AllReduceFn allReduce = nullptr;
  CommDestroyFn commDestroy = nullptr;
  GetErrorStringFn getErrorString = nullptr;
};

Api& api() {
  static Api a;
  return a;
}

template <class F>
F symbol(void* lib, const char* name, std::string& error) {
  void* p = dlsym(lib, name);
  if (!p && error.empty()) error = std::string("symbol ") + name + " missing";
  return reinterpret_cast<F>(p);
}

void check(Result rc, const char* what) {
  if (rc == 0) return;
  const char* msg = api().getErrorString ? api().getErrorString(rc) : "unknown error";
  throw std::runtime_error(std::string("NCCL: ") + what + " failed: " + (msg ? msg : "?") + " (code " +
                           std::to_string(rc) + ")");
}

}  // namespace

bool Nccl::load() {
  static std::once_flag once;
  std::call_once(once, [] {
    Api& a = api();
    const char* path = std::getenv("KORTEX_NCCL_LIBRARY");
    void* lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* e = dlerror();
      a.error = std::string("cannot load ") + (path && *path ? path : "libnccl.so.2") + ": " + (e ? e : "?");
      return;
    }
    std::string err;
    auto getVersion = symbol<GetVersionFn>(lib, "ncclGetVersion", err);
    a.getUniqueId = symbol<GetUniqueIdFn>(lib, "ncclGetUniqueId", err);
    a.commInitRank = symbol<CommInitRankFn>(lib, "ncclCommInitRank", err);
    a.allReduce = symbol<AllReduceFn>(lib, "ncclAllReduce", err);
    a.commDestroy = symbol<CommDestroyFn>(lib, "ncclCommDestroy", err);
    a.getErrorString = symbol<GetErrorStringFn>(lib, "ncclGetErrorString", err);
    if (!err.empty()) {
      a.error = err;
      return;
    }
    if (getVersion) getVersion(&a.version);
    a.loaded = true;
  });
  return api().loaded;
}

std::string const& Nccl::error() { return api().error; }
int Nccl::version() { return api().version; }

Nccl::UniqueId Nccl::uniqueId() {
  if (!load()) throw std::runtime_error("NCCL: " + error());
  UniqueId id{};
  check(api().getUniqueId(&id), "ncclGetUniqueId");
  return id;
}

Nccl::Nccl(int ranks, int rank, UniqueId const& id) {
  if (!load()) throw std::runtime_error("NCCL: " + error());
  check(api().commInitRank(&comm_, ranks, id, rank), "ncclCommInitRank");
}

Nccl::~Nccl() {
  if (comm_) api().commDestroy(comm_);
}

void Nccl::sumInt64(std::int64_t* data, std::size_t n, void* stream) {
  check(api().allReduce(data, data, n, kInt64, kSum, comm_, stream), "ncclAllReduce");
}

}  // namespace kortex::distributed::detail
