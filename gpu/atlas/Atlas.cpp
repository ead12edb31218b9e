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

template <class Mem>
struct SubjectState {
  ImageView<Mem> I, W;
  Field<Mem> u, v;  // v: warm-started solvers only
  bool frozen = false;
};

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

// One process's atlas (gpu/atlas/Atlas.hpp buildAtlas) in stages: the checks and the shared
// buffers (constructor), per scale the resident subjects' state, the streamed subjects' set-up and
// the iterations (template average, each subject's greedy step through the GreedyStepper, the
// centring, the sums over ranks, a checkpoint), then the outputs and the final statistics.
template <class Exec>
class AtlasBuilder {
 public:
  using Mem = typename Exec::memory_space;
  using Flat = Kokkos::View<std::int64_t*, Mem>;
  using Streamed = StreamedSubject<Exec>;

  AtlasBuilder(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params, AtlasRun const& run)
      : exec_(exec), images_(images), gp_(params.greedy), run_(run) {
    comm_ = run.comm != nullptr && run.comm->size() > 1 ? run.comm : nullptr;
    local_ = int(images.size());
    n_ = run.total > 0 ? run.total : local_;
    if (n_ < AtlasParams::kMinSubjects) throw InvalidArgument("atlas: at least two images are needed");
    if (local_ < 1) throw InvalidArgument("atlas: this process holds no subject (more ranks than subjects)");
    if (run.first < 0 || run.first + local_ > n_)
      throw InvalidArgument("atlas: subjects " + std::to_string(run.first) + ".." + std::to_string(run.first + local_ - 1) +
                            " lie outside the cohort of " + std::to_string(n_));
    if (!comm_ && local_ != n_) throw InvalidArgument("atlas: a partial cohort needs a process group");
    g_ = images.front().geometry;
    for (auto const& img : images)
      if (!img.geometry.sameGrid(g_)) throw InvalidArgument("atlas: the images are on different grids");
    for (int f : gp_.scales)
      if (const std::string why = scaleMisfit(g_, f); !why.empty()) throw InvalidArgument("atlas: " + why + " of " + describe(g_));
    if (gp_.scales.back() != 1) throw InvalidArgument("atlas: the last scale factor must be 1");
    if (std::int64_t(g_.nx()) * g_.ny() * g_.nz() * 3 > 2147483647) throw InvalidArgument("atlas: more than (2^31 - 1) / 3 voxels");
    keepV_ = atlasKeepsVelocity(gp_.solver);
    resume_ = run.resume;
    s0_ = resume_ ? resume_->scale : 0;
    if (resume_) {
      if (s0_ < 0 || s0_ >= int(gp_.scales.size()) || resume_->iteration < 0 ||
          resume_->iteration > gp_.iterations[std::size_t(s0_)] || int(resume_->u.size()) != local_ ||
          int(resume_->frozen.size()) != local_ || (keepV_ && int(resume_->v.size()) != local_))
        throw InvalidArgument("atlas: the state to resume from does not match this cohort and these parameters");
    }
    // Local subjects 0 .. resident-1 stay on the device; the others are streamed.
    resident_ = run.residentSubjects < 0 ? local_ : std::min(run.residentSubjects, local_);
    streamedCount_ = local_ - resident_;
    streaming_ = streamedCount_ > 0;
    // Each resident image goes to the device once, on the full grid; it is the last scale's I_i, and
    // the coarser scales' I_i are blurred and down-sampled from it (the blur workspace is shared).
    full_.resize(std::size_t(resident_));
    if (gp_.scales.front() > 1) blurred_ = ImageView<Mem>("kortex::atlas::blurred", g_.nz(), g_.ny(), g_.nx());
    if (resume_) {
      result_.history = resume_->history;
      result_.refused = resume_->refused;
      result_.iterations = int(resume_->history.size());
      result_.resumedAt = result_.iterations;
    }
    secondsBefore_ = resume_ ? resume_->seconds : 0.0;
    // Streaming: the subjects' state in (pinned) host memory, two device slots (the next subject's
    // state is uploaded on the copy queue while the current one computes) and a full-grid image buffer.
    hostSub_.resize(std::size_t(streamedCount_));
    if (streaming_) {
      copy_ = std::make_unique<Exec>(kx::partitionSpace(exec, 1).front());
      fullStage_ = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_image"), Kokkos::WithoutInitializing),
                                  g_.nz(), g_.ny(), g_.nx());
    }
    sub_.resize(std::size_t(resident_));
    sse_ = Kokkos::View<double*, Mem>("kortex::atlas::mismatch", std::size_t(local_));
    prevFactor_ = s0_ > 0 ? gp_.scales[std::size_t(s0_) - 1] : 0;
  }

  AtlasResult build(HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields) {
    for (std::size_t s = std::size_t(s0_); s < gp_.scales.size(); ++s) {
      kx::ScopedRegion region("kortex::atlas::scale");
      exec_.fence();
      const auto tScale = Clock::now();
      Scale S(g_, gp_, int(s), resume_ && int(s) == s0_);
      enterResident(S);
      S.allocate(exec_, gp_, keepV_);
      enterStreamed(S);
      exec_.fence();
      tSetup_ += since(tScale);
      const int startIt = S.resumeHere ? resume_->iteration + 1 : 1;
      for (int it = startIt; it <= gp_.iterations[s]; ++it) iterate(S, it);
      if (s + 1 == gp_.scales.size()) average(S);
      prev_ = sub_;
      prevFactor_ = S.f;
    }
    return finish(templ, fields);
  }

 private:
  // A scale's grid and its shared buffers: the template and the previous one, the int64 sums, the
  // mean displacement, the shared velocity (solvers that keep none per subject) and the stepper.
  struct Scale {
    int s, f;
    GridExtents e;
    int nz, ny, nx, voxels;
    bool resumeHere;
    ImageView<Mem> Tprev;
    Flat sum, ubarSum;
    Field<Mem> ubar, vShared;
    std::unique_ptr<GreedyStepper<Exec>> stepper;
    Scale(Geometry const& g, GreedyParams const& gp, int scale, bool resume)
        : s(scale), f(gp.scales[std::size_t(scale)]), e(scaledExtents(g, f)), nz(e.nz), ny(e.ny), nx(e.nx),
          voxels(int(e.voxels())), resumeHere(resume) {}
    // After the resident subjects' state (the previous scale's is freed by then: the peak the
    // memory model plans for).
    void allocate(Exec const& exec, GreedyParams const& gp, bool keepV) {
      sum = Flat("kortex::atlas::template_sum", std::size_t(voxels));
      ubarSum = Flat("kortex::atlas::mean_displacement_sum", 3 * std::size_t(voxels));
      ubar = Field<Mem>("kortex::atlas::mean_displacement", 3, nz, ny, nx);
      if (!keepV) vShared = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
      stepper = std::make_unique<GreedyStepper<Exec>>(exec, e, gp, GreedyStepper<Exec>::Use::Field);  // force, candidate, fluid solver
    }
  };

  void checkResumeField(Scale const& S, std::size_t i) const {
    auto const& hu = resume_->u[i];
    if (hu.extent(0) != 3 || int(hu.extent(1)) != S.nz || int(hu.extent(2)) != S.ny || int(hu.extent(3)) != S.nx)
      throw InvalidArgument("atlas: the state to resume from is not on the grid of scale " + std::to_string(S.s + 1));
  }

  // The resident subjects at this scale: I_i (from the full-grid image on the device), u_i and v_i
  // (resumed, up-sampled or zero), W_i; then the template buffers.
  void enterResident(Scale& S) {
    const int f = S.f, nz = S.nz, ny = S.ny, nx = S.nx;
    for (int i = 0; i < resident_; ++i) {
      SubjectState<Mem> st;
      ImageView<Mem>& image = full_[std::size_t(i)];
      if (image.size() == 0) {
        image = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::image"), Kokkos::WithoutInitializing), g_.nz(),
                               g_.ny(), g_.nx());
        Kokkos::deep_copy(exec_, image, images_[std::size_t(i)].data);
      }
      if (f == 1) {
        st.I = image;  // downsampleImage at factor 1 is a copy: the same values
      } else {
        st.I = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::I"), Kokkos::WithoutInitializing), nz, ny, nx);
        downsampleImage(exec_, ConstImageView<Mem>(image), f, blurred_, st.I);
      }
      st.W = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::W"), Kokkos::WithoutInitializing), nz, ny, nx);
      st.u = Field<Mem>("kortex::atlas::u", 3, nz, ny, nx);
      if (keepV_) st.v = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
      if (S.resumeHere) {
        checkResumeField(S, std::size_t(i));
        Kokkos::deep_copy(exec_, st.u, resume_->u[std::size_t(i)]);
        if (keepV_) Kokkos::deep_copy(exec_, st.v, resume_->v[std::size_t(i)]);
        st.frozen = resume_->frozen[std::size_t(i)] != 0;
      } else if (prevFactor_ != 0) {
        upsampleField(exec_, ConstField<Mem>(prev_[std::size_t(i)].u), prevFactor_, f, st.u);
        if (keepV_) upsampleField(exec_, ConstField<Mem>(prev_[std::size_t(i)].v), prevFactor_, f, st.v);
      }
      warpSnapped(exec_, st.I, st.u, st.W);
      sub_[std::size_t(i)] = st;
    }
    prev_.clear();
    T_ = ImageView<Mem>("kortex::atlas::template", nz, ny, nx);
    S.Tprev = ImageView<Mem>("kortex::atlas::template_previous", nz, ny, nx);
    if (S.resumeHere) {
      if (int(resume_->templ.extent(0)) != nz || int(resume_->templ.extent(1)) != ny || int(resume_->templ.extent(2)) != nx)
        throw InvalidArgument("atlas: the state's template is not on the grid of scale " + std::to_string(S.s + 1));
      Kokkos::deep_copy(exec_, S.Tprev, resume_->templ);
    }
  }

  // The streamed subjects at this scale: I_i and u_i (v_i) to the host, W_i into the sum.
  void enterStreamed(Scale& S) {
    if (!streaming_) return;
    const int f = S.f, nz = S.nz, ny = S.ny, nx = S.nx;
    for (int k = 0; k < 2; ++k) {
      slot_[k].I = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_I"), Kokkos::WithoutInitializing), nz, ny, nx);
      slot_[k].W = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_W"), Kokkos::WithoutInitializing), nz, ny, nx);
      slot_[k].u = Field<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_u"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
      if (keepV_)
        slot_[k].v = Field<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_v"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
    }
    SubjectState<Mem>& st = slot_[0];
    Field<Mem> prevU, prevV;
    if (prevFactor_ != 0 && !S.resumeHere) {
      const GridExtents pe = scaledExtents(g_, prevFactor_);
      prevU = Field<Mem>("kortex::atlas::stream_previous_u", 3, pe.nz, pe.ny, pe.nx);
      if (keepV_) prevV = Field<Mem>("kortex::atlas::stream_previous_v", 3, pe.nz, pe.ny, pe.nx);
    }
    Kokkos::deep_copy(exec_, S.sum, std::int64_t(0));
    for (int j = 0; j < streamedCount_; ++j) {
      const std::size_t i = std::size_t(resident_ + j);
      Streamed& h = hostSub_[std::size_t(j)];
      Kokkos::deep_copy(exec_, fullStage_, images_[i].data);
      if (f == 1)
        Kokkos::deep_copy(exec_, st.I, fullStage_);
      else
        downsampleImage(exec_, ConstImageView<Mem>(fullStage_), f, blurred_, st.I);
      if (S.resumeHere) {
        checkResumeField(S, i);
        Kokkos::deep_copy(exec_, st.u, resume_->u[i]);
        if (keepV_) Kokkos::deep_copy(exec_, st.v, resume_->v[i]);
        h.frozen = resume_->frozen[i] != 0;
      } else if (prevFactor_ != 0) {
        exec_.fence();  // the previous subject's copies to its host buffers are done
        Kokkos::deep_copy(exec_, prevU, h.u);
        upsampleField(exec_, ConstField<Mem>(prevU), prevFactor_, f, st.u);
        if (keepV_) {
          Kokkos::deep_copy(exec_, prevV, h.v);
          upsampleField(exec_, ConstField<Mem>(prevV), prevFactor_, f, st.v);
        }
      } else {
        Kokkos::deep_copy(exec_, st.u, 0.0f);
        if (keepV_) Kokkos::deep_copy(exec_, st.v, 0.0f);
      }
      exec_.fence();  // nothing in flight reads the buffers replaced here
      h.I = decltype(h.I)(Kokkos::view_alloc(std::string("kortex::atlas::host_I"), Kokkos::WithoutInitializing), nz, ny, nx);
      h.u = decltype(h.u)(Kokkos::view_alloc(std::string("kortex::atlas::host_u"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
      if (keepV_) h.v = decltype(h.v)(Kokkos::view_alloc(std::string("kortex::atlas::host_v"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
      warpSnapped(exec_, st.I, st.u, st.W);
      accumulateFlat(exec_, {st.W.data()}, S.sum.data(), S.voxels, "kortex::atlas::template_sum", true);
      Kokkos::deep_copy(exec_, h.I, st.I);
      Kokkos::deep_copy(exec_, h.u, st.u);
      if (keepV_) Kokkos::deep_copy(exec_, h.v, st.v);
    }
    exec_.fence();
  }

  // T = the fixed-point mean of every W_i (over ranks).
  void average(Scale& S) {
    kx::ScopedRegion region("kortex::atlas::average");
    std::vector<const float*> w;
    for (auto const& st : sub_) w.push_back(st.W.data());
    // Streaming: `sum` already holds the streamed subjects' terms (set-up or the last centring).
    accumulateFlat(exec_, w, S.sum.data(), S.voxels, "kortex::atlas::template_sum", streaming_);
    tReduce_ += reduceRanks(exec_, comm_, S.sum, staged_);
    meanFlat(exec_, S.sum.data(), n_, T_.data(), S.voxels, "kortex::atlas::template_mean");
    if (streaming_) Kokkos::deep_copy(exec_, S.sum, std::int64_t(0));
  }

  // Streams the streamed subjects through the device slots: body(state, j) runs on the device copy
  // of subject resident + j (uploaded by then; warpFirst: W_i recomputed from I_i and u_i), then u_i (v_i)
  // go back. The next subject's upload runs on the copy queue meanwhile.
  template <class Body>
  void forStreamed(bool warpFirst, Body&& body) {
    if (!streaming_) return;
    auto upload = [&](int j, SubjectState<Mem>& st) {
      Streamed const& h = hostSub_[std::size_t(j)];
      Kokkos::deep_copy(*copy_, st.I, h.I);
      Kokkos::deep_copy(*copy_, st.u, h.u);
      if (keepV_) Kokkos::deep_copy(*copy_, st.v, h.v);
    };
    exec_.fence();
    upload(0, slot_[0]);
    for (int j = 0; j < streamedCount_; ++j) {
      SubjectState<Mem>& st = slot_[j % 2];
      copy_->fence();  // this subject's upload (and the last download) done
      if (j + 1 < streamedCount_) upload(j + 1, slot_[(j + 1) % 2]);
      Streamed& h = hostSub_[std::size_t(j)];
      st.frozen = h.frozen;
      if (warpFirst) warpSnapped(exec_, st.I, st.u, st.W);
      body(st, j);
      h.frozen = st.frozen;
      exec_.fence();
      Kokkos::deep_copy(*copy_, h.u, st.u);
      if (keepV_) Kokkos::deep_copy(*copy_, h.v, st.v);
    }
    copy_->fence();
  }

  // Spec step 2 for one subject (its W_i current): the greedy step against the template; a subject
  // whose step folds at every size is frozen, one whose velocity is zero stays.
  // slots: [sse_i | refused_i | minJ_i | frozen_i], global subject index.
  void step(Scale& S, SubjectState<Mem>& st, std::size_t gi, bool first, std::vector<double>& slots) {
    if (st.frozen) return;
    kx::ScopedRegion region("kortex::atlas::step");
    Field<Mem> v = keepV_ ? st.v : S.vShared;
    S.stepper->computeForce(ConstImageView<Mem>(st.W), ConstImageView<Mem>(T_));
    S.stepper->solve(v, first, first && prevFactor_ == 0);
    const GreedyStepOutcome o = S.stepper->stepField(st.u, ConstField<Mem>(v));
    slots[std::size_t(n_) + gi] += double(o.refused);
    if (!o.zeroVelocity && !o.accepted) st.frozen = true;
  }

  // Spec step 3 for one subject (ubar current), then W_i and its mismatch (summed into the device
  // slot of local subject `li`, read back once per iteration by collectMismatch).
  void centre(Scale& S, SubjectState<Mem>& st, int li, std::vector<double>& slots) {
    kx::ScopedRegion region("kortex::atlas::centre");
    const std::size_t n = std::size_t(n_), gi = std::size_t(run_.first + li);
    // The candidate is warped and checked in one pass; a folded one (rare) is dropped and W warped
    // again from the u kept.
    Field<Mem> cand = S.stepper->composeCandidate(ConstField<Mem>(st.u), ConstField<Mem>(S.ubar));
    const CentreSums c = warpSnapChecked(exec_, st.I, cand, st.W, ConstImageView<Mem>(T_));
    float jKept = c.minJ;
    if (c.minJ > 0.0f) {
      S.stepper->keepCandidate(st.u);
      Kokkos::deep_copy(exec_, Kokkos::subview(sse_, li), c.sse);
    } else {
      slots[n + gi] += 1.0;
      warpSnapped(exec_, st.I, st.u, st.W, ConstImageView<Mem>(T_), Kokkos::subview(sse_, li));
      jKept = minJacobian(exec_, ConstField<Mem>(st.u));
    }
    slots[2 * n + gi] = double(jKept);
    slots[3 * n + gi] = st.frozen ? 1.0 : 0.0;
  }

  // Every local subject's mean (W_i - T)^2 into its slot.
  void collectMismatch(Scale const& S, std::vector<double>& slots) {
    auto h = Kokkos::create_mirror_view(sse_);
    Kokkos::deep_copy(exec_, h, sse_);
    exec_.fence();
    for (int li = 0; li < local_; ++li) slots[std::size_t(run_.first + li)] = h(li) / double(S.voxels);
  }

  void reduceSlots(std::vector<double>& slots) {
    if (!comm_) return;
    kx::ScopedRegion region("kortex::atlas::reduce");
    const auto t0 = Clock::now();
    comm_->sum(slots.data(), slots.size());
    tReduce_ += since(t0);
  }

  // One iteration of the spec over every subject (resident, then streamed), its record and checkpoint.
  void iterate(Scale& S, int it) {
    const int first = run_.first, voxels = S.voxels;
    AtlasIteration rec;
    rec.scale = S.s;
    rec.factor = S.f;
    rec.iteration = it;
    std::vector<double> slots(4 * std::size_t(n_), 0.0);
    average(S);
    rec.templateChange = it == 1 ? 0.0 : imageRmse(exec_, ConstImageView<Mem>(T_), ConstImageView<Mem>(S.Tprev));
    Kokkos::deep_copy(exec_, S.Tprev, T_);
    for (int i = 0; i < resident_; ++i) step(S, sub_[std::size_t(i)], std::size_t(first + i), it == 1, slots);
    // Centring (spec step 3): u_i <- u_i(x + ubar) - ubar. The streamed subjects add their u_i
    // to the sum as they pass; the sums are integers, so the order does not matter.
    if (streaming_) Kokkos::deep_copy(exec_, S.ubarSum, std::int64_t(0));
    forStreamed(true, [&](SubjectState<Mem>& st, int j) {
      step(S, st, std::size_t(first + resident_ + j), it == 1, slots);
      accumulateFlat(exec_, {st.u.data()}, S.ubarSum.data(), 3 * voxels, "kortex::atlas::mean_displacement_sum", true);
    });
    {
      std::vector<const float*> terms;
      for (auto const& st : sub_) terms.push_back(st.u.data());
      accumulateFlat(exec_, terms, S.ubarSum.data(), 3 * voxels, "kortex::atlas::mean_displacement_sum", streaming_);
      tReduce_ += reduceRanks(exec_, comm_, S.ubarSum, staged_);
      meanFlat(exec_, S.ubarSum.data(), n_, S.ubar.data(), 3 * voxels, "kortex::atlas::mean_displacement");
    }
    for (int i = 0; i < resident_; ++i) centre(S, sub_[std::size_t(i)], i, slots);
    // The streamed subjects' new W_i go into the next template's sum at once (`average` adds the
    // resident ones).
    forStreamed(false, [&](SubjectState<Mem>& st, int j) {
      centre(S, st, resident_ + j, slots);
      accumulateFlat(exec_, {st.W.data()}, S.sum.data(), voxels, "kortex::atlas::template_sum", true);
    });
    collectMismatch(S, slots);
    reduceSlots(slots);
    record(rec, slots);
    if (run_.checkpoint && run_.checkpointEvery > 0 && result_.iterations % run_.checkpointEvery == 0) checkpoint(S, it);
  }

  // The iteration's figures over every subject of every rank.
  void record(AtlasIteration& rec, std::vector<double> const& slots) {
    const std::size_t n = std::size_t(n_);
    double sse = 0.0, refused = 0.0, frozen = 0.0;
    float minJ = 3.4e38f;
    for (std::size_t i = 0; i < n; ++i) {
      sse += slots[i];
      refused += slots[n + i];
      minJ = std::min(minJ, float(slots[2 * n + i]));
      frozen += slots[3 * n + i];
    }
    rec.mismatch = std::sqrt(sse / double(n_));
    rec.refused = int(refused);
    rec.minJacobian = minJ;
    rec.frozen = int(frozen);
    rec.seconds = secondsBefore_ + since(start_);
    result_.refused += rec.refused;
    ++result_.iterations;
    result_.history.push_back(rec);
    if (run_.progress) run_.progress(rec);
  }

  void checkpoint(Scale const& S, int it) {
    kx::ScopedRegion region("kortex::atlas::checkpoint");
    exec_.fence();
    const auto t0 = Clock::now();
    AtlasState state;
    state.scale = S.s;
    state.iteration = it;
    for (auto const& st : sub_) {
      state.frozen.push_back(st.frozen ? 1 : 0);
      state.u.push_back(hostCopy(st.u));
      if (keepV_) state.v.push_back(hostCopy(st.v));
    }
    for (auto const& h : hostSub_) {
      state.frozen.push_back(h.frozen ? 1 : 0);
      state.u.push_back(hostCopy(h.u));  // a copy: on host back ends h.u is itself host memory
      if (keepV_) state.v.push_back(hostCopy(h.v));
    }
    state.templ = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>("kortex::atlas::state_template", S.nz, S.ny, S.nx);
    Kokkos::deep_copy(state.templ, T_);
    state.history = result_.history;
    state.refused = result_.refused;
    state.seconds = secondsBefore_ + since(start_);
    run_.checkpoint(state);
    tSetup_ += since(t0);
  }

  // Outputs and the final statistics.
  AtlasResult finish(HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields) {
    exec_.fence();
    const auto tOut = Clock::now();
    templ = HostImage("atlas template", g_);
    Kokkos::deep_copy(templ.data, T_);
    fields.clear();
    full_.clear();
    const int voxels = int(g_.nz() * g_.ny() * g_.nx());
    std::vector<double> slots(std::size_t(n_), 0.0);
    std::vector<const float*> terms;
    Flat uSum("kortex::atlas::final_displacement_sum", 3 * std::size_t(voxels));
    for (int i = 0; i < resident_; ++i) {
      auto const& st = sub_[std::size_t(i)];
      if (run_.returnFields) {
        fields.emplace_back("atlas displacement", g_);
        Kokkos::deep_copy(fields.back().data, st.u);
      }
      slots[std::size_t(run_.first + i)] = double(minJacobian(exec_, ConstField<Mem>(st.u)));
      terms.push_back(st.u.data());
    }
    if (streaming_) Kokkos::deep_copy(exec_, uSum, std::int64_t(0));
    for (int j = 0; j < streamedCount_; ++j) {
      Streamed const& h = hostSub_[std::size_t(j)];
      Kokkos::deep_copy(exec_, slot_[0].u, h.u);
      if (run_.returnFields) {
        fields.emplace_back("atlas displacement", g_);
        Kokkos::deep_copy(fields.back().data, h.u);
      }
      slots[std::size_t(run_.first + resident_ + j)] = double(minJacobian(exec_, ConstField<Mem>(slot_[0].u)));
      accumulateFlat(exec_, {slot_[0].u.data()}, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", true);
    }
    accumulateFlat(exec_, terms, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", streaming_);
    tReduce_ += reduceRanks(exec_, comm_, uSum, staged_);
    reduceSlots(slots);
    result_.minJacobian = 3.4e38f;
    for (double j : slots) result_.minJacobian = std::min(result_.minJacobian, float(j));
    double ss = 0.0;
    Kokkos::parallel_reduce("kortex::atlas::mean_displacement_norm",
                            Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec_, 0, voxels),
                            MeanNormFunctor{uSum.data(), voxels, n_}, ss);
    result_.meanDisplacementRms = std::sqrt(ss / double(voxels));
    exec_.fence();
    tSetup_ += since(tOut);
    result_.seconds = secondsBefore_ + since(start_);
    result_.secondsSetup = tSetup_;
    result_.secondsReduce = tReduce_;
    result_.secondsCompute = std::max(0.0, since(start_) - tSetup_ - tReduce_);
    result_.streamed = streamedCount_;
    return result_;
  }

  Exec exec_;
  std::vector<HostImage> const& images_;
  GreedyParams const& gp_;
  AtlasRun const& run_;
  const Clock::time_point start_ = Clock::now();
  Communicator* comm_ = nullptr;
  int local_ = 0, n_ = 0;
  Geometry g_;
  bool keepV_ = false;
  AtlasState const* resume_ = nullptr;
  int s0_ = 0, resident_ = 0, streamedCount_ = 0;
  bool streaming_ = false;
  AtlasResult result_;
  StagedRankSum<Exec> staged_;
  std::vector<ImageView<Mem>> full_;
  ImageView<Mem> blurred_;
  double tReduce_ = 0.0, tSetup_ = 0.0, secondsBefore_ = 0.0;
  std::vector<Streamed> hostSub_;
  std::unique_ptr<Exec> copy_;  // the streamed subjects' copies: its own stream on a device
  ImageView<Mem> fullStage_;
  SubjectState<Mem> slot_[2];
  std::vector<SubjectState<Mem>> sub_, prev_;
  int prevFactor_ = 0;
  ImageView<Mem> T_;
  Kokkos::View<double*, Mem> sse_;  // per local subject: sum (W_i - T)^2 of the last centring
};

}  // namespace

template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields, AtlasRun const& run) {
  return AtlasBuilder<Exec>(exec, images, params, run).build(templ, fields);
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
