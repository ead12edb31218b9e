#include "gpu/atlas/Atlas.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/greedy/detail/GreedyKernels.hpp"
#include "gpu/registration/Registration.hpp"

namespace kortex::gpu {
namespace {

using namespace greedy_detail;

constexpr int kMaxGroup = 8;

template <class Mem>
struct AccumulateFunctor {
  const float* w[kMaxGroup];
  int count;
  double* sum;
  bool accumulate;
  float* out;  // may be null
  double inv;
  KOKKOS_INLINE_FUNCTION void operator()(int k) const {
    double s = accumulate ? sum[k] : 0.0;
    for (int j = 0; j < count; ++j) s += double(w[j][k]);
    sum[k] = s;
    if (out) out[k] = float(s * inv);
  }
};

template <class Exec>
struct SubjectState {
  using Mem = typename Exec::memory_space;
  ImageView<Mem> I, W;
  Field<Mem> u, v;
  bool frozen = false;
};

}  // namespace

template <class Exec>
void atlasAccumulate(Exec const& exec, std::vector<ConstImageView<typename Exec::memory_space>> const& w,
                     Kokkos::View<double***, Kokkos::LayoutRight, typename Exec::memory_space> sum, bool accumulate,
                     int n, ImageView<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  if (w.empty() || w.size() > std::size_t(kMaxGroup))
    throw InvalidArgument("atlasAccumulate: 1 to " + std::to_string(kMaxGroup) + " images per pass");
  for (auto const& a : w)
    for (int k = 0; k < 3; ++k)
      if (a.extent(k) != sum.extent(k) || (out.data() && out.extent(k) != sum.extent(k)))
        throw InvalidArgument("atlasAccumulate: images on different grids");
  AccumulateFunctor<Mem> f{};
  f.count = int(w.size());
  for (int j = 0; j < f.count; ++j) f.w[j] = w[std::size_t(j)].data();
  f.sum = sum.data();
  f.accumulate = accumulate;
  f.out = out.data();
  f.inv = 1.0 / double(n);
  const long voxels = long(sum.size());
  if (voxels > 2147483647L) throw InvalidArgument("atlasAccumulate: more than 2^31 - 1 voxels");
  Kokkos::parallel_for("kortex::atlas::accumulate", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(voxels)), f);
}

template <class Exec>
AtlasResult buildAtlas(Exec const& exec, std::vector<HostImage> const& images, AtlasParams const& params,
                       HostImage& templ, std::vector<VectorField<Kokkos::HostSpace>>& fields,
                       AtlasProgress const& progress) {
  using Mem = typename Exec::memory_space;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (images.size() < std::size_t(AtlasParams::kMinSubjects))
    throw InvalidArgument("atlas: at least two images are needed");
  const Geometry g = images.front().geometry;
  for (auto const& img : images)
    if (!img.geometry.sameGrid(g)) throw InvalidArgument("atlas: the images are on different grids");
  GreedyParams const& gp = params.greedy;
  for (int f : gp.scales)
    if (f < 1 || g.nx() % f || g.ny() % f || g.nz() % f || g.nx() / f < kFluidMinExtent ||
        g.ny() / f < kFluidMinExtent || g.nz() / f < kFluidMinExtent)
      throw InvalidArgument("atlas: scale factor " + std::to_string(f) + " does not fit " + describe(g));

  const int n = int(images.size());
  std::vector<ImageView<Mem>> full;  // the full-grid images on the device
  for (auto const& img : images) full.push_back(Kokkos::create_mirror_view_and_copy(Mem(), img.data));
  ImageView<Mem> blurred;
  if (gp.scales.front() > 1) blurred = ImageView<Mem>("kortex::atlas::blurred", g.nz(), g.ny(), g.nx());

  AtlasResult result;
  std::vector<SubjectState<Exec>> sub(static_cast<std::size_t>(n)), prev;
  int prevFactor = 0;
  ImageView<Mem> T;
  for (std::size_t s = 0; s < gp.scales.size(); ++s) {
    const int f = gp.scales[s];
    const GridExtents e = scaledExtents(g, f);
    const int nz = e.nz, ny = e.ny, nx = e.nx, voxels = int(e.voxels());
    for (int i = 0; i < n; ++i) {
      SubjectState<Exec> st;
      st.I = ImageView<Mem>("kortex::atlas::I", nz, ny, nx);
      st.W = ImageView<Mem>("kortex::atlas::W", nz, ny, nx);
      st.u = Field<Mem>("kortex::atlas::u", 3, nz, ny, nx);
      st.v = Field<Mem>("kortex::atlas::v", 3, nz, ny, nx);
      downsampleImage(exec, full[std::size_t(i)], f, blurred, st.I);
      if (prevFactor != 0) {
        upsampleField(exec, prev[std::size_t(i)].u, prevFactor, f, st.u);
        upsampleField(exec, prev[std::size_t(i)].v, prevFactor, f, st.v);
      }
      warp(exec, st.I, st.u, st.W);
      sub[std::size_t(i)] = st;
    }
    prev.clear();
    T = ImageView<Mem>("kortex::atlas::template", nz, ny, nx);
    ImageView<Mem> Tprev("kortex::atlas::template_previous", nz, ny, nx);
    Kokkos::View<double***, Kokkos::LayoutRight, Mem> sum("kortex::atlas::sum", nz, ny, nx);
    Field<Mem> force("kortex::atlas::force", 3, nz, ny, nx), cand("kortex::atlas::candidate", 3, nz, ny, nx);
    Field<Mem> ubar("kortex::atlas::mean_displacement", 3, nz, ny, nx);
    Kokkos::View<double*, Mem> ubarSum("kortex::atlas::mean_displacement_sum", 3 * std::size_t(voxels));
    FluidSolver<Exec> solver(exec, nz, ny, nx, gp.fluid);
    auto average = [&] {
      for (int b = 0; b < n; b += kMaxGroup) {
        std::vector<ConstImageView<Mem>> group;
        for (int i = b; i < std::min(n, b + kMaxGroup); ++i) group.push_back(sub[std::size_t(i)].W);
        atlasAccumulate(exec, group, sum, b > 0, n, b + kMaxGroup >= n ? T : ImageView<Mem>());
      }
    };
    int frozenCount = 0;
    for (int it = 1; it <= gp.iterations[s]; ++it) {
      AtlasIteration rec;
      rec.scale = int(s);
      rec.factor = f;
      rec.iteration = it;
      average();
      rec.templateChange = it == 1 ? 0.0 : imageRmse(exec, T, Tprev);
      Kokkos::deep_copy(exec, Tprev, T);
      const bool first = it == 1;
      for (int i = 0; i < n; ++i) {
        SubjectState<Exec>& st = sub[std::size_t(i)];
        if (st.frozen) continue;
        greedyForce(exec, st.W, T, force);
        switch (gp.solver) {
          case GreedySolver::Fft: solver.spectral(force, st.v); break;
          case GreedySolver::HybridSor:
          case GreedySolver::HybridCg:
            if (first)
              solver.spectral(force, st.v);
            else if (gp.solver == GreedySolver::HybridSor)
              solver.sor(force, st.v, gp.warmSweeps, gp.sorVariant, false);
            else
              solver.cg(force, st.v, gp.cgMaxIterations, gp.cgTolerance, gp.matvecVariant);
            break;
          case GreedySolver::Sor:
            if (first && prevFactor == 0) Kokkos::deep_copy(exec, st.v, 0.0f);
            solver.sor(force, st.v, first ? gp.coldSweeps : gp.warmSweeps, gp.sorVariant, false);
            break;
          case GreedySolver::Cg: solver.cg(force, st.v, gp.cgMaxIterations, gp.cgTolerance, gp.matvecVariant); break;
        }
        const double m = fieldMaxNorm(exec, st.v);
        if (!(m > 0.0)) continue;  // zero velocity: the subject stays
        float delta = gp.maxStep;
        bool accepted = false;
        while (delta >= gp.minStep) {
          greedyCompose(exec, st.u, st.v, float(delta / m), cand);
          if (minJacobian(exec, cand) > 0.0f) {
            accepted = true;
            break;
          }
          ++rec.refused;
          delta *= 0.5f;
        }
        if (accepted) {
          std::swap(st.u, cand);
        } else {
          st.frozen = true;
          ++frozenCount;
        }
      }
      // Centring (spec step 3): u_i <- u_i(x + ubar) - ubar.
      for (int b = 0; b < n; b += kMaxGroup) {
        AccumulateFunctor<Mem> acc{};
        acc.count = std::min(n, b + kMaxGroup) - b;
        for (int j = 0; j < acc.count; ++j) acc.w[j] = sub[std::size_t(b + j)].u.data();
        acc.sum = ubarSum.data();
        acc.accumulate = b > 0;
        acc.out = b + kMaxGroup >= n ? ubar.data() : nullptr;
        acc.inv = 1.0 / double(n);
        Kokkos::parallel_for("kortex::atlas::mean_displacement",
                             Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, 3 * voxels), acc);
      }
      float minJ = 3.4e38f;
      double sse = 0.0;
      for (int i = 0; i < n; ++i) {
        SubjectState<Exec>& st = sub[std::size_t(i)];
        greedyCompose(exec, st.u, ubar, 1.0f, cand);
        const float j = minJacobian(exec, cand);
        if (j > 0.0f) {
          std::swap(st.u, cand);
          minJ = std::min(minJ, j);
        } else {
          ++rec.refused;
          minJ = std::min(minJ, minJacobian(exec, st.u));
        }
        warp(exec, st.I, st.u, st.W);
        const double r = imageRmse(exec, st.W, T);
        sse += r * r;
      }
      rec.mismatch = std::sqrt(sse / double(n));
      rec.minJacobian = minJ;
      rec.frozen = frozenCount;
      rec.seconds = elapsed();
      result.refused += rec.refused;
      ++result.iterations;
      result.history.push_back(rec);
      if (progress) progress(rec);
    }
    if (s + 1 == gp.scales.size()) average();
    prev = sub;
    prevFactor = f;
  }
  // Outputs and the final statistics.
  templ = HostImage("atlas template", g);
  Kokkos::deep_copy(templ.data, T);
  fields.clear();
  result.minJacobian = 3.4e38f;
  const int voxels = int(g.nz() * g.ny() * g.nx());
  for (int i = 0; i < n; ++i) {
    auto const& st = sub[std::size_t(i)];
    fields.emplace_back("atlas displacement", g);
    Kokkos::deep_copy(fields.back().data, st.u);
    result.minJacobian = std::min(result.minJacobian, minJacobian(exec, st.u));
  }
  double ss = 0.0;
  {
    // sqrt(mean_x |(1/N) sum_i u_i|^2): sum the subjects' fields in double, subject order.
    Kokkos::View<double****, Kokkos::LayoutRight, Mem> acc("kortex::atlas::mean_acc", 3, g.nz(), g.ny(), g.nx());
    for (auto const& st : sub) {
      const float* p = st.u.data();
      double* a = acc.data();
      Kokkos::parallel_for("kortex::atlas::mean_u", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, 3 * voxels),
                           KOKKOS_LAMBDA(int k) { a[k] += double(p[k]); });
    }
    const double* a = acc.data();
    const double inv = 1.0 / double(n);
    Kokkos::parallel_reduce(
        "kortex::atlas::mean_u_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, voxels),
        KOKKOS_LAMBDA(int k, double& t) {
          const double x = a[k] * inv, y = a[voxels + k] * inv, z = a[2 * voxels + k] * inv;
          t += x * x + y * y + z * z;
        },
        ss);
  }
  result.meanDisplacementRms = std::sqrt(ss / double(voxels));
  result.seconds = elapsed();
  return result;
}

#define KORTEX_INSTANTIATE_ATLAS(SPACE)                                                                         \
  template void atlasAccumulate<SPACE>(SPACE const&, std::vector<ConstImageView<SPACE::memory_space>> const&,  \
                                       Kokkos::View<double***, Kokkos::LayoutRight, SPACE::memory_space>, bool, \
                                       int, ImageView<SPACE::memory_space>);                                    \
  template AtlasResult buildAtlas<SPACE>(SPACE const&, std::vector<HostImage> const&, AtlasParams const&,       \
                                         HostImage&, std::vector<VectorField<Kokkos::HostSpace>>&,              \
                                         AtlasProgress const&);

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
