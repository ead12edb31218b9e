#include "gpu/atlas/Atlas.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/GreedyStepper.hpp"
#include "gpu/imageops/ImageOps.hpp"

namespace kortex::gpu {
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

struct SnapFunctor {
  float* w;
  KOKKOS_INLINE_FUNCTION void operator()(int k) const { w[k] = atlasSnap(w[k]); }
};

// W = snap(I(x - u(x))) (core/Atlas.hpp).
template <class Exec>
void warpSnapped(Exec const& exec, ImageView<typename Exec::memory_space> I, Field<typename Exec::memory_space> u,
                 ImageView<typename Exec::memory_space> W) {
  using Mem = typename Exec::memory_space;
  warp(exec, ConstImageView<Mem>(I), ConstField<Mem>(u), W);
  Kokkos::parallel_for("kortex::atlas::snap", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(W.size())),
                       SnapFunctor{W.data()});
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

// Host memory the streamed subjects live in: pinned (page-locked) for a CUDA device, so the copies
// run asynchronously on their own stream; plain host memory otherwise.
template <class Exec>
struct StagingSpace {
  using type = Kokkos::HostSpace;
};
#ifdef KOKKOS_ENABLE_CUDA
template <>
struct StagingSpace<Kokkos::Cuda> {
  using type = Kokkos::CudaHostPinnedSpace;
};
#endif

// An execution space instance for the copies of streamed subjects: its own CUDA stream, so an
// upload overlaps the kernels of the subject before; the same instance on host back ends.
template <class Exec>
struct CopyQueue {
  Exec exec;
  explicit CopyQueue(Exec const& e) : exec(e) {}
};
#ifdef KOKKOS_ENABLE_CUDA
template <>
struct CopyQueue<Kokkos::Cuda> {
  Kokkos::Cuda exec;
  explicit CopyQueue(Kokkos::Cuda const&) : exec(make()) {}
  static Kokkos::Cuda make() {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
      throw std::runtime_error("atlas: cannot create the CUDA stream of the streamed subjects");
    return Kokkos::Cuda(s, Kokkos::Impl::ManageStream::yes);
  }
};
#endif

// A streamed subject's state between its visits to the device.
template <class Exec>
struct StreamedSubject {
  using Space = typename StagingSpace<Exec>::type;
  Kokkos::View<float***, Kokkos::LayoutRight, Space> I;
  Kokkos::View<float****, Kokkos::LayoutRight, Space> u, v;
  bool frozen = false;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sums over ranks of an int64 device array: the transport reads device memory, or the array
// is staged through host memory. Returns the seconds spent.
template <class Exec>
double reduceRanks(Exec const& exec, AtlasComm* comm, Kokkos::View<std::int64_t*, typename Exec::memory_space> a,
                   typename Kokkos::View<std::int64_t*, typename Exec::memory_space>::HostMirror& staging) {
  using Mem = typename Exec::memory_space;
  if (comm == nullptr || comm->size() == 1) return 0.0;
  exec.fence();
  const auto t0 = Clock::now();
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible) {
    comm->sum(a.data(), a.size());
  } else if (!comm->sumDevice(a.data(), a.size())) {
    if (staging.size() < a.size())
      staging = typename Kokkos::View<std::int64_t*, Mem>::HostMirror("kortex::atlas::staging", a.size());
    auto s = Kokkos::subview(staging, std::make_pair(std::size_t(0), a.size()));
    Kokkos::deep_copy(exec, s, a);
    exec.fence();
    comm->sum(s.data(), s.size());
    Kokkos::deep_copy(exec, a, s);
    exec.fence();
  }
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
double atlasSumSeconds(Exec const& exec, AtlasComm* comm, std::size_t count, int repetitions) {
  using Mem = typename Exec::memory_space;
  if (comm == nullptr || comm->size() == 1 || count == 0) return 0.0;
  if (repetitions < 1) throw InvalidArgument("atlasSumSeconds: at least one repetition");
  Kokkos::View<std::int64_t*, Mem> a("kortex::atlas::sum_probe", count);
  typename Kokkos::View<std::int64_t*, Mem>::HostMirror staging;
  reduceRanks(exec, comm, a, staging);  // warm-up: first-use set-up of the path and the staging buffer
  std::vector<double> t;
  for (int r = 0; r < repetitions; ++r) {
    comm->barrier();
    t.push_back(reduceRanks(exec, comm, a, staging));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields, AtlasRun const& run) {
  using Mem = typename Exec::memory_space;
  using Flat = Kokkos::View<std::int64_t*, Mem>;
  using Streamed = StreamedSubject<Exec>;
  const auto start = Clock::now();
  AtlasComm* comm = run.comm != nullptr && run.comm->size() > 1 ? run.comm : nullptr;
  const int local = int(images.size());
  const int n = run.total > 0 ? run.total : local;
  if (n < AtlasParams::kMinSubjects) throw InvalidArgument("atlas: at least two images are needed");
  if (local < 1) throw InvalidArgument("atlas: this process holds no subject (more ranks than subjects)");
  if (run.first < 0 || run.first + local > n)
    throw InvalidArgument("atlas: subjects " + std::to_string(run.first) + ".." + std::to_string(run.first + local - 1) +
                          " lie outside the cohort of " + std::to_string(n));
  if (!comm && local != n) throw InvalidArgument("atlas: a partial cohort needs a process group");
  const Geometry g = images.front().geometry;
  for (auto const& img : images)
    if (!img.geometry.sameGrid(g)) throw InvalidArgument("atlas: the images are on different grids");
  GreedyParams const& gp = params.greedy;
  for (int f : gp.scales)
    if (const std::string why = scaleMisfit(g, f); !why.empty()) throw InvalidArgument("atlas: " + why + " of " + describe(g));
  if (gp.scales.back() != 1) throw InvalidArgument("atlas: the last scale factor must be 1");
  if (std::int64_t(g.nx()) * g.ny() * g.nz() * 3 > 2147483647)
    throw InvalidArgument("atlas: more than (2^31 - 1) / 3 voxels");
  const bool keepV = atlasKeepsVelocity(gp.solver);
  AtlasState const* resume = run.resume;
  const int s0 = resume ? resume->scale : 0;
  if (resume) {
    if (s0 < 0 || s0 >= int(gp.scales.size()) || resume->iteration < 0 || resume->iteration > gp.iterations[std::size_t(s0)] ||
        int(resume->u.size()) != local || int(resume->frozen.size()) != local || (keepV && int(resume->v.size()) != local))
      throw InvalidArgument("atlas: the state to resume from does not match this cohort and these parameters");
  }
  // Local subjects 0 .. resident-1 stay on the device; the others are streamed.
  const int resident = run.residentSubjects < 0 ? local : std::min(run.residentSubjects, local);
  const int streamedCount = local - resident;
  const bool streaming = streamedCount > 0;

  AtlasResult result;
  typename Flat::HostMirror staging;
  // Each resident image goes to the device once, on the full grid; it is the last scale's I_i, and
  // the coarser scales' I_i are blurred and down-sampled from it (the blur workspace is shared).
  std::vector<ImageView<Mem>> full(static_cast<std::size_t>(resident));
  ImageView<Mem> blurred;
  if (gp.scales.front() > 1) blurred = ImageView<Mem>("kortex::atlas::blurred", g.nz(), g.ny(), g.nx());
  double tReduce = 0.0, tSetup = 0.0;
  auto reduceSlots = [&](std::vector<double>& slots) {
    if (!comm) return;
    const auto t0 = Clock::now();
    comm->sum(slots.data(), slots.size());
    tReduce += since(t0);
  };
  if (resume) {
    result.history = resume->history;
    result.refused = resume->refused;
    result.iterations = int(resume->history.size());
    result.resumedAt = result.iterations;
  }
  const double secondsBefore = resume ? resume->seconds : 0.0;

  // Streaming: the subjects' state in (pinned) host memory, two device slots (the next subject's
  // state is uploaded on the copy queue while the current one computes) and a full-grid image buffer.
  std::vector<Streamed> hostSub(static_cast<std::size_t>(streamedCount));
  std::unique_ptr<CopyQueue<Exec>> copy;
  ImageView<Mem> fullStage;
  if (streaming) {
    copy = std::make_unique<CopyQueue<Exec>>(exec);
    fullStage = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_image"), Kokkos::WithoutInitializing), g.nz(), g.ny(), g.nx());
  }
  SubjectState<Mem> slot[2];

  std::vector<SubjectState<Mem>> sub(static_cast<std::size_t>(resident)), prev;
  int prevFactor = s0 > 0 ? gp.scales[std::size_t(s0) - 1] : 0;
  ImageView<Mem> T;
  for (std::size_t s = std::size_t(s0); s < gp.scales.size(); ++s) {
    exec.fence();
    const auto tScale = Clock::now();
    const int f = gp.scales[s];
    const GridExtents e = scaledExtents(g, f);
    const int nz = e.nz, ny = e.ny, nx = e.nx, voxels = int(e.voxels());
    const bool resumeHere = resume && int(s) == s0;
    auto checkResumeField = [&](std::size_t i) {
      auto const& hu = resume->u[i];
      if (hu.extent(0) != 3 || int(hu.extent(1)) != nz || int(hu.extent(2)) != ny || int(hu.extent(3)) != nx)
        throw InvalidArgument("atlas: the state to resume from is not on the grid of scale " + std::to_string(s + 1));
    };
    for (int i = 0; i < resident; ++i) {
      SubjectState<Mem> st;
      ImageView<Mem>& image = full[std::size_t(i)];
      if (image.size() == 0) {
        image = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::image"), Kokkos::WithoutInitializing), g.nz(), g.ny(), g.nx());
        Kokkos::deep_copy(exec, image, images[std::size_t(i)].data);
      }
      if (f == 1) {
        st.I = image;  // downsampleImage at factor 1 is a copy: the same values
      } else {
        st.I = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::I"), Kokkos::WithoutInitializing), nz, ny, nx);
        downsampleImage(exec, ConstImageView<Mem>(image), f, blurred, st.I);
      }
      st.W = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::W"), Kokkos::WithoutInitializing), nz, ny, nx);
      st.u = Field<Mem>("kortex::atlas::u", 3, nz, ny, nx);
      if (keepV) st.v = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
      if (resumeHere) {
        checkResumeField(std::size_t(i));
        Kokkos::deep_copy(exec, st.u, resume->u[std::size_t(i)]);
        if (keepV) Kokkos::deep_copy(exec, st.v, resume->v[std::size_t(i)]);
        st.frozen = resume->frozen[std::size_t(i)] != 0;
      } else if (prevFactor != 0) {
        upsampleField(exec, ConstField<Mem>(prev[std::size_t(i)].u), prevFactor, f, st.u);
        if (keepV) upsampleField(exec, ConstField<Mem>(prev[std::size_t(i)].v), prevFactor, f, st.v);
      }
      warpSnapped(exec, st.I, st.u, st.W);
      sub[std::size_t(i)] = st;
    }
    prev.clear();
    T = ImageView<Mem>("kortex::atlas::template", nz, ny, nx);
    ImageView<Mem> Tprev("kortex::atlas::template_previous", nz, ny, nx);
    if (resumeHere) {
      if (int(resume->templ.extent(0)) != nz || int(resume->templ.extent(1)) != ny || int(resume->templ.extent(2)) != nx)
        throw InvalidArgument("atlas: the state's template is not on the grid of scale " + std::to_string(s + 1));
      Kokkos::deep_copy(exec, Tprev, resume->templ);
    }
    Flat sum("kortex::atlas::template_sum", std::size_t(voxels));
    Flat ubarSum("kortex::atlas::mean_displacement_sum", 3 * std::size_t(voxels));
    Field<Mem> ubar("kortex::atlas::mean_displacement", 3, nz, ny, nx);
    Field<Mem> vShared;
    if (!keepV) vShared = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
    GreedyStepper<Exec> stepper(exec, e, gp, GreedyStepper<Exec>::Use::Field);  // force, candidate, fluid solver

    // ---- the streamed subjects at this scale: I_i and u_i (v_i) to the host, W_i into the sum
    if (streaming) {
      for (int k = 0; k < 2; ++k) {
        slot[k].I = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_I"), Kokkos::WithoutInitializing), nz, ny, nx);
        slot[k].W = ImageView<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_W"), Kokkos::WithoutInitializing), nz, ny, nx);
        slot[k].u = Field<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_u"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
        if (keepV) slot[k].v = Field<Mem>(Kokkos::view_alloc(std::string("kortex::atlas::stream_v"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
      }
      SubjectState<Mem>& st = slot[0];
      Field<Mem> prevU, prevV;
      if (prevFactor != 0 && !resumeHere) {
        const GridExtents pe = scaledExtents(g, prevFactor);
        prevU = Field<Mem>("kortex::atlas::stream_previous_u", 3, pe.nz, pe.ny, pe.nx);
        if (keepV) prevV = Field<Mem>("kortex::atlas::stream_previous_v", 3, pe.nz, pe.ny, pe.nx);
      }
      Kokkos::deep_copy(exec, sum, std::int64_t(0));
      for (int j = 0; j < streamedCount; ++j) {
        const std::size_t i = std::size_t(resident + j);
        Streamed& h = hostSub[std::size_t(j)];
        Kokkos::deep_copy(exec, fullStage, images[i].data);
        if (f == 1) Kokkos::deep_copy(exec, st.I, fullStage);
        else downsampleImage(exec, ConstImageView<Mem>(fullStage), f, blurred, st.I);
        if (resumeHere) {
          checkResumeField(i);
          Kokkos::deep_copy(exec, st.u, resume->u[i]);
          if (keepV) Kokkos::deep_copy(exec, st.v, resume->v[i]);
          h.frozen = resume->frozen[i] != 0;
        } else if (prevFactor != 0) {
          exec.fence();  // the previous subject's copies to its host buffers are done
          Kokkos::deep_copy(exec, prevU, h.u);
          upsampleField(exec, ConstField<Mem>(prevU), prevFactor, f, st.u);
          if (keepV) {
            Kokkos::deep_copy(exec, prevV, h.v);
            upsampleField(exec, ConstField<Mem>(prevV), prevFactor, f, st.v);
          }
        } else {
          Kokkos::deep_copy(exec, st.u, 0.0f);
          if (keepV) Kokkos::deep_copy(exec, st.v, 0.0f);
        }
        exec.fence();  // nothing in flight reads the buffers replaced here
        h.I = decltype(h.I)(Kokkos::view_alloc(std::string("kortex::atlas::host_I"), Kokkos::WithoutInitializing), nz, ny, nx);
        h.u = decltype(h.u)(Kokkos::view_alloc(std::string("kortex::atlas::host_u"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
        if (keepV) h.v = decltype(h.v)(Kokkos::view_alloc(std::string("kortex::atlas::host_v"), Kokkos::WithoutInitializing), 3, nz, ny, nx);
        warpSnapped(exec, st.I, st.u, st.W);
        accumulateFlat(exec, {st.W.data()}, sum.data(), voxels, "kortex::atlas::template_sum", true);
        Kokkos::deep_copy(exec, h.I, st.I);
        Kokkos::deep_copy(exec, h.u, st.u);
        if (keepV) Kokkos::deep_copy(exec, h.v, st.v);
      }
      exec.fence();
    }

    auto average = [&] {
      std::vector<const float*> w;
      for (auto const& st : sub) w.push_back(st.W.data());
      // Streaming: `sum` already holds the streamed subjects' terms (set-up or the last centring).
      accumulateFlat(exec, w, sum.data(), voxels, "kortex::atlas::template_sum", streaming);
      tReduce += reduceRanks(exec, comm, sum, staging);
      meanFlat(exec, sum.data(), n, T.data(), voxels, "kortex::atlas::template_mean");
      if (streaming) Kokkos::deep_copy(exec, sum, std::int64_t(0));
    };
    // Streams the streamed subjects through the device slots: body(state, j) runs on the device copy
    // of subject resident + j (uploaded by then; warpFirst: W_i recomputed from I_i and u_i), then u_i (v_i)
    // go back. The next subject's upload runs on the copy queue meanwhile.
    auto forStreamed = [&](bool warpFirst, auto&& body) {
      if (!streaming) return;
      auto upload = [&](int j, SubjectState<Mem>& st) {
        Streamed const& h = hostSub[std::size_t(j)];
        Kokkos::deep_copy(copy->exec, st.I, h.I);
        Kokkos::deep_copy(copy->exec, st.u, h.u);
        if (keepV) Kokkos::deep_copy(copy->exec, st.v, h.v);
      };
      exec.fence();
      upload(0, slot[0]);
      for (int j = 0; j < streamedCount; ++j) {
        SubjectState<Mem>& st = slot[j % 2];
        copy->exec.fence();  // this subject's upload (and the last download) done
        if (j + 1 < streamedCount) upload(j + 1, slot[(j + 1) % 2]);
        Streamed& h = hostSub[std::size_t(j)];
        st.frozen = h.frozen;
        if (warpFirst) warpSnapped(exec, st.I, st.u, st.W);
        body(st, j);
        h.frozen = st.frozen;
        exec.fence();
        Kokkos::deep_copy(copy->exec, h.u, st.u);
        if (keepV) Kokkos::deep_copy(copy->exec, h.v, st.v);
      }
      copy->exec.fence();
    };
    exec.fence();
    tSetup += since(tScale);
    const int startIt = resumeHere ? resume->iteration + 1 : 1;
    for (int it = startIt; it <= gp.iterations[s]; ++it) {
      AtlasIteration rec;
      rec.scale = int(s);
      rec.factor = f;
      rec.iteration = it;
      // slots: [sse_i | refused_i | minJ_i | frozen_i], global subject index
      std::vector<double> slots(4 * std::size_t(n), 0.0);
      average();
      rec.templateChange = it == 1 ? 0.0 : imageRmse(exec, ConstImageView<Mem>(T), ConstImageView<Mem>(Tprev));
      Kokkos::deep_copy(exec, Tprev, T);
      const bool first = it == 1;
      // Spec step 2 for one subject (its W_i current): the greedy step against the template; a
      // subject whose step folds at every size is frozen, one whose velocity is zero stays.
      auto step = [&](SubjectState<Mem>& st, std::size_t gi) {
        if (st.frozen) return;
        Field<Mem> v = keepV ? st.v : vShared;
        stepper.computeForce(ConstImageView<Mem>(st.W), ConstImageView<Mem>(T));
        stepper.solve(v, first, first && prevFactor == 0);
        const GreedyStepOutcome o = stepper.stepField(st.u, ConstField<Mem>(v));
        slots[std::size_t(n) + gi] += double(o.refused);
        if (!o.zeroVelocity && !o.accepted) st.frozen = true;
      };
      // Spec step 3 for one subject (ubar current), then W_i and its mismatch.
      auto centre = [&](SubjectState<Mem>& st, std::size_t gi) {
        bool kept = false;
        const float jKept = stepper.composeUnfolded(st.u, ConstField<Mem>(ubar), kept);
        if (!kept) slots[std::size_t(n) + gi] += 1.0;
        warpSnapped(exec, st.I, st.u, st.W);
        const double r = imageRmse(exec, ConstImageView<Mem>(st.W), ConstImageView<Mem>(T));
        slots[gi] = r * r;
        slots[2 * std::size_t(n) + gi] = double(jKept);
        slots[3 * std::size_t(n) + gi] = st.frozen ? 1.0 : 0.0;
      };
      for (int i = 0; i < resident; ++i) step(sub[std::size_t(i)], std::size_t(run.first + i));
      // Centring (spec step 3): u_i <- u_i(x + ubar) - ubar. The streamed subjects add their u_i
      // to the sum as they pass; the sums are integers, so the order does not matter.
      if (streaming) Kokkos::deep_copy(exec, ubarSum, std::int64_t(0));
      forStreamed(true, [&](SubjectState<Mem>& st, int j) {
        step(st, std::size_t(run.first + resident + j));
        accumulateFlat(exec, {st.u.data()}, ubarSum.data(), 3 * voxels, "kortex::atlas::mean_displacement_sum", true);
      });
      {
        std::vector<const float*> terms;
        for (auto const& st : sub) terms.push_back(st.u.data());
        accumulateFlat(exec, terms, ubarSum.data(), 3 * voxels, "kortex::atlas::mean_displacement_sum", streaming);
        tReduce += reduceRanks(exec, comm, ubarSum, staging);
        meanFlat(exec, ubarSum.data(), n, ubar.data(), 3 * voxels, "kortex::atlas::mean_displacement");
      }
      for (int i = 0; i < resident; ++i) centre(sub[std::size_t(i)], std::size_t(run.first + i));
      // The streamed subjects' new W_i go into the next template's sum at once (`average` adds the
      // resident ones).
      forStreamed(false, [&](SubjectState<Mem>& st, int j) {
        centre(st, std::size_t(run.first + resident + j));
        accumulateFlat(exec, {st.W.data()}, sum.data(), voxels, "kortex::atlas::template_sum", true);
      });
      reduceSlots(slots);
      double sse = 0.0, refused = 0.0, frozen = 0.0;
      float minJ = 3.4e38f;
      for (std::size_t i = 0; i < std::size_t(n); ++i) {
        sse += slots[i];
        refused += slots[std::size_t(n) + i];
        minJ = std::min(minJ, float(slots[2 * std::size_t(n) + i]));
        frozen += slots[3 * std::size_t(n) + i];
      }
      rec.mismatch = std::sqrt(sse / double(n));
      rec.refused = int(refused);
      rec.minJacobian = minJ;
      rec.frozen = int(frozen);
      rec.seconds = secondsBefore + since(start);
      result.refused += rec.refused;
      ++result.iterations;
      result.history.push_back(rec);
      if (run.progress) run.progress(rec);
      if (run.checkpoint && run.checkpointEvery > 0 && result.iterations % run.checkpointEvery == 0) {
        exec.fence();
        const auto t0 = Clock::now();
        AtlasState state;
        state.scale = int(s);
        state.iteration = it;
        for (auto const& st : sub) {
          state.frozen.push_back(st.frozen ? 1 : 0);
          state.u.push_back(hostCopy(st.u));
          if (keepV) state.v.push_back(hostCopy(st.v));
        }
        for (auto const& h : hostSub) {
          state.frozen.push_back(h.frozen ? 1 : 0);
          state.u.push_back(hostCopy(h.u));  // a copy: on host back ends h.u is itself host memory
          if (keepV) state.v.push_back(hostCopy(h.v));
        }
        state.templ = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>("kortex::atlas::state_template", nz, ny, nx);
        Kokkos::deep_copy(state.templ, T);
        state.history = result.history;
        state.refused = result.refused;
        state.seconds = secondsBefore + since(start);
        run.checkpoint(state);
        tSetup += since(t0);
      }
    }
    if (s + 1 == gp.scales.size()) average();
    prev = sub;
    prevFactor = f;
  }
  // Outputs and the final statistics.
  exec.fence();
  const auto tOut = Clock::now();
  templ = HostImage("atlas template", g);
  Kokkos::deep_copy(templ.data, T);
  fields.clear();
  full.clear();
  const int voxels = int(g.nz() * g.ny() * g.nx());
  std::vector<double> slots(std::size_t(n), 0.0);
  std::vector<const float*> terms;
  Flat uSum("kortex::atlas::final_displacement_sum", 3 * std::size_t(voxels));
  for (int i = 0; i < resident; ++i) {
    auto const& st = sub[std::size_t(i)];
    if (run.returnFields) {
      fields.emplace_back("atlas displacement", g);
      Kokkos::deep_copy(fields.back().data, st.u);
    }
    slots[std::size_t(run.first + i)] = double(minJacobian(exec, ConstField<Mem>(st.u)));
    terms.push_back(st.u.data());
  }
  if (streaming) Kokkos::deep_copy(exec, uSum, std::int64_t(0));
  for (int j = 0; j < streamedCount; ++j) {
    Streamed const& h = hostSub[std::size_t(j)];
    Kokkos::deep_copy(exec, slot[0].u, h.u);
    if (run.returnFields) {
      fields.emplace_back("atlas displacement", g);
      Kokkos::deep_copy(fields.back().data, h.u);
    }
    slots[std::size_t(run.first + resident + j)] = double(minJacobian(exec, ConstField<Mem>(slot[0].u)));
    accumulateFlat(exec, {slot[0].u.data()}, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", true);
  }
  accumulateFlat(exec, terms, uSum.data(), 3 * voxels, "kortex::atlas::final_displacement_sum", streaming);
  tReduce += reduceRanks(exec, comm, uSum, staging);
  reduceSlots(slots);
  result.minJacobian = 3.4e38f;
  for (double j : slots) result.minJacobian = std::min(result.minJacobian, float(j));
  double ss = 0.0;
  Kokkos::parallel_reduce("kortex::atlas::mean_displacement_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, voxels),
                          MeanNormFunctor{uSum.data(), voxels, n}, ss);
  result.meanDisplacementRms = std::sqrt(ss / double(voxels));
  exec.fence();
  tSetup += since(tOut);
  result.seconds = secondsBefore + since(start);
  result.secondsSetup = tSetup;
  result.secondsReduce = tReduce;
  result.secondsCompute = std::max(0.0, since(start) - tSetup - tReduce);
  result.streamed = streamedCount;
  return result;
}

#define KORTEX_INSTANTIATE_ATLAS(SPACE)                                                                       \
  template void atlasAccumulate<SPACE>(SPACE const&, std::vector<ConstImageView<SPACE::memory_space>> const&, \
                                       FixedSum<SPACE::memory_space>, bool);                                  \
  template double atlasSumSeconds<SPACE>(SPACE const&, AtlasComm*, std::size_t, int);                        \
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
