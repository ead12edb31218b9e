#include "pipeline/Distributed.hpp"

#include <climits>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "core/Errors.hpp"

#ifdef KORTEX_HAVE_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

namespace kortex::pipeline {
namespace {

#ifdef KORTEX_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed (code " + std::to_string(rc) + ")");
}

bool deviceAwareMpi() {
  const char* staged = std::getenv("KORTEX_MPI_STAGED");
  if (staged && std::string(staged) == "1") return false;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

class MpiAtlasComm final : public AtlasComm {
 public:
  MpiAtlasComm(int rank, int size) : rank_(rank), size_(size), device_(deviceAwareMpi()) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(std::int64_t* data, std::size_t n) override { allreduce(data, n, MPI_INT64_T); }
  void sum(double* data, std::size_t n) override { allreduce(data, n, MPI_DOUBLE); }
  bool sumDevice(std::int64_t* data, std::size_t n) override {
    if (!device_) return false;
    allreduce(data, n, MPI_INT64_T);
    return true;
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  std::string describe() const override {
    return "MPI, " + std::to_string(size_) + " ranks (" + (device_ ? "device buffers, CUDA-aware MPI" : "host-staged sums") + ")";
  }

 private:
  template <class T>
  void allreduce(T* data, std::size_t n, MPI_Datatype type) {
    for (std::size_t off = 0; off < n; off += std::size_t(INT_MAX)) {
      const int count = int(std::min(n - off, std::size_t(INT_MAX)));
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, count, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    }
  }
  int rank_, size_;
  bool device_;
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
