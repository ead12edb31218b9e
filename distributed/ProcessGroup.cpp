#include "distributed/ProcessGroup.hpp"

#include <Kokkos_Core.hpp>
#include <omp.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <functional>
#include <memory>
#include <stdexcept>

#include <algorithm>
#include <vector>

#include "core/Errors.hpp"
#include "core/WorkerPool.hpp"
#include "distributed/detail/Nccl.hpp"

#ifdef KORTEX_HAVE_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kortex::distributed {
namespace {

#ifdef KORTEX_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed (code " + std::to_string(rc) + ")");
}

// data[0, n) <- its sum over the ranks of `comm`, in place, in calls of at most INT_MAX values.
void allreduceSum(MPI_Comm comm, void* data, std::size_t n, MPI_Datatype type, std::size_t bytesPerValue) {
  for (std::size_t off = 0; off < n; off += std::size_t(INT_MAX))
    check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * bytesPerValue, int(std::min(n - off, std::size_t(INT_MAX))),
                        type, MPI_SUM, comm),
          "MPI_Allreduce");
}

bool cudaAwareMpi() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// Sums of int64 arrays over the ranks through each node's shared memory (an MPI-3 shared window):
// every rank of a node owns a slot; for a range of the slots, each rank adds its share of the
// range over the node's slots and writes the sum into every slot (one pass over memory, threads
// of the rank sharing it); with several nodes the node leaders then sum their slots over the
// network (MPI_Allreduce) and the node copies its leader's. Integer sums: any order gives the
// bits MPI_Allreduce gives. Every call is collective over the world.
class NodeSum {
 public:
  NodeSum() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (const int per = ranksPerNode(); per > 0)
      check(MPI_Comm_split(MPI_COMM_WORLD, rank / per, rank, &node_), "MPI_Comm_split");
    else
      check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_), "MPI_Comm_split_type");
    MPI_Comm_rank(node_, &nodeRank_);
    MPI_Comm_size(node_, &nodeSize_);
    check(MPI_Comm_split(MPI_COMM_WORLD, nodeRank_ == 0 ? 0 : MPI_UNDEFINED, rank, &leaders_), "MPI_Comm_split");
    if (nodeRank_ == 0) MPI_Comm_size(leaders_, &nodes_);
    check(MPI_Bcast(&nodes_, 1, MPI_INT, 0, node_), "MPI_Bcast");
    check(MPI_Allreduce(&nodeSize_, &largestNode_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  ~NodeSum() {
    release();
    if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
    MPI_Comm_free(&node_);
  }
  NodeSum(NodeSum const&) = delete;
  NodeSum& operator=(NodeSum const&) = delete;
  // Whether some node has several ranks (the same answer on every rank): else no memory is
  // shared and the sums are MPI_Allreduce over the world.
  bool shared() const { return largestNode_ > 1; }

  // KORTEX_RANKS_PER_NODE=N (testing the several-node sums on one machine): every N consecutive
  // ranks form a node. Unset: the ranks that share memory.
  static int ranksPerNode() {
    const char* v = std::getenv("KORTEX_RANKS_PER_NODE");
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > INT_MAX)
      throw InvalidArgument(std::string("KORTEX_RANKS_PER_NODE must be a positive integer, not '") + v + "'");
    return int(n);
  }

  // This rank's slot, at least n values (the same n on every rank); `pin`: page-locked for the
  // device's asynchronous copies (CUDA builds).
  std::int64_t* slot(std::size_t n, bool pin) {
    if (n > capacity_) {
      release();
      MPI_Info info;
      MPI_Info_create(&info);
      MPI_Info_set(info, "alloc_shared_noncontig", "true");
      void* base = nullptr;
      check(MPI_Win_allocate_shared(MPI_Aint(n * sizeof(std::int64_t)), int(sizeof(std::int64_t)), info, node_, &base, &win_),
            "MPI_Win_allocate_shared");
      MPI_Info_free(&info);
      slots_.assign(std::size_t(nodeSize_), nullptr);
      for (int r = 0; r < nodeSize_; ++r) {
        MPI_Aint bytes = 0;
        int unit = 0;
        void* p = nullptr;
        check(MPI_Win_shared_query(win_, r, &bytes, &unit, &p), "MPI_Win_shared_query");
        slots_[std::size_t(r)] = static_cast<std::int64_t*>(p);
      }
      check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all");
      capacity_ = n;
    }
    if (pin && !pinTried_) pinMine();
    return slots_[std::size_t(nodeRank_)];
  }
  // This rank's slot as it is (null before the first slot()).
  std::int64_t* mine() const { return slots_.empty() ? nullptr : slots_[std::size_t(nodeRank_)]; }

  // slot[offset, offset + count) <- its sum over the ranks, on every rank.
  void sum(std::size_t offset, std::size_t count) {
    sync();  // every rank's values are in its slot
    const std::size_t lo = offset + count * std::size_t(nodeRank_) / std::size_t(nodeSize_);
    const std::size_t hi = offset + count * std::size_t(nodeRank_ + 1) / std::size_t(nodeSize_);
    std::int64_t* const* s = slots_.data();
    const int L = nodeSize_;
    auto add = [s, L](std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i) {
        std::int64_t t = 0;
        for (int r = 0; r < L; ++r) t += s[r][i];
        for (int r = 0; r < L; ++r) s[r][i] = t;
      }
    };
    if (hi - lo <= kSerialSum) {
      add(lo, hi);
    } else {
      if (!workers_) workers_ = std::make_unique<WorkerPool>(std::max(1, omp_get_max_threads()));  // OMP_NUM_THREADS
      const std::size_t parts = std::size_t(workers_->size());
      workers_->run([&](int t) { add(lo + (hi - lo) * std::size_t(t) / parts, lo + (hi - lo) * std::size_t(t + 1) / parts); });
    }
    sync();  // every slot holds the node's sums
    if (nodes_ == 1) return;
    if (nodeRank_ == 0) allreduceSum(leaders_, s[0] + offset, count, MPI_INT64_T, sizeof(std::int64_t));
    sync();  // the leader's slot holds the world's sums
    if (nodeRank_ != 0) std::memcpy(s[nodeRank_] + offset, s[0] + offset, count * sizeof(std::int64_t));
    sync();  // copied: the leader may fill its slot again
  }

 private:
  void sync() {
    MPI_Win_sync(win_);
    check(MPI_Barrier(node_), "MPI_Barrier");
    MPI_Win_sync(win_);
  }
  // Page-locked memory must be unregistered while the CUDA context lives: at Kokkos::finalize (a
  // hook sharing `pin_`), or at release(), whichever comes first.
  struct Pin {
    void* p = nullptr;
    void undo() {
#ifdef KOKKOS_ENABLE_CUDA
      if (p) (void)cudaHostUnregister(p);
#endif
      p = nullptr;
    }
  };
  void pinMine() {
    pinTried_ = true;
#ifdef KOKKOS_ENABLE_CUDA
    void* p = slots_[std::size_t(nodeRank_)];
    if (cudaHostRegister(p, capacity_ * sizeof(std::int64_t), cudaHostRegisterPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // pageable: the copies are synchronous, the sums the same
      return;
    }
    if (!pin_) {
      pin_ = std::make_shared<Pin>();
      std::shared_ptr<Pin> hook = pin_;
      Kokkos::push_finalize_hook([hook] { hook->undo(); });
    }
    pin_->p = p;
#endif
  }
  void release() {
    if (win_ == MPI_WIN_NULL) return;
    if (pin_) pin_->undo();
    pinTried_ = false;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    slots_.clear();
    capacity_ = 0;
  }
  static constexpr std::size_t kSerialSum = 65536;  // values summed on the calling thread alone
  std::unique_ptr<WorkerPool> workers_;  // sleeping between sums (core/WorkerPool.hpp)
  MPI_Comm node_ = MPI_COMM_NULL, leaders_ = MPI_COMM_NULL;
  int nodeRank_ = 0, nodeSize_ = 1, nodes_ = 1, largestNode_ = 1;
  MPI_Win win_ = MPI_WIN_NULL;
  std::size_t capacity_ = 0;
  std::vector<std::int64_t*> slots_;
  std::shared_ptr<Pin> pin_;
  bool pinTried_ = false;
};

// The path asked for by the environment: KORTEX_REDUCTION=auto|staged|mpi|nccl (KORTEX_MPI_STAGED=1
// is the older spelling of staged).
gpu::ReductionPath requestedReduction() {
  const char* staged = std::getenv("KORTEX_MPI_STAGED");
  if (staged && std::string(staged) == "1") return gpu::ReductionPath::HostStaged;
  const char* r = std::getenv("KORTEX_REDUCTION");
  if (!r || !*r) return gpu::ReductionPath::Auto;
  return gpu::parseReductionPath(r);  // InvalidArgument on a bad value
}

class MpiCommunicator final : public gpu::Communicator {
 public:
  MpiCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Host arrays: through the nodes' shared memory in chunks when some node has several ranks.
  void sum(std::int64_t* data, std::size_t n) override {
    if (!node().shared()) return allreduce(data, n, MPI_INT64_T);
    const std::size_t chunk = std::min(n, kHostChunk);
    std::int64_t* slot = node().slot(chunk, false);
    for (std::size_t off = 0; off < n; off += chunk) {
      const std::size_t c = std::min(chunk, n - off);
      std::memcpy(slot, data + off, c * sizeof(std::int64_t));
      node().sum(0, c);
      std::memcpy(data + off, slot, c * sizeof(std::int64_t));
    }
  }
  void sum(double* data, std::size_t n) override { allreduce(data, n, MPI_DOUBLE); }
  // Host staging of device arrays: into this rank's slot of the node's shared memory.
  std::int64_t* stagingBuffer(std::size_t n) override {
    return node().shared() ? node().slot(n, true) : nullptr;
  }
  void sumStaged(std::int64_t* buffer, std::size_t offset, std::size_t count) override {
    if (node().shared() && buffer == node().mine()) return node().sum(offset, count);
    allreduce(buffer + offset, count, MPI_INT64_T);
  }
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
    allreduceSum(MPI_COMM_WORLD, data, n, type, sizeof(T));
  }
  NodeSum& node() {
    if (!node_) node_ = std::make_unique<NodeSum>();  // collective: the first int64 sum of every rank
    return *node_;
  }
  static constexpr std::size_t kHostChunk = std::size_t(1) << 20;  // values per pass of a host array
  int rank_, size_;
  std::unique_ptr<NodeSum> node_;
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
  if (size_ > 1) comm_ = std::make_unique<MpiCommunicator>(rank_, size_);
#endif
}

ProcessGroup::~ProcessGroup() {
#ifdef KORTEX_HAVE_MPI
  comm_.reset();  // its communicators and shared memory go before MPI_Finalize
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

}  // namespace kortex::distributed
