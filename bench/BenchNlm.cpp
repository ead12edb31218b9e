// NLM part of the CT benchmark: the rows of Table II (2D, patch 7x7) and the 3D rows (patch 5^3,
// which holds the target "NLM 3D 256^3, patch 5, window 11", and patch 7^3 as in 2D),
// parameters, and how each implementation is launched.
#include "bench/ct/CtBench.hpp"
#include "bench/PaperCt.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "reference_cpu/Nlm.hpp"
#include "validation/Quality.hpp"

namespace kortex::bench::ct {

std::vector<RowSpec> nlmRows(bool tiny) {
  std::vector<RowSpec> rows;
  const std::vector<Index> sizes2 = tiny ? std::vector<Index>{64} : std::vector<Index>{256, 512, 1024};
  const std::vector<Index> sizes3 = tiny ? std::vector<Index>{16} : std::vector<Index>{64, 128, 256};
  for (Index n : sizes2)
    for (int w : {7, 11, 17}) {
      RowSpec r;
      r.algo = Algo::Nlm;
      r.dim = 2;
      r.n = n;
      r.window = w;
      r.patchRadius = paper::kTableIIPatchRadius;
      rows.push_back(r);
    }
  // 3D: patch 5^3 for every size; patch 7^3 as well (its naive cost is 2.7x larger: the cost
  // model skips what does not fit the budget). Tiny: patch 5^3 only.
  for (Index n : sizes3)
    for (int patch : tiny ? std::vector<int>{2} : std::vector<int>{2, 3})
      for (int w : {7, 11, 17}) {
        RowSpec r;
        r.algo = Algo::Nlm;
        r.dim = 3;
        r.n = n;
        r.window = w;
        r.patchRadius = patch;
        rows.push_back(r);
      }
  return rows;
}

void setNlmParams(RowSpec& row) {
  // The quality study's rule (h = sigma_n); the cost does not depend on h.
  row.nlm = qualityNlmParams(row.window, row.noiseSigma, row.patchRadius);
}

double nlmUnits(RowSpec const& row) {
  return static_cast<double>(row.voxels()) * static_cast<double>(row.taps());
}

namespace {
// Naive and ScratchTiled compute every patch distance: their cost grows with the patch.
double patchUnits(RowSpec const& row) { return nlmUnits(row) * patchSize(row.patchRadius, row.dim); }

template <NlmVariant V>
void launchVariant(DeviceExec const& exec, ConstImageView<DeviceMem> in, ImageView<DeviceMem> out,
                   RowSpec const& row) {
  NlmParams p = row.nlm;
  p.variant = V;
  gpu::nlm(exec, in, out, p);
}
}  // namespace

std::vector<DeviceVariant> const& nlmVariants() {
  static const std::vector<DeviceVariant> v{
      {toString(NlmVariant::Naive), &launchVariant<NlmVariant::Naive>, &patchUnits},
      {toString(NlmVariant::ScratchTiled), &launchVariant<NlmVariant::ScratchTiled>, &patchUnits},
      {toString(NlmVariant::BoxSum), &launchVariant<NlmVariant::BoxSum>, &nlmUnits}};
  return v;
}

void referenceNlm(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
                  RowSpec const& row) {
  ref::nlm(in, out, row.nlm);
}

}  // namespace kortex::bench::ct
