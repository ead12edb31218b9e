#include "pipeline/Distributed.hpp"

#include <climits>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include <algorithm>
#include <vector>

#include "core/Errors.hpp"
#include "pipeline/detail/Nccl.hpp"

#ifdef KORTEX_HAVE_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kortex::pipeline {
namespace {

#ifdef KORTEX_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed (code " + std::to_string(rc) + ")");
}

bool cudaAwareMpi() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// The path asked for by the environment: KORTEX_REDUCTION=auto|staged|mpi|nccl (KORTEX_MPI_STAGED=1
// is the older spelling of staged).
gpu::ReductionPath requestedReduction() {
  const char* staged = std::getenv("KORTEX_MPI_STAGED");
  if (staged && std::string(staged) == "1") return gpu::ReductionPath::HostStaged;
  const char* r = std::getenv("KORTEX_REDUCTION");
  if (!r || !*r) return gpu::ReductionPath::Auto;
  return gpu::parseReductionPath(r);  // InvalidArgument on a bad value
}

class MpiAtlasComm final : public gpu::Communicator {
 public:
  MpiAtlasComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::int64_t* data, std::size_t n) override { allreduce(data, n, MPI_INT64_T); }
  void sum(double* data, std::size_t n) override { allreduce(data, n, MPI_DOUBLE); }
  bool sumDevice(std::int64_t* data, std::size_t n) override {
    if (!chosen_) choose(requestedReduction(), true);
    switch (path_) {
      case gpu::ReductionPath::DeviceMpi: allreduce(data, n, MPI_INT64_T); return true;
      case gpu::ReductionPath::Nccl:
        nccl_->sumInt64(data, n, nullptr);
        Kokkos::fence();  // the device: NCCL ran on the legacy default stream
        return true;
      default: return false;
    }
  }
  bool useReduction(gpu::ReductionPath r) override { return choose(r, false); }
  gpu::ReductionPath reduction() const override { return path_; }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  std::string describe() const override {
#ifdef KOKKOS_ENABLE_CUDA
    const std::string pending = "device-buffer path (" + std::string(toString(requestedReduction())) + ") chosen at the first sum";
#else
    const std::string pending = "sums of host memory through MPI_Allreduce";
#endif
    std::string how = !chosen_ ? pending
                               : path_ == gpu::ReductionPath::Nccl ? "device buffers through NCCL " + ncclVersion()
                               : path_ == gpu::ReductionPath::DeviceMpi ? "device buffers, CUDA-aware MPI"
                                                                     : "host-staged sums";
    return "MPI, " + std::to_string(size_) + " ranks (" + how + ")";
  }

 private:
  static std::string ncclVersion() {
    const int v = detail::Nccl::version();
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }
  // Collective: every rank asks for the same path and takes the same decision. `strict`: a path
  // named by the environment that cannot be taken is an error, not a fallback.
  bool choose(gpu::ReductionPath want, bool strict) {
    gpu::ReductionPath got = gpu::ReductionPath::HostStaged;
    std::string why;
    if (want == gpu::ReductionPath::Nccl || want == gpu::ReductionPath::Auto) {
      why = ncclUnusable();
      if (why.empty()) got = gpu::ReductionPath::Nccl;
    }
    if (got == gpu::ReductionPath::HostStaged && (want == gpu::ReductionPath::DeviceMpi || want == gpu::ReductionPath::Auto)) {
      if (cudaAwareMpi()) got = gpu::ReductionPath::DeviceMpi;
      else if (want == gpu::ReductionPath::DeviceMpi) why = "the MPI library does not read device memory (not CUDA-aware)";
    }
    const bool ok = want == gpu::ReductionPath::Auto || got == want;
    if (!ok && strict)
      throw std::runtime_error(std::string("the ") + toString(want) + " reduction path was asked for but " + why);
    if (!ok) return false;
    if (got == gpu::ReductionPath::Nccl && !nccl_) {
      detail::Nccl::UniqueId id{};
      if (rank_ == 0) id = detail::Nccl::uniqueId();
      check(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
      nccl_ = std::make_unique<detail::Nccl>(size_, rank_, id);
    }
    path_ = got;
    chosen_ = true;
    return true;
  }
  // Empty when every rank can use NCCL: a CUDA build, the library on every rank and one GPU per
  // rank (NCCL refuses two ranks on one device). The same answer on every rank.
  std::string ncclUnusable() {
    std::string why;
    int local = 1;
#ifdef KOKKOS_ENABLE_CUDA
    if (!detail::Nccl::load()) {
      why = "NCCL is not available (" + detail::Nccl::error() + ")";
      local = 0;
    }
    // Device identity: the PCI bus id of this rank's device; two ranks on one device cannot use NCCL.
    int dev = 0;
    char bus[64] = {0};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, int(sizeof bus), dev) != cudaSuccess) {
      local = 0;
      if (why.empty()) why = "the CUDA device of a rank could not be identified";
    }
    std::vector<char> all(sizeof bus * std::size_t(size_));
    check(MPI_Allgather(bus, int(sizeof bus), MPI_CHAR, all.data(), int(sizeof bus), MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
    int everyone = 0;
    check(MPI_Allreduce(&local, &everyone, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    if (!everyone && why.empty()) why = "NCCL is not available on every rank";
    if (everyone) {
      std::vector<std::string> ids;
      for (int r = 0; r < size_; ++r) ids.emplace_back(all.data() + sizeof bus * std::size_t(r));
      std::sort(ids.begin(), ids.end());
      if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
        why = "two ranks share a GPU (NCCL takes one rank per device)";
    }
#else
    (void)local;
    why = "the build has no CUDA back end";
#endif
    return why;
  }
  template <class T>
  void allreduce(T* data, std::size_t n, MPI_Datatype type) {
    for (std::size_t off = 0; off < n; off += std::size_t(INT_MAX)) {
      const int count = int(std::min(n - off, std::size_t(INT_MAX)));
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, count, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    }
  }
  int rank_, size_;
  bool chosen_ = false;
  gpu::ReductionPath path_ = gpu::ReductionPath::HostStaged;
  std::unique_ptr<detail::Nccl> nccl_;
};
#endif

}  // namespace

ProcessGroup& ProcessGroup::world() {
  static ProcessGroup group;
  return group;
}

bool ProcessGroup::builtWithMpi() {
#ifdef KORTEX_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool ProcessGroup::launchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

ProcessGroup::ProcessGroup() {
#ifdef KORTEX_HAVE_MPI
  if (!launchedByMpi()) return;
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) check(MPI_Init(nullptr, nullptr), "MPI_Init");
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (size_ > 1) comm_ = std::make_unique<MpiAtlasComm>(rank_, size_);
#endif
}

ProcessGroup::~ProcessGroup() {
#ifdef KORTEX_HAVE_MPI
  if (mpi_) {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  }
#endif
}

void ProcessGroup::abort(std::string const& message, int code) const {
  std::cerr << message << std::endl;
#ifdef KORTEX_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void ProcessGroup::barrier() const {
#ifdef KORTEX_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

std::string ProcessGroup::describe() const {
  if (comm_) return comm_->describe();
  return mpi_ ? "MPI, 1 rank" : "1 process";
}

}  // namespace kortex::pipeline
