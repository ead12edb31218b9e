// Quality study (the paper's experiment, in 2D and 3D): a clean image gets additive Gaussian
// noise at SNR 25 (SNR = mean voxel value / noise sigma, core/Phantom.hpp), then the bilateral
// filter and NLM run at windows 7, 11 and 17 with parameters scaled to the noise sigma; PSNR
// and SSIM (validation/Metrics.hpp, data range L = max - min of the CLEAN image) are reported
// before and after, and a PNG montage (noisy | BF | NLM) is written when image I/O is built.
//
// Parameter rules (sigma_n = noise sigma; window w = 2r + 1):
//   bilateral: radius r = (w-1)/2, sigma_spatial = r / 2 (the window spans +-2 sigma_s, so the
//              truncated Gaussian keeps ~95% of its mass per axis and larger windows smooth
//              more, as in the paper), sigma_range = 2 sigma_n (two noisy samples of one flat
//              region differ by N(0, 2 sigma_n^2); with sigma_r = 2 sigma_n their mean range
//              weight is 1/sqrt(1.5) ~ 0.82, while across a step of 6 sigma_n - far below the
//              contrasts of CT soft tissue vs bone or of the phantom's ellipses - the weight
//              drops to e^-4.5 ~ 0.011).
//   NLM:       search radius R = (w-1)/2, patch radius 3 (7x7 as in the paper; 3D: patch radius
//              1, i.e. 3x3x3, see kQuality3DPatchRadius), h = sigma_n: Kortex's weight uses the
//              MEAN squared patch difference, whose expectation for two noisy copies of the same
//              patch is 2 sigma_n^2, so such a patch gets weight e^-2 ~ 0.14 and a patch whose
//              mean squared signal difference exceeds 2 sigma_n^2 gets < e^-4. (0.8 - 1.2 sigma_n
//              is the usual range; 1.0 sits in the middle.)
// CT images in Hounsfield units are shifted to attenuation-like values (HU + 1024, clamped at 0)
// before the SNR is applied, so that air is ~0 as in the paper's reconstructed attenuation
// (an SNR relative to a mean in HU, which is negative for a head slice with air, is undefined).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/Backend.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"
#include "core/QualitySettings.hpp"

namespace kortex::validation {

// The filter settings: core/QualitySettings.hpp (kQualitySnr, qualityBilateralParams, ...).

struct QualityOptions {
  double snr = kQualitySnr;
  std::uint64_t noiseSeed = 20240601;
  std::vector<int> windows{7, 11, 17};
  int patchRadius2D = kQualityPatchRadius;
  int patchRadius3D = kQuality3DPatchRadius;
  // Backend::Auto = Kokkos default execution space when it is a GPU, else the CPU reference.
  Backend backend = Backend::Auto;
  // Folder for PNG montages (noisy | BF | NLM, one row per window; 3D: the middle axial slice).
  // Empty: none. Needs Kortex built with image I/O (VTK); otherwise montages are skipped.
  std::string montageDir;
  // Grey window of the montage; used when displayLo < displayHi, else the clean image's range.
  float displayLo = 0.0f, displayHi = 0.0f;
};

struct QualityFilterResult {
  std::string filter;  // "bilateral" | "nlm"
  int window = 0;      // 2r+1 (bilateral) or 2R+1 (NLM)
  std::string params;
  BilateralParams bilateral;
  NlmParams nlm;
  double psnr = 0.0;  // dB, against the clean image
  double ssim = 0.0;
  double ms = 0.0;    // filter time (one run, kernel + transfers on a device backend)
  bool improvedPsnr = false;
};

struct QualityImageResult {
  std::string name;    // "shepp_logan_phantom.png", "head_ge/01.dcm", ...
  std::string source;  // file path, or "embedded phantom"
  std::string note;    // preprocessing (e.g. the HU offset)
  Geometry geometry;
  double mean = 0.0;        // of the clean image (defines the SNR)
  double noiseSigma = 0.0;  // mean / SNR
  double snr = 0.0;
  double dataRange = 0.0;   // L for PSNR/SSIM: max - min of the clean image
  double psnrNoisy = 0.0;
  double ssimNoisy = 0.0;
  std::string backend;      // "cpu reference (N threads)" or the Kokkos space
  std::vector<QualityFilterResult> filters;
  std::string montagePath;  // empty when none was written
  bool pass = false;        // every filter raised the PSNR
  double wallMs = 0.0;      // whole study of this image (noise, filters, metrics, montage)
};

// Runs the study on one clean image (2D or 3D; 3D uses opt.patchRadius3D).
QualityImageResult runQualityImage(HostImage const& clean, std::string const& name,
                                   std::string const& source, QualityOptions const& opt);

// Shifts a CT image from Hounsfield units to attenuation-like values: max(HU + 1024, 0).
HostImage hounsfieldToAttenuation(HostImage const& hu);

struct QualityStudyOptions {
  bool quick = false;
  std::string dataDir;   // empty: embedded phantoms only
  QualityOptions quality;
};

// The study of the validation report. With dataDir (and image I/O built): the Shepp-Logan png
// (slices2d/shepp_logan_phantom.png), the head CT slices (ct/head_ge/*.dcm; quick: the first
// two; shifted to HU + 1024) and one IXI T1 volume (mri/ixi_2mm/, the first file). Without data
// (or without image I/O): the embedded Shepp-Logan 2D (256^2) and 3D (64^3) phantoms. 2D images
// use windows 7, 11, 17; 3D volumes windows 7 (quick) or 7 and 11 (full) with the 3x3x3 patch.
// Backend: opt.quality.backend (Auto: the Kokkos default space when it is a GPU, else the CPU
// reference). `skipped` receives a line for every requested input that could not be used.
std::vector<QualityImageResult> runQualityStudy(QualityStudyOptions const& opt,
                                                std::vector<std::string>* skipped = nullptr);

// True when this build can read real images (Kortex built with VTK image I/O).
bool qualityHasImageIo();
// Reads an image with io::readImage (throws Unsupported when built without image I/O).
HostImage qualityReadImage(std::string const& path);

nlohmann::json toJson(QualityImageResult const& r);
std::string toMarkdown(std::vector<QualityImageResult> const& results);

}  // namespace kortex::validation
