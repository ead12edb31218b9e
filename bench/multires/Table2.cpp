// `kortex bench multires`, Table 2: frames per second at 512^2 .. 8192^2: Kokkos end to end
// (MultiresPlan::run, plan built once, image on the device) for the float and the 16-bit
// pipelines with concurrent level filtering on and off, the decompose / filter / reconstruct
// split, and the CPU reference (reference_cpu/Multires.hpp) at 4 threads and at all threads.
// End-to-end outputs are checked against the CPU reference: every configuration at the smallest
// size, the default float configuration wherever the CPU reference was timed too.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/PaperMultires.hpp"
#include "bench/multires/MultiresBench.hpp"
#include "bench/multires/MultiresSections.hpp"
#include "core/Compat.hpp"
#include "gpu/multires/Multires.hpp"
#include "reference_cpu/Multires.hpp"
#include "validation/Metrics.hpp"

namespace kortex::bench::multires {

namespace {

using common::Measurement;
namespace paper = paper_multires;

// A plan's images: k rotating copies of the noisy input and k outputs.
template <class T>
void makeImages(Context& ctx, Input const& in, PlanImages<T>& s) {
  const Index n = in.n;
  s.k = ctx.slots(2.0 * sizeof(T) * double(n) * double(n));
  for (int i = 0; i < s.k; ++i) {
    s.in.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::in"), Kokkos::WithoutInitializing), 1, n, n);
    s.out.emplace_back(Kokkos::view_alloc(std::string("kortex::bench::multires::out"), Kokkos::WithoutInitializing), 1, n, n);
    copyInput(s.in.back(), in);
  }
}

// The Table 2 rows and the CPU reference outputs at the smallest size (computed once, on demand).
class Table2 {
 public:
  explicit Table2(Context& ctx) : ctx_(ctx) {}

  void runDevice();
  void runCpu();
  std::vector<Table2Row> takeRows() { return std::move(rows_); }

 private:
  bool smallest(Index n) const { return n == table2Sizes(ctx_.tiny()).front(); }
  // The row records the input it measured.
  void noteInput(Table2Row& row, Input const& in) {
    row.inputMade = true;
    row.psnrNoisy = in.psnrNoisy;
    row.sigma = in.sigma;
  }

  template <class T>
  Case e2eCase(Table2Row& row, int config, Index n);
  template <class T>
  void phaseCases(Table2Row& row, int pipeline);
  Case cpuCase(Index n, int threads, Table2Row* row = nullptr);
  double probeE2e(int config, Index target);
  double probeCpu(int threads, Index target);

  Context& ctx_;
  std::vector<Table2Row> rows_;
  Index refSize_ = 0;
  std::unique_ptr<HostImage> refFloat_;
  HostU16 refInt_;
};

// End to end through a plan built once: run(in, out) with inputs and outputs rotating.
template <class T>
Case Table2::e2eCase(Table2Row& row, int config, Index n) {
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  Input& in = ctx_.input(n);
  noteInput(row, in);
  auto st = std::make_shared<PlanImages<T>>();
  const MultiresParams p = e2eParams(baseParams(in.sigma, kInt), config);
  st->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(ctx_.exec(), n, n, p, e2eSchedule(config));
  row.tiles[config] = ctx_.withSources(n, st->plan->tiles());
  makeImages(ctx_, in, *st);
  Kokkos::fence();
  const bool compareToReference = smallest(n);
  Case c;
  c.run = [st] {
    st->advance();
    st->plan->run(st->in[st->last], st->out[st->last]);
  };
  c.check = [this, st, &in, &row, config, n, compareToReference] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st->out[st->last]);
    const HostImage a = asHostImage(h, in);
    std::string why = checkFinite(a, in, &row.psnr[config]);
    if (!why.empty()) return why;
    if (!compareToReference) {
      // Larger sizes: the default float configuration is compared with the CPU reference's
      // output once the CPU pass has timed it (runCpu).
      if (config == 0) row.kokkosFloatOut = std::make_shared<HostImage>(copyOf(a));
      return why;
    }
    // Once, at the smallest size: the CPU reference (same parameters).
    MultiresParams rp = st->plan->params();
    if (refSize_ != n) {
      refFloat_.reset();
      refInt_ = HostU16();
      refSize_ = n;
    }
    if constexpr (kInt) {
      if (refInt_.data() == nullptr) {
        refInt_ = HostU16("kortex::bench::multires::reference16", 1, n, n);
        ref::multires(in.noisy16, refInt_, rp);
      }
      why = checkEqual(h, refInt_, "Kokkos vs the CPU reference (integer pipeline, exact)");
      row.referenceCheck[config] = why.empty() ? "passed: identical to the CPU reference at " + sq(n) : why;
    } else {
      if (!refFloat_) refFloat_ = std::make_unique<HostImage>(ref::multires(in.noisy, rp));
      const auto e = validation::compare(a, *refFloat_);
      why = e.maxRel <= kFloatRelTol ? std::string()
                                     : "Kokkos vs the CPU reference: max relative error " +
                                           validation::fmtSci(e.maxRel) + " > " + validation::fmtSci(kFloatRelTol);
      row.referenceCheck[config] = why.empty() ? "passed: max relative error " + validation::fmtSci(e.maxRel) +
                                                     " vs the CPU reference at " + sq(n)
                                               : why;
    }
    return why;
  };
  return c;
}

// decompose / filterLayers / reconstruct timed one by one on one plan (default concurrency).
template <class T>
void Table2::phaseCases(Table2Row& row, int pipeline) {
  constexpr bool kInt = std::is_same_v<T, std::uint16_t>;
  const Index n = row.n;
  using State = PlanImages<T>;
  std::shared_ptr<State> st;
  auto state = [&]() -> std::shared_ptr<State> {
    if (st) return st;
    Input& in = ctx_.input(n);
    noteInput(row, in);
    auto s = std::make_shared<State>();
    s->plan = std::make_unique<gpu::MultiresPlan<Exec, T>>(ctx_.exec(), n, n, baseParams(in.sigma, kInt));
    makeImages(ctx_, in, *s);
    s->plan->decompose(s->in[0]);  // filterLayers and reconstruct need a decomposition
    s->plan->filterLayers();
    Kokkos::fence();
    st = s;
    return st;
  };
  auto check = [this, n](std::shared_ptr<State> const& s) {
    // Complete a frame from the current state and check it as an end-to-end output.
    Input& in = ctx_.input(n);
    s->plan->decompose(s->in[s->last]);
    s->plan->filterLayers();
    s->plan->reconstruct(s->out[s->last]);
    ctx_.exec().fence();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s->out[s->last]);
    return checkFinite(asHostImage(h, in), in, nullptr);
  };
  const std::string pipe = kInt ? "uint16" : "float";
  for (int ph = 0; ph < 3; ++ph) {
    Measurement& m = row.phases[pipeline][ph];
    m.impl = phaseName(ph);
    m.threads = kx::concurrency(ctx_.exec());
    ctx_.measure(m, phasesLabel(n, kInt) + " " + phaseName(ph), true, "phase|" + pipe + "|" + phaseName(ph),
                 double(n) * double(n), [&, ph] {
                   auto s = state();
                   Case c;
                   if (ph == 0)
                     c.run = [s] { s->plan->decompose(s->in[s->advance()]); };
                   else if (ph == 1)
                     c.run = [s] { s->plan->filterLayers(); };
                   else
                     c.run = [s] { s->plan->reconstruct(s->out[s->advance()]); };
                   c.check = [s, check] { return check(s); };
                   return c;
                 });
  }
}

// Rate probes (ms per pixel) when no smaller size of the same configuration has run (e.g. with
// --only): one warm run and one timed run at a smaller size (256^2 / 128^2 at most).
double Table2::probeE2e(int config, Index target) {
  const Index n = std::max<Index>(32, std::min<Index>(256, target / 2));
  Table2Row scratch;
  scratch.n = n;
  Case c = kE2e[config].integer ? e2eCase<std::uint16_t>(scratch, config, n) : e2eCase<float>(scratch, config, n);
  c.run();
  ctx_.exec().fence();
  const auto t = Clock::now();
  c.run();
  ctx_.exec().fence();
  return secondsSince(t) * 1e3 / (double(n) * double(n));
}

double Table2::probeCpu(int threads, Index target) {
  const Index n = std::max<Index>(32, std::min<Index>(128, target / 2));
  Case c = cpuCase(n, threads);
  c.run();
  const auto t = Clock::now();
  c.run();
  return secondsSince(t) * 1e3 / (double(n) * double(n));
}

void Table2::runDevice() {
  for (Index n : table2Sizes(ctx_.tiny())) {
    Table2Row row;
    row.n = n;
    for (int c = 0; c < kNumE2e; ++c) {
      row.e2eSelected[c] = ctx_.selected(e2eLabel(n, c));
      row.e2e[c].impl = kE2e[c].name;
    }
    for (int p = 0; p < 2; ++p) {
      row.phasesSelected[p] = false;
      for (int ph = 0; ph < 3; ++ph)
        row.phasesSelected[p] = row.phasesSelected[p] || ctx_.selected(phasesLabel(n, p == 1) + " " + phaseName(ph));
    }
    row.cpuSelected[0] = ctx_.selected(cpuLabel(n, false));
    row.cpuSelected[1] = ctx_.selected(cpuLabel(n, true));
    row.cpu4.impl = "cpu-4";
    row.cpuAll.impl = "cpu-all";
    rows_.push_back(std::move(row));
  }
  for (auto& row : rows_) {
    const Index n = row.n;
    for (int c = 0; c < kNumE2e; ++c) {
      if (!row.e2eSelected[c]) continue;
      Measurement& m = row.e2e[c];
      m.threads = kx::concurrency(ctx_.exec());
      if (kE2e[c].concurrent && !kx::hasConcurrentInstances<Exec>) {
        m.status = "not applicable";
        m.note = std::string("the levels run in order on `") + Exec::name() +
                 "` either way (no concurrent execution-space instances here), so this is the column before";
        continue;
      }
      ctx_.measure(m, e2eLabel(n, c), true, std::string("e2e|") + kE2e[c].name, double(n) * double(n),
                   [&] { return kE2e[c].integer ? e2eCase<std::uint16_t>(row, c, n) : e2eCase<float>(row, c, n); },
                   smallest(n) ? std::function<double()>()
                               : std::function<double()>([this, c, n] { return probeE2e(c, n); }));
    }
    if (row.phasesSelected[0]) phaseCases<float>(row, 0);
    if (row.phasesSelected[1]) phaseCases<std::uint16_t>(row, 1);
    ctx_.releaseLargeInputs();
  }
}

// The CPU reference, float pipeline. With `row`, its output also checks the row's Kokkos float
// output (kept by e2eCase) once: a mismatch fails that Kokkos measurement.
Case Table2::cpuCase(Index n, int threads, Table2Row* row) {
  Input& in = ctx_.input(n);
  struct State : Rotation {
    std::vector<HostImage> out;
    MultiresParams p;
  };
  auto st = std::make_shared<State>();
  st->p = baseParams(in.sigma, false);
  st->k = common::rotationSlots(8.0 * double(n) * double(n), std::size_t(32) << 20, 4);
  for (int s = 0; s < st->k; ++s) st->out.emplace_back("kortex::bench::multires::cpu_out", in.noisy.geometry);
  Case c;
  c.run = [st, &in, threads] {
    common::OmpThreads t(threads);
    st->advance();
    ref::multires(in.noisy.data, st->out[st->last].data, st->p);
  };
  c.check = [this, st, &in, row, n, threads] {
    std::string why = checkFinite(st->out[st->last], in, nullptr);
    if (!why.empty() || !row || !row->kokkosFloatOut || !row->referenceCheck[0].empty()) return why;
    const auto e = validation::compare(*row->kokkosFloatOut, st->out[st->last]);
    if (e.maxRel <= kFloatRelTol) {
      row->referenceCheck[0] = "passed: max relative error " + validation::fmtSci(e.maxRel) +
                               " vs the CPU reference (" + std::to_string(threads) + " thr) at " + sq(n);
    } else {
      row->referenceCheck[0] = "Kokkos vs the CPU reference: max relative error " + validation::fmtSci(e.maxRel) +
                               " > " + validation::fmtSci(kFloatRelTol);
      Measurement& k = row->e2e[0];
      if (k.measured()) {
        k.status = "check failed";
        k.note = row->referenceCheck[0];
        ctx_.recountAsFailed();
        ctx_.progress("  " + e2eLabel(n, 0) + ": CHECK FAILED: " + k.note);
      }
    }
    row->kokkosFloatOut.reset();
    return why;
  };
  return c;
}

void Table2::runCpu() {
  for (bool all : {false, true}) {
    const int threads = all ? ctx_.cpuThreads() : paper::kTable2CpuThreads;
    for (auto& row : rows_) {
      if (!row.cpuSelected[all ? 1 : 0]) continue;
      Measurement& m = all ? row.cpuAll : row.cpu4;
      m.threads = threads;
      const Index n = row.n;
      ctx_.measure(m, cpuLabel(n, all) + " (" + std::to_string(threads) + ")", false,
                   "cpu|" + std::to_string(threads), double(n) * double(n),
                   [&] {
                     Case c = cpuCase(n, threads, &row);
                     noteInput(row, ctx_.input(n));
                     return c;
                   },
                   smallest(n) ? std::function<double()>()
                               : std::function<double()>([this, threads, n] { return probeCpu(threads, n); }));
      if (n > 2048) ctx_.releaseLargeInputs();
    }
  }
  for (auto& row : rows_) row.kokkosFloatOut.reset();
  ctx_.releaseLargeInputs();
}

}  // namespace

std::vector<Table2Row> runTable2(Context& ctx) {
  Table2 t(ctx);
  t.runDevice();
  t.runCpu();
  return t.takeRows();
}

}  // namespace kortex::bench::multires
