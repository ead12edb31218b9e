// The process group the Kokkos back ends reduce over (a multi-process atlas): the interface, and
// the paths a device buffer's sum can take. distributed/ProcessGroup.hpp implements it with MPI (and
// NCCL); a null communicator is one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kortex::gpu {

// How the sums over ranks move a device buffer: through host memory (copy down, MPI_Allreduce,
// copy up), by MPI on the device buffer (CUDA-aware MPI), or by NCCL on the device buffer. Every
// path adds the same int64 values, so the template has the same bits on each.
enum class ReductionPath { Auto, HostStaged, DeviceMpi, Nccl };
ReductionPath parseReductionPath(std::string const& s);  // auto|staged|mpi|nccl
const char* toString(ReductionPath r);                    // the same spelling

// A process group as the back ends' reductions see it (the MPI implementation:
// distributed/ProcessGroup.hpp): the atlas splits its subjects over size() ranks in contiguous blocks,
// and every rank computes the same template from the sums.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place element-wise sums over the ranks of host arrays. Integer sums are exact; the double
  // arrays carry per-subject slots that one rank fills while the others add zeros: exact too.
  virtual void sum(std::int64_t* data, std::size_t n) = 0;
  virtual void sum(double* data, std::size_t n) = 0;
  // The same sum on a buffer in device memory, when the transport reads device memory (CUDA-aware
  // MPI); false: not done, the caller stages through host memory.
  virtual bool sumDevice(std::int64_t* /*data*/, std::size_t /*n*/) { return false; }
  // Selects the path of sumDevice (a collective call: every rank names the same path). Returns
  // false, leaving the path as it was, when this group cannot take it (no CUDA-aware MPI, no NCCL
  // library, two ranks on one GPU for NCCL). Auto: NCCL, else CUDA-aware MPI, else host-staged.
  virtual bool useReduction(ReductionPath r) { return r == ReductionPath::Auto || r == ReductionPath::HostStaged; }
  virtual ReductionPath reduction() const { return ReductionPath::HostStaged; }
  // Host staging through memory the group provides (the MPI group: this rank's slot of its node's
  // shared memory, pinned for the device's copies): a buffer of at least n values, or nullptr (the
  // caller stages into a buffer of its own). A collective call with the same n on every rank; the
  // buffer stays valid until the next call.
  virtual std::int64_t* stagingBuffer(std::size_t /*n*/) { return nullptr; }
  // In-place sums over the ranks of buffer[offset, offset + count), `buffer` being this group's
  // stagingBuffer or the caller's own (then sum() does it). Collective.
  virtual void sumStaged(std::int64_t* buffer, std::size_t offset, std::size_t count) { sum(buffer + offset, count); }
  virtual void barrier() {}
  virtual std::string describe() const = 0;
};

}  // namespace kortex::gpu
