// CPU reference non-local means (core/Nlm.hpp's definition), written independently of the
// Kokkos kernels: it shares only NlmParams and the clamp rule.
//
// Algorithm (per output block, per search offset o):
//   S_o(y) = (I(clamp(y)) - I(clamp(y + o)))^2     at unclamped positions y
//   D(x,o) = box sum of S_o over the patch           separable running sums in double (z, y, x),
//                                                    cost independent of the patch radius
//   w = exp(-D / (|P| h^2)),  wsum(x) += w,  vsum(x) += w I(clamp(x + o))
// Symmetry: S_{-o}(y + o) = S_o(y) for every unclamped y, hence D(x + o, -o) = D(x, o) exactly.
// Only half of the offsets (o > 0 lexicographically in (z, y, x)) are evaluated: the weight
// w(x, o) also serves voxel x + o with value I(x). For an output block B the box sums cover
// B u (B - o), so voxels of B get the contributions of both o and -o without leaving the block.
//
// Memory: the input is read through a clamped copy of the block and its halo (R + r voxels);
// the only other buffers are one plane of z-running sums (3D), one row of y-running sums, one
// row of distances/weights and the block's double accumulators: O(block), never O(image).
// Parallelism: OpenMP over blocks. Each block's arithmetic does not depend on the thread
// that runs it, so the result is the same for any number of threads.
#include "reference_cpu/Nlm.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "reference_cpu/Checks.hpp"

namespace kortex::ref {

using namespace detail;

namespace {

using ConstRowF = Eigen::Map<const Eigen::ArrayXf>;
using RowF = Eigen::Map<Eigen::ArrayXf>;
using RowD = Eigen::Map<Eigen::ArrayXd>;

// Output block sizes (full-width rows; 3D: planes x rows). Fixed, not derived from the thread
// count, so the result is bitwise the same for any number of threads. Per block and offset the
// redundant work is about (|o| + 2r) / size along each blocked axis (halo of the box sums and
// the symmetric extension), hence large blocks; small enough that a block's accumulators
// (~1 MiB for 1024^2 or 128^3) stay in cache and 16 threads get work on those sizes.
// Single-thread timings of 8x32 to 32x64 blocks (3D 64^3 r=2 R=5, 2D 512^2 r=3 R=8) differed by
// less than the run-to-run noise (~30%) of the machines measured on.
constexpr Index kBlockRows2D = 64;
constexpr Index kBlockPlanes3D = 16;
constexpr Index kBlockRows3D = 32;

struct Offset {
  int z, y, x;
};

// Output block: planes [z0, z1), rows [y0, y1), every column.
struct Block {
  Index z0, z1, y0, y1;
};

// Clamped copy of the input around one block, padded by (pz, py, px) voxels: every position a
// patch or search offset of the block reads, with the clamp rule applied to each position.
class ClampedBlock {
 public:
  void build(HostConstView const& in, Block const& b, Index pz, Index py, Index px) {
    const Index nz = static_cast<Index>(in.extent(0)), ny = static_cast<Index>(in.extent(1)),
                nx = static_cast<Index>(in.extent(2));
    z0_ = b.z0 - pz;
    y0_ = b.y0 - py;
    px_ = px;
    ny_ = (b.y1 - b.y0) + 2 * py;
    nx_ = nx + 2 * px;
    const Index planes = (b.z1 - b.z0) + 2 * pz;
    data_.resize(static_cast<std::size_t>(planes * ny_ * nx_));
    for (Index zz = 0; zz < planes; ++zz)
      for (Index yy = 0; yy < ny_; ++yy) {
        const float* src = &in(clampIndex(z0_ + zz, nz), clampIndex(y0_ + yy, ny), 0);
        float* dst = data_.data() + (zz * ny_ + yy) * nx_;
        std::fill(dst, dst + px, src[0]);
        std::copy(src, src + nx, dst + px);
        std::fill(dst + px + nx, dst + nx_, src[nx - 1]);
      }
  }
  // Column x = 0 of image row (z, y); valid for x in [-px, nx + px).
  const float* row(Index z, Index y) const {
    return data_.data() + ((z - z0_) * ny_ + (y - y0_)) * nx_ + px_;
  }

 private:
  std::vector<float> data_;
  Index z0_ = 0, y0_ = 0, px_ = 0, ny_ = 0, nx_ = 0;
};

struct Problem {
  HostConstView in;
  HostView out;
  Index nz, ny, nx;
  int r, rz, R, Rz;          // patch / search radii; rz = Rz = 0 in 2D
  double negInvNormalizer;   // -1 / (|P| h^2)
  std::vector<Offset> half;  // offsets o > 0 in lexicographic (z, y, x) order
  Index blockPlanes, blockRows;
};

// Per-thread buffers, sized once for the largest block.
struct Workspace {
  ClampedBlock pad;
  std::vector<double> sz;              // z-running sums of S over one plane (3D)
  Eigen::ArrayXd ry, dist, arg, weight;  // one row each
  std::vector<double> wsum, vsum;        // the block's accumulators

  explicit Workspace(Problem const& p) {
    const Index maxSW = p.nx + p.R + 2 * p.r;
    const Index maxSH = p.blockRows + p.R + 2 * p.r;
    if (p.rz > 0) sz.resize(static_cast<std::size_t>(maxSH * maxSW));
    ry.resize(maxSW);
    dist.resize(p.nx + p.R);
    arg.resize(p.nx + p.R);
    weight.resize(p.nx + p.R);
    wsum.resize(static_cast<std::size_t>(p.blockPlanes * p.blockRows * p.nx));
    vsum.resize(wsum.size());
  }
};

// Adds the weights of offset o (and, by symmetry, of -o) to the accumulators of block b.
void accumulateOffset(Problem const& p, Block const& b, Offset const& o, Workspace& ws) {
  const int r = p.r, rz = p.rz;
  const Index nx = p.nx, by = b.y1 - b.y0;
  ClampedBlock const& pad = ws.pad;

  // Positions x whose distance D(x, o) is needed: B u (B - o), bounded by a box E.
  const Index ez0 = b.z0 - std::max(o.z, 0), ez1 = b.z1 + std::max(-o.z, 0);
  const Index ey0 = b.y0 - std::max(o.y, 0), ey1 = b.y1 + std::max(-o.y, 0);
  const Index ex0 = -std::max(o.x, 0);
  // S is needed on E grown by the patch radius: rows [sy0, sy0 + SH), columns [sx0, sx0 + SW).
  const Index SW = nx + std::abs(o.x) + 2 * r;
  const Index sx0 = ex0 - r;
  const Index sy0 = ey0 - r;
  const Index SH = (ey1 - ey0) + 2 * r;

  // Operands of S_o on row (zz, yy) over the S columns: I(y) and I(y + o), as Eigen expressions
  // (they hold their Maps by value), so S_o = (a - s)^2.
  auto a = [&](Index zz, Index yy) { return ConstRowF(pad.row(zz, yy) + sx0, SW).cast<double>(); };
  auto s = [&](Index zz, Index yy) {
    return ConstRowF(pad.row(zz + o.z, yy + o.y) + sx0 + o.x, SW).cast<double>();
  };

  // 3D: sz holds sum_{zz = z - rz}^{z + rz} S_o(zz, yy, .) for the current plane z.
  double* sz = ws.sz.data();
  if (rz > 0) {
    std::fill(sz, sz + SH * SW, 0.0);
    for (Index zz = ez0 - rz; zz <= ez0 + rz; ++zz)
      for (Index yy = sy0; yy < sy0 + SH; ++yy)
        RowD(sz + (yy - sy0) * SW, SW) += (a(zz, yy) - s(zz, yy)).square();
  }

  Eigen::ArrayXd& ry = ws.ry;
  double* dist = ws.dist.data();
  const double* ryp = ry.data();
  const Index iDirect = -ex0;     // E column of x = 0
  const Index iSym = -o.x - ex0;  // E column of x = -o.x

  for (Index z = ez0; z < ez1; ++z) {
    if (rz > 0 && z > ez0)  // slide the z window: + plane z + rz, - plane z - rz - 1
      for (Index yy = sy0; yy < sy0 + SH; ++yy)
        RowD(sz + (yy - sy0) * SW, SW) += (a(z + rz, yy) - s(z + rz, yy)).square() -
                                          (a(z - rz - 1, yy) - s(z - rz - 1, yy)).square();
    const bool directPlane = z >= b.z0 && z < b.z1;
    const bool symPlane = z + o.z >= b.z0 && z + o.z < b.z1;
    if (!directPlane && !symPlane) continue;

    // ry = sum_{yy = y - r}^{y + r} (z-summed) S_o(yy, .)
    ry.head(SW).setZero();
    for (Index yy = ey0 - r; yy <= ey0 + r; ++yy) {
      if (rz > 0)
        ry.head(SW) += RowD(sz + (yy - sy0) * SW, SW);
      else
        ry.head(SW) += (a(z, yy) - s(z, yy)).square();
    }
    for (Index y = ey0; y < ey1; ++y) {
      if (y > ey0) {
        if (rz > 0)
          ry.head(SW) += RowD(sz + (y + r - sy0) * SW, SW) - RowD(sz + (y - r - 1 - sy0) * SW, SW);
        else
          ry.head(SW) += (a(z, y + r) - s(z, y + r)).square() -
                         (a(z, y - r - 1) - s(z, y - r - 1)).square();
      }
      const bool direct = directPlane && y >= b.y0 && y < b.y1;
      const bool sym = symPlane && y + o.y >= b.y0 && y + o.y < b.y1;
      if (!direct && !sym) continue;

      Index ilo = std::numeric_limits<Index>::max(), ihi = std::numeric_limits<Index>::min();
      if (direct) ilo = std::min(ilo, iDirect), ihi = std::max(ihi, iDirect + nx);
      if (sym) ilo = std::min(ilo, iSym), ihi = std::max(ihi, iSym + nx);
      const Index n = ihi - ilo;

      // x box sum: dist[i - ilo] = sum_{k = i}^{i + 2r} ry[k], running.
      double acc = 0.0;
      for (int k = 0; k <= 2 * r; ++k) acc += ryp[ilo + k];
      dist[0] = acc;
      for (Index i = 1; i < n; ++i) {
        acc += ryp[ilo + i + 2 * r] - ryp[ilo + i - 1];
        dist[i] = acc;
      }
      // Running sums may leave a rounding residue below 0 where D is exactly 0.
      auto arg = ws.arg.head(n);
      auto weight = ws.weight.head(n);
      arg = ws.dist.head(n).max(0.0) * p.negInvNormalizer;
      weight = arg.max(kMinExpArgument).exp();
      for (Index i = 0; i < n; ++i)
        if (arg[i] < kMinExpArgument) weight[i] = 0.0;

      if (direct) {  // x in B: w(x, o) with value I(x + o)
        const Index at = ((z - b.z0) * by + (y - b.y0)) * nx;
        const auto w = weight.segment(iDirect - ilo, nx);
        RowD(ws.wsum.data() + at, nx) += w;
        RowD(ws.vsum.data() + at, nx) +=
            w * ConstRowF(pad.row(z + o.z, y + o.y) + o.x, nx).cast<double>();
      }
      if (sym) {  // x + o in B: w(x + o, -o) = w(x, o) with value I(x)
        const Index at = ((z + o.z - b.z0) * by + (y + o.y - b.y0)) * nx;
        const auto w = weight.segment(iSym - ilo, nx);
        RowD(ws.wsum.data() + at, nx) += w;
        RowD(ws.vsum.data() + at, nx) += w * ConstRowF(pad.row(z, y) - o.x, nx).cast<double>();
      }
    }
  }
}

void filterBlock(Problem const& p, Block const& b, Workspace& ws) {
  const Index nx = p.nx, bz = b.z1 - b.z0, by = b.y1 - b.y0;
  ws.pad.build(p.in, b, p.Rz + p.rz, p.R + p.r, p.R + p.r);
  // Centre term: w(x, 0) = 1, set explicitly.
  for (Index k = 0; k < bz; ++k)
    for (Index j = 0; j < by; ++j) {
      const Index at = (k * by + j) * nx;
      RowD(ws.wsum.data() + at, nx).setOnes();
      RowD(ws.vsum.data() + at, nx) = ConstRowF(ws.pad.row(b.z0 + k, b.y0 + j), nx).cast<double>();
    }
  for (Offset const& o : p.half) accumulateOffset(p, b, o, ws);
  for (Index k = 0; k < bz; ++k)
    for (Index j = 0; j < by; ++j) {
      const Index at = (k * by + j) * nx;
      RowF(&p.out(b.z0 + k, b.y0 + j, 0), nx) =
          (RowD(ws.vsum.data() + at, nx) / RowD(ws.wsum.data() + at, nx)).cast<float>();
    }
}

}  // namespace

void nlm(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
         NlmParams const& params) {
  const Geometry g = checkViews(in, out, "nlm");

  Problem p{in, out, g.nz(), g.ny(), g.nx(), 0, 0, 0, 0, 0.0, {}, 0, 0};
  const int dim = g.dimension;
  p.r = params.patchRadius;
  p.R = params.searchRadius;
  p.rz = dim == 3 ? p.r : 0;  // nz == 1: 2D patches and search window, no z taps
  p.Rz = dim == 3 ? p.R : 0;
  const double h = params.h;
  p.negInvNormalizer = -1.0 / (static_cast<double>(patchSize(p.r, dim)) * h * h);
  for (int oz = 0; oz <= p.Rz; ++oz)
    for (int oy = (oz > 0 ? -p.R : 0); oy <= p.R; ++oy)
      for (int ox = (oz > 0 || oy > 0 ? -p.R : 1); ox <= p.R; ++ox) p.half.push_back({oz, oy, ox});

  std::vector<Block> blocks;
  if (dim == 3) {
    p.blockPlanes = std::min(kBlockPlanes3D, p.nz);
    p.blockRows = std::min(kBlockRows3D, p.ny);
    for (Index z0 = 0; z0 < p.nz; z0 += p.blockPlanes)
      for (Index y0 = 0; y0 < p.ny; y0 += p.blockRows)
        blocks.push_back({z0, std::min(z0 + p.blockPlanes, p.nz), y0,
                          std::min(y0 + p.blockRows, p.ny)});
  } else {
    p.blockPlanes = 1;
    p.blockRows = std::min(kBlockRows2D, p.ny);
    for (Index y0 = 0; y0 < p.ny; y0 += p.blockRows)
      blocks.push_back({0, 1, y0, std::min(y0 + p.blockRows, p.ny)});
  }

  // Exceptions (std::bad_alloc) must not leave an OpenMP region: the first one is kept and
  // rethrown after it.
  const auto numBlocks = static_cast<std::int64_t>(blocks.size());
  std::exception_ptr failure;
#pragma omp parallel
  {
    std::unique_ptr<Workspace> ws;
    try {
      ws = std::make_unique<Workspace>(p);
    } catch (...) {
#pragma omp critical(kortex_ref_nlm_failure)
      if (!failure) failure = std::current_exception();
    }
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < numBlocks; ++i) {
      if (!ws) continue;
      try {
        filterBlock(p, blocks[static_cast<std::size_t>(i)], *ws);
      } catch (...) {
#pragma omp critical(kortex_ref_nlm_failure)
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

HostImage nlm(HostImage const& in, NlmParams const& params) {
  checkImage(in, "nlm");
  HostImage out("kortex::ref::Nlm::out", in.geometry);
  out.metadata = in.metadata;
  nlm(in.data, out.data, params);
  return out;
}

}  // namespace kortex::ref
