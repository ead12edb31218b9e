#include "gpu/atlas/Atlas.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Registration.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/GreedyStepper.hpp"
#include "gpu/greedy/detail/GreedyKernels.hpp"
#include "gpu/greedy/detail/SubjectScale.hpp"
#include "gpu/imageops/ImageOps.hpp"

namespace kortex::gpu {

AtlasMemory atlasMemory(Geometry const& g, AtlasParams const& params) {
  const std::int64_t voxels = std::int64_t(g.nx()) * g.ny() * g.nz();
  const bool keepV = atlasKeepsVelocity(params.greedy.solver);
  const std::int64_t v = keepV ? 12 : 0;
  AtlasMemory m;
  m.perSubject = voxels * (4 + 4 + 12 + v) + std::int64_t(sizeof(double));  // image, W, u, v; mismatch slot
  const std::int64_t blurred = params.greedy.scales.front() > 1 ? 4 : 0;
  const std::int64_t vShared = keepV ? 0 : 12;
  m.shared = voxels * (4 + 4 + 8 + 12 + 24 + blurred + vShared) +  // template, previous, sum, mean u, its sum
             greedyStepperBytes(GridExtents{int(g.nz()), int(g.ny()), int(g.nx())}, params.greedy, false);
  m.streamBuffers = voxels * (2 * (4 + 4 + 12 + v) + 4);
  m.perStreamedHost = voxels * (4 + 12 + v);
  return m;
}
namespace {

using greedy_detail::allocateSubjectScale;
using greedy_detail::carryFields;
using greedy_detail::SubjectScale;
using greedy_detail::SubjectScaleViews;
using greedy_detail::zeroFields;

constexpr int kMaxGroup = 8;  // terms per accumulation pass

// sum[k] (+)= q(w[0][k]) + ... + q(w[count-1][k]) over a flat range.
struct AccumulateFunctor {
  const float* w[kMaxGroup];
  int count;
  std::int64_t* sum;
  bool accumulate;
  KOKKOS_INLINE_FUNCTION void operator()(int k) const {
    std::int64_t s = accumulate ? sum[k] : 0;
    for (int j = 0; j < count; ++j) s += atlasFixed(w[j][k]);
    sum[k] = s;
  }
};

struct MeanFunctor {
  const std::int64_t* sum;
  float* out;
  int n;
  KOKKOS_INLINE_FUNCTION void operator()(int k) const { out[k] = ::kortex::atlasMean(sum[k], n); }
};

// W = snap(I(x - u(x))) (core/Atlas.hpp; the warp is gpu/imageops' rule) in one pass;
// WarpSnapSseFunctor also sums (W - T)^2.
template <class Mem>
struct WarpSnapFunctor {
  Kokkos::View<const float***, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::RandomAccess>> I;
  ConstField<Mem> u;
  ImageView<Mem> W;
  ConstImageView<Mem> T;
  int ny, nx;
  KOKKOS_INLINE_FUNCTION float at(int i) const {
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    float grad[3];
    const float w = atlasSnap(regSampleTrilinear(I, static_cast<float>(x) - u(0, z, y, x), static_cast<float>(y) - u(1, z, y, x),
                                                 static_cast<float>(z) - u(2, z, y, x), grad));
    W.data()[i] = w;
    return w;
  }
  KOKKOS_INLINE_FUNCTION void operator()(int i) const { at(i); }
};
template <class Mem>
struct WarpSnapSseFunctor {
  WarpSnapFunctor<Mem> warp;
  KOKKOS_INLINE_FUNCTION void operator()(int i, double& sse) const {
    const double d = double(warp.at(i)) - double(warp.T.data()[i]);
    sse += d * d;
  }
};

// The centring's candidate in one pass: W = snap(I(x - u(x))), sum (W - T)^2 and min det(I - grad u)
// (clamped central differences, the greedy step's fold check).
struct CentreSums {
  double sse;
  float minJ;
};
template <class Mem>
struct WarpSnapCheckFunctor {
  using value_type = CentreSums;
  WarpSnapFunctor<Mem> warp;
  int nz;
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& s) const {
    const double d = double(warp.at(i)) - double(warp.T.data()[i]);
    s.sse += d * d;
    const int row = i / warp.nx, x = i - row * warp.nx, y = row % warp.ny, z = row / warp.ny;
    const float J = deformationDeterminant(warp.u, z, y, x, nz, warp.ny, warp.nx);
    if (J < s.minJ) s.minJ = J;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const {
    s.sse = 0.0;
    s.minJ = 3.4e38f;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.sse += s.sse;
    if (s.minJ < d.minJ) d.minJ = s.minJ;
  }
};

template <class Exec>
void warpSnapped(Exec const& exec, ImageView<typename Exec::memory_space> I, Field<typename Exec::memory_space> u,
                 ImageView<typename Exec::memory_space> W) {
  Kokkos::parallel_for("kortex::atlas::warp_snap", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(W.size())),
                       WarpSnapFunctor<typename Exec::memory_space>{I, u, W, {}, int(W.extent(1)), int(W.extent(2))});
}

// The centring's candidate u: W from it, its sum (W - T)^2 and its min det (read back, fences).
template <class Exec>
CentreSums warpSnapChecked(Exec const& exec, ImageView<typename Exec::memory_space> I, Field<typename Exec::memory_space> u,
                           ImageView<typename Exec::memory_space> W, ConstImageView<typename Exec::memory_space> T) {
  CentreSums s{0.0, 0.0f};
  Kokkos::parallel_reduce("kortex::atlas::warp_snap_check", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(W.size())),
                          WarpSnapCheckFunctor<typename Exec::memory_space>{{I, u, W, T, int(W.extent(1)), int(W.extent(2))}, int(W.extent(0))},
                          s);
  return s;
}

// The same as warpSnapped, with sum (W - T)^2 left in the device scalar `sse` (no read-back).
template <class Exec>
void warpSnapped(Exec const& exec, ImageView<typename Exec::memory_space> I, Field<typename Exec::memory_space> u,
                 ImageView<typename Exec::memory_space> W, ConstImageView<typename Exec::memory_space> T,
                 Kokkos::View<double, typename Exec::memory_space> sse) {
  Kokkos::parallel_reduce("kortex::atlas::warp_snap_sse", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(W.size())),
                          WarpSnapSseFunctor<typename Exec::memory_space>{{I, u, W, T, int(W.extent(1)), int(W.extent(2))}}, sse);
}

// sum_x |mean_i u_i(x)|^2 from the fixed-point sums of the three components.
struct MeanNormFunctor {
  const std::int64_t* sum;
  int voxels, n;
  KOKKOS_INLINE_FUNCTION void operator()(int k, double& t) const {
    for (int c = 0; c < 3; ++c) {
      const double m = double(::kortex::atlasMean(sum[std::size_t(c) * voxels + k], n));
      t += m * m;
    }
  }
};

// sum (+)= q(terms...) in passes of up to eight; `onto`: add to what `sum` holds (else the first
// pass overwrites it). No term and not `onto`: sum = 0.
template <class Exec>
void accumulateFlat(Exec const& exec, std::vector<const float*> const& terms, std::int64_t* sum, int length,
                    const char* label, bool onto = false) {
  if (terms.empty() && !onto)
    Kokkos::deep_copy(exec, Kokkos::View<std::int64_t*, typename Exec::memory_space, Kokkos::MemoryUnmanaged>(sum, std::size_t(length)),
                      std::int64_t(0));
  for (std::size_t b = 0; b < terms.size(); b += kMaxGroup) {
    AccumulateFunctor f{};
    f.count = int(std::min(terms.size(), b + kMaxGroup) - b);
    for (int j = 0; j < f.count; ++j) f.w[j] = terms[b + std::size_t(j)];
    f.sum = sum;
    f.accumulate = onto || b > 0;
    Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, length), f);
  }
}

template <class Exec>
void meanFlat(Exec const& exec, std::int64_t const* sum, int n, float* out, int length, const char* label) {
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, length), MeanFunctor{sum, out, n});
}

// A streamed subject's state between its visits to the device.
template <class Exec>
struct StreamedSubject {
  using Space = kx::PinnedHostSpace<Exec>;  // copies overlap the kernels on a device
  Kokkos::View<float***, Kokkos::LayoutRight, Space> I;
  Kokkos::View<float****, Kokkos::LayoutRight, Space> u, v;
  bool frozen = false;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sums over ranks of an int64 device array: the transport reads device memory (or the array
// is in host memory), or the array is staged through pinned host memory. Returns the seconds spent.
template <class Exec>
double reduceRanks(Exec const& exec, Communicator* comm, Kokkos::View<std::int64_t*, typename Exec::memory_space> a,
                   StagedRankSum<Exec>& staged) {
  using Mem = typename Exec::memory_space;
  if (comm == nullptr || comm->size() == 1) return 0.0;
  kx::ScopedRegion region("kortex::atlas::reduce");
  exec.fence();
  const auto t0 = Clock::now();
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible)
    comm->sum(a.data(), a.size());
  else if (!comm->sumDevice(a.data(), a.size()))
    staged(exec, *comm, a);
  return since(t0);
}

template <class F>
Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> hostCopy(F const& f) {
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> h("kortex::atlas::state_field", f.extent(0),
                                                                    f.extent(1), f.extent(2), f.extent(3));
  Kokkos::deep_copy(h, f);
  return h;
}

}  // namespace

template <class Exec>
void atlasAccumulate(Exec const& exec, std::vector<ConstImageView<typename Exec::memory_space>> const& w,
                     FixedSum<typename Exec::memory_space> sum, bool accumulate) {
  if (w.empty() || w.size() > std::size_t(kMaxGroup))
    throw InvalidArgument("atlasAccumulate: 1 to " + std::to_string(kMaxGroup) + " images per pass");
  for (auto const& a : w)
    for (int k = 0; k < 3; ++k)
      if (a.extent(k) != sum.extent(k)) throw InvalidArgument("atlasAccumulate: images on different grids");
  if (sum.size() > 2147483647u) throw InvalidArgument("atlasAccumulate: more than 2^31 - 1 voxels");
  AccumulateFunctor f{};
  f.count = int(w.size());
  for (int j = 0; j < f.count; ++j) f.w[j] = w[std::size_t(j)].data();
  f.sum = sum.data();
  f.accumulate = accumulate;
  Kokkos::parallel_for("kortex::atlas::accumulate", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(sum.size())), f);
}

template <class Exec>
void atlasMean(Exec const& exec, FixedSum<typename Exec::memory_space> sum, int n, ImageView<typename Exec::memory_space> out) {
  for (int k = 0; k < 3; ++k)
    if (out.extent(k) != sum.extent(k)) throw InvalidArgument("atlasMean: the sum and the output are on different grids");
  if (n < 1) throw InvalidArgument("atlasMean: n must be >= 1");
  meanFlat(exec, sum.data(), n, out.data(), int(sum.size()), "kortex::atlas::mean");
}

template <class Exec>
StagedRankSum<Exec>::StagedRankSum(std::size_t chunk) : chunk_(chunk) {
  if (chunk < 1) throw InvalidArgument("staged sums over ranks: a chunk holds at least one value");
}

template <class Exec>
void StagedRankSum<Exec>::operator()(Exec const& exec, Communicator& comm, Array a) {
  const std::size_t n = a.size();
  if (n == 0) return;
  std::int64_t* host = comm.stagingBuffer(n);
  if (host == nullptr) {
    if (staging_.size() < n)
      staging_ = decltype(staging_)(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::atlas::staging"), n);
    host = staging_.data();
  }
  const Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> buffer(host, n);
  const std::size_t chunks = n / chunk_ + (n % chunk_ != 0);
  auto range = [&](std::size_t k) { return std::make_pair(k * chunk_, k * chunk_ + std::min(chunk_, n - k * chunk_)); };
  auto down = [&](std::size_t k) { Kokkos::deep_copy(exec, Kokkos::subview(buffer, range(k)), Kokkos::subview(a, range(k))); };
  auto up = [&](std::size_t k) { Kokkos::deep_copy(exec, Kokkos::subview(a, range(k)), Kokkos::subview(buffer, range(k))); };
  down(0);
  exec.fence();
  for (std::size_t k = 0; k < chunks; ++k) {
    // Queued before the sum of chunk k, so they run while the ranks sum it.
    if (k > 0) up(k - 1);
    if (k + 1 < chunks) down(k + 1);
    comm.sumStaged(host, range(k).first, range(k).second - range(k).first);
    exec.fence();
  }
  up(chunks - 1);
  exec.fence();
}

template <class Exec>
double atlasSumSeconds(Exec const& exec, Communicator* comm, std::size_t count, int repetitions, std::size_t stagedChunk) {
  using Mem = typename Exec::memory_space;
  if (comm == nullptr || comm->size() == 1 || count == 0) return 0.0;
  if (repetitions < 1) throw InvalidArgument("atlasSumSeconds: at least one repetition");
  Kokkos::View<std::int64_t*, Mem> a("kortex::atlas::sum_probe", count);
  StagedRankSum<Exec> staged(stagedChunk);
  reduceRanks(exec, comm, a, staged);  // warm-up: first-use set-up of the path and the staging buffer
  std::vector<double> t;
  for (int r = 0; r < repetitions; ++r) {
    comm->barrier();
    t.push_back(reduceRanks(exec, comm, a, staged));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

namespace {

// One process's atlas (buildAtlas) in stages, each a function of what it reads and writes:
// planAtlas (the checks and the partition), per scale enterResident / allocateShared /
// enterStreamed (the subjects' state and the shared buffers), iterate (template average, each
// subject's greedy step through the GreedyStepper, the centring, the sums over ranks, a
// checkpoint), then finishAtlas (the outputs and the final statistics).

template <class Exec>
using MemOf = typename Exec::memory_space;

// What the checks fix before anything is allocated: the inputs, the cohort over the process group
// and its partition on the device (local subjects 0 .. resident - 1 stay there, the others are
// streamed through host memory).
struct AtlasPlan {
  std::vector<HostImage> const& images;
  GreedyParams const& gp;
  AtlasRun const& run;
  Communicator* comm = nullptr;  // null: one process
  int local = 0, n = 0;          // subjects of this process, of the cohort
  int resident = 0, streamed = 0;
  Geometry g;
  bool keepV = false;  // a velocity per subject (the warm-started solvers)
  int s0 = 0;          // the first scale run (a resumed run's)
};

void checkResume(AtlasPlan const& p, AtlasState const& r) {
  if (p.s0 < 0 || p.s0 >= int(p.gp.scales.size()) || r.iteration < 0 || r.iteration > p.gp.iterations[std::size_t(p.s0)] ||
      int(r.u.size()) != p.local || int(r.frozen.size()) != p.local || (p.keepV && int(r.v.size()) != p.local))
    throw InvalidArgument("atlas: the state to resume from does not match this cohort and these parameters");
}

AtlasPlan planAtlas(std::vector<HostImage> const& images, GreedyParams const& gp, AtlasRun const& run) {
  AtlasPlan p{images, gp, run};
  p.comm = run.comm != nullptr && run.comm->size() > 1 ? run.comm : nullptr;
  p.local = int(images.size());
  p.n = run.total > 0 ? run.total : p.local;
  if (p.n < AtlasParams::kMinSubjects) throw InvalidArgument("atlas: at least two images are needed");
  if (p.local < 1) throw InvalidArgument("atlas: this process holds no subject (more ranks than subjects)");
  if (run.first < 0 || run.first + p.local > p.n)
    throw InvalidArgument("atlas: subjects " + std::to_string(run.first) + ".." + std::to_string(run.first + p.local - 1) +
                          " lie outside the cohort of " + std::to_string(p.n));
  if (!p.comm && p.local != p.n) throw InvalidArgument("atlas: a partial cohort needs a process group");
  p.g = images.front().geometry;
  for (auto const& img : images)
    if (!img.geometry.sameGrid(p.g)) throw InvalidArgument("atlas: the images are on different grids");
  for (int f : gp.scales)
    if (const std::string why = scaleMisfit(p.g, f); !why.empty()) throw InvalidArgument("atlas: " + why + " of " + describe(p.g));
  if (gp.scales.back() != 1) throw InvalidArgument("atlas: the last scale factor must be 1");
  if (std::int64_t(p.g.nx()) * p.g.ny() * p.g.nz() * 3 > 2147483647) throw InvalidArgument("atlas: more than (2^31 - 1) / 3 voxels");
  p.keepV = atlasKeepsVelocity(gp.solver);
  p.s0 = run.resume ? run.resume->scale : 0;
  if (run.resume) checkResume(p, *run.resume);
  p.resident = run.residentSubjects < 0 ? p.local : std::min(run.residentSubjects, p.local);
  p.streamed = p.local - p.resident;
  return p;
}

// The run's figures so far (a resumed run's start with the state's) and where its seconds went.
struct AtlasTally {
  AtlasResult result;
  Clock::time_point start;
  double before = 0.0;  // seconds of the runs before a resume
  double setup = 0.0, reduce = 0.0;
  double seconds() const { return before + since(start); }
};

AtlasTally startTally(Clock::time_point start, AtlasState const* resume) {
  AtlasTally t;
  t.start = start;
  if (resume) {
    t.result.history = resume->history;
    t.result.refused = resume->refused;
    t.result.iterations = int(resume->history.size());
    t.result.resumedAt = t.result.iterations;
    t.before = resume->seconds;
  }
  return t;
}

// The device buffers kept through every scale: the resident subjects' full-grid images (uploaded
// at their first scale: the last scale's I_i, blurred and down-sampled for the coarser ones), the
// shared blur workspace (a coarse first scale), the mismatch sums and the staged sums' buffer.
template <class Exec>
struct AtlasWorkspace {
  std::vector<ImageView<MemOf<Exec>>> full;
  ImageView<MemOf<Exec>> blurred;
  Kokkos::View<double*, MemOf<Exec>> sse;  // per local subject: sum (W_i - T)^2 of the last centring
  StagedRankSum<Exec> staged;
};

template <class Exec>
AtlasWorkspace<Exec> allocateWorkspace(AtlasPlan const& p) {
  AtlasWorkspace<Exec> ws;
  ws.full.resize(std::size_t(p.resident));
  if (p.gp.scales.front() > 1) ws.blurred = ImageView<MemOf<Exec>>("kortex::atlas::blurred", p.g.nz(), p.g.ny(), p.g.nx());
  ws.sse = Kokkos::View<double*, MemOf<Exec>>("kortex::atlas::mismatch", std::size_t(p.local));
  return ws;
}

// The streamed subjects: their state in (pinned) host memory between visits, the copy queue, two
// device slots (the next subject's state is uploaded while the current one computes) and a
// full-grid image buffer.
template <class Exec>
struct AtlasStreaming {
  std::vector<StreamedSubject<Exec>> host;
  std::unique_ptr<Exec> copy;  // its own stream on a device
  ImageView<MemOf<Exec>> fullStage;
  SubjectScale<MemOf<Exec>> slot[2];
};

template <class Exec>
AtlasStreaming<Exec> allocateStreaming(Exec const& exec, AtlasPlan const& p) {
  AtlasStreaming<Exec> st;
  st.host.resize(std::size_t(p.streamed));
  if (p.streamed > 0) {
    st.copy = std::make_unique<Exec>(kx::partitionSpace(exec, 1).front());
    st.fullStage = ImageView<MemOf<Exec>>(Kokkos::view_alloc(std::string("kortex::atlas::stream_image"), Kokkos::WithoutInitializing),
                                          p.g.nz(), p.g.ny(), p.g.nx());
  }
  return st;
}

// One scale of the run: its index and factor, the previous scale's factor (0: none), its grid and
// whether the run resumes here.
struct AtlasScale {
  int s, f, from;
  GridExtents e;
  int voxels;
  bool resumeHere;
};

AtlasScale atlasScale(AtlasPlan const& p, int s) {
  const int f = p.gp.scales[std::size_t(s)];
  const GridExtents e = scaledExtents(p.g, f);
  return AtlasScale{s, f, s > 0 ? p.gp.scales[std::size_t(s) - 1] : 0, e, int(e.voxels()), p.run.resume && s == p.s0};
}

// A resident subject at one scale.
template <class Mem>
struct ResidentSubject {
  SubjectScale<Mem> s;
  bool frozen = false;
};

// st.u (st.v) from the state of local subject i at a resumed scale; returns whether it is frozen.
template <class Exec>
bool resumeSubject(Exec const& exec, AtlasState const& r, AtlasScale const& sc, std::size_t i, SubjectScale<MemOf<Exec>> const& st) {
  auto const& hu = r.u[i];
  if (hu.extent(0) != 3 || int(hu.extent(1)) != sc.e.nz || int(hu.extent(2)) != sc.e.ny || int(hu.extent(3)) != sc.e.nx)
    throw InvalidArgument("atlas: the state to resume from is not on the grid of scale " + std::to_string(sc.s + 1));
  Kokkos::deep_copy(exec, st.u, hu);
  if (st.v.data() != nullptr) Kokkos::deep_copy(exec, st.v, r.v[i]);
  return r.frozen[i] != 0;
}

// The full-grid image of resident subject i on the device (uploaded on first use).
template <class Exec>
ImageView<MemOf<Exec>> residentImage(Exec const& exec, AtlasPlan const& p, int i, AtlasWorkspace<Exec>& ws) {
  ImageView<MemOf<Exec>>& image = ws.full[std::size_t(i)];
  if (image.size() == 0) {
    image = ImageView<MemOf<Exec>>(Kokkos::view_alloc(std::string("kortex::atlas::image"), Kokkos::WithoutInitializing), p.g.nz(),
                                   p.g.ny(), p.g.nx());
    Kokkos::deep_copy(exec, image, p.images[std::size_t(i)].data);
  }
  return image;
}

// The resident subjects at scale sc: I_i (from the full-grid image), u_i and v_i (resumed,
// up-sampled from `prev`, the previous scale's, or zero), W_i.
template <class Exec>
std::vector<ResidentSubject<MemOf<Exec>>> enterResident(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc,
                                                        std::vector<ResidentSubject<MemOf<Exec>>> const& prev,
                                                        AtlasWorkspace<Exec>& ws) {
  using Mem = MemOf<Exec>;
  const SubjectScaleViews views{"", "kortex::atlas::W", "kortex::atlas::u", p.keepV ? "kortex::atlas::v" : "", false, true};
  std::vector<ResidentSubject<Mem>> next(std::size_t(p.resident));
  for (int i = 0; i < p.resident; ++i) {
    const ImageView<Mem> image = residentImage(exec, p, i, ws);
    ImageView<Mem> I = image;  // downsampleImage at factor 1 is a copy: the same values
    if (sc.f != 1) {
      I = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::I"), Kokkos::WithoutInitializing), sc.e.nz, sc.e.ny, sc.e.nx);
      downsampleImage(exec, ConstImageView<Mem>(image), sc.f, ws.blurred, I);
    }
    ResidentSubject<Mem>& r = next[std::size_t(i)];
    r.s = allocateSubjectScale<Mem>(sc.e, views);  // u, v zero
    r.s.I = I;
    if (sc.resumeHere)
      r.frozen = resumeSubject(exec, *p.run.resume, sc, std::size_t(i), r.s);
    else if (sc.from != 0)
      carryFields(exec, prev[std::size_t(i)].s, sc.from, sc.f, r.s);
    warpSnapped(exec, r.s.I, r.s.u, r.s.W);
  }
  return next;
}

// A scale's buffers shared by its subjects: the template and the previous one, the int64 sums of
// the template and of the mean displacement, the mean displacement ubar, the velocity of solvers
// that keep none per subject, and the greedy stepper (force, candidate, fluid solver).
template <class Exec>
struct AtlasShared {
  using Flat = Kokkos::View<std::int64_t*, MemOf<Exec>>;
  ImageView<MemOf<Exec>> T, Tprev;
  Flat sum, ubarSum;
  Field<MemOf<Exec>> ubar, vShared;
  std::unique_ptr<GreedyStepper<Exec>> stepper;
  Field<MemOf<Exec>> velocity(SubjectScale<MemOf<Exec>> const& st) const { return vShared.data() != nullptr ? vShared : st.v; }
};

// Allocated after the resident subjects' state (the previous scale's is freed by then: the peak
// the memory model plans for); Tprev is the resumed state's template at a resumed scale.
template <class Exec>
AtlasShared<Exec> allocateShared(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc) {
  using Mem = MemOf<Exec>;
  const int nz = sc.e.nz, ny = sc.e.ny, nx = sc.e.nx;
  AtlasShared<Exec> sh;
  sh.T = ImageView<Mem>("kortex::atlas::template", nz, ny, nx);
  sh.Tprev = ImageView<Mem>("kortex::atlas::template_previous", nz, ny, nx);
  if (sc.resumeHere) {
    auto const& t = p.run.resume->templ;
    if (int(t.extent(0)) != nz || int(t.extent(1)) != ny || int(t.extent(2)) != nx)
      throw InvalidArgument("atlas: the state's template is not on the grid of scale " + std::to_string(sc.s + 1));
    Kokkos::deep_copy(exec, sh.Tprev, t);
  }
  sh.sum = typename AtlasShared<Exec>::Flat("kortex::atlas::template_sum", std::size_t(sc.voxels));
  sh.ubarSum = typename AtlasShared<Exec>::Flat("kortex::atlas::mean_displacement_sum", 3 * std::size_t(sc.voxels));
  sh.ubar = Field<Mem>("kortex::atlas::mean_displacement", 3, nz, ny, nx);
  if (!p.keepV) sh.vShared = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
  sh.stepper = std::make_unique<GreedyStepper<Exec>>(exec, sc.e, p.gp, GreedyStepper<Exec>::Use::Field);
  return sh;
}

// Streamed subject i (local index) at scale sc in device slot `st`: I_i, u_i and v_i (resumed,
// up-sampled through `prev` from its host state, or zero), then its host state replaced by
// them and W_i added to `sum`.
template <class Exec>
void enterStreamedSubject(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc, std::size_t i, ImageView<MemOf<Exec>> blurred,
                          ImageView<MemOf<Exec>> fullStage, SubjectScale<MemOf<Exec>> const& prev,
                          SubjectScale<MemOf<Exec>> const& st, StreamedSubject<Exec>& h, Kokkos::View<std::int64_t*, MemOf<Exec>> sum) {
  using Mem = MemOf<Exec>;
  const int nz = sc.e.nz, ny = sc.e.ny, nx = sc.e.nx;
  Kokkos::deep_copy(exec, fullStage, p.images[i].data);
  if (sc.f == 1)
    Kokkos::deep_copy(exec, st.I, fullStage);
  else
    downsampleImage(exec, ConstImageView<Mem>(fullStage), sc.f, blurred, st.I);
  h.frozen = false;  // a subject frozen at the previous scale steps again at this one (as a resident one)
  if (sc.resumeHere) {
    h.frozen = resumeSubject(exec, *p.run.resume, sc, i, st);
  } else if (sc.from != 0) {
    exec.fence();  // the previous subject's copies to its host buffers are done
    Kokkos::deep_copy(exec, prev.u, h.u);
    if (p.keepV) Kokkos::deep_copy(exec, prev.v, h.v);
    carryFields(exec, prev, sc.from, sc.f, st);
  } else {
    zeroFields(exec, st);
  }
  exec.fence();  // nothing in flight reads the buffers replaced here
  h.I = decltype(h.I)(Kokkos::view_alloc(std::string("kortex::atlas::host_I"), Kokkos::WithoutInitializing), nz, ny, nx);
  h.u = decltype(h.u)(Kokkos::view_alloc(std::string("kortex::atlas::host_u"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
  if (p.keepV) h.v = decltype(h.v)(Kokkos::view_alloc(std::string("kortex::atlas::host_v"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
  warpSnapped(exec, st.I, st.u, st.W);
  accumulateFlat(exec, {st.W.data()}, sum.data(), sc.voxels, "kortex::atlas::template_sum", true);
  Kokkos::deep_copy(exec, h.I, st.I);
  Kokkos::deep_copy(exec, h.u, st.u);
  if (p.keepV) Kokkos::deep_copy(exec, h.v, st.v);
}

// The streamed subjects at scale sc: the device slots, then each subject through slot 0 (its
// W_i into `sum`, zeroed first).
template <class Exec>
void enterStreamed(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc, ImageView<MemOf<Exec>> blurred,
                   Kokkos::View<std::int64_t*, MemOf<Exec>> sum, AtlasStreaming<Exec>& str) {
  using Mem = MemOf<Exec>;
  if (p.streamed == 0) return;
  const SubjectScaleViews slotViews{"kortex::atlas::stream_I", "kortex::atlas::stream_W", "kortex::atlas::stream_u",
                                    p.keepV ? "kortex::atlas::stream_v" : "", false, false};
  for (auto& slot : str.slot) slot = allocateSubjectScale<Mem>(sc.e, slotViews);
  SubjectScale<Mem> prev;  // the previous scale's u (v), from the host
  if (sc.from != 0 && !sc.resumeHere)
    prev = allocateSubjectScale<Mem>(scaledExtents(p.g, sc.from),
                                     {"", "", "kortex::atlas::stream_previous_u", p.keepV ? "kortex::atlas::stream_previous_v" : ""});
  Kokkos::deep_copy(exec, sum, std::int64_t(0));
  for (int j = 0; j < p.streamed; ++j)
    enterStreamedSubject(exec, p, sc, std::size_t(p.resident + j), blurred, str.fullStage, prev, str.slot[0],
                         str.host[std::size_t(j)], sum);
  exec.fence();
}

// Streams the streamed subjects through the device slots: body(state, frozen, j) runs on the
// device copy of subject resident + j (uploaded by then; warpFirst: W_i recomputed from I_i and
// u_i), then u_i (v_i) go back. The next subject's upload runs on the copy queue meanwhile.
template <class Exec, class Body>
void forStreamed(Exec const& exec, AtlasStreaming<Exec>& str, bool warpFirst, Body&& body) {
  using Mem = MemOf<Exec>;
  const int count = int(str.host.size());
  if (count == 0) return;
  Exec const& copy = *str.copy;
  auto upload = [&](int j, SubjectScale<Mem> const& st) {
    StreamedSubject<Exec> const& h = str.host[std::size_t(j)];
    Kokkos::deep_copy(copy, st.I, h.I);
    Kokkos::deep_copy(copy, st.u, h.u);
    if (st.v.data() != nullptr) Kokkos::deep_copy(copy, st.v, h.v);
  };
  exec.fence();
  upload(0, str.slot[0]);
  for (int j = 0; j < count; ++j) {
    SubjectScale<Mem>& st = str.slot[j % 2];
    copy.fence();  // this subject's upload (and the last download) done
    if (j + 1 < count) upload(j + 1, str.slot[(j + 1) % 2]);
    StreamedSubject<Exec>& h = str.host[std::size_t(j)];
    if (warpFirst) warpSnapped(exec, st.I, st.u, st.W);
    body(st, h.frozen, j);
    exec.fence();
    Kokkos::deep_copy(copy, h.u, st.u);
    if (st.v.data() != nullptr) Kokkos::deep_copy(copy, h.v, st.v);
  }
  copy.fence();
}

// T = the fixed-point mean of every W_i over the ranks. Streaming: `sum` holds the streamed
// subjects' terms already (set-up or the last centring). Returns the seconds of the sums over ranks.
template <class Exec>
double averageTemplate(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc,
                       std::vector<ResidentSubject<MemOf<Exec>>> const& resident, AtlasShared<Exec>& sh,
                       StagedRankSum<Exec>& staged) {
  kx::ScopedRegion region("kortex::atlas::average");
  const bool streaming = p.streamed > 0;
  std::vector<const float*> w;
  for (auto const& r : resident) w.push_back(r.s.W.data());
  accumulateFlat(exec, w, sh.sum.data(), sc.voxels, "kortex::atlas::template_sum", streaming);
  const double seconds = reduceRanks(exec, p.comm, sh.sum, staged);
  meanFlat(exec, sh.sum.data(), p.n, sh.T.data(), sc.voxels, "kortex::atlas::template_mean");
  if (streaming) Kokkos::deep_copy(exec, sh.sum, std::int64_t(0));
  return seconds;
}

// ubar = the fixed-point mean of every u_i over the ranks. Streaming: `ubarSum` holds the
// streamed subjects' terms already. Returns the seconds of the sums over ranks.
template <class Exec>
double meanDisplacement(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc,
                        std::vector<ResidentSubject<MemOf<Exec>>> const& resident, AtlasShared<Exec>& sh,
                        StagedRankSum<Exec>& staged) {
  std::vector<const float*> terms;
  for (auto const& r : resident) terms.push_back(r.s.u.data());
  accumulateFlat(exec, terms, sh.ubarSum.data(), 3 * sc.voxels, "kortex::atlas::mean_displacement_sum", p.streamed > 0);
  const double seconds = reduceRanks(exec, p.comm, sh.ubarSum, staged);
  meanFlat(exec, sh.ubarSum.data(), p.n, sh.ubar.data(), 3 * sc.voxels, "kortex::atlas::mean_displacement");
  return seconds;
}

// One iteration's figures per subject of the cohort, summed over the ranks in one call:
// [sse_i | refused_i | minJ_i | frozen_i].
struct IterationSlots {
  explicit IterationSlots(int subjects) : n(std::size_t(subjects)), v(4 * n, 0.0) {}
  std::size_t n;
  std::vector<double> v;
  double& sse(std::size_t i) { return v[i]; }
  double& refused(std::size_t i) { return v[n + i]; }
  double& minJ(std::size_t i) { return v[2 * n + i]; }
  double& frozen(std::size_t i) { return v[3 * n + i]; }
};

// Spec step 2 for one subject (its W_i current): the greedy step against the template, its
// refused candidates added to `refused`; a subject whose step folds at every size is frozen, one
// whose velocity is zero stays.
template <class Exec>
void stepSubject(SubjectScale<MemOf<Exec>>& st, bool& frozen, AtlasShared<Exec>& sh, bool first, bool coldStart, double& refused) {
  using Mem = MemOf<Exec>;
  if (frozen) return;
  kx::ScopedRegion region("kortex::atlas::step");
  Field<Mem> v = sh.velocity(st);
  sh.stepper->computeForce(ConstImageView<Mem>(st.W), ConstImageView<Mem>(sh.T));
  sh.stepper->solve(v, first, coldStart);
  const GreedyStepOutcome o = sh.stepper->stepField(st.u, ConstField<Mem>(v));
  refused += double(o.refused);
  if (!o.zeroVelocity && !o.accepted) frozen = true;
}

// Spec step 3 for one subject (ubar current), then W_i and its sum (W_i - T)^2 into the device
// scalar `sse` (read back once per iteration by collectMismatch); its figures into the slots of
// global subject gi.
template <class Exec>
void centreSubject(Exec const& exec, SubjectScale<MemOf<Exec>>& st, bool frozen, AtlasShared<Exec>& sh,
                   Kokkos::View<double, MemOf<Exec>> sse, std::size_t gi, IterationSlots& slots) {
  using Mem = MemOf<Exec>;
  kx::ScopedRegion region("kortex::atlas::centre");
  // The candidate is warped and checked in one pass; a folded one (rare) is dropped and W warped
  // again from the u kept.
  Field<Mem> cand = sh.stepper->composeCandidate(ConstField<Mem>(st.u), ConstField<Mem>(sh.ubar));
  const CentreSums c = warpSnapChecked(exec, st.I, cand, st.W, ConstImageView<Mem>(sh.T));
  float jKept = c.minJ;
  if (c.minJ > 0.0f) {
    sh.stepper->keepCandidate(st.u);
    Kokkos::deep_copy(exec, sse, c.sse);
  } else {
    slots.refused(gi) += 1.0;
    warpSnapped(exec, st.I, st.u, st.W, ConstImageView<Mem>(sh.T), sse);
    jKept = minJacobian(exec, ConstField<Mem>(st.u));
  }
  slots.minJ(gi) = double(jKept);
  slots.frozen(gi) = frozen ? 1.0 : 0.0;
}

// Every local subject's mean (W_i - T)^2 into its slot.
template <class Exec>
void collectMismatch(Exec const& exec, Kokkos::View<double*, MemOf<Exec>> sse, int first, int voxels, IterationSlots& slots) {
  auto h = Kokkos::create_mirror_view(sse);
  Kokkos::deep_copy(exec, h, sse);
  exec.fence();
  for (std::size_t li = 0; li < sse.size(); ++li) slots.sse(std::size_t(first) + li) = h(li) / double(voxels);
}

// The slots summed over the ranks; returns the seconds spent.
double reduceSlots(Communicator* comm, std::vector<double>& slots) {
  if (!comm) return 0.0;
  kx::ScopedRegion region("kortex::atlas::reduce");
  const auto t0 = Clock::now();
  comm->sum(slots.data(), slots.size());
  return since(t0);
}

// The iteration's figures over every subject of every rank, into the tally and to the progress.
void recordIteration(AtlasIteration rec, IterationSlots& slots, AtlasRun const& run, AtlasTally& tally) {
  double sse = 0.0, refused = 0.0, frozen = 0.0;
  float minJ = 3.4e38f;
  for (std::size_t i = 0; i < slots.n; ++i) {
    sse += slots.sse(i);
    refused += slots.refused(i);
    minJ = std::min(minJ, float(slots.minJ(i)));
    frozen += slots.frozen(i);
  }
  rec.mismatch = std::sqrt(sse / double(slots.n));
  rec.refused = int(refused);
  rec.minJacobian = minJ;
  rec.frozen = int(frozen);
  rec.seconds = tally.seconds();
  tally.result.refused += rec.refused;
  ++tally.result.iterations;
  tally.result.history.push_back(rec);
  if (run.progress) run.progress(rec);
}

// The state a run resumes from after iteration `it` of scale sc, on the host.
template <class Exec>
AtlasState atlasState(AtlasScale const& sc, int it, std::vector<ResidentSubject<MemOf<Exec>>> const& resident,
                      AtlasStreaming<Exec> const& str, ImageView<MemOf<Exec>> T, AtlasTally const& tally) {
  AtlasState state;
  state.scale = sc.s;
  state.iteration = it;
  for (auto const& r : resident) {
    state.frozen.push_back(r.frozen ? 1 : 0);
    state.u.push_back(hostCopy(r.s.u));
    if (r.s.v.data() != nullptr) state.v.push_back(hostCopy(r.s.v));
  }
  for (auto const& h : str.host) {
    state.frozen.push_back(h.frozen ? 1 : 0);
    state.u.push_back(hostCopy(h.u));  // a copy: on host back ends h.u is itself host memory
    if (h.v.data() != nullptr) state.v.push_back(hostCopy(h.v));
  }
  state.templ = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>("kortex::atlas::state_template", sc.e.nz, sc.e.ny,
                                                                                sc.e.nx);
  Kokkos::deep_copy(state.templ, T);
  state.history = tally.result.history;
  state.refused = tally.result.refused;
  state.seconds = tally.seconds();
  return state;
}

template <class Exec>
void checkpoint(Exec const& exec, AtlasRun const& run, AtlasScale const& sc, int it,
                std::vector<ResidentSubject<MemOf<Exec>>> const& resident, AtlasStreaming<Exec> const& str,
                ImageView<MemOf<Exec>> T, AtlasTally& tally) {
  kx::ScopedRegion region("kortex::atlas::checkpoint");
  exec.fence();
  const auto t0 = Clock::now();
  run.checkpoint(atlasState(sc, it, resident, str, T, tally));
  tally.setup += since(t0);
}

// One iteration of the spec over every subject (resident, then streamed), its record and checkpoint.
template <class Exec>
void iterate(Exec const& exec, AtlasPlan const& p, AtlasScale const& sc, int it,
             std::vector<ResidentSubject<MemOf<Exec>>>& resident, AtlasStreaming<Exec>& str, AtlasShared<Exec>& sh,
             AtlasWorkspace<Exec>& ws, AtlasTally& tally) {
  using Mem = MemOf<Exec>;
  const std::size_t first = std::size_t(p.run.first), nRes = std::size_t(p.resident);
  const bool firstIt = it == 1, coldStart = firstIt && sc.from == 0;
  AtlasIteration rec;
  rec.scale = sc.s;
  rec.factor = sc.f;
  rec.iteration = it;
  IterationSlots slots(p.n);
  tally.reduce += averageTemplate(exec, p, sc, resident, sh, ws.staged);
  rec.templateChange = firstIt ? 0.0 : imageRmse(exec, ConstImageView<Mem>(sh.T), ConstImageView<Mem>(sh.Tprev));
  Kokkos::deep_copy(exec, sh.Tprev, sh.T);
  for (std::size_t i = 0; i < nRes; ++i) stepSubject(resident[i].s, resident[i].frozen, sh, firstIt, coldStart, slots.refused(first + i));
  // Centring (spec step 3): u_i <- u_i(x + ubar) - ubar. The streamed subjects add their u_i
  // to the sum as they pass; the sums are integers, so the order does not matter.
  if (p.streamed > 0) Kokkos::deep_copy(exec, sh.ubarSum, std::int64_t(0));
  forStreamed(exec, str, true, [&](SubjectScale<Mem>& st, bool& frozen, int j) {
    stepSubject(st, frozen, sh, firstIt, coldStart, slots.refused(first + nRes + std::size_t(j)));
    accumulateFlat(exec, {st.u.data()}, sh.ubarSum.data(), 3 * sc.voxels, "kortex::atlas::mean_displacement_sum", true);
  });
  tally.reduce += meanDisplacement(exec, p, sc, resident, sh, ws.staged);
  for (std::size_t i = 0; i < nRes; ++i)
    centreSubject(exec, resident[i].s, resident[i].frozen, sh, Kokkos::subview(ws.sse, i), first + i, slots);
  // The streamed subjects' new W_i go into the next template's sum at once (averageTemplate adds
  // the resident ones).
  forStreamed(exec, str, false, [&](SubjectScale<Mem>& st, bool& frozen, int j) {
    const std::size_t li = nRes + std::size_t(j);
    centreSubject(exec, st, frozen, sh, Kokkos::subview(ws.sse, li), first + li, slots);
    accumulateFlat(exec, {st.W.data()}, sh.sum.data(), sc.voxels, "kortex::atlas::template_sum", true);
  });
  collectMismatch(exec, ws.sse, p.run.first, sc.voxels, slots);
  tally.reduce += reduceSlots(p.comm, slots.v);
  recordIteration(rec, slots, p.run, tally);
  if (p.run.checkpoint && p.run.checkpointEvery > 0 && tally.result.iterations % p.run.checkpointEvery == 0)
    checkpoint(exec, p.run, sc, it, resident, str, sh.T, tally);
}

// Every local subject's final field: into `fields` (run.returnFields), its min det into its slot
// of `minJ` (per subject of the cohort), and into the returned fixed-point sum of the fields.
template <class Exec>
Kokkos::View<std::int64_t*, MemOf<Exec>> finalFields(Exec const& exec, AtlasPlan const& p,
                                                     std::vector<ResidentSubject<MemOf<Exec>>> const& resident,
                                                     AtlasStreaming<Exec>& str, std::vector<VectorField<Kokkos::HostSpace>>& fields,
                                                     std::vector<double>& minJ) {
  using Mem = MemOf<Exec>;
  const int voxels = int(p.g.nz() * p.g.ny() * p.g.nx());
  const bool streaming = p.streamed > 0;
  std::vector<const float*> terms;
  Kokkos::View<std::int64_t*, Mem> uSum("kortex::atlas::final_displacement_sum", 3 * std::size_t(voxels));
  for (int i = 0; i < p.resident; ++i) {
    Field<Mem> const& u = resident[std::size_t(i)].s.u;
    if (p.run.returnFields) {
      fields.emplace_back("atlas displacement", p.g);
      Kokkos::deep_copy(fields.back().data, u);
    }
    minJ[std::size_t(p.run.first + i)] = double(minJacobian(exec, ConstField<Mem>(u)));
    terms.push_back(u.data());
  }
  if (streaming) Kokkos::deep_copy(exec, uSum, std::int64_t(0));
  for (int j = 0; j < p.streamed; ++j) {
    StreamedSubject<Exec> const& h = str.host[std::size_t(j)];
    Field<Mem> const& u = str.slot[0].u;
    Kokkos::deep_copy(exec, u, h.u);
    if (p.run.returnFields) {
      fields.emplace_back("atlas displacement", p.g);
      Kokkos::deep_copy(fields.back().data, h.u);
    }
    minJ[std::size_t(p.run.first + p.resident + j)] = double(minJacobian(exec, ConstField<Mem>(u)));
    accumulateFlat(exec, {u.data()}, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", true);
  }
  accumulateFlat(exec, terms, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", streaming);
  return uSum;
}

// The outputs (the template T, every local subject's field) and the final statistics.
template <class Exec>
AtlasResult finishAtlas(Exec const& exec, AtlasPlan const& p, ImageView<MemOf<Exec>> T,
                        std::vector<ResidentSubject<MemOf<Exec>>> const& resident, AtlasStreaming<Exec>& str,
                        AtlasWorkspace<Exec>& ws, AtlasTally& tally, HostImage& templ,
                        std::vector<VectorField<Kokkos::HostSpace>>& fields) {
  exec.fence();
  const auto tOut = Clock::now();
  templ = HostImage("atlas template", p.g);
  Kokkos::deep_copy(templ.data, T);
  fields.clear();
  ws.full.clear();
  const int voxels = int(p.g.nz() * p.g.ny() * p.g.nx());
  std::vector<double> minJ(std::size_t(p.n), 0.0);
  const auto uSum = finalFields(exec, p, resident, str, fields, minJ);
  tally.reduce += reduceRanks(exec, p.comm, uSum, ws.staged);
  tally.reduce += reduceSlots(p.comm, minJ);
  AtlasResult& result = tally.result;
  result.minJacobian = 3.4e38f;
  for (double j : minJ) result.minJacobian = std::min(result.minJacobian, float(j));
  double ss = 0.0;
  Kokkos::parallel_reduce("kortex::atlas::mean_displacement_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, voxels),
                          MeanNormFunctor{uSum.data(), voxels, p.n}, ss);
  result.meanDisplacementRms = std::sqrt(ss / double(voxels));
  exec.fence();
  tally.setup += since(tOut);
  result.seconds = tally.seconds();
  result.secondsSetup = tally.setup;
  result.secondsReduce = tally.reduce;
  result.secondsCompute = std::max(0.0, since(tally.start) - tally.setup - tally.reduce);
  result.streamed = p.streamed;
  return result;
}

}  // namespace

template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields, AtlasRun const& run) {
  using Mem = MemOf<Exec>;
  const auto start = Clock::now();
  const AtlasPlan p = planAtlas(images, params.greedy, run);
  AtlasTally tally = startTally(start, run.resume);
  AtlasWorkspace<Exec> ws = allocateWorkspace<Exec>(p);
  AtlasStreaming<Exec> str = allocateStreaming(exec, p);
  std::vector<ResidentSubject<Mem>> resident;
  ImageView<Mem> T;  // the last scale's template
  for (int s = p.s0; s < int(p.gp.scales.size()); ++s) {
    kx::ScopedRegion region("kortex::atlas::scale");
    exec.fence();
    const auto tScale = Clock::now();
    const AtlasScale sc = atlasScale(p, s);
    resident = enterResident(exec, p, sc, resident, ws);  // the previous scale's state is freed here
    AtlasShared<Exec> sh = allocateShared(exec, p, sc);
    enterStreamed(exec, p, sc, ws.blurred, sh.sum, str);
    exec.fence();
    tally.setup += since(tScale);
    const int startIt = sc.resumeHere ? run.resume->iteration + 1 : 1;
    for (int it = startIt; it <= p.gp.iterations[std::size_t(s)]; ++it) iterate(exec, p, sc, it, resident, str, sh, ws, tally);
    if (s + 1 == int(p.gp.scales.size())) {
      tally.reduce += averageTemplate(exec, p, sc, resident, sh, ws.staged);
      T = sh.T;
    }
    if (run.scaleTemplate) {
      HostImage t("kortex::atlas::scale_template", scaledGeometry(p.g, sc.f));
      Kokkos::deep_copy(exec, t.data, sh.T);
      exec.fence();
      run.scaleTemplate(s, sc.f, t);
    }
  }
  return finishAtlas(exec, p, T, resident, str, ws, tally, templ, fields);
}

#define KORTEX_INSTANTIATE_ATLAS(SPACE)                                                                       \
  template void atlasAccumulate<SPACE>(SPACE const&, std::vector<ConstImageView<SPACE::memory_space>> const&, \
                                       FixedSum<SPACE::memory_space>, bool);                                  \
  template double atlasSumSeconds<SPACE>(SPACE const&, Communicator*, std::size_t, int, std::size_t);           \
  template class StagedRankSum<SPACE>;                                                                         \
  template void atlasMean<SPACE>(SPACE const&, FixedSum<SPACE::memory_space>, int, ImageView<SPACE::memory_space>); \
  template AtlasResult buildAtlas<SPACE>(SPACE const&, std::vector<HostImage> const&, AtlasParams const&,     \
                                         HostImage&, std::vector<VectorField<Kokkos::HostSpace>>&, AtlasRun const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_ATLAS(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_ATLAS(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_ATLAS(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_ATLAS(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_ATLAS

}  // namespace kortex::gpu
