// Kernels shared by the Kokkos unbiased fluid registration (entry points:
// gpu/registration/Registration.hpp; specification: core/Registration.hpp): views, extent checks,
// the energy reduction, the clamped central-difference gradient from global memory, the force
// variants' launch configuration (ForceKernel is specialised by detail/Force*.hpp; the dispatch
// is detail/Force.hpp) and the element-wise kernels:
//   Smooth<Axis>  one pass of the separable Gaussian (zero boundary);
//   Rate          rate = v - H v (upwind) and max |rate|;
//   Update        u' = u + dt rate (flat);
//   Warp          T(x - u(x));
//   Jacobian      det(I - G).
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Timing.hpp"
#include "core/ViewChecks.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/registration/Registration.hpp"

namespace kortex::gpu::registration_detail {

template <class Mem>
using RandomImage = Kokkos::View<const float***, Kokkos::LayoutRight, Mem,
                                 Kokkos::MemoryTraits<Kokkos::RandomAccess>>;
template <class Mem>
using RandomField = Kokkos::View<const float****, Kokkos::LayoutRight, Mem,
                                 Kokkos::MemoryTraits<Kokkos::RandomAccess>>;
// The template with its gradient, interleaved (core/Registration.hpp regSampleAt).
template <class Mem>
using SampleImage = Kokkos::View<RegSample4***, Kokkos::LayoutRight, Mem>;
template <class Mem>
using RandomSampleImage = Kokkos::View<const RegSample4***, Kokkos::LayoutRight, Mem,
                                       Kokkos::MemoryTraits<Kokkos::RandomAccess>>;

struct Extents {
  int nx = 0, ny = 0, nz = 0;
  KOKKOS_INLINE_FUNCTION std::int64_t voxels() const {
    return static_cast<std::int64_t>(nx) * ny * nz;
  }
};


// Ring-buffer slot of slice s (s may be negative: slices before the volume, clamped at load).
KOKKOS_INLINE_FUNCTION int ringSlot(int s, int n) { return ((s % n) + n) % n; }

// The part of the grid one team of a scratch force variant owns: the xy tile at (x0, y0) and the
// z slices [zB, zE). League rank -> tile: x fastest, then y, then the z chunk.
struct TeamTile {
  int x0, y0, zB, zE;
};
KOKKOS_INLINE_FUNCTION TeamTile teamTile(int leagueRank, int tx, int ty, int chunk, int tilesX, int tilesY,
                                         int nz) {
  TeamTile t;
  t.x0 = (leagueRank % tilesX) * tx;
  leagueRank /= tilesX;
  t.y0 = (leagueRank % tilesY) * ty;
  t.zB = (leagueRank / tilesY) * chunk;
  t.zE = t.zB + chunk < nz ? t.zB + chunk : nz;
  return t;
}

// Loads slice zz (clamped) of the 3 components of u into S: the tile plus `apron` voxels on each
// side in x and y (ax x ay per component, x fastest), the clamp rule applied to every apron voxel.
// `u` is anything read as u(c, z, y, x): a field, or CandidateU.
template <class Member, class UView>
KOKKOS_INLINE_FUNCTION void loadApronSlice(Member const& team, UView const& u, Extents const& e, float* S, int zz,
                                           int x0, int y0, int apron, int ax, int ay) {
  const int axy = ax * ay;
  const int zc = clampIndex(zz, e.nz);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 3 * axy), [&](const int i) {
    const int c = i / axy;
    const int r = i - c * axy;
    const int iy = r / ax;
    const int ix = r - iy * ax;
    S[i] = u(c, zc, clampIndex(y0 - apron + iy, e.ny), clampIndex(x0 - apron + ix, e.nx));
  });
}

// The iteration's candidate u + dt * rate, read as a field (the update's own expression, UpdateFunctor).
template <class UView>
struct CandidateU {
  UView u, rate;
  float dt;
  KOKKOS_INLINE_FUNCTION float operator()(int c, int z, int y, int x) const { return u(c, z, y, x) + dt * rate(c, z, y, x); }
};

// ---- checks ------------------------------------------------------------------------------------

inline std::string extentsString(std::size_t a, std::size_t b, std::size_t c) {
  return "(" + std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c) + ")";
}

template <class View>
std::string fieldExtents(View const& v) {
  return "(" + std::to_string(v.extent(0)) + "," + std::to_string(v.extent(1)) + "," +
         std::to_string(v.extent(2)) + "," + std::to_string(v.extent(3)) + ")";
}

// The grid the kernels are written for: 3D, every extent >= RegistrationParams::kMinExtent (the
// clamped differences and the z ring buffers need that many slices).
inline void checkGridShape(Index nx, Index ny, Index nz, const char* what) {
  if (nx < RegistrationParams::kMinExtent || ny < RegistrationParams::kMinExtent ||
      nz < RegistrationParams::kMinExtent)
    throw InvalidArgument(std::string(what) + ": a 3D grid with every extent >= " +
                          std::to_string(RegistrationParams::kMinExtent) + " is needed, got " +
                          extentsString(nz, ny, nx));
}

// Extents of a registration grid from the fixed image: checkGridShape, 32-bit indexable.
template <class ImgView>
Extents checkGrid(ImgView const& img, const char* what) {
  if (img.data() == nullptr) throw InvalidArgument(std::string(what) + ": image is not allocated");
  const Index nz = static_cast<Index>(img.extent(0)), ny = static_cast<Index>(img.extent(1)),
              nx = static_cast<Index>(img.extent(2));
  if (nx > INT_MAX / 4 || ny > INT_MAX / 4 || nz > INT_MAX / 4 ||
      nx * ny * nz > static_cast<Index>(INT64_MAX / 8))
    throw InvalidArgument(std::string(what) + ": image extents " +
                          extentsString(img.extent(0), img.extent(1), img.extent(2)) +
                          " are too large for 32-bit indexing");
  checkGridShape(nx, ny, nz, what);
  return Extents{static_cast<int>(nx), static_cast<int>(ny), static_cast<int>(nz)};
}

template <class A, class B>
void checkSameImage(A const& a, B const& b, const char* what, const char* nameA,
                    const char* nameB) {
  if (a.data() == nullptr || b.data() == nullptr)
    throw InvalidArgument(std::string(what) + ": " + nameA + " or " + nameB + " is not allocated");
  for (int r = 0; r < 3; ++r)
    if (a.extent(r) != b.extent(r))
      throw InvalidArgument(std::string(what) + ": " + nameA + " extents " +
                            extentsString(a.extent(0), a.extent(1), a.extent(2)) + " differ from " +
                            nameB + " extents " +
                            extentsString(b.extent(0), b.extent(1), b.extent(2)));
}

// A displacement-like field on the grid `e`: extents (3, nz, ny, nx).
template <class F>
void checkField(F const& f, Extents const& e, const char* what, const char* name) {
  if (f.data() == nullptr)
    throw InvalidArgument(std::string(what) + ": " + name + " is not allocated");
  if (f.extent(0) != 3 || f.extent(1) != static_cast<std::size_t>(e.nz) ||
      f.extent(2) != static_cast<std::size_t>(e.ny) ||
      f.extent(3) != static_cast<std::size_t>(e.nx))
    throw InvalidArgument(std::string(what) + ": " + name + " extents " + fieldExtents(f) +
                          " must be (3," + std::to_string(e.nz) + "," + std::to_string(e.ny) + "," +
                          std::to_string(e.nx) + ") (3 components on the image grid)");
}

// Two fields with equal extents (any number of components).
template <class A, class B>
void checkSameField(A const& a, B const& b, const char* what, const char* nameA,
                    const char* nameB) {
  if (a.data() == nullptr || b.data() == nullptr)
    throw InvalidArgument(std::string(what) + ": " + nameA + " or " + nameB + " is not allocated");
  for (int r = 0; r < 4; ++r)
    if (a.extent(r) != b.extent(r))
      throw InvalidArgument(std::string(what) + ": " + nameA + " extents " + fieldExtents(a) +
                            " differ from " + nameB + " extents " + fieldExtents(b));
}

// Throws unless the memory spans of `a` and `b` are disjoint.
template <class A, class B>
void checkNoOverlap(A const& a, B const& b, const char* what, const char* nameA,
                    const char* nameB) {
  if (spansOverlap(a, b))
    throw InvalidArgument(std::string(what) + ": " + nameA + " and " + nameB + " must not overlap");
}

// ---- energy reduction
// ----------------------------------------------------------------------------

// Partial sums of one force evaluation: E_data, E_reg (double) and min J (float). Every force
// functor reduces one of these per thread (value_type of the functor: init/join below).
struct EnergySums {
  double data;
  double reg;
  float minJ;
};

KOKKOS_INLINE_FUNCTION void energyInit(EnergySums& s) {
  s.data = 0.0;
  s.reg = 0.0;
  s.minJ = Kokkos::reduction_identity<float>::min();
}

// Adds the regulariser term of one voxel: Phi(J) for J > 0; a fold (J <= 0, Phi = +inf) is
// reported through min J and turned into E_reg = +inf by finishSums. A NaN J (non-finite u)
// counts as a fold at -FLT_MAX, so such a field is never accepted.
KOKKOS_INLINE_FUNCTION void energyAddJacobian(EnergySums& s, float J) {
  if (J > 0.0f) s.reg += static_cast<double>(regPhi(J));
  const float lowest = -Kokkos::reduction_identity<float>::min();
  const float j = J >= lowest ? J : lowest;
  if (j < s.minJ) s.minJ = j;
}

KOKKOS_INLINE_FUNCTION void energyAddData(EnergySums& s, float diff) {
  s.data += 0.5 * static_cast<double>(diff) * static_cast<double>(diff);
}

// D and S are EnergySums, volatile-qualified where Kokkos 3.4 joins volatile values.
template <class D, class S>
KOKKOS_INLINE_FUNCTION void energyJoin(D& dst, S const& src) {
  dst.data += src.data;
  dst.reg += src.reg;
  if (src.minJ < dst.minJ) dst.minJ = src.minJ;
}

// Reduction interface of the force functors (value_type EnergySums): written into each functor
// rather than inherited, because Kokkos detects init/join through member pointers of the functor
// type itself.
#define KORTEX_REGISTRATION_ENERGY_REDUCER                                                  \
  using value_type = ::kortex::gpu::registration_detail::EnergySums;                        \
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const {                                   \
    ::kortex::gpu::registration_detail::energyInit(s);                                      \
  }                                                                                         \
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& dst,                    \
                                   const KORTEX_JOIN_VOLATILE value_type& src) const {      \
    ::kortex::gpu::registration_detail::energyJoin(dst, src);                               \
  }

inline RegistrationEnergy finishSums(EnergySums const& s, double lambda) {
  const bool folded = !(s.minJ > 0.0f);
  return finishEnergy(s.data, folded ? std::numeric_limits<double>::infinity() : s.reg, s.minJ,
                      lambda);
}

// ---- per-voxel helpers on global memory
// ------------------------------------------------------------

// G at grid point (x, y, z): g[3i + j] = D_j u_i with the clamp rule.
template <class UView>
KOKKOS_INLINE_FUNCTION void gradientGlobal(UView const& u, Extents const& e, int x, int y, int z,
                                           float* g) {
  const int xm = clampIndex(x - 1, e.nx), xp = clampIndex(x + 1, e.nx);
  const int ym = clampIndex(y - 1, e.ny), yp = clampIndex(y + 1, e.ny);
  const int zm = clampIndex(z - 1, e.nz), zp = clampIndex(z + 1, e.nz);
  for (int i = 0; i < 3; ++i) {
    g[3 * i + 0] = regCentral(u(i, z, y, xm), u(i, z, y, xp));
    g[3 * i + 1] = regCentral(u(i, z, ym, x), u(i, z, yp, x));
    g[3 * i + 2] = regCentral(u(i, zm, y, x), u(i, zp, y, x));
  }
}

// W from a scratch apron: point `idx` of slice S0 (3 components, `axy` floats apart, rows of
// `ax` floats), z neighbours from slices Sm and Sp at the same index; returns J. The apron holds
// u already clamped, so these are the spec's clamped central differences.
KOKKOS_INLINE_FUNCTION float stressScratch(const float* Sm, const float* S0, const float* Sp,
                                           int idx, int ax, int axy, float* w) {
  float g[9];
  for (int c = 0; c < 3; ++c) {
    const float* s = S0 + c * axy + idx;
    g[3 * c + 0] = regCentral(s[-1], s[1]);
    g[3 * c + 1] = regCentral(s[-ax], s[ax]);
    g[3 * c + 2] = regCentral(Sm[c * axy + idx], Sp[c * axy + idx]);
  }
  return regStress(g, w);
}

// Decomposes a flat voxel index, x fastest (I: int where the grid allows it, 32-bit divisions being
// several times cheaper on GPUs than 64-bit ones).
template <class I>
KOKKOS_INLINE_FUNCTION void voxelOf(I i, Extents const& e, int& x, int& y, int& z) {
  x = static_cast<int>(i % e.nx);
  const I t = i / e.nx;
  y = static_cast<int>(t % e.ny);
  z = static_cast<int>(t / e.ny);
}

// Data term of voxel (x, y, z) with displacement (u0, u1, u2): adds 1/2 (T(x-u)-R)^2 to `s`
// and writes (T(x-u)-R) grad T(x-u) to fd (`moving`: the interleaved samples of T).
template <class Img4, class Img>
KOKKOS_INLINE_FUNCTION void dataTerm(Img4 const& moving, Img const& fixed, int x, int y, int z,
                                     float u0, float u1, float u2, EnergySums& s, float* fd) {
  float grad[3];
  const float t = regSampleSmoothGradient(moving, static_cast<float>(x) - u0, static_cast<float>(y) - u1,
                                          static_cast<float>(z) - u2, grad);
  const float diff = t - fixed(z, y, x);
  energyAddData(s, diff);
  fd[0] = diff * grad[0];
  fd[1] = diff * grad[1];
  fd[2] = diff * grad[2];
}

// ---- force variants: configuration and dispatch ------------------------------------------------

// Team tile of the scratch variants: x * y voxels of one xy tile, marching through `chunk`
// consecutive z slices. Zero entries mean "choose" (see chooseForceTile).
struct ForceTile {
  int x = 0;
  int y = 0;
  int chunk = 0;
};

// What one force launch looks like (benchmarks and the paper's Table 1 report it).
struct ForceLaunchInfo {
  RegistrationVariant variant = RegistrationVariant::Naive;
  int tileX = 1, tileY = 1, chunk = 1;  // voxels per team: tileX * tileY * chunk (Naive: 1x1x1)
  int teamSize = 0;                     // threads per team (Naive: 0 = backend's block size)
  std::size_t scratchBytes = 0;         // level-0 scratch per team
  std::size_t scratchMax = 0;           // the backend's level-0 limit
  std::int64_t teams = 0;               // league size (Naive: voxels = work items)
};

inline std::string describe(ForceLaunchInfo const& i) {
  return std::string(toString(i.variant)) + " tile " + std::to_string(i.tileX) + "x" +
         std::to_string(i.tileY) + "x" + std::to_string(i.chunk) + ", team " +
         std::to_string(i.teamSize) + ", scratch " + std::to_string(i.scratchBytes) + "/" +
         std::to_string(i.scratchMax) + " B, teams " + std::to_string(i.teams);
}

// The views of one force evaluation. With `rate` set, the force is evaluated at the iteration's candidate
// u + dt * rate, which is also written to `uOut` (computeForce: formed while the kernel loads u where the
// variant can, else by a separate update first).
template <class Mem>
struct ForceViews {
  RandomSampleImage<Mem> moving;  // T with its gradient (buildSamples)
  RandomImage<Mem> fixed;
  RandomField<Mem> u;
  Field<Mem> f;
  Field<Mem> stress = {};  // TwoPass only: 9 x the grid, kept by the caller across calls
  RandomField<Mem> rate = {};
  float dt = 0.0f;
  Field<Mem> uOut = {};
  KOKKOS_INLINE_FUNCTION bool updating() const { return rate.data() != nullptr; }
};

template <class Mem>
struct SamplesFunctor {
  ConstImageView<Mem> moving;
  SampleImage<Mem> out;
  int nx, ny;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const int x = static_cast<int>(i % nx);
    const std::int64_t r = i / nx;
    const int y = static_cast<int>(r % ny), z = static_cast<int>(r / ny);
    out(z, y, x) = regSampleAt(moving, x, y, z);
  }
};

// The interleaved samples of `moving` (regSampleAt at every voxel): one pass, enqueued on exec.
template <class Exec>
SampleImage<typename Exec::memory_space> buildSamples(Exec const& exec,
                                                       ConstImageView<typename Exec::memory_space> moving) {
  using Mem = typename Exec::memory_space;
  SampleImage<Mem> out(Kokkos::view_alloc(std::string("kortex::registration::samples"), Kokkos::WithoutInitializing),
                       moving.extent(0), moving.extent(1), moving.extent(2));
  SamplesFunctor<Mem> f{moving, out, static_cast<int>(moving.extent(2)), static_cast<int>(moving.extent(1))};
  Kokkos::parallel_for("kortex::registration::samples",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(moving.size())),
                       f);
  return out;
}

// Level-0 scratch bytes of `n` floats as Kokkos lays them out (alignment included).
template <class Exec>
std::size_t scratchFloatBytes(std::size_t n) {
  using ScratchView = Kokkos::View<float*, typename Exec::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return ScratchView::shmem_size(n);
}

// Shortest z chunk a team marches through: the prologue of a chunk (Recompute: 4 extra u slices;
// Reuse: 2 u slices and one W slice) then costs at most ~1/4 of the chunk's loads.
inline constexpr int kMinChunk = 8;

// Default z chunk: the whole column, split so that the league holds about twice as many teams
// as the device runs at once (concurrency / teamSize), but no chunk shorter than kMinChunk.
// Host backends (a few threads) keep whole columns unless the image has fewer xy tiles than
// twice their thread count. Not tuned yet: the chunk length is a parameter of ForceTile.
inline int defaultChunk(Extents const& e, int tileX, int tileY, int concurrency, int teamSize) {
  const std::int64_t tilesXY =
      static_cast<std::int64_t>(ceilDiv(e.nx, tileX)) * ceilDiv(e.ny, tileY);
  const std::int64_t wanted = std::max<std::int64_t>(1, 2 * concurrency / std::max(1, teamSize));
  const std::int64_t chunks = std::max<std::int64_t>(1, (wanted + tilesXY - 1) / tilesXY);
  const int chunk = static_cast<int>((e.nz + chunks - 1) / chunks);
  return std::min(e.nz, std::max(kMinChunk, chunk));
}

// Team size: what the backend recommends for this functor and scratch (ParallelReduce), capped
// at the next power of two of `work` (the most work items one pass of the team offers). Kokkos
// 3.4 Serial answers 1.
template <class Policy, class Functor>
int chooseTeamSize(Policy const& policy, Functor const& f, int work) {
  const int rec = policy.team_size_recommended(f, Kokkos::ParallelReduceTag());
  int cap = 1;
  while (cap < work) cap *= 2;
  return std::max(1, std::min(rec, cap));
}

// Launch of a team variant (Recompute, Reuse): Functor::scratchFloats(tx, ty) floats of level-0
// scratch per team. A requested tile (x, y > 0) is used as is; else `preferred` shrinks (y by
// one, then x halved) until its scratch fits the backend's limit. Zero chunk: defaultChunk.
template <class Functor, class Exec>
ForceLaunchInfo teamLaunchInfo(Exec const& exec, Extents const& e, RegistrationVariant variant,
                               ForceTile const& requested, ForceTile const& preferred) {
  using Policy = Kokkos::TeamPolicy<Exec>;
  const std::size_t maxBytes = kx::scratchSizeMax<Policy>(0);
  auto bytes = [](int tx, int ty) {
    return scratchFloatBytes<Exec>(Functor::scratchFloats(tx, ty));
  };
  ForceLaunchInfo i;
  i.variant = variant;
  i.scratchMax = maxBytes;
  const std::string name = std::string("registration ") + toString(variant) + " force";
  if (requested.x > 0 || requested.y > 0) {
    if (requested.x < 1 || requested.y < 1 || requested.x > 1024 || requested.y > 1024)
      throw InvalidArgument(name + ": tile " + std::to_string(requested.x) + "x" +
                            std::to_string(requested.y) + " must have extents in [1, 1024]");
    if (bytes(requested.x, requested.y) > maxBytes)
      throw Unsupported(name + ": tile " + std::to_string(requested.x) + "x" +
                        std::to_string(requested.y) + " needs " +
                        std::to_string(bytes(requested.x, requested.y)) +
                        " B of team scratch, more than the " + std::to_string(maxBytes) +
                        " B this execution space offers");
    i.tileX = requested.x;
    i.tileY = requested.y;
  } else {
    int tx = preferred.x, ty = preferred.y;
    while (bytes(tx, ty) > maxBytes) {
      if (ty > 1)
        --ty;
      else if (tx > 1)
        tx = (tx + 1) / 2;
      else
        throw Unsupported(name + " needs " + std::to_string(bytes(1, 1)) +
                          " B of team scratch even for a 1x1 tile, more than the " +
                          std::to_string(maxBytes) +
                          " B this execution space offers; use the naive variant");
    }
    i.tileX = tx;
    i.tileY = ty;
  }
  if (requested.chunk < 0)
    throw InvalidArgument(name + ": the z chunk must be >= 1, got " +
                          std::to_string(requested.chunk));
  i.scratchBytes = bytes(i.tileX, i.tileY);
  const Policy probe =
      Policy(exec, 1, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(i.scratchBytes));
  i.teamSize = chooseTeamSize(probe, Functor{}, i.tileX * i.tileY);
  i.chunk = requested.chunk > 0
                ? std::min(requested.chunk, e.nz)
                : defaultChunk(e, i.tileX, i.tileY, kx::concurrency(exec), i.teamSize);
  i.teams = static_cast<std::int64_t>(ceilDiv(e.nx, i.tileX)) * ceilDiv(e.ny, i.tileY) *
            ceilDiv(e.nz, i.chunk);
  if (i.teams > INT_MAX) throw InvalidArgument(name + ": too many teams for one launch");
  return i;
}

// The exact policy a team variant launches with `info` (resource reports: gpu/Resources.hpp
// takes this policy and the functor from forceTeamFunctor).
template <class Exec>
Kokkos::TeamPolicy<Exec> forceTeamPolicy(Exec const& exec, ForceLaunchInfo const& info) {
  return Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(info.teams), info.teamSize)
      .set_scratch_size(0, Kokkos::PerTeam(info.scratchBytes));
}

// A team variant's functor (fields v, e, lambda, tx, ty, chunk, tilesX, tilesY) set up for
// `info`. Closures above 512 B would go to constant memory under a lock on CUDA.
template <class Functor>
Functor forceTeamFunctor(ForceViews<typename Functor::Mem> const& views, Extents const& e,
                         float lambda, ForceLaunchInfo const& info) {
  static_assert(sizeof(Functor) <= 512, "force functor closure above 512 B");
  Functor f;
  f.v = views;
  f.e = e;
  f.lambda = lambda;
  f.tx = info.tileX;
  f.ty = info.tileY;
  f.chunk = info.chunk;
  f.tilesX = ceilDiv(e.nx, info.tileX);
  f.tilesY = ceilDiv(e.ny, info.tileY);
  return f;
}

template <class Functor, class Exec>
EnergySums launchTeams(Exec const& exec, ForceViews<typename Exec::memory_space> const& views,
                       Extents const& e, float lambda, ForceLaunchInfo const& info,
                       const char* label) {
  EnergySums s;
  // lightWeight: functor, reducer and policy together cross 512 B.
  Kokkos::parallel_reduce(label, lightWeight(forceTeamPolicy(exec, info)),
                          forceTeamFunctor<Functor>(views, e, lambda, info), s);
  return s;
}

// Specialised by gpu/registration/detail/ForceNaive.hpp, ...Recompute.hpp, ...Reuse.hpp:
//   static ForceLaunchInfo info(Exec const&, Extents const&, ForceTile const& requested);
//   static EnergySums launch(Exec const&, ForceViews<Mem> const&, Extents const&, float lambda,
//                            ForceLaunchInfo const&);   (fences: returns the sums)
// `requested` with x, y > 0 is used as is (Unsupported if its scratch does not fit); zeros pick
// the variant's default tile shrunk to the backend's scratch limit.
template <RegistrationVariant V, class Exec>
struct ForceKernel;

// ---- Gaussian smoothing
// ------------------------------------------------------------------------------

// Half of the symmetric taps: w[k] = exp(-k^2 / (2 sigma^2)) / sum, k = 0..radius.
struct GaussianTaps {
  float w[RegistrationParams::kMaxRadius + 1];
  int radius;
};

inline GaussianTaps gaussianTaps(float sigma) {
  GaussianTaps t{};
  t.radius = smoothingRadius(sigma);
  if (t.radius < 0 || t.radius > RegistrationParams::kMaxRadius || !(sigma > 0.0f))
    throw InvalidArgument("registration smoothing: sigma must be in (0, " +
                          std::to_string(RegistrationParams::kMaxRadius / 3) + "] voxels, got " +
                          std::to_string(sigma));
  const double s2 = 2.0 * static_cast<double>(sigma) * static_cast<double>(sigma);
  double sum = 0.0;
  for (int k = -t.radius; k <= t.radius; ++k) sum += std::exp(-double(k) * double(k) / s2);
  for (int k = 0; k <= t.radius; ++k)
    t.w[k] = static_cast<float>(std::exp(-double(k) * double(k) / s2) / sum);
  return t;
}

// One pass along Axis (0 = x, 1 = y, 2 = z) over every component: out = sum_k w_|k| in(i+k),
// k = -r..r in that order, terms with i+k outside the grid left out (zero boundary). One team per image row (c, z, y), its threads across x: no 64-bit
// index division per voxel (the flat RangePolicy version spent most of its time there: 2.16 ms
// for the three passes at 240^3, radius 6, on an H200 = 11 % of the copy bandwidth), and
// consecutive threads read consecutive x on every axis.
template <int Axis, class Exec>
struct SmoothFunctor {
  using Mem = typename Exec::memory_space;
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  ConstField<Mem> in;
  Field<Mem> out;
  GaussianTaps taps;
  Extents e;

  KOKKOS_INLINE_FUNCTION void operator()(member_type const& team) const {
    const int row = team.league_rank();
    const int y = row % e.ny;
    const int z = (row / e.ny) % e.nz;
    const int c = row / (e.ny * e.nz);
    const int r = taps.radius;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, e.nx), [&](const int x) {
      float s = 0.0f;
      const int pos = Axis == 0 ? x : (Axis == 1 ? y : z);
      const int len = Axis == 0 ? e.nx : (Axis == 1 ? e.ny : e.nz);
      for (int k = -r; k <= r; ++k) {
        const int q = pos + k;
        if (q < 0 || q >= len) continue;  // zero outside the grid (spec)
        const float w = taps.w[k < 0 ? -k : k];
        float v;
        if (Axis == 0)
          v = in(c, z, y, q);
        else if (Axis == 1)
          v = in(c, z, q, x);
        else
          v = in(c, q, y, x);
        s += w * v;
      }
      out(c, z, y, x) = s;
    });
  }
};

// y and z passes, tiled: a team owns kSmoothTileX consecutive x by kSmoothTileA consecutive
// positions along the pass axis (fixed component and third coordinate), loads the column
// segment with its 2r apron once into level-0 scratch (zero outside the grid, applied while loading), then
// every output reads its 2r+1 taps from scratch: each input value is read from memory once per
// tile instead of 2r+1 times through L2. Same taps, same order as SmoothFunctor.
inline constexpr int kSmoothTileX = 32;
inline constexpr int kSmoothTileA = 32;

template <int Axis, class Exec>
struct SmoothTiledFunctor {
  static_assert(Axis == 1 || Axis == 2, "tiled smoothing runs the y and z passes");
  using Mem = typename Exec::memory_space;
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  using scratch_view = Kokkos::View<float*, typename Exec::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  ConstField<Mem> in;
  Field<Mem> out;
  GaussianTaps taps;
  Extents e;
  int tilesX = 1, tilesA = 1;

  static std::size_t scratchBytes(int radius) {
    return scratch_view::shmem_size(static_cast<std::size_t>(kSmoothTileX) * (kSmoothTileA + 2 * radius));
  }

  KOKKOS_INLINE_FUNCTION void operator()(member_type const& team) const {
    const int nA = Axis == 1 ? e.ny : e.nz;  // extent along the pass
    const int nB = Axis == 1 ? e.nz : e.ny;  // the third coordinate
    int t = team.league_rank();
    const int tx = t % tilesX;
    t /= tilesX;
    const int ta = t % tilesA;
    t /= tilesA;
    const int b = t % nB;
    const int c = t / nB;
    const int x0 = tx * kSmoothTileX, a0 = ta * kSmoothTileA;
    const int r = taps.radius;
    const int rows = kSmoothTileA + 2 * r;
    scratch_view buf(team.team_scratch(0), static_cast<std::size_t>(kSmoothTileX) * rows);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSmoothTileX * rows), [&](const int i) {
      const int lx = i % kSmoothTileX, la = i / kSmoothTileX;
      const int x = clampIndex(x0 + lx, e.nx);  // columns past nx are loaded but never written
      const int a = a0 + la - r;
      buf(i) = (a < 0 || a >= nA) ? 0.0f : (Axis == 1 ? in(c, b, a, x) : in(c, a, b, x));
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSmoothTileX * kSmoothTileA), [&](const int i) {
      const int lx = i % kSmoothTileX, la = i / kSmoothTileX;
      const int x = x0 + lx, a = a0 + la;
      if (x >= e.nx || a >= nA) return;
      float s = 0.0f;
      for (int k = -r; k <= r; ++k) s += taps.w[k < 0 ? -k : k] * buf((la + r + k) * kSmoothTileX + lx);
      if (Axis == 1)
        out(c, b, a, x) = s;
      else
        out(c, a, b, x) = s;
    });
  }
};

template <int Axis, class Exec>
void smoothTiled(Exec const& exec, ConstField<typename Exec::memory_space> in, Field<typename Exec::memory_space> out,
                 GaussianTaps const& taps, Extents const& e) {
  using F = SmoothTiledFunctor<Axis, Exec>;
  using Policy = Kokkos::TeamPolicy<Exec>;
  const int nA = Axis == 1 ? e.ny : e.nz, nB = Axis == 1 ? e.nz : e.ny;
  F f{in, out, taps, e, (e.nx + kSmoothTileX - 1) / kSmoothTileX, (nA + kSmoothTileA - 1) / kSmoothTileA};
  const std::int64_t league = static_cast<std::int64_t>(in.extent(0)) * nB * f.tilesA * f.tilesX;
  const std::size_t bytes = F::scratchBytes(taps.radius);
  if (league > INT_MAX) throw InvalidArgument("registration smoothing: too many tiles for one launch");
  if (bytes > kx::scratchSizeMax<Policy>(0))
    throw Unsupported("registration smoothing: a " + std::to_string(kSmoothTileX) + "x" +
                      std::to_string(kSmoothTileA) + " tile with radius " + std::to_string(taps.radius) +
                      " needs " + std::to_string(bytes) + " B of team scratch, more than this backend offers");
  Policy policy = [&] {
    if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible)
      return Policy(exec, static_cast<int>(league), Kokkos::AUTO);
    else  // one thread per output of a 32 x 32 tile would be 1024: 256 threads, 4 outputs each (not tuned)
      return Policy(exec, static_cast<int>(league), 256);
  }();
  Kokkos::parallel_for(Axis == 1 ? "kortex::Registration::smooth::y" : "kortex::Registration::smooth::z",
                       policy.set_scratch_size(0, Kokkos::PerTeam(bytes)), f);
}

// ---- smoothing with a compile-time radius R (1..kMaxFixedSmoothRadius; larger radii run the kernels
// above). The same taps added in the same order (k = -R..R, from 0) as SmoothFunctor, so the same
// bits; a term outside the grid is fma(w, 0, s) = s (s is never -0: it starts at +0). What changes is
// the instruction count: Nsight Compute on an H200 put the run-time-radius passes at 88-90 % issue-slot
// use and 12 % of DRAM bandwidth (0.52-0.56 ms each at 240^3 x 3, radius 6): per tap an index
// computation, a bounds check and the weight read from a dynamically indexed array. Here the weights
// are registers, the loops unrolled, no bounds check but at the loads, and x and y share one kernel.
inline constexpr int kMaxFixedSmoothRadius = 8;
// y and z passes: outputs per thread, a run along the pass axis (each input it reads is added to the
// up to 2R + 1 outputs of the run whose windows hold it; (run + 2R) / run reads per output).
inline constexpr int kSmoothRun = 16;

template <int R>
struct FixedTaps {
  float w[R + 1];
  KOKKOS_INLINE_FUNCTION explicit FixedTaps(GaussianTaps const& t) {
    KORTEX_UNROLL
    for (int k = 0; k <= R; ++k) w[k] = t.w[k];
  }
  KOKKOS_INLINE_FUNCTION float operator()(int k) const { return w[k < 0 ? -k : k]; }
};

// x and y passes in one kernel: a team owns a tile of kSmoothTileXY_X x kSmoothTileXY_Y outputs of one
// (component, z) plane. It loads the tile grown by R on every side into scratch (zero outside the grid,
// coalesced rows, indices within the plane), x-smooths every row of it into a second buffer
// (kSmoothXRun consecutive outputs per thread from kSmoothXRun + 2R values read once into registers, the
// taps in order), then y-smooths as runs of kSmoothRun outputs per thread (as SmoothZRunFixedFunctor along
// z), writing coalesced rows. The same terms in the same order as the separate passes: the same bits, and
// one read and one write of the field fewer. Scratch rows have odd pitches: a warp's x runs (8 per row,
// 4 rows) then fall on 32 distinct banks.
inline constexpr int kSmoothTileXY_X = 32;
inline constexpr int kSmoothTileXY_Y = 64;  // 32 x 64 / kSmoothRun = 128 y-runs: one per thread of a 128-team
inline constexpr int kSmoothXRun = 4;       // x outputs per thread: 4 + 2R scratch reads instead of 4 (2R + 1)

template <int R, class Exec>
struct SmoothXYFixedFunctor {
  static_assert(kSmoothTileXY_Y % kSmoothRun == 0, "whole runs per tile column");
  static_assert(kSmoothTileXY_X % kSmoothXRun == 0, "whole x runs per tile row");
  using Mem = typename Exec::memory_space;
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  using scratch_view = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int TX = kSmoothTileXY_X, TY = kSmoothTileXY_Y;
  static constexpr int LW = TX + 2 * R, LH = TY + 2 * R;  // loaded tile
  static constexpr int LP = LW | 1, XP = TX + 1;          // odd pitches
  ConstField<Mem> in;
  Field<Mem> out;
  GaussianTaps taps;
  Extents e;
  int tilesX = 1, tilesY = 1;

  static std::size_t scratchBytes() {
    return scratch_view::shmem_size(static_cast<std::size_t>(LH) * LP) + scratch_view::shmem_size(static_cast<std::size_t>(LH) * XP);
  }

  KOKKOS_INLINE_FUNCTION void operator()(member_type const& team) const {
    scratch_view L(team.team_scratch(0), static_cast<std::size_t>(LH) * LP);
    scratch_view X(team.team_scratch(0), static_cast<std::size_t>(LH) * XP);
    int t = team.league_rank();
    const int x0 = (t % tilesX) * TX;
    t /= tilesX;
    const int y0 = (t % tilesY) * TY;
    t /= tilesY;
    const int z = t % e.nz, c = t / e.nz;
    // The plane's samples by 32-bit offsets (smoothXYFixed checks that a plane has fewer than 2^31).
    const float* const plane = &in(c, z, 0, 0);
    const int rowStride = static_cast<int>(in.stride(2));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, LH * LW), [&](const int i) {
      const int ly = i / LW, lx = i - ly * LW;
      const int y = y0 - R + ly, x = x0 - R + lx;
      L(ly * LP + lx) = (y >= 0 && y < e.ny && x >= 0 && x < e.nx) ? plane[y * rowStride + x] : 0.0f;
    });
    team.team_barrier();
    const FixedTaps<R> w(taps);
    constexpr int XR = kSmoothXRun, runsPerRow = TX / XR;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, LH * runsPerRow), [&](const int i) {
      const int ly = i / runsPerRow, lx = (i - ly * runsPerRow) * XR;
      const float* const row = &L(ly * LP + lx);  // output lx + m has taps row[m .. m + 2R]
      float v[XR + 2 * R];
      KORTEX_UNROLL
      for (int j = 0; j < XR + 2 * R; ++j) v[j] = row[j];
      KORTEX_UNROLL
      for (int m = 0; m < XR; ++m) {
        float s = 0.0f;
        KORTEX_UNROLL
        for (int k = -R; k <= R; ++k) s += w(k) * v[m + k + R];
        X(ly * XP + lx + m) = s;
      }
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, TX * (TY / kSmoothRun)), [&](const int i) {
      const int run = i / TX, lx = i - run * TX;
      const int x = x0 + lx, a0 = run * kSmoothRun;
      if (x >= e.nx || y0 + a0 >= e.ny) return;
      float s[kSmoothRun];
      KORTEX_UNROLL
      for (int m = 0; m < kSmoothRun; ++m) s[m] = 0.0f;
      KORTEX_UNROLL
      for (int j = 0; j < kSmoothRun + 2 * R; ++j) {
        const float v = X((a0 + j) * XP + lx);  // row y0 + a0 - R + j (0 outside the grid)
        KORTEX_UNROLL
        for (int m = 0; m < kSmoothRun; ++m) {
          const int k = j - m - R;
          if (k >= -R && k <= R) s[m] += w(k) * v;
        }
      }
      KORTEX_UNROLL
      for (int m = 0; m < kSmoothRun; ++m)
        if (y0 + a0 + m < e.ny) out(c, z, y0 + a0 + m, x) = s[m];
    });
  }
};

// z sums of one run of N outputs: s[m] = sum_k w(k) in(a0 + m + k) for m < N, k = -R..R in order (0
// outside [0, nz)), from the column at `src` with plane stride `si`; each input read once.
template <int R, int N = kSmoothRun>
KOKKOS_INLINE_FUNCTION void zRunSums(const float* src, std::ptrdiff_t si, int a0, int nz, FixedTaps<R> const& w,
                                     float* s) {
  KORTEX_UNROLL
  for (int m = 0; m < N; ++m) s[m] = 0.0f;
  KORTEX_UNROLL
  for (int j = 0; j < N + 2 * R; ++j) {
    const int a = a0 - R + j;
    const float v = (a >= 0 && a < nz) ? readOnly(src + a * si) : 0.0f;
    KORTEX_UNROLL
    for (int m = 0; m < N; ++m) {
      const int k = j - m - R;  // output a0 + m's tap; its terms arrive in increasing k
      if (k >= -R && k <= R) s[m] += w(k) * v;
    }
  }
}

// z pass: one thread per kSmoothRun consecutive outputs along z at one (c, y, x); consecutive threads
// own consecutive x (coalesced loads and stores).
template <int R, class Exec>
struct SmoothZRunFixedFunctor {
  using Mem = typename Exec::memory_space;
  ConstField<Mem> in;
  Field<Mem> out;
  GaussianTaps taps;
  Extents e;
  int runs = 1;  // runs per column

  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const int x = i % e.nx;
    int t = i / e.nx;
    const int a0 = (t % runs) * kSmoothRun;
    t /= runs;
    const int y = t % e.ny;
    const int c = t / e.ny;
    float s[kSmoothRun];
    zRunSums<R>(&in(c, 0, y, x), static_cast<std::ptrdiff_t>(in.stride(1)), a0, e.nz, FixedTaps<R>(taps), s);
    float* const dst = &out(c, 0, y, x);
    const std::ptrdiff_t so = static_cast<std::ptrdiff_t>(out.stride(1));
    KORTEX_UNROLL
    for (int m = 0; m < kSmoothRun; ++m)
      if (a0 + m < e.nz) dst[(a0 + m) * so] = s[m];
  }
};

template <int R, class Exec>
void smoothZRunsFixed(Exec const& exec, ConstField<typename Exec::memory_space> in, Field<typename Exec::memory_space> out,
                      GaussianTaps const& taps, Extents const& e) {
  const int runs = (e.nz + kSmoothRun - 1) / kSmoothRun;
  const std::int64_t n = static_cast<std::int64_t>(in.extent(0)) * e.ny * runs * e.nx;
  if (n > INT_MAX) throw InvalidArgument("registration smoothing: too many columns for one launch");
  Kokkos::parallel_for("kortex::Registration::smooth::z",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, static_cast<int>(n)),
                       SmoothZRunFixedFunctor<R, Exec>{in, out, taps, e, runs});
}

// in -> tmp, the x and y passes in one kernel. False, nothing run, when the backend's team scratch cannot
// hold the x-y tile or a plane needs 64-bit offsets (the caller then runs the run-time-radius kernels).
template <int R, class Exec>
bool smoothXYFixed(Exec const& exec, ConstField<typename Exec::memory_space> in, Field<typename Exec::memory_space> tmp,
                   GaussianTaps const& taps, Extents const& e) {
  using F = SmoothXYFixedFunctor<R, Exec>;
  using Policy = Kokkos::TeamPolicy<Exec>;
  if (F::scratchBytes() > kx::scratchSizeMax<Policy>(0)) return false;
  if (static_cast<std::int64_t>(e.ny) * static_cast<std::int64_t>(in.stride(2)) > INT_MAX) return false;
  const int tilesX = (e.nx + F::TX - 1) / F::TX, tilesY = (e.ny + F::TY - 1) / F::TY;
  const std::int64_t league = static_cast<std::int64_t>(in.extent(0)) * e.nz * tilesY * tilesX;
  if (league > INT_MAX) throw InvalidArgument("registration smoothing: too many tiles for one launch");
  Policy policy = [&] {
    if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible)
      return Policy(exec, static_cast<int>(league), Kokkos::AUTO);
    else  // one y-run per thread (not tuned)
      return Policy(exec, static_cast<int>(league), F::TX * (F::TY / kSmoothRun));
  }();
  Kokkos::parallel_for("kortex::Registration::smooth::xy", policy.set_scratch_size(0, Kokkos::PerTeam(F::scratchBytes())),
                       F{in, tmp, taps, e, tilesX, tilesY});
  return true;
}

// in -> tmp (x and y), tmp -> out (z); false as smoothXYFixed.
template <int R, class Exec>
bool smoothFixed(Exec const& exec, ConstField<typename Exec::memory_space> in, Field<typename Exec::memory_space> out,
                 Field<typename Exec::memory_space> tmp, GaussianTaps const& taps, Extents const& e) {
  if (!smoothXYFixed<R>(exec, in, tmp, taps, e)) return false;
  smoothZRunsFixed<R>(exec, ConstField<typename Exec::memory_space>(tmp), out, taps, e);
  return true;
}

// Calls run(std::integral_constant<int, R>{}) for the compile-time radius R == radius (1..kMaxFixedSmoothRadius)
// and returns what it returns (whether it ran); false for other radii.
template <class Run>
bool withFixedRadius(int radius, Run&& run) {
  static_assert(kMaxFixedSmoothRadius == 8, "update the radius switch");
  switch (radius) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    case 8: return run(std::integral_constant<int, 8>{});
    default: return false;
  }
}

// The result in `out`, `tmp` overwritten. Radius <= kMaxFixedSmoothRadius: smoothFixed; else (or with
// `runTimeRadius`, which tests use to compare the two) in -> out (x), out -> tmp (y), tmp -> out (z).
template <class Exec>
void smooth(Exec const& exec, ConstField<typename Exec::memory_space> in,
            Field<typename Exec::memory_space> out, Field<typename Exec::memory_space> tmp,
            GaussianTaps const& taps, bool runTimeRadius = false) {
  const Extents e{static_cast<int>(in.extent(3)), static_cast<int>(in.extent(2)),
                  static_cast<int>(in.extent(1))};
  const std::int64_t rows = static_cast<std::int64_t>(in.extent(0)) * e.nz * e.ny;
  if (rows > INT_MAX) throw InvalidArgument("registration smoothing: too many image rows for one launch");
  // Device team size for the x pass: a warp multiple covering a typical row (<= 256 voxels) in
  // one or two passes (not tuned); host spaces: AUTO (Kokkos 3.4 Serial allows only 1).
  const int teamSize = e.nx > 128 ? 128 : 64;
  Kokkos::TeamPolicy<Exec> policy = [&] {
    if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible)
      return Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(rows), Kokkos::AUTO);
    else
      return Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(rows), teamSize);
  }();
  if (!runTimeRadius && withFixedRadius(taps.radius, [&](auto radius) {
        return smoothFixed<decltype(radius)::value>(exec, in, out, tmp, taps, e);
      }))
    return;
  Kokkos::parallel_for("kortex::Registration::smooth::x", policy, SmoothFunctor<0, Exec>{in, out, taps, e});
  smoothTiled<1>(exec, ConstField<typename Exec::memory_space>(out), tmp, taps, e);
  smoothTiled<2>(exec, ConstField<typename Exec::memory_space>(tmp), out, taps, e);
}

// ---- rate, update, Jacobian
// ------------------------------------------------------------------

// rate = v - H v at one voxel (upwind, core/Registration.hpp) from its velocity vv, written to `rate`;
// returns the voxel's step norm. Only the neighbour the upwind rule uses is read (backward for v_j > 0,
// else forward; v_j == 0 gives 0 whichever): regUpwind gets it as both neighbours, 3 reads per
// component instead of 6.
template <class UView, class RView>
KOKKOS_INLINE_FUNCTION float rateAt(UView const& u, RView const& rate, Extents const& e, int x, int y, int z,
                                    const float* vv) {
  const int xn = clampIndex(vv[0] > 0.0f ? x - 1 : x + 1, e.nx);
  const int yn = clampIndex(vv[1] > 0.0f ? y - 1 : y + 1, e.ny);
  const int zn = clampIndex(vv[2] > 0.0f ? z - 1 : z + 1, e.nz);
  float h[9];
  for (int c = 0; c < 3; ++c) {
    const float u0 = u(c, z, y, x), ux = u(c, z, y, xn), uy = u(c, z, yn, x), uz = u(c, zn, y, x);
    h[3 * c + 0] = regUpwind(vv[0], ux, u0, ux);
    h[3 * c + 1] = regUpwind(vv[1], uy, u0, uy);
    h[3 * c + 2] = regUpwind(vv[2], uz, u0, uz);
  }
  float r[3];
  regRate(h, vv, r);
  rate(0, z, y, x) = r[0];
  rate(1, z, y, x) = r[1];
  rate(2, z, y, x) = r[2];
  return regStepNorm(r, vv);
}

// The step norms' maximum as a reduction (value_type, init, join).
#define KORTEX_REGISTRATION_MAX_REDUCER                                                                  \
  using value_type = float;                                                                             \
  KOKKOS_INLINE_FUNCTION void init(float& m) const { m = Kokkos::reduction_identity<float>::max(); }   \
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE float& dst, const KORTEX_JOIN_VOLATILE float& src) const { \
    if (src > dst) dst = src;                                                                           \
  }

template <class Mem, class I>
struct RateFunctor {
  RandomField<Mem> u;
  ConstField<Mem> v;
  Field<Mem> rate;
  Extents e;

  KORTEX_REGISTRATION_MAX_REDUCER

  KOKKOS_INLINE_FUNCTION void operator()(I i, float& mx) const {
    int x, y, z;
    voxelOf(i, e, x, y, z);
    const float vv[3] = {v(0, z, y, x), v(1, z, y, x), v(2, z, y, x)};
    const float norm = rateAt(u, rate, e, x, y, z, vv);
    if (norm > mx) mx = norm;
  }
};

// rate = v - H v (upwind, core/Registration.hpp); returns the step norm m (fences).
template <class Exec>
double rate(Exec const& exec, ConstField<typename Exec::memory_space> u,
            ConstField<typename Exec::memory_space> v, Field<typename Exec::memory_space> r,
            Extents const& e) {
  using Mem = typename Exec::memory_space;
  float mx = 0.0f;  // the max of the same per-voxel norms whatever the index type or order: the same result
  if (e.voxels() <= INT_MAX)
    reduceVoxels("kortex::Registration::rate", exec, static_cast<int>(e.voxels()), RateFunctor<Mem, int>{u, v, r, e}, mx);
  else
    Kokkos::parallel_reduce("kortex::Registration::rate",
                            Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, e.voxels()),
                            RateFunctor<Mem, std::int64_t>{u, v, r, e}, mx);
  return static_cast<double>(mx);
}

// The smoothing's z pass and the rate in one kernel (radius 1..kMaxFixedSmoothRadius): one thread per
// run of N voxels along z at one (y, x), the three components' z sums of the x-y smoothed force
// (zRunSums: v exactly as SmoothZRunFixedFunctor writes it), then the rate at each voxel of the run
// (rateAt) and the max of their step norms. v is never stored: one write and one read of the field
// fewer than the two kernels. Consecutive threads own consecutive x. The run length trades registers
// (3N sums) against re-reads ((N + 2R) / N loads per output); kSmoothRateRun is the shipped one.
// Measured on an H200 at 240^3, radius 6 (`kortex bench register --only "Fig2 240^3"`, the split's two
// smoothing + rate columns; bench/results/kernels43_session57_nvidia-h200.md): runs of 16 (128 registers)
// 0.672 / 0.664 ms, runs of 8 (96 registers) 0.700 / 0.688 ms in two builds.
inline constexpr int kSmoothRateRun = 16;

template <int R, int N, class Exec>
struct SmoothZRateFixedFunctor {
  using Mem = typename Exec::memory_space;
  KORTEX_REGISTRATION_MAX_REDUCER
  ConstField<Mem> in;  // the force smoothed along x and y
  RandomField<Mem> u;
  Field<Mem> rate;
  GaussianTaps taps;
  Extents e;
  int runs = 1;  // runs per column

  KOKKOS_INLINE_FUNCTION void operator()(const int i, float& mx) const {
    const int x = i % e.nx;
    const int t = i / e.nx;
    const int a0 = (t % runs) * N;
    const int y = t / runs;
    const FixedTaps<R> w(taps);
    const std::ptrdiff_t si = static_cast<std::ptrdiff_t>(in.stride(1));
    float s[3][N];
    KORTEX_UNROLL
    for (int c = 0; c < 3; ++c) zRunSums<R, N>(&in(c, 0, y, x), si, a0, e.nz, w, s[c]);
    KORTEX_UNROLL
    for (int m = 0; m < N; ++m) {
      if (a0 + m >= e.nz) break;
      const float vv[3] = {s[0][m], s[1][m], s[2][m]};
      const float norm = rateAt(u, rate, e, x, y, a0 + m, vv);
      if (norm > mx) mx = norm;
    }
  }
};

template <int R, int N, class Exec>
double smoothZRateFixed(Exec const& exec, ConstField<typename Exec::memory_space> in, ConstField<typename Exec::memory_space> u,
                        Field<typename Exec::memory_space> rate, GaussianTaps const& taps, Extents const& e) {
  const int runs = (e.nz + N - 1) / N;
  const std::int64_t n = static_cast<std::int64_t>(e.ny) * runs * e.nx;
  if (n > INT_MAX) throw InvalidArgument("registration smoothing and rate: too many columns for one launch");
  float mx = 0.0f;
  reduceVoxels("kortex::Registration::smooth_z_rate", exec, static_cast<int>(n),
               SmoothZRateFixedFunctor<R, N, Exec>{in, u, rate, taps, e, runs}, mx);
  return static_cast<double>(mx);
}

// The iteration's velocity and rate: v = G_sigma * f, rate = v - H v, returns the step norm m (fences).
// Radius <= kMaxFixedSmoothRadius: f -> tmp (x and y), then z and the rate in one kernel (v not
// stored); else smooth (f -> v) and rate (v -> rateOut). The same v, rate and m either way. `rateOut` may
// be `f` (f is not read after the x-y pass); v is a workspace.
// N: the fused kernel's run length (kSmoothRateRun; the benchmark times others).
template <class Exec, int N = kSmoothRateRun>
double smoothRate(Exec const& exec, ConstField<typename Exec::memory_space> f, ConstField<typename Exec::memory_space> u,
                  Field<typename Exec::memory_space> v, Field<typename Exec::memory_space> rateOut,
                  Field<typename Exec::memory_space> tmp, GaussianTaps const& taps, Extents const& e) {
  using CF = ConstField<typename Exec::memory_space>;
  double m = 0.0;
  if (withFixedRadius(taps.radius, [&](auto radius) {
        constexpr int R = decltype(radius)::value;
        if (!smoothXYFixed<R>(exec, f, tmp, taps, e)) return false;
        m = smoothZRateFixed<R, N>(exec, CF(tmp), u, rateOut, taps, e);
        return true;
      }))
    return m;
  smooth(exec, f, v, tmp, taps);
  return rate(exec, u, CF(v), rateOut, e);
}

template <class Mem>
struct UpdateFunctor {
  const float* u;
  const float* rate;
  float* out;
  float dt;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const { out[i] = u[i] + dt * rate[i]; }
};

// The same update four floats per thread (16-byte loads and stores: a quarter of the memory
// instructions); the same per-element arithmetic, so the same bits.
struct alignas(16) Float4 {
  float x, y, z, w;
};

template <class Mem>
struct UpdateFunctor4 {
  const Float4* u;
  const Float4* rate;
  Float4* out;
  float dt;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const Float4 a = u[i], b = rate[i];
    Float4 o;
    o.x = a.x + dt * b.x;
    o.y = a.y + dt * b.y;
    o.z = a.z + dt * b.z;
    o.w = a.w + dt * b.w;
    out[i] = o;
  }
};

template <class Exec>
void update(Exec const& exec, ConstField<typename Exec::memory_space> u,
            ConstField<typename Exec::memory_space> r, float dt,
            Field<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  const std::int64_t n = static_cast<std::int64_t>(u.span());
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % alignof(Float4) == 0; };
  if (n % 4 == 0 && n / 4 <= INT_MAX && aligned(u.data()) && aligned(r.data()) && aligned(out.data())) {
    Kokkos::parallel_for("kortex::Registration::update",
                         Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, static_cast<int>(n / 4)),
                         UpdateFunctor4<Mem>{reinterpret_cast<const Float4*>(u.data()),
                                             reinterpret_cast<const Float4*>(r.data()),
                                             reinterpret_cast<Float4*>(out.data()), dt});
    return;
  }
  Kokkos::parallel_for("kortex::Registration::update",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                       UpdateFunctor<Mem>{u.data(), r.data(), out.data(), dt});
}

template <class Mem>
struct JacobianFunctor {
  RandomField<Mem> u;
  ImageView<Mem> out;
  Extents e;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    int x, y, z;
    voxelOf(i, e, x, y, z);
    float g[9];
    gradientGlobal(u, e, x, y, z, g);
    out(z, y, x) = regDeterminant(g);
  }
};

}  // namespace kortex::gpu::registration_detail

