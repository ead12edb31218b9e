// The process group's sums (distributed/ProcessGroup.hpp), run under mpiexec with several ranks: host
// int64 arrays larger than one pass of the node's shared memory (several passes, the node sums split
// over the rank's threads), the host staging buffer's sums of a sub-range, and the double slots.
// Every sum is checked value by value against the sum the test computes itself. ctest runs it twice:
// the ranks of one machine as one node, and as nodes of 2 ranks (KORTEX_RANKS_PER_NODE=2: the node
// leaders then sum over MPI).
#define BOOST_TEST_MODULE tstDistributed
#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "distributed/ProcessGroup.hpp"

namespace {

using kortex::distributed::ProcessGroup;

// MPI before Kokkos, as the CLI does; Kokkos ends first (the staging buffer's pinning is undone by a
// Kokkos finalize hook), MPI when the process group is destroyed at exit.
struct MpiThenKokkos {
  MpiThenKokkos() {
    (void)ProcessGroup::world();
    if (!Kokkos::is_initialized()) Kokkos::initialize();
  }
  ~MpiThenKokkos() {
    if (Kokkos::is_initialized()) Kokkos::finalize();
  }
};
BOOST_TEST_GLOBAL_FIXTURE(MpiThenKokkos);

kortex::gpu::Communicator& comm() {
  BOOST_REQUIRE_MESSAGE(ProcessGroup::launchedByMpi(), "run this test under mpiexec with at least 2 ranks");
  kortex::gpu::Communicator* c = ProcessGroup::world().communicator();
  BOOST_REQUIRE(c != nullptr);
  BOOST_REQUIRE_GE(c->size(), 2);
  return *c;
}

// Rank r's value at index i: distinct per rank and index, negative ones included.
std::int64_t value(int r, std::size_t i) { return std::int64_t(i % 9973) * (r + 3) - std::int64_t(r) * 1000003 + (i % 2 ? 5 : -7); }
std::int64_t total(int ranks, std::size_t i) {
  std::int64_t t = 0;
  for (int r = 0; r < ranks; ++r) t += value(r, i);
  return t;
}

}  // namespace

// 2^21 + 12345 values: three passes of the node's shared memory (2^20 values each), each rank's share
// of a pass far above what one thread sums alone.
BOOST_AUTO_TEST_CASE(host_int64_sums_are_exact_over_several_passes) {
  auto& c = comm();
  const std::size_t n = (std::size_t(1) << 21) + 12345;
  std::vector<std::int64_t> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = value(c.rank(), i);
  c.sum(a.data(), n);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != total(c.size(), i);
  BOOST_TEST(wrong == 0u);
  // Again on the same memory: the sums are repeatable (a second call reuses the slots and threads).
  for (std::size_t i = 0; i < n; ++i) a[i] = value(c.rank(), n - 1 - i);
  c.sum(a.data(), n);
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != total(c.size(), n - 1 - i);
  BOOST_TEST(wrong == 0u);
}

// The staging buffer: a sub-range summed in place, the values around it left as they were.
BOOST_AUTO_TEST_CASE(staged_sums_of_a_range_leave_the_rest) {
  auto& c = comm();
  const std::size_t n = 700001, offset = 1234, count = 600000;
  std::int64_t* buf = c.stagingBuffer(n);
  std::vector<std::int64_t> own;
  if (buf == nullptr) {  // no shared memory on this machine: the caller's own buffer
    own.resize(n);
    buf = own.data();
  }
  for (std::size_t i = 0; i < n; ++i) buf[i] = value(c.rank(), i);
  c.sumStaged(buf, offset, count);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool inside = i >= offset && i < offset + count;
    wrong += buf[i] != (inside ? total(c.size(), i) : value(c.rank(), i));
  }
  BOOST_TEST(wrong == 0u);
}

// The double slots: one rank fills a slot, the others add zeros.
BOOST_AUTO_TEST_CASE(double_slots_come_back_from_their_rank) {
  auto& c = comm();
  const std::size_t n = 6 * std::size_t(c.size());
  std::vector<double> slots(n, 0.0);
  for (std::size_t k = 0; k < 6; ++k) slots[6 * std::size_t(c.rank()) + k] = 0.1 * double(c.rank()) + double(k) / 3.0;
  c.sum(slots.data(), n);
  for (int r = 0; r < c.size(); ++r)
    for (std::size_t k = 0; k < 6; ++k) BOOST_TEST(slots[6 * std::size_t(r) + k] == 0.1 * double(r) + double(k) / 3.0);
}
