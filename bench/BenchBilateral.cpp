// Bilateral part of the CT benchmark: the rows of Table I (2D) and their 3D counterparts,
// parameters, and how each implementation is launched.
#include <sstream>

#include "bench/ct/CtBench.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "validation/Quality.hpp"

namespace kortex::bench::ct {

std::vector<RowSpec> bilateralRows(bool tiny) {
  std::vector<RowSpec> rows;
  const std::vector<Index> sizes2 = tiny ? std::vector<Index>{64} : std::vector<Index>{256, 512, 1024};
  const std::vector<Index> sizes3 = tiny ? std::vector<Index>{16} : std::vector<Index>{64, 128, 256};
  for (int dim : {2, 3})
    for (Index n : dim == 2 ? sizes2 : sizes3)
      for (int w : {7, 11, 17}) {
        RowSpec r;
        r.algo = Algo::Bilateral;
        r.dim = dim;
        r.n = n;
        r.window = w;
        rows.push_back(r);
      }
  return rows;
}

void setBilateralParams(RowSpec& row) {
  // The quality study's rule (sigma_s = r/2, sigma_r = 2 sigma_n): the benchmark times the
  // filter as it is used on CT at SNR 25. The cost does not depend on the sigmas.
  row.bilateral = qualityBilateralParams(row.window, row.noiseSigma);
}

double bilateralUnits(RowSpec const& row) {
  return static_cast<double>(row.voxels()) * static_cast<double>(row.taps());
}

namespace {
template <BilateralVariant V>
void launchVariant(DeviceExec const& exec, ConstImageView<DeviceMem> in, ImageView<DeviceMem> out,
                   RowSpec const& row) {
  BilateralParams p = row.bilateral;
  p.variant = V;
  gpu::bilateral(exec, in, out, p);
}
}  // namespace

std::vector<DeviceVariant> const& bilateralVariants() {
  static const std::vector<DeviceVariant> v{
      {toString(BilateralVariant::Naive), &launchVariant<BilateralVariant::Naive>, &bilateralUnits},
      {toString(BilateralVariant::ScratchTiled), &launchVariant<BilateralVariant::ScratchTiled>, &bilateralUnits}};
  return v;
}

void referenceBilateral(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
                        RowSpec const& row) {
  ref::bilateral(in, out, row.bilateral);
}

}  // namespace kortex::bench::ct
