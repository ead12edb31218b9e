#include "validation/Quality.hpp"

#include <Kokkos_Core.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/Errors.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/nlm/Nlm.hpp"
#include "reference_cpu/Bilateral.hpp"
#include "reference_cpu/Nlm.hpp"
#include "validation/Harness.hpp"
#include "validation/Metrics.hpp"
#include "validation/QualitySupport.hpp"
#include "validation/Report.hpp"

#if KORTEX_VALIDATION_HAVE_IO
#include "io/ImageIO.hpp"
#endif

namespace kortex::validation {

namespace fs = std::filesystem;

HostImage hounsfieldToAttenuation(HostImage const& hu) {
  HostImage out("kortex::validation::attenuation", hu.geometry);
  out.metadata = hu.metadata;
  const float* p = hu.data.data();
  float* q = out.data.data();
  const Index n = hu.numVoxels();
  for (Index i = 0; i < n; ++i) q[i] = std::max(0.0f, p[i] + 1024.0f);
  return out;
}

bool qualityHasImageIo() { return KORTEX_VALIDATION_HAVE_IO != 0; }

HostImage qualityReadImage(std::string const& path) {
#if KORTEX_VALIDATION_HAVE_IO
  return io::readImage(path);
#else
  throw Unsupported("cannot read '" + path + "': Kortex was built without image I/O (VTK)");
#endif
}

using detail::backendLabel;
using detail::middleSlice;
using detail::runOnBackend;
#if KORTEX_VALIDATION_HAVE_IO
using detail::composeGrid;
using detail::stripImageExtension;
#endif
using Clock = detail::Clock;

QualityImageResult runQualityImage(HostImage const& clean, std::string const& name,
                                   std::string const& source, QualityOptions const& opt) {
  const auto wall0 = Clock::now();
  if (clean.numVoxels() == 0) throw InvalidArgument("quality study: empty image '" + name + "'");
  if (!allFinite(clean)) throw InvalidArgument("quality study: image '" + name + "' has NaN/Inf voxels");
  QualityImageResult r;
  r.name = name;
  r.source = source;
  r.geometry = clean.geometry;
  r.snr = opt.snr;
  r.mean = meanValue(clean);
  if (!(r.mean > 0.0))
    throw InvalidArgument("quality study: image '" + name +
                          "' has a non-positive mean, so SNR = mean / sigma is undefined");
  r.noiseSigma = noiseSigmaForSnr(clean, opt.snr);
  r.dataRange = dataRange(clean);
  if (!(r.dataRange > 0.0)) throw InvalidArgument("quality study: image '" + name + "' is constant");
  const Backend backend = resolve(opt.backend);
  r.backend = backendLabel(backend);

  const HostImage noisy = addGaussianNoise(clean, r.noiseSigma, opt.noiseSeed);
  r.psnrNoisy = psnr(noisy, clean, r.dataRange);
  r.ssimNoisy = ssim(noisy, clean, r.dataRange);
  const int patchRadius = clean.dimension() == 3 ? opt.patchRadius3D : opt.patchRadius2D;

  std::vector<std::vector<HostImage>> montageRows;
  r.pass = true;
  for (int w : opt.windows) {
    std::vector<HostImage> row{middleSlice(noisy)};
    {
      QualityFilterResult f;
      f.filter = "bilateral";
      f.window = w;
      f.bilateral = qualityBilateralParams(w, r.noiseSigma);
      f.bilateral.validateFor(clean.geometry);
      f.params = describeParams(f.bilateral);
      const BilateralParams p = f.bilateral;
      HostImage out = runOnBackend(
          noisy, backend,
          [&](auto in, auto outView) { ref::bilateral(in, outView, p); },
          [&](auto const& exec, auto in, auto outView) { gpu::bilateral(exec, in, outView, p); },
          &f.ms);
      f.psnr = psnr(out, clean, r.dataRange);
      f.ssim = ssim(out, clean, r.dataRange);
      f.improvedPsnr = f.psnr > r.psnrNoisy;
      r.pass = r.pass && f.improvedPsnr;
      row.push_back(middleSlice(out));
      r.filters.push_back(std::move(f));
    }
    {
      QualityFilterResult f;
      f.filter = "nlm";
      f.window = w;
      f.nlm = qualityNlmParams(w, r.noiseSigma, patchRadius);
      f.nlm.validateFor(clean.geometry);
      f.params = describeParams(f.nlm);
      const NlmParams p = f.nlm;
      HostImage out = runOnBackend(
          noisy, backend, [&](auto in, auto outView) { ref::nlm(in, outView, p); },
          [&](auto const& exec, auto in, auto outView) { gpu::nlm(exec, in, outView, p); }, &f.ms);
      f.psnr = psnr(out, clean, r.dataRange);
      f.ssim = ssim(out, clean, r.dataRange);
      f.improvedPsnr = f.psnr > r.psnrNoisy;
      r.pass = r.pass && f.improvedPsnr;
      row.push_back(middleSlice(out));
      r.filters.push_back(std::move(f));
    }
    montageRows.push_back(std::move(row));
  }

  if (!opt.montageDir.empty()) {
#if KORTEX_VALIDATION_HAVE_IO
    fs::create_directories(opt.montageDir);
    const std::string file =
        (fs::path(opt.montageDir) / ("quality_" + sanitizeForFileName(stripImageExtension(name)) + ".png"))
            .string();
    // One grid image: rows = windows, columns = noisy | BF | NLM, 2-pixel white separators;
    // every tile shares one grey-level window, the clean image's [min, max].
    float lo = static_cast<float>(minValue(clean)), hi = static_cast<float>(maxValue(clean));
    if (opt.displayLo < opt.displayHi) {
      lo = opt.displayLo;
      hi = opt.displayHi;
    }
    io::writePngMontage({composeGrid(montageRows, hi)}, file, lo, hi);
    r.montagePath = file;
#endif
  }
  r.wallMs = msSince(wall0);
  return r;
}

std::vector<QualityImageResult> runQualityStudy(QualityStudyOptions const& opt,
                                                std::vector<std::string>* skipped) {
  std::vector<QualityImageResult> results;
  auto skip = [&](std::string const& why) {
    if (skipped) skipped->push_back(why);
  };
  QualityOptions q2 = opt.quality;
  QualityOptions q3 = opt.quality;
  // 3D: windows 7 (quick) or 7 and 11 (full); patch 3x3x3 (kQuality3DPatchRadius).
  q3.windows = opt.quick ? std::vector<int>{7} : std::vector<int>{7, 11};

  bool usedData = false;
  if (!opt.dataDir.empty()) {
    const fs::path d(opt.dataDir);
    if (!fs::is_directory(d)) throw IoError("data folder '" + opt.dataDir + "' does not exist");
    if (!qualityHasImageIo()) {
      skip("real data in '" + opt.dataDir + "': Kortex was built without image I/O (VTK)");
    } else {
      const fs::path shepp = d / "slices2d" / "shepp_logan_phantom.png";
      if (fs::exists(shepp)) {
        results.push_back(runQualityImage(qualityReadImage(shepp.string()), "shepp_logan_phantom.png",
                                          shepp.string(), q2));
        usedData = true;
      } else {
        skip("missing " + shepp.string());
      }
      const fs::path ct = d / "ct" / "head_ge";
      std::vector<fs::path> slices;
      if (fs::is_directory(ct))
        for (auto const& e : fs::directory_iterator(ct))
          if (e.path().extension() == ".dcm") slices.push_back(e.path());
      std::sort(slices.begin(), slices.end());
      if (opt.quick && slices.size() > 2) slices.resize(2);
      if (slices.empty()) skip("no DICOM slices in " + ct.string());
      for (auto const& s : slices) {
        HostImage att = hounsfieldToAttenuation(qualityReadImage(s.string()));
        QualityOptions qct = q2;
        // Montage grey window: HU -50 .. 130 (soft tissue, where the noise is visible).
        qct.displayLo = 1024.0f - 50.0f;
        qct.displayHi = 1024.0f + 130.0f;
        auto r = runQualityImage(att, "head_ge/" + s.filename().string(), s.string(), qct);
        r.note = "CT in HU shifted to attenuation-like values max(HU + 1024, 0) before the SNR";
        results.push_back(std::move(r));
        usedData = true;
      }
      const fs::path ixi = d / "mri" / "ixi_2mm";
      std::vector<fs::path> vols;
      if (fs::is_directory(ixi))
        for (auto const& e : fs::directory_iterator(ixi))
          if (e.path().string().size() > 7 &&
              e.path().string().compare(e.path().string().size() - 7, 7, ".nii.gz") == 0)
            vols.push_back(e.path());
      std::sort(vols.begin(), vols.end());
      if (vols.empty()) {
        skip("no IXI volume in " + ixi.string());
      } else {
        results.push_back(runQualityImage(qualityReadImage(vols.front().string()),
                                          "ixi_2mm/" + vols.front().filename().string(),
                                          vols.front().string(), q3));
        usedData = true;
      }
    }
  }
  if (!usedData) {
    results.push_back(runQualityImage(sheppLogan2D(256), "shepp-logan-2d-256", "embedded phantom", q2));
    results.push_back(runQualityImage(sheppLogan3D(64), "shepp-logan-3d-64", "embedded phantom", q3));
  }
  return results;
}

nlohmann::json toJson(QualityImageResult const& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["source"] = r.source;
  if (!r.note.empty()) j["note"] = r.note;
  j["size"] = {r.geometry.nx(), r.geometry.ny(), r.geometry.nz()};
  j["dimension"] = r.geometry.dimension;
  j["mean"] = r.mean;
  j["snr"] = r.snr;
  j["noise_sigma"] = r.noiseSigma;
  j["data_range"] = r.dataRange;
  j["psnr_definition"] = "10 log10(L^2 / MSE), L = max - min of the clean image";
  j["ssim_definition"] =
      "skimage structural_similarity(gaussian_weights=True, sigma=1.5, "
      "use_sample_covariance=False, data_range=L)";
  j["noisy"] = {{"psnr_db", r.psnrNoisy}, {"ssim", r.ssimNoisy}};
  j["backend"] = r.backend;
  j["pass"] = r.pass;
  j["wall_ms"] = r.wallMs;
  if (!r.montagePath.empty()) j["montage"] = r.montagePath;
  j["filters"] = nlohmann::json::array();
  for (auto const& f : r.filters) {
    nlohmann::json jf{{"filter", f.filter}, {"window", f.window},    {"params", f.params},
                      {"psnr_db", f.psnr},  {"ssim", f.ssim},        {"ms", f.ms},
                      {"improved_psnr", f.improvedPsnr}};
    if (f.filter == "bilateral")
      jf["param_values"] = {{"radius", f.bilateral.radius},
                            {"sigma_spatial", f.bilateral.sigmaSpatial},
                            {"sigma_range", f.bilateral.sigmaRange}};
    else
      jf["param_values"] = {{"patch_radius", f.nlm.patchRadius},
                            {"search_radius", f.nlm.searchRadius},
                            {"h", f.nlm.h}};
    j["filters"].push_back(jf);
  }
  return j;
}

std::string toMarkdown(std::vector<QualityImageResult> const& results) {
  std::ostringstream os;
  os << "Gaussian noise at SNR " << fmt(results.empty() ? kQualitySnr : results.front().snr, 3)
     << " (sigma = mean / SNR). PSNR = 10 log10(L^2/MSE) and SSIM (scikit-image definition, "
        "Gaussian window sigma 1.5) against the clean image, L = max - min of the clean image. "
        "BF: sigma_s = r/2, sigma_r = "
     << fmt(kQualityBilateralRangeFactor, 2) << " sigma_n; NLM: h = " << fmt(kQualityNlmHFactor, 2)
     << " sigma_n, patch 7x7 (2D) / 3x3x3 (3D).\n\n";
  os << "| image | size | sigma_n | filter | window | params | PSNR dB (noisy -> filtered) | "
        "SSIM (noisy -> filtered) | ms | raised PSNR |\n"
     << "|---|---|---:|---|---:|---|---:|---:|---:|---|\n";
  for (auto const& r : results) {
    std::ostringstream size;
    size << r.geometry.nx() << "x" << r.geometry.ny();
    if (r.geometry.dimension == 3) size << "x" << r.geometry.nz();
    for (auto const& f : r.filters)
      os << "| " << r.name << " | " << size.str() << " | " << fmt(r.noiseSigma, 4) << " | "
         << f.filter << " | " << f.window << " | " << f.params << " | " << fmt(r.psnrNoisy, 4)
         << " -> " << fmt(f.psnr, 4) << " | " << fmt(r.ssimNoisy, 4) << " -> " << fmt(f.ssim, 4)
         << " | " << fmtMs(f.ms) << " | " << (f.improvedPsnr ? "yes" : "**NO**") << " |\n";
  }
  os << "\nBackend: " << (results.empty() ? std::string("-") : results.front().backend) << ".";
  for (auto const& r : results) {
    if (!r.note.empty()) {
      os << " CT: " << r.note << ".";
      break;
    }
  }
  bool anyMontage = false;
  for (auto const& r : results) anyMontage = anyMontage || !r.montagePath.empty();
  if (anyMontage) {
    os << "\n\nMontages (rows = windows, columns = noisy | BF | NLM):";
    for (auto const& r : results)
      if (!r.montagePath.empty()) os << "\n- " << r.name << ": `" << r.montagePath << "`";
  }
  os << "\n";
  return os.str();
}

}  // namespace kortex::validation
