#define BOOST_TEST_MODULE Quality
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "io/ImageIO.hpp"
#include "validation/Quality.hpp"

// The paper's quality study on real images: Gaussian noise at SNR 25 (mean / sigma), bilateral
// filter and NLM at windows 7, 11 and 17 with the parameter rules of validation/Quality.hpp.
// Both filters must raise the PSNR against the clean image. The backend is the one the CLI's
// "auto" picks (the CPU reference on a machine without a GPU backend).

using namespace kortex;
using namespace kortex::validation;
namespace fs = std::filesystem;

namespace {

void checkRaised(QualityImageResult const& r, std::size_t expectedFilters) {
  BOOST_TEST_MESSAGE(toMarkdown(std::vector<QualityImageResult>{r}));
  BOOST_TEST(r.filters.size() == expectedFilters);
  BOOST_TEST(r.noiseSigma > 0.0);
  BOOST_TEST(r.psnrNoisy > 0.0);
  for (auto const& f : r.filters) {
    BOOST_TEST_CONTEXT(r.name << " " << f.filter << " window " << f.window) {
      BOOST_TEST(f.psnr > r.psnrNoisy);
      BOOST_TEST(f.improvedPsnr);
      BOOST_TEST(std::isfinite(f.ssim));
    }
  }
  BOOST_TEST(r.pass);
}

fs::path tempDir(std::string const& tag) {
  const fs::path d = fs::temp_directory_path() / ("kortex-tstQuality-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(shepp_logan_png_snr25) {
  if (!test::requireData("slices2d/shepp_logan_phantom.png")) return;
  const auto path = test::dataDir() / "slices2d" / "shepp_logan_phantom.png";
  const fs::path out = tempDir("shepp");
  QualityOptions q;
  q.montageDir = out.string();
  const auto r = runQualityImage(io::readImage(path), "shepp_logan_phantom.png", path.string(), q);
  checkRaised(r, 6);
  // Larger windows remove more noise on this piecewise-constant phantom (the paper's finding).
  BOOST_TEST(r.filters[4].psnr > r.filters[0].psnr);  // BF 17 > BF 7
  BOOST_TEST(!r.montagePath.empty());
  BOOST_TEST(fs::exists(r.montagePath));
  const HostImage montage = io::readImage(r.montagePath);
  // 3 columns (noisy | BF | NLM) x 3 rows (windows), 2-pixel separators.
  BOOST_TEST(montage.geometry.nx() == 3 * r.geometry.nx() + 4);
  BOOST_TEST(montage.geometry.ny() == 3 * r.geometry.ny() + 4);
  fs::remove_all(out);
}

BOOST_AUTO_TEST_CASE(head_ct_slices_snr25) {
  if (!test::requireData("ct/head_ge")) return;
  std::vector<fs::path> slices;
  for (auto const& e : fs::directory_iterator(test::dataDir() / "ct" / "head_ge"))
    if (e.path().extension() == ".dcm") slices.push_back(e.path());
  std::sort(slices.begin(), slices.end());
  BOOST_TEST_REQUIRE(!slices.empty());
  for (auto const& s : slices) {
    const HostImage hu = io::readImage(s);
    const auto r = runQualityImage(hounsfieldToAttenuation(hu), s.filename().string(), s.string(),
                                   QualityOptions{});
    checkRaised(r, 6);
  }
}

BOOST_AUTO_TEST_CASE(ixi_t1_nlm3d_snr25) {
  if (!test::requireData("mri/ixi_2mm")) return;
  std::vector<fs::path> vols;
  for (auto const& e : fs::directory_iterator(test::dataDir() / "mri" / "ixi_2mm"))
    if (e.path().filename().string().find(".nii") != std::string::npos) vols.push_back(e.path());
  std::sort(vols.begin(), vols.end());
  BOOST_TEST_REQUIRE(!vols.empty());
  const HostImage vol = io::readImage(vols.front());
  BOOST_TEST(vol.dimension() == 3);
  QualityOptions q;
  q.windows = {7};
  const auto r = runQualityImage(vol, vols.front().filename().string(), vols.front().string(), q);
  checkRaised(r, 2);
  for (auto const& f : r.filters)
    if (f.filter == "nlm") BOOST_TEST(f.nlm.patchRadius == kQuality3DPatchRadius);
}

KORTEX_REALDATA_TEST_MAIN()
