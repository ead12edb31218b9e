#include "validation/QualityMultires.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/multires/Multires.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Multires.hpp"
#include "validation/Metrics.hpp"
#include "validation/Quality.hpp"
#include "validation/QualitySupport.hpp"
#include "validation/Report.hpp"

#if KORTEX_VALIDATION_HAVE_IO
#include "io/ImageIO.hpp"
#endif

namespace kortex::validation {

namespace fs = std::filesystem;

MultiresParams qualityMultiresParams(Geometry const& g, double noiseSigma) {
  MultiresParams p;
  p.levels = std::min(kMultiresQualityLevels, maxLevels(g.nx(), g.ny()));
  p.radius = kMultiresQualityRadius;
  p.sigmaSpatial = kMultiresQualitySigmaD;
  p.sigmaRange = static_cast<float>(kMultiresQualityRangeFactor * noiseSigma);
  return p;
}

BilateralParams qualitySingleLevelParams(double noiseSigma) {
  BilateralParams p;
  p.radius = kMultiresQualityRadius;
  p.sigmaSpatial = kMultiresQualitySigmaD;
  p.sigmaRange = static_cast<float>(kQualityBilateralRangeFactor * noiseSigma);
  p.variant = BilateralVariant::ScratchTiled;
  return p;
}

MultiresQualityResult runMultiresQualityImage(HostImage const& clean, std::string const& name,
                                              std::string const& source,
                                              MultiresQualityOptions const& opt) {
  const auto wall0 = detail::Clock::now();
  if (clean.dimension() != 2)
    throw InvalidArgument("multires quality study: image '" + name + "' is not 2D");
  if (!allFinite(clean))
    throw InvalidArgument("multires quality study: image '" + name + "' has NaN/Inf voxels");
  MultiresQualityResult r;
  r.name = name;
  r.source = source;
  r.geometry = clean.geometry;
  r.snr = opt.snr;
  if (!(meanValue(clean) > 0.0))
    throw InvalidArgument("multires quality study: image '" + name +
                          "' has a non-positive mean, so SNR = mean / sigma is undefined");
  r.noiseSigma = noiseSigmaForSnr(clean, opt.snr);
  r.dataRange = dataRange(clean);
  if (!(r.dataRange > 0.0)) throw InvalidArgument("multires quality study: image '" + name + "' is constant");
  if (maxLevels(clean.geometry.nx(), clean.geometry.ny()) < 1 ||
      clean.geometry.nx() <= kMultiresQualityRadius || clean.geometry.ny() <= kMultiresQualityRadius)
    throw InvalidArgument("multires quality study: image '" + name + "' is too small");
  const Backend backend = resolve(opt.backend);
  r.backend = detail::backendLabel(backend);

  const HostImage noisy = addGaussianNoise(clean, r.noiseSigma, opt.noiseSeed);
  r.psnrNoisy = psnr(noisy, clean, r.dataRange);
  r.ssimNoisy = ssim(noisy, clean, r.dataRange);

  r.bilateral = qualitySingleLevelParams(r.noiseSigma);
  const BilateralParams bp = r.bilateral;
  const HostImage bf = detail::runOnBackend(
      noisy, backend, [&](auto in, auto out) { ref::bilateral(in, out, bp); },
      [&](auto const& exec, auto in, auto out) { gpu::bilateral(exec, in, out, bp); }, &r.msBilateral);
  r.psnrBilateral = psnr(bf, clean, r.dataRange);
  r.ssimBilateral = ssim(bf, clean, r.dataRange);

  r.multires = qualityMultiresParams(clean.geometry, r.noiseSigma);
  const MultiresParams mp = r.multires;
  const HostImage mr = detail::runOnBackend(
      noisy, backend, [&](auto in, auto out) { ref::multires(in, out, mp); },
      [&](auto const& exec, auto in, auto out) { gpu::multires(exec, in, out, mp); }, &r.msMultires);
  r.psnrMultires = psnr(mr, clean, r.dataRange);
  r.ssimMultires = ssim(mr, clean, r.dataRange);
  r.pass = r.psnrMultires > r.psnrNoisy;

  if (!opt.montageDir.empty()) {
#if KORTEX_VALIDATION_HAVE_IO
    fs::create_directories(opt.montageDir);
    const std::string file =
        (fs::path(opt.montageDir) /
         ("multires_" + sanitizeForFileName(detail::stripImageExtension(name)) + ".png"))
            .string();
    const float lo = static_cast<float>(minValue(clean)), hi = static_cast<float>(maxValue(clean));
    io::writePngMontage({detail::composeGrid({{noisy, bf, mr}}, hi)}, file, lo, hi);
    r.montagePath = file;
#endif
  }
  r.wallMs = msSince(wall0);
  return r;
}

std::vector<MultiresQualityResult> runMultiresQualityStudy(MultiresQualityOptions const& opt,
                                                           std::vector<std::string>* skipped) {
  std::vector<MultiresQualityResult> results;
  auto skip = [&](std::string const& why) {
    if (skipped) skipped->push_back(why);
  };
  bool usedData = false;
  if (!opt.dataDir.empty()) {
    const fs::path d(opt.dataDir);
    if (!fs::is_directory(d)) throw IoError("data folder '" + opt.dataDir + "' does not exist");
    if (!qualityHasImageIo()) {
      skip("multires quality on real data: Kortex was built without image I/O (VTK)");
    } else {
      const fs::path s2 = d / "slices2d";
      std::vector<fs::path> slices;
      if (fs::is_directory(s2))
        for (auto const& e : fs::directory_iterator(s2)) {
          const std::string ext = e.path().extension().string();
          if (ext == ".png" || ext == ".jpg") slices.push_back(e.path());
        }
      std::sort(slices.begin(), slices.end());
      if (opt.quick) {
        std::vector<fs::path> keep;
        for (auto const& s : slices)
          if (s.filename() == "shepp_logan_phantom.png" || s.filename() == "BrainT1Slice.png") keep.push_back(s);
        slices = keep;
      }
      if (slices.empty()) skip("no 2D slices in " + s2.string());
      for (auto const& s : slices) {
        results.push_back(runMultiresQualityImage(qualityReadImage(s.string()),
                                                  "slices2d/" + s.filename().string(), s.string(), opt));
        usedData = true;
      }
      const fs::path ixi = d / "mri" / "ixi_2mm";
      std::vector<fs::path> vols;
      if (fs::is_directory(ixi))
        for (auto const& e : fs::directory_iterator(ixi)) {
          const std::string p = e.path().string();
          if (p.size() > 7 && p.compare(p.size() - 7, 7, ".nii.gz") == 0) vols.push_back(e.path());
        }
      std::sort(vols.begin(), vols.end());
      if (vols.size() > (opt.quick ? 1u : 3u)) vols.resize(opt.quick ? 1 : 3);
      if (vols.empty()) skip("no IXI volume in " + ixi.string());
      for (auto const& v : vols) {
        const HostImage slice = detail::middleSlice(qualityReadImage(v.string()));
        results.push_back(runMultiresQualityImage(
            slice, "ixi_2mm/" + v.filename().string() + " (middle axial slice)", v.string(), opt));
        usedData = true;
      }
    }
  }
  if (!usedData)
    results.push_back(runMultiresQualityImage(sheppLogan2D(256), "shepp-logan-2d-256", "embedded phantom", opt));
  return results;
}

nlohmann::json toJson(MultiresQualityResult const& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["source"] = r.source;
  j["size"] = {r.geometry.nx(), r.geometry.ny()};
  j["snr"] = r.snr;
  j["noise_sigma"] = r.noiseSigma;
  j["data_range"] = r.dataRange;
  j["noisy"] = {{"psnr_db", r.psnrNoisy}, {"ssim", r.ssimNoisy}};
  j["bilateral"] = {{"psnr_db", r.psnrBilateral},
                    {"ssim", r.ssimBilateral},
                    {"ms", r.msBilateral},
                    {"radius", r.bilateral.radius},
                    {"sigma_spatial", r.bilateral.sigmaSpatial},
                    {"sigma_range", r.bilateral.sigmaRange}};
  j["multires"] = {{"psnr_db", r.psnrMultires},
                   {"ssim", r.ssimMultires},
                   {"ms", r.msMultires},
                   {"levels", r.multires.levels},
                   {"radius", r.multires.radius},
                   {"sigma_spatial", r.multires.sigmaSpatial},
                   {"sigma_range", r.multires.sigmaRange}};
  j["backend"] = r.backend;
  j["pass"] = r.pass;
  j["wall_ms"] = r.wallMs;
  if (!r.montagePath.empty()) j["montage"] = r.montagePath;
  return j;
}

std::string toMarkdown(std::vector<MultiresQualityResult> const& results) {
  std::ostringstream os;
  os << "Gaussian noise at SNR " << fmt(results.empty() ? 25.0 : results.front().snr, 3)
     << "; bilateral r = " << kMultiresQualityRadius << " (5x5), sigma_d = " << fmt(kMultiresQualitySigmaD, 2)
     << ", once (single level, sigma_r = " << fmt(kQualityBilateralRangeFactor, 2)
     << " sigma_n) or on every layer of the multiresolution filter (5 levels, fewer for small images; sigma_r = "
     << fmt(kMultiresQualityRangeFactor, 2) << " sigma_n: validation/QualityMultires.hpp says why). PSNR / SSIM against the clean image (L = max - min of the clean image).\n\n";
  os << "| image | size | levels | noisy PSNR / SSIM | bilateral PSNR / SSIM | multires PSNR / SSIM | "
        "bilateral ms | multires ms | multires raised PSNR |\n"
     << "|---|---|---:|---|---|---|---:|---:|---|\n";
  for (auto const& r : results)
    os << "| " << r.name << " | " << r.geometry.nx() << "x" << r.geometry.ny() << " | " << r.multires.levels
       << " | " << fmt(r.psnrNoisy, 4) << " / " << fmt(r.ssimNoisy, 3) << " | " << fmt(r.psnrBilateral, 4)
       << " / " << fmt(r.ssimBilateral, 3) << " | " << fmt(r.psnrMultires, 4) << " / "
       << fmt(r.ssimMultires, 3) << " | " << fmtMs(r.msBilateral) << " | " << fmtMs(r.msMultires) << " | "
       << (r.pass ? "yes" : "**NO**") << " |\n";
  os << "\nBackend: " << (results.empty() ? std::string("-") : results.front().backend) << ".";
  bool any = false;
  for (auto const& r : results) any = any || !r.montagePath.empty();
  if (any) {
    os << "\n\nMontages (noisy | bilateral | multires):";
    for (auto const& r : results)
      if (!r.montagePath.empty()) os << "\n- " << r.name << ": `" << r.montagePath << "`";
  }
  os << "\n";
  return os.str();
}

}  // namespace kortex::validation
