// Greedy benchmark, Kernels: gradient (Naive vs ScratchTiled), 3D Gaussian (separable, recursive,
// spectral) and n-ary fused vs binary element-wise operators, with GB/s.
#include "bench/greedy/GreedyBench.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/Timing.hpp"
#include "gpu/gaussian/Gaussian.hpp"
#include "gpu/imageops/ImageOps.hpp"

namespace kortex::bench::greedy {

using common::fixedDecimals;

void runKernels(Context& ctx) {
  BenchOptions const& opt = ctx.opt;
  BenchReport& rep = ctx.rep;
  Exec& exec = ctx.exec;
  nlohmann::json& j = ctx.j;
  std::ostringstream& md = ctx.md;
  const bool onDevice = ctx.onDevice;
  const int reps = ctx.reps, warm = ctx.warm;
  const double copyGBs = ctx.copyGBs;
  auto say = [&](std::string const& s) { ctx.say(s); };
  auto fence = [&] { ctx.fence(); };
  say("gradient, Gaussian and n-ary kernels");
  struct Size {
    int nx, ny, nz;
    double paperNaive, paperShared;  // the paper's gradient ms (simple, shared)
  };
  std::vector<Size> sizes = opt.tiny ? std::vector<Size>{{24, 32, 20, NAN, NAN}}
                                     : (onDevice ? std::vector<Size>{{160, 224, 160, 3.4, 1.6}, {256, 256, 256, 9.5, 5.2}}
                                                 : std::vector<Size>{{64, 80, 64, NAN, NAN}});
  md << "## Kernels\n\n### Gradient (clamped central differences, 3 components): ms and GB/s (16 B/voxel)\n\n"
     << "| size | Naive ms | Naive GB/s | ScratchTiled ms | ScratchTiled GB/s | % of copy (best) | paper simple / shared ms |\n"
     << "|---|---|---|---|---|---|---|\n";
  nlohmann::json grad = nlohmann::json::array(), gauss = nlohmann::json::array(), nary = nlohmann::json::array();
  for (auto const& sz : sizes) {
    const double vox = double(sz.nx) * sz.ny * sz.nz;
    ImageView<Mem> a("kortex::bench::a", sz.nz, sz.ny, sz.nx);
    Kokkos::deep_copy(a, 1.0f);
    gpu::Field<Mem> g("kortex::bench::grad", 3, sz.nz, sz.ny, sz.nx);
    double ms[2];
    int k = 0;
    for (GradientVariant v : {GradientVariant::Naive, GradientVariant::ScratchTiled})
      ms[k++] = timeMedian([&] { gpu::gradient(exec, a, g, v); }, fence, warm, reps).medianMs;
    rep.measured += 2;
    auto gbs = [&](double bytes, double t) { return bytes * vox / (t * 1e-3) * 1e-9; };
    const double best = std::min(ms[0], ms[1]);
    md << "| " << sz.nx << "x" << sz.ny << "x" << sz.nz << " | " << fixedDecimals(ms[0]) << " | " << fixedDecimals(gbs(16, ms[0]), 0) << " | "
       << fixedDecimals(ms[1]) << " | " << fixedDecimals(gbs(16, ms[1]), 0) << " | " << fixedDecimals(100 * gbs(16, best) / copyGBs, 0) << " | "
       << fixedDecimals(sz.paperNaive, 1) << " / " << fixedDecimals(sz.paperShared, 1) << " |\n";
    grad.push_back({{"size", {sz.nx, sz.ny, sz.nz}}, {"naive_ms", ms[0]}, {"scratch_tiled_ms", ms[1]},
                    {"naive_GBs", gbs(16, ms[0])}, {"scratch_tiled_GBs", gbs(16, ms[1])},
                    {"paper_simple_ms", sz.paperNaive}, {"paper_shared_ms", sz.paperShared}});
  }
  // Gaussian at the largest size, half kernel sizes 2 / 4 / 8 (sigma = r / 3, radius ceil(3 sigma) = r).
  const Size& big = sizes.back();
  const double bigVox = double(big.nx) * big.ny * big.nz;
  ImageView<Mem> in("kortex::bench::in", big.nz, big.ny, big.nx), out("kortex::bench::out", big.nz, big.ny, big.nx);
  Kokkos::deep_copy(in, 1.0f);
  md << "\n### 3D Gaussian at " << big.nx << "x" << big.ny << "x" << big.nz
     << " (ms; sigma = half size / 3; the separable one allocates its two temporaries per call, the FFT one its padded "
        "image, spectrum and FFT plan, as the library does)\n\n"
     << "| half size | Separable | Recursive | FFT | paper separable / recursive / FFT |\n|---|---|---|---|---|\n";
  const double paperSep[] = {14, 26, 49}, paperRec[] = {10, 10, 10}, paperFft[] = {85, 85, 80};
  int idx = 0;
  for (int half : {2, 4, 8}) {
    const double sigma = half / 3.0;
    double t[3];
    int k = 0;
    for (GaussianVariant v : {GaussianVariant::Separable, GaussianVariant::Recursive, GaussianVariant::Fft}) {
      if (v == GaussianVariant::Recursive && sigma < GaussianParams::kMinRecursiveSigma) {
        t[k++] = NAN;
        continue;
      }
      t[k++] = timeMedian([&] { gpu::gaussianBlur(exec, in, out, GaussianParams{sigma, v}); }, fence, warm, reps).medianMs;
      ++rep.measured;
    }
    const bool paper = onDevice && !opt.tiny;
    md << "| " << half << " | " << fixedDecimals(t[0]) << " | " << fixedDecimals(t[1]) << " | " << fixedDecimals(t[2]) << " | "
       << (paper ? fixedDecimals(paperSep[idx], 0) + " / " + fixedDecimals(paperRec[idx], 0) + " / " + fixedDecimals(paperFft[idx], 0) : "-") << " |\n";
    gauss.push_back({{"half_size", half}, {"sigma", sigma}, {"separable_ms", t[0]}, {"recursive_ms", t[1]}, {"fft_ms", t[2]}});
    ++idx;
  }
  md << "\nThe down-sampler uses the recursive filter; FFT computes the separable operator through a clamp-padded "
        "real FFT (core/Gaussian.hpp).\n";
  // n-ary vs binary at the largest size.
  std::vector<ImageView<Mem>> imgs;
  for (int k = 0; k < kMaxAverageInputs; ++k) {
    imgs.emplace_back("kortex::bench::img", big.nz, big.ny, big.nx);
    Kokkos::deep_copy(imgs.back(), float(k));
  }
  ImageView<Mem> t1("kortex::bench::t1", big.nz, big.ny, big.nx), t2("kortex::bench::t2", big.nz, big.ny, big.nx);
  auto fusedAxpby = [&] { gpu::axpby(exec, 0.5f, imgs[0], 2.0f, imgs[1], out); };
  auto binaryAxpby = [&] {
    gpu::scale(exec, 0.5f, imgs[0], t1);
    gpu::scale(exec, 2.0f, imgs[1], t2);
    gpu::add(exec, t1, t2, out);
  };
  std::vector<ConstImageView<Mem>> eight(imgs.begin(), imgs.end());
  auto fusedAvg = [&] { gpu::average(exec, eight, out); };
  auto binaryAvg = [&] {
    gpu::add(exec, imgs[0], imgs[1], t1);
    for (int k = 2; k < kMaxAverageInputs; ++k) gpu::add(exec, t1, imgs[k], t1);
    gpu::scale(exec, 1.0f / kMaxAverageInputs, t1, out);
  };
  const double fa = timeMedian(fusedAxpby, fence, warm, reps).medianMs, ba = timeMedian(binaryAxpby, fence, warm, reps).medianMs;
  const double fv = timeMedian(fusedAvg, fence, warm, reps).medianMs, bv = timeMedian(binaryAvg, fence, warm, reps).medianMs;
  rep.measured += 4;
  auto gbs = [&](double units, double t) { return units * 4.0 * bigVox / (t * 1e-3) * 1e-9; };
  md << "\n### n-ary fused vs binary operators at " << big.nx << "x" << big.ny << "x" << big.nz
     << " (Figs 2, 3; traffic in image units: axpby 3 fused / 7 binary, average of 8: 9 / 23)\n\n"
     << "| operator | fused ms | fused GB/s | % of copy | binary ms | binary / fused |\n|---|---|---|---|---|---|\n"
     << "| a y + b z | " << fixedDecimals(fa) << " | " << fixedDecimals(gbs(3, fa), 0) << " | " << fixedDecimals(100 * gbs(3, fa) / copyGBs, 0) << " | "
     << fixedDecimals(ba) << " | " << fixedDecimals(ba / fa, 2) << " |\n"
     << "| average of 8 | " << fixedDecimals(fv) << " | " << fixedDecimals(gbs(9, fv), 0) << " | " << fixedDecimals(100 * gbs(9, fv) / copyGBs, 0)
     << " | " << fixedDecimals(bv) << " | " << fixedDecimals(bv / fv, 2) << " |\n\nPaper: 2-3x.\n\n";
  nary = {{"axpby_fused_ms", fa}, {"axpby_binary_ms", ba}, {"average8_fused_ms", fv}, {"average8_binary_ms", bv},
          {"axpby_fused_GBs", gbs(3, fa)}, {"average8_fused_GBs", gbs(9, fv)}};
  j["gradient"] = grad;
  j["gaussian"] = gauss;
  j["nary"] = nary;
}

}  // namespace kortex::bench::greedy
