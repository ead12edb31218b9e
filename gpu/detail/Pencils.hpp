// The ScratchPencils spectral solve (SpectralVariant::ScratchPencils, core/Fluid.hpp): a real 3D
// field of extents (batch, nz, ny, nx), LayoutRight, through
//   forward R2C FFT -> a per-frequency multiplier on the (batch) coefficients -> inverse C2R FFT
// in three passes over the spectrum (batch, nz, ny, nx/2 + 1), each transform a mixed-radix
// Stockham FFT of team-scratch pencils (radices 4, 2, 3, 5, 7; twiddles w[t] = exp(-2 pi i t / n)
// rounded from double):
//   SlabForward  - a team per (component, z) slab: the x rows two at a time as one complex FFT
//                  (a + i b; separated by Hermitian symmetry), written to the spectrum; then, after
//                  a team barrier, the y columns of the slab read back (the slab's lines are still
//                  in L2) and transformed in place.
//   ZMultiply    - a team per (ky, block of kx): the z pencils of every component, forward, the
//                  multiplier, inverse, in place.
//   SlabInverse  - SlabForward backwards: y columns, barrier, x rows two at a time (Hermitian
//                  extension of each half row, imaginary parts of DC and Nyquist dropped).
// Unnormalised both ways, as the library path (gpu/detail/Spectral.hpp): the multiplier scales.
// Lengths whose prime factors are all <= 7 only (pencilRadices); the owner falls back to the
// library otherwise.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <string>

#include "core/Errors.hpp"

namespace kortex::gpu::detail {

using PencilComplex = Kokkos::complex<float>;

inline constexpr int kPencilMaxStages = 24;  // 4^24 > 2^31: every int length

// The Stockham stages of a length-n transform: radix 4 while 4 divides n, then 2, 3, 5, 7.
struct PencilRadices {
  int count = 0;  // 0: n has a prime factor above 7
  int r[kPencilMaxStages] = {};
};
inline PencilRadices pencilRadices(int n) {
  PencilRadices p;
  if (n < 1) return p;
  while (n % 4 == 0) p.r[p.count++] = 4, n /= 4;
  for (int f : {2, 3, 5, 7})
    while (n % f == 0) p.r[p.count++] = f, n /= f;
  if (n != 1) p.count = 0;
  return p;
}

// One transform length on the device: its stages and twiddle table.
template <class Mem>
struct PencilLength {
  int n = 0;
  PencilRadices radices;
  Kokkos::View<const PencilComplex*, Mem> twiddle;
};

template <class Mem>
PencilLength<Mem> makePencilLength(int n) {
  PencilLength<Mem> L;
  L.n = n;
  L.radices = pencilRadices(n);
  if (L.radices.count == 0 && n != 1) throw InvalidArgument("pencil FFT: length " + std::to_string(n) + " has a prime factor above 7");
  Kokkos::View<PencilComplex*, Mem> w("kortex::pencils::twiddle", n);
  auto h = Kokkos::create_mirror_view(w);
  const double twoPi = 6.283185307179586476925286766559;
  for (int t = 0; t < n; ++t)
    h(t) = PencilComplex(static_cast<float>(std::cos(twoPi * t / n)), static_cast<float>(-std::sin(twoPi * t / n)));
  Kokkos::deep_copy(w, h);
  L.twiddle = w;
  return L;
}

// A set of pencils in team scratch: element e of pencil p at data[e * se + p * sp].
struct PencilSet {
  PencilComplex* data;
  int se, sp;
  KOKKOS_INLINE_FUNCTION PencilComplex& operator()(int e, int p) const { return data[e * se + p * sp]; }
};

KOKKOS_INLINE_FUNCTION PencilComplex pencilTimesI(PencilComplex a) { return PencilComplex(-a.imag(), a.real()); }

// exp(s 2 pi i t / n) with s = -1 forward, +1 inverse.
template <class Mem>
KOKKOS_INLINE_FUNCTION PencilComplex pencilTwiddle(PencilLength<Mem> const& L, int t, bool inverse) {
  const PencilComplex w = L.twiddle(t);
  return inverse ? PencilComplex(w.real(), -w.imag()) : w;
}

// In-register DFT of R points: U[a] = sum_b u[b] exp(s 2 pi i a b / R).
template <int R, class Mem>
KOKKOS_INLINE_FUNCTION void pencilDft(PencilComplex* u, PencilLength<Mem> const& L, bool inverse) {
  if constexpr (R == 2) {
    const PencilComplex a = u[0], b = u[1];
    u[0] = a + b;
    u[1] = a - b;
  } else if constexpr (R == 4) {
    const PencilComplex a = u[0] + u[2], b = u[0] - u[2], c = u[1] + u[3];
    const PencilComplex d = inverse ? pencilTimesI(u[1] - u[3]) : -pencilTimesI(u[1] - u[3]);  // s i (u1 - u3)
    u[0] = a + c;
    u[1] = b + d;
    u[2] = a - c;
    u[3] = b - d;
  } else {
    PencilComplex U[R];
    const int step = L.n / R;
    for (int a = 0; a < R; ++a) {
      U[a] = u[0];
      for (int b = 1; b < R; ++b) U[a] += u[b] * pencilTwiddle(L, ((a * b) % R) * step, inverse);
    }
    for (int a = 0; a < R; ++a) u[a] = U[a];
  }
}

// One radix-R Stockham stage over `pencils` pencils, src -> dst; `span` is the product of the
// radices before it. Butterfly i of a pencil reads i + q n / R, twiddles by q (i mod span) and
// writes (i - i mod span) R + i mod span + q span. pencilFastest: neighbouring threads take the
// same butterfly of neighbouring pencils (pencils interleaved in scratch), else neighbouring
// butterflies of one pencil.
template <int R, class Team, class Mem>
KOKKOS_INLINE_FUNCTION void pencilStage(Team const& team, PencilLength<Mem> const& L, int span, int pencils,
                                        bool pencilFastest, bool inverse, PencilSet src, PencilSet dst) {
  const int m = L.n / R, stride = L.n / (span * R);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, pencils * m), [&](int t) {
    const int p = pencilFastest ? t % pencils : t / m, i = pencilFastest ? t / pencils : t % m;
    const int k = i % span;
    PencilComplex u[R];
    for (int q = 0; q < R; ++q) u[q] = src(i + q * m, p);
    for (int q = 1; q < R; ++q) u[q] *= pencilTwiddle(L, q * k * stride, inverse);
    pencilDft<R>(u, L, inverse);
    const int j = (i - k) * R + k;
    for (int q = 0; q < R; ++q) dst(j + q * span, p) = u[q];
  });
  team.team_barrier();
}

// The whole transform of the pencils in `a` (loaded, barrier passed), ping-ponging with `b`.
// Returns the set that holds the result.
template <class Team, class Mem>
KOKKOS_INLINE_FUNCTION PencilSet pencilTransform(Team const& team, PencilLength<Mem> const& L, int pencils,
                                                 bool pencilFastest, bool inverse, PencilSet a, PencilSet b) {
  int span = 1;
  for (int s = 0; s < L.radices.count; ++s) {
    const int R = L.radices.r[s];
    switch (R) {
      case 4: pencilStage<4>(team, L, span, pencils, pencilFastest, inverse, a, b); break;
      case 2: pencilStage<2>(team, L, span, pencils, pencilFastest, inverse, a, b); break;
      case 3: pencilStage<3>(team, L, span, pencils, pencilFastest, inverse, a, b); break;
      case 5: pencilStage<5>(team, L, span, pencils, pencilFastest, inverse, a, b); break;
      default: pencilStage<7>(team, L, span, pencils, pencilFastest, inverse, a, b); break;
    }
    span *= R;
    const PencilSet t = a;
    a = b;
    b = t;
  }
  return a;
}

// Pencils per chunk of each pass (scratch: two sets of complex floats per chunk).
struct PencilChunks {
  int rowPairs = 0;   // x rows (two per complex pencil) per chunk, SlabForward / SlabInverse
  int columns = 0;    // y columns per chunk, SlabForward / SlabInverse
  int zColumns = 0;   // (ky, kx) columns per team (every component), ZMultiply
  int teamSize = 0;   // 0: Kokkos::AUTO
};

template <class Exec>
using PencilScratch = Kokkos::View<PencilComplex*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;

// Scratch complexes of one slab team: two sets of the larger of its row and column chunks.
KOKKOS_INLINE_FUNCTION int slabScratchComplexes(PencilChunks const& c, int ny, int nx) {
  const int rows = c.rowPairs * (nx + 1), cols = c.columns * ny;
  return 2 * (rows > cols ? rows : cols);
}
KOKKOS_INLINE_FUNCTION int zScratchComplexes(PencilChunks const& c, int batch, int nz) { return 2 * batch * c.zColumns * nz; }

// SlabForward: in (batch, nz, ny, nx) real -> spec (batch, nz, ny, nh) with x and y transformed.
template <class Exec>
struct PencilSlabForward {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  const float* in;
  PencilComplex* spec;
  int ny, nx, nh;
  PencilLength<Mem> X, Y;
  PencilChunks chunks;

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const long slab = team.league_rank();
    const float* rows = in + slab * long(ny) * nx;
    PencilComplex* s = spec + slab * long(ny) * nh;
    const int n = slabScratchComplexes(chunks, ny, nx) / 2;
    PencilScratch<Exec> buf(team.team_scratch(0), 2 * n);
    const int pairs = (ny + 1) / 2;
    for (int pair0 = 0; pair0 < pairs; pair0 += chunks.rowPairs) {
      const int np = pairs - pair0 < chunks.rowPairs ? pairs - pair0 : chunks.rowPairs;
      const PencilSet a{buf.data(), 1, nx + 1}, b{buf.data() + n, 1, nx + 1};
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np * nx), [&](int t) {
        const int p = t / nx, e = t - p * nx, ra = 2 * (pair0 + p);
        a(e, p) = PencilComplex(rows[long(ra) * nx + e], ra + 1 < ny ? rows[long(ra + 1) * nx + e] : 0.0f);
      });
      team.team_barrier();
      const PencilSet z = pencilTransform(team, X, np, false, false, a, b);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np * nh), [&](int t) {
        const int p = t / nh, k = t - p * nh, ra = 2 * (pair0 + p);
        const PencilComplex zk = z(k, p), zc = Kokkos::conj(z(k == 0 ? 0 : nx - k, p));
        s[long(ra) * nh + k] = 0.5f * (zk + zc);
        if (ra + 1 < ny) s[long(ra + 1) * nh + k] = -0.5f * pencilTimesI(zk - zc);
      });
      team.team_barrier();
    }
    for (int k0 = 0; k0 < nh; k0 += chunks.columns) {
      const int np = nh - k0 < chunks.columns ? nh - k0 : chunks.columns;
      const PencilSet a{buf.data(), np, 1}, b{buf.data() + n, np, 1};
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ny * np), [&](int t) {
        const int e = t / np, p = t - e * np;
        a(e, p) = s[long(e) * nh + k0 + p];
      });
      team.team_barrier();
      const PencilSet z = pencilTransform(team, Y, np, true, false, a, b);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ny * np), [&](int t) {
        const int e = t / np, p = t - e * np;
        s[long(e) * nh + k0 + p] = z(e, p);
      });
      team.team_barrier();
    }
  }
};

// ZMultiply: the z pencils of every component at (ky, kx block): forward, mult(kz, ky, kx, re, im)
// on the batch's coefficients, inverse.
template <class Exec, int Batch, class Multiplier>
struct PencilZMultiply {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  PencilComplex* spec;
  int nz, ny, nh;
  PencilLength<Mem> Z;
  PencilChunks chunks;
  Multiplier mult;

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int blocks = (nh + chunks.zColumns - 1) / chunks.zColumns;
    const int ky = team.league_rank() / blocks, k0 = (team.league_rank() % blocks) * chunks.zColumns;
    const int np = nh - k0 < chunks.zColumns ? nh - k0 : chunks.zColumns, pencils = Batch * np;
    const int n = zScratchComplexes(chunks, Batch, nz) / 2;
    PencilScratch<Exec> buf(team.team_scratch(0), 2 * n);
    const PencilSet a{buf.data(), pencils, 1}, b{buf.data() + n, pencils, 1};
    const long plane = long(ny) * nh, comp = long(nz) * plane;
    auto at = [&](int c, int kz, int p) -> PencilComplex& { return spec[c * comp + kz * plane + long(ky) * nh + k0 + p]; };
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nz * pencils), [&](int t) {
      const int e = t / pencils, q = t - e * pencils;
      a(e, q) = at(q / np, e, q % np);
    });
    team.team_barrier();
    const PencilSet f = pencilTransform(team, Z, pencils, true, false, a, b);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nz * np), [&](int t) {
      const int kz = t / np, p = t - kz * np;
      float re[Batch], im[Batch];
      for (int c = 0; c < Batch; ++c) {
        re[c] = f(kz, c * np + p).real();
        im[c] = f(kz, c * np + p).imag();
      }
      mult(kz, ky, k0 + p, re, im);
      for (int c = 0; c < Batch; ++c) f(kz, c * np + p) = PencilComplex(re[c], im[c]);
    });
    team.team_barrier();
    const PencilSet g = pencilTransform(team, Z, pencils, true, true, f, f.data == a.data ? b : a);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nz * pencils), [&](int t) {
      const int e = t / pencils, q = t - e * pencils;
      at(q / np, e, q % np) = g(e, q);
    });
  }
};

// SlabInverse: spec (batch, nz, ny, nh) with z done -> out (batch, nz, ny, nx) real; the spectrum
// is overwritten.
template <class Exec>
struct PencilSlabInverse {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  PencilComplex* spec;
  float* out;
  int ny, nx, nh;
  PencilLength<Mem> X, Y;
  PencilChunks chunks;

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const long slab = team.league_rank();
    float* rows = out + slab * long(ny) * nx;
    PencilComplex* s = spec + slab * long(ny) * nh;
    const int n = slabScratchComplexes(chunks, ny, nx) / 2;
    PencilScratch<Exec> buf(team.team_scratch(0), 2 * n);
    for (int k0 = 0; k0 < nh; k0 += chunks.columns) {
      const int np = nh - k0 < chunks.columns ? nh - k0 : chunks.columns;
      const PencilSet a{buf.data(), np, 1}, b{buf.data() + n, np, 1};
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ny * np), [&](int t) {
        const int e = t / np, p = t - e * np;
        a(e, p) = s[long(e) * nh + k0 + p];
      });
      team.team_barrier();
      const PencilSet z = pencilTransform(team, Y, np, true, true, a, b);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ny * np), [&](int t) {
        const int e = t / np, p = t - e * np;
        s[long(e) * nh + k0 + p] = z(e, p);
      });
      team.team_barrier();
    }
    const int pairs = (ny + 1) / 2;
    for (int pair0 = 0; pair0 < pairs; pair0 += chunks.rowPairs) {
      const int np = pairs - pair0 < chunks.rowPairs ? pairs - pair0 : chunks.rowPairs;
      const PencilSet a{buf.data(), 1, nx + 1}, b{buf.data() + n, 1, nx + 1};
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np * nx), [&](int t) {
        const int p = t / nx, k = t - p * nx, ra = 2 * (pair0 + p);
        const bool lower = k < nh;
        const long col = lower ? k : nx - k;
        PencilComplex A = s[long(ra) * nh + col];
        PencilComplex B = ra + 1 < ny ? s[long(ra + 1) * nh + col] : PencilComplex(0.0f, 0.0f);
        if (col == 0 || 2 * col == nx) {
          A = PencilComplex(A.real(), 0.0f);
          B = PencilComplex(B.real(), 0.0f);
        }
        if (!lower) {
          A = Kokkos::conj(A);
          B = Kokkos::conj(B);
        }
        a(k, p) = A + pencilTimesI(B);
      });
      team.team_barrier();
      const PencilSet z = pencilTransform(team, X, np, false, true, a, b);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np * nx), [&](int t) {
        const int p = t / nx, e = t - p * nx, ra = 2 * (pair0 + p);
        rows[long(ra) * nx + e] = z(e, p).real();
        if (ra + 1 < ny) rows[long(ra + 1) * nx + e] = z(e, p).imag();
      });
      team.team_barrier();
    }
  }
};

// The chunks of a grid under a scratch budget (bytes per team, for the two sets): as many pencils
// per chunk as fit, up to 8 row pairs, 16 y columns and 8 z columns (SlabForward's y chunks read
// whole 32-byte sectors from 4 columns up). zColumns 0: even one z column of the batch does not fit.
inline PencilChunks pencilChunks(int batch, int nz, int ny, int nx, std::size_t budget) {
  auto fit = [&](std::size_t perPencil, int cap) {
    const std::size_t k = budget / (2 * sizeof(PencilComplex) * perPencil);
    return int(k < std::size_t(cap) ? k : std::size_t(cap));
  };
  PencilChunks c;
  c.rowPairs = fit(std::size_t(nx) + 1, 8);
  c.columns = fit(std::size_t(ny), 16);
  c.zColumns = fit(std::size_t(batch) * nz, 8);
  return c;
}

// Why the ScratchPencils solve cannot take this grid ("" when it can): an extent with a prime
// factor above 7, or pencils that do not fit the scratch budget.
inline std::string pencilMisfit(int nz, int ny, int nx, PencilChunks const& c) {
  for (int n : {nz, ny, nx})
    if (pencilRadices(n).count == 0) return "the extent " + std::to_string(n) + " has a prime factor above 7";
  if (c.rowPairs < 1 || c.columns < 1 || c.zColumns < 1) return "its pencils do not fit the team scratch";
  return "";
}

// The plan of one grid: the three lengths and the chunks.
template <class Exec>
struct PencilPlan {
  using Mem = typename Exec::memory_space;
  int nz = 0, ny = 0, nx = 0;
  PencilLength<Mem> X, Y, Z;
  PencilChunks chunks;
  PencilPlan(int z, int y, int x, PencilChunks c)
      : nz(z), ny(y), nx(x), X(makePencilLength<Mem>(x)), Y(makePencilLength<Mem>(y)),
        Z(makePencilLength<Mem>(z)), chunks(c) {}
};

template <class Exec>
Kokkos::TeamPolicy<Exec> pencilPolicy(Exec const& exec, int league, int teamSize, int complexes) {
  using Policy = Kokkos::TeamPolicy<Exec>;
  Policy policy = teamSize > 0 ? Policy(exec, league, teamSize) : Policy(exec, league, Kokkos::AUTO);
  const std::size_t bytes = PencilScratch<Exec>::shmem_size(complexes);
  if (bytes > policy.scratch_size_max(0))
    throw InvalidArgument("pencil FFT: " + std::to_string(bytes) + " B of team scratch, the back end offers " +
                          std::to_string(policy.scratch_size_max(0)) + " B");
  return policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
}

// The three passes, each enqueued on exec (the bench times them one by one). in / out are
// (Batch, nz, ny, nx) real and may be the same; spec holds Batch * nz * ny * (nx/2 + 1) complexes.
template <int Batch, class Exec>
void pencilSlabForward(Exec const& exec, PencilPlan<Exec> const& plan, const float* in, PencilComplex* spec) {
  PencilChunks const& c = plan.chunks;
  Kokkos::parallel_for("kortex::pencils::slab_forward",
                       pencilPolicy(exec, Batch * plan.nz, c.teamSize, slabScratchComplexes(c, plan.ny, plan.nx)),
                       PencilSlabForward<Exec>{in, spec, plan.ny, plan.nx, plan.nx / 2 + 1, plan.X, plan.Y, c});
}
template <int Batch, class Exec, class Multiplier>
void pencilZMultiply(Exec const& exec, PencilPlan<Exec> const& plan, PencilComplex* spec, Multiplier const& mult) {
  PencilChunks const& c = plan.chunks;
  const int nh = plan.nx / 2 + 1, blocks = (nh + c.zColumns - 1) / c.zColumns;
  Kokkos::parallel_for("kortex::pencils::z_multiply",
                       pencilPolicy(exec, plan.ny * blocks, c.teamSize, zScratchComplexes(c, Batch, plan.nz)),
                       PencilZMultiply<Exec, Batch, Multiplier>{spec, plan.nz, plan.ny, nh, plan.Z, c, mult});
}
template <int Batch, class Exec>
void pencilSlabInverse(Exec const& exec, PencilPlan<Exec> const& plan, PencilComplex* spec, float* out) {
  PencilChunks const& c = plan.chunks;
  Kokkos::parallel_for("kortex::pencils::slab_inverse",
                       pencilPolicy(exec, Batch * plan.nz, c.teamSize, slabScratchComplexes(c, plan.ny, plan.nx)),
                       PencilSlabInverse<Exec>{spec, out, plan.ny, plan.nx, plan.nx / 2 + 1, plan.X, plan.Y, c});
}

// out = inverse FFT(mult(FFT(in))), unnormalised both ways.
template <int Batch, class Exec, class Multiplier>
void pencilSolve(Exec const& exec, PencilPlan<Exec> const& plan, const float* in, PencilComplex* spec, float* out,
                 Multiplier const& mult) {
  pencilSlabForward<Batch>(exec, plan, in, spec);
  pencilZMultiply<Batch>(exec, plan, spec, mult);
  pencilSlabInverse<Batch>(exec, plan, spec, out);
}

}  // namespace kortex::gpu::detail
