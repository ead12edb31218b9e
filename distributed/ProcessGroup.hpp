// The process group of a distributed job: MPI (OpenMPI; one rank per GPU) when Kortex is built
// with MPI and the process was started by an MPI launcher (mpirun / mpiexec / srun), otherwise one
// process. The back ends sum over it through gpu::Communicator (gpu/Communicator.hpp): the atlas. Device buffers are summed by
// NCCL (loaded at run time, one rank per GPU), else by MPI_Allreduce on the device buffer when the
// MPI library reads CUDA memory (CUDA-aware OpenMPI), else staged through host memory; the
// environment can name the path: KORTEX_REDUCTION=auto|staged|mpi|nccl (a named path that cannot
// be taken is an error; KORTEX_MPI_STAGED=1 = staged). Host arrays and host-staged device arrays
// are summed through each node's shared memory (an MPI-3 shared window; between nodes,
// MPI_Allreduce over one rank per node; KORTEX_RANKS_PER_NODE=N makes every N consecutive ranks a
// node, to test that path on one machine); the double slots go through MPI_Allreduce.
#pragma once

#include <memory>
#include <string>

#include "gpu/Communicator.hpp"

namespace kortex::distributed {

class ProcessGroup {
 public:
  // Initialises MPI when the environment names an MPI launcher; MPI_Finalize at destruction.
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(ProcessGroup const&) = delete;
  ProcessGroup& operator=(ProcessGroup const&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool mpi() const { return mpi_; }
  // The group as the back ends sum over it (gpu/Communicator.hpp): null for one process.
  gpu::Communicator* communicator() const { return comm_.get(); }
  // Prints `message` once (this rank) and ends every rank of the job (MPI_Abort; exit otherwise).
  [[noreturn]] void abort(std::string const& message, int code = 1) const;
  void barrier() const;
  std::string describe() const;  // "1 process" | "MPI, 3 ranks (host-staged sums)"

  // The process's group, created (and MPI initialised) by the first call: call it before
  // Kokkos::initialize.
  static ProcessGroup& world();
  static bool builtWithMpi();
  static bool launchedByMpi();  // the launcher's environment variables are set

 private:
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
  std::unique_ptr<gpu::Communicator> comm_;
};

}  // namespace kortex::distributed
