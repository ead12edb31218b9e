// Cost model of the CT benchmark: a case's run time is its implementation's measured rate (ms
// per work unit) times its work units; a case whose implementation has no rate yet is estimated
// from a probe run of the same parameters on a small phantom.
#include <algorithm>

#include "bench/ct/CtBench.hpp"

namespace kortex::bench::ct {

std::string CostModel::key(std::string const& impl, RowSpec const& r) {
  // Window and patch are part of the key: a variant's rate per tap changes with them (e.g. the
  // tile that fits in scratch), so only a smaller image with the same window predicts a cost.
  return impl + "|" + (r.algo == Algo::Bilateral ? "bf" : "nlm") + "|" + std::to_string(r.dim) +
         "|w" + std::to_string(r.window) + "|p" + std::to_string(r.patchRadius);
}

double CostModel::estimateMs(std::string const& impl, RowSpec const& r, WorkUnits units,
                             std::function<double(RowSpec const&)> const& probe) {
  const std::string k = key(impl, r);
  auto it = rate_.find(k);
  if (it == rate_.end()) {
    // Probe: same parameters on a small phantom whose extents exceed the radii.
    RowSpec p = r;
    const int rad = std::max((r.window - 1) / 2, std::max(r.patchRadius, 0));
    p.n = std::max<Index>(r.dim == 2 ? 48 : 12, rad + 2);
    if (p.n >= r.n) return -1.0;  // the row itself is the smallest: just run it
    const double ms = probe(p);
    rate_[k] = ms / units(p);
    it = rate_.find(k);
  }
  return it->second * units(r);
}

double CostModel::estimateDeviceMs(DeviceExec const& exec, RowSpec const& r, DeviceVariant const& variant) {
  return estimateMs(variant.name, r, variant.units,
                    [&](RowSpec const& p) { return probeDevice(exec, p, variant); });
}

double CostModel::estimateCpuMs(std::string const& impl, RowSpec const& r, int threads) {
  return estimateMs(impl, r, referenceUnits(r.algo), [&](RowSpec const& p) { return probeCpu(p, threads); });
}

void CostModel::learn(std::string const& impl, RowSpec const& r, WorkUnits units, double ms) {
  if (ms > 0.0) rate_[key(impl, r)] = ms / units(r);
}

namespace {

// The probe's own input (not kept), with the case's parameters set from its noise.
InputSet probeInput(RowSpec& p) {
  InputSet probe(p.dim, p.n);
  probe.make();
  setParams(p, probe.sigma);
  return probe;
}

// The probe's time: one run, or the second when the first is short.
template <class Once>
double probeMs(Once&& once) {
  double ms = once();
  if (ms < 50.0) ms = once();  // the first launch may carry one-time costs
  return ms;
}

}  // namespace

double CostModel::probeDevice(DeviceExec const& exec, RowSpec const& p0, DeviceVariant const& variant) {
  RowSpec p = p0;
  InputSet probe = probeInput(p);
  const auto& h = probe.image.data;
  ImageView<DeviceMem> din("kortex::bench::probe_in", h.extent(0), h.extent(1), h.extent(2));
  ImageView<DeviceMem> dout("kortex::bench::probe_out", h.extent(0), h.extent(1), h.extent(2));
  Kokkos::deep_copy(din, h);
  return probeMs([&] {
    exec.fence();
    const auto t = Clock::now();
    variant.launch(exec, din, dout, p);
    exec.fence();
    return secondsSince(t) * 1e3;
  });
}

double CostModel::probeCpu(RowSpec const& p0, int threads) {
  RowSpec p = p0;
  InputSet probe = probeInput(p);
  HostImage out("kortex::bench::probe_out", probe.image.geometry);
  common::OmpThreads t(threads);
  return probeMs([&] {
    const auto t1 = Clock::now();
    reference(p, probe.image.data, out.data);
    return secondsSince(t1) * 1e3;
  });
}

}  // namespace kortex::bench::ct
