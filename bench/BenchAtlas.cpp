#include "bench/BenchAtlas.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "bench/BenchCommon.hpp"
#include "core/Atlas.hpp"
#include "core/Errors.hpp"
#include "core/Intensity.hpp"
#include "core/Phantom.hpp"
#include "core/Timing.hpp"
#include "gpu/Resources.hpp"
#include "gpu/atlas/Atlas.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "reference_cpu/Atlas.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::bench {
namespace {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
namespace fs = std::filesystem;

// The targets on one H100 / H200.
constexpr double kTargetIterationS = 0.1;   // one iteration over 315 subjects at 144x192x160
constexpr double kTargetWholeS = 8.0;       // the whole 315-subject multi-scale atlas (25 + 50)
constexpr double kPaperMultiscaleGain = 3.5;  // Fig 13: single scale 200 vs 25 + 50
// Memory traffic per voxel and subject of one atlas iteration (float32, the passes of
// gpu/atlas/Atlas.cpp at their minimum): template sum (read W: 4; the int64 sum's read + write
// shared by 8 subjects: 2), force (W, T -> F: 20), spectral solve (R2C + C2R of 3 components, real
// field and half spectrum read and written: 48), max |v| (12), composition (u gathered, v read, u'
// written: 36), det (12), mean displacement sum (u: 12; its sum: 6), centring composition (36),
// det (12), warp (I gathered, u read, W written: 20), snap (8), mismatch (W, T: 8). Total 236.
constexpr double kIterationBytesPerVoxel = 236.0;

using common::fixedDecimals;
using common::selected;

// img resampled (trilinear, centre to centre, clamp) onto g.
HostImage resampleTo(HostImage const& img, Geometry const& g) {
  HostImage out("kortex::bench::resampled", g);
  const Geometry& s = img.geometry;
  const double fx = double(s.nx()) / double(g.nx()), fy = double(s.ny()) / double(g.ny()), fz = double(s.nz()) / double(g.nz());
  auto at = [&](Index z, Index y, Index x) {
    return img.data(std::clamp<Index>(z, 0, s.nz() - 1), std::clamp<Index>(y, 0, s.ny() - 1), std::clamp<Index>(x, 0, s.nx() - 1));
  };
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const double px = (x + 0.5) * fx - 0.5, py = (y + 0.5) * fy - 0.5, pz = (z + 0.5) * fz - 0.5;
        const Index x0 = Index(std::floor(px)), y0 = Index(std::floor(py)), z0 = Index(std::floor(pz));
        const double ax = px - x0, ay = py - y0, az = pz - z0;
        double v = 0.0;
        for (int c = 0; c < 8; ++c) {
          const double w = (c & 1 ? ax : 1 - ax) * (c & 2 ? ay : 1 - ay) * (c & 4 ? az : 1 - az);
          v += w * at(z0 + (c >> 2 & 1), y0 + (c >> 1 & 1), x0 + (c & 1));
        }
        out.data(z, y, x) = float(v);
      }
  return out;
}

// The base images: the IXI volumes (normalised, resampled to g) or one structured phantom.
std::vector<HostImage> baseImages(BenchOptions const& opt, Geometry const& g, std::string& source) {
  std::vector<HostImage> out;
  if (!opt.dataDir.empty()) {
    std::vector<fs::path> files;
    for (const char* sub : {"ixi_2mm", "ixi_2mm_more"}) {
      const fs::path d = fs::path(opt.dataDir) / "mri" / sub;
      if (!fs::is_directory(d)) continue;
      for (auto const& e : fs::recursive_directory_iterator(d)) {
        const std::string p = e.path().string();
        if (p.size() > 7 && p.substr(p.size() - 7) == ".nii.gz" && p.find("label") == std::string::npos)
          files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (auto const& f : files) out.push_back(resampleTo(normaliseIntensity(io::readImage(f), IntensityParams{}, f.string()), g));
    if (!out.empty()) {
      source = std::to_string(out.size()) + " IXI T1 volumes (normalised, resampled to " + describe(g) + ")";
      return out;
    }
  }
  out.push_back(structuredImage(g, 7));
  source = "the structured phantom (core/Phantom.hpp)";
  return out;
}

// Subject i: base[i mod B] under the seeded smooth diffeomorphic displacement of seed 1000 + i.
// The subjects `indices` (any order), built in parallel (each subject's result depends on i only).
std::vector<HostImage> subjects(std::vector<HostImage> const& base, std::vector<int> const& indices) {
  std::vector<HostImage> out(indices.size());
#pragma omp parallel for schedule(dynamic)
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const int i = indices[k];
    HostImage const& b = base[std::size_t(i) % base.size()];
    const auto u = smoothDisplacement(b.geometry, 3.0, 1000 + std::uint64_t(i));
    HostImage img("kortex::bench::subject", b.geometry);
    ref::warp(b.data, u.data, img.data);
    out[k] = img;
  }
  return out;
}

std::vector<HostImage> cohort(std::vector<HostImage> const& base, int n) {
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[std::size_t(i)] = i;
  return subjects(base, all);
}

// FNV-1a 64 of an image's bytes: equal templates from runs over different rank counts.
std::string fnv1a(HostImage const& img) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(img.data.data());
  for (std::size_t k = 0; k < img.data.size() * sizeof(float); ++k) h = (h ^ p[k]) * 1099511628211ull;
  std::ostringstream o;
  o << std::hex << std::setw(16) << std::setfill('0') << h;
  return o.str();
}

// Median seconds of one iteration at each scale (differences of the iteration clock).
std::vector<double> iterationSecondsPerScale(AtlasResult const& r, std::size_t scales) {
  std::vector<double> out(scales, 0.0);
  for (std::size_t s = 0; s < scales; ++s) {
    std::vector<double> d;
    for (std::size_t k = 1; k < r.history.size(); ++k)
      if (r.history[k].scale == int(s) && r.history[k - 1].scale == int(s)) d.push_back(r.history[k].seconds - r.history[k - 1].seconds);
    if (d.empty()) continue;
    std::sort(d.begin(), d.end());
    out[s] = d[d.size() / 2];
  }
  return out;
}

bool sameBits(HostImage const& a, HostImage const& b) {
  return std::equal(a.data.data(), a.data.data() + a.data.size(), b.data.data(),
                    [](float x, float y) { return x == y; });
}

// Per-iteration seconds: differences of the iteration clock, after the first iteration.
TimingStats iterationStats(AtlasResult const& r) {
  std::vector<double> ms;
  for (std::size_t k = 1; k < r.history.size(); ++k)
    if (r.history[k].scale == r.history[k - 1].scale) ms.push_back(1e3 * (r.history[k].seconds - r.history[k - 1].seconds));
  TimingStats t;
  if (ms.empty()) return t;
  t.samplesMs = ms;
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  t.medianMs = s[s.size() / 2];
  t.minMs = s.front();
  t.maxMs = s.back();
  t.repetitions = int(ms.size());
  return t;
}

}  // namespace

BenchReport runAtlasBench(BenchOptions const& opt) {
  const auto tStart = Clock::now();
  BenchReport rep;
  const nlohmann::json peers = common::checkOptions(opt, "atlas");
  common::requireOnlyMatches(opt, {"Iteration", "Whole", "CPU", "Scaling"}, "atlas", "\"Whole\"");
  AtlasComm* comm = opt.comm != nullptr && opt.comm->size() > 1 ? opt.comm : nullptr;
  if (comm && (opt.only.empty() || !common::selected(opt.only, "Scaling") || common::selected(opt.only, "Whole") ||
               common::selected(opt.only, "Iteration") || common::selected(opt.only, "CPU")))
    throw InvalidArgument("bench atlas: under " + std::to_string(comm->size()) +
                          " processes only the \"Scaling\" section runs (select it alone)");
  auto say = [&](std::string const& s) {
    if (opt.progress) *opt.progress << "bench atlas: " << s << std::endl;
  };
  Exec exec;
  const bool onDevice = !common::kDeviceIsHostMemory;
  const double copyGBs = common::measureCopyBandwidth(exec, opt.tiny || !onDevice);
  const Geometry g = opt.tiny ? Geometry::make3D(24, 32, 28)
                              : (onDevice ? Geometry::make3D(160, 192, 144) : Geometry::make3D(48, 64, 56));
  const int large = opt.tiny ? 3 : (onDevice ? (opt.quick ? 64 : 315) : 6);
  const int small = opt.tiny ? 3 : (onDevice ? 20 : 4);
  const double voxels = double(g.numVoxels());
  nlohmann::json j;
  j["kind"] = "kortex-bench-atlas";
  j["environment"] = io::environmentJson(true);
  j["copy_bandwidth_GBs"] = copyGBs;
  j["grid"] = describe(g);
  std::string source;
  say("building the cohorts");
  const auto base = baseImages(opt, g, source);
  const bool single = selected(opt.only, "Iteration") || selected(opt.only, "Whole") || selected(opt.only, "CPU");
  const auto big = single ? cohort(base, large) : std::vector<HostImage>{};
  j["cohort"] = {{"source", source}, {"subjects", large}, {"perturbation", "smoothDisplacement max 3 voxels, seed 1000 + i"}};
  AtlasParams defaults;
  std::ostringstream md;
  md << "# Kortex atlas benchmark (Ha et al. 2010)\n\n"
     << "Device: " << j["environment"].value("device", std::string("?")) << ", Kokkos " << Exec::name() << ", git "
     << j["environment"].value("git_hash", std::string("?")) << ", one process. Measured copy bandwidth "
     << fixedDecimals(copyGBs, 0) << " GB/s. Grid " << describe(g) << "; cohort of " << large << " subjects: " << source
     << ", subject i under a seeded random smooth diffeomorphic displacement (max 3 voxels, seed 1000 + i). Operator "
     << "alpha " << defaults.greedy.fluid.alpha << ", gamma " << defaults.greedy.fluid.gamma << ", max step "
     << defaults.greedy.maxStep << " voxel.\n\n";
  auto fail = [&](std::string const& what) {
    ++rep.failed;
    md << "\n**FAILED:** " << what << "\n";
    say("FAILED: " + what);
  };
  auto run = [&](std::vector<HostImage> const& imgs, AtlasParams const& p) {
    HostImage t;
    std::vector<VectorField<Kokkos::HostSpace>> f;
    exec.fence();
    const auto t0 = Clock::now();
    AtlasRun solo;
    solo.returnFields = false;  // the template comes back; the fields stay on the device
    AtlasResult r = gpu::buildAtlas(exec, imgs, p, t, f, solo);
    exec.fence();
    const double s = secondsSince(t0);
    if (!(r.minJacobian > 0.0f)) fail("a field folded (min det " + fixedDecimals(r.minJacobian) + ")");
    return std::make_pair(r, s);
  };

  // ---- Iteration -----------------------------------------------------------------------------------
  if (selected(opt.only, "Iteration")) {
    md << "## One atlas iteration, " << large << " subjects at " << describe(g) << "\n\n"
       << "| solver | iteration ms (median) | per subject ms | GB/s (" << kIterationBytesPerVoxel
       << " B/voxel/subject) | % of copy | device bytes | min det |\n|---|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    for (GreedySolver s : {GreedySolver::Fft, GreedySolver::Sor, GreedySolver::Cg, GreedySolver::HybridSor, GreedySolver::HybridCg}) {
      AtlasParams p;
      p.greedy.solver = s;
      p.greedy.scales = {1};
      p.greedy.iterations = {opt.tiny ? 3 : 6};
      const AtlasMemory m = atlasMemory(g, p);
      const std::int64_t need = m.total(large), avail = gpu::availableMemoryBytes<Mem>();
      if (avail > 0 && need > avail) {
        md << "| " << toString(s) << " | skipped: needs " << need / (1 << 20) << " MiB, " << avail / (1 << 20)
           << " MiB free | | | | | |\n";
        ++rep.skipped;
        continue;
      }
      say(std::string("iteration, ") + toString(s));
      const auto [r, secs] = run(big, p);
      const TimingStats t = iterationStats(r);
      const double gbs = kIterationBytesPerVoxel * voxels * large / (t.medianMs * 1e-3) / 1e9;
      md << "| " << toString(s) << " | " << fixedDecimals(t.medianMs, 1) << " | " << fixedDecimals(t.medianMs / large, 3) << " | "
         << fixedDecimals(gbs, 0) << " | " << fixedDecimals(100.0 * gbs / copyGBs, 0) << " | " << need / (1 << 20) << " MiB | "
         << fixedDecimals(r.minJacobian) << " |\n";
      rows.push_back({{"solver", toString(s)}, {"iteration_ms", t.medianMs}, {"samples_ms", t.samplesMs},
                      {"per_subject_ms", t.medianMs / large}, {"GBs", gbs}, {"device_bytes", need},
                      {"min_jacobian", r.minJacobian}, {"run_seconds", secs}});
      ++rep.measured;
      if (s == GreedySolver::Fft && onDevice && large == 315) {
        const bool met = t.medianMs * 1e-3 <= kTargetIterationS;
        j["target_iteration"] = {{"target_s", kTargetIterationS}, {"measured_s", t.medianMs * 1e-3}, {"met", met}};
      }
    }
    j["iteration"] = rows;
    // Streaming: the same iteration (fft) with only some subjects resident, the others streamed
    // from pinned host memory (56 B per voxel and subject cross the bus per iteration: I_i and
    // u_i up twice, u_i down twice).
    {
      const std::vector<int> residents = opt.tiny ? std::vector<int>{large, 1, 0} : std::vector<int>{large, (2 * large) / 3, 0};
      md << "\nStreaming (fft): subjects beyond the resident ones live in pinned host memory and cross the bus twice per "
         << "iteration (I_i and u_i up, u_i down: 56 B per voxel), the next subject's upload overlapping the current one's "
         << "kernels.\n\n| resident | streamed | iteration ms (median) | per subject ms | bus GB/s (streamed bytes / iteration) "
         << "| same template as all resident |\n|---|---|---|---|---|---|\n";
      nlohmann::json srows = nlohmann::json::array();
      HostImage reference;
      for (int resident : residents) {
        AtlasParams p;
        p.greedy.scales = {1};
        p.greedy.iterations = {opt.tiny ? 3 : 4};
        AtlasRun solo;
        solo.returnFields = false;
        solo.residentSubjects = resident;
        say("iteration, fft, " + std::to_string(resident) + " resident");
        HostImage t;
        std::vector<VectorField<Kokkos::HostSpace>> f;
        exec.fence();
        const AtlasResult r = gpu::buildAtlas(exec, big, p, t, f, solo);
        const TimingStats ts = iterationStats(r);
        const int streamed = large - resident;
        const double busGBs = streamed > 0 ? 56.0 * voxels * streamed / (ts.medianMs * 1e-3) / 1e9 : 0.0;
        if (resident == large) reference = t;
        const bool same = reference.data.size() == t.data.size() && sameBits(reference, t);
        if (!same) fail("streamed atlas (" + std::to_string(resident) + " resident) differs from the all-resident one");
        md << "| " << resident << " | " << streamed << " | " << fixedDecimals(ts.medianMs, 1) << " | "
           << fixedDecimals(ts.medianMs / large, 3) << " | " << (streamed > 0 ? fixedDecimals(busGBs, 1) : std::string("-")) << " | "
           << (same ? "yes (same bits)" : "**NO**") << " |\n";
        srows.push_back({{"resident", resident}, {"streamed", streamed}, {"iteration_ms", ts.medianMs}, {"samples_ms", ts.samplesMs},
                         {"bus_GBs", busGBs}, {"same_template", same}, {"setup_s", r.secondsSetup}});
        ++rep.measured;
      }
      j["streaming"] = srows;
    }
    if (peers.is_object()) {
      for (auto const& pr : peers.value("results", nlohmann::json::array()))
        if (pr.value("algorithm", "") == "atlas-iteration" && pr.value("per_subject_ms", nlohmann::json()).is_number()) {
          const double ps = pr["per_subject_ms"].get<double>();
          md << "\nPeer (bench/peers/atlas_torch.py, " << peers.value("device", std::string("?")) << ", torch "
             << peers["versions"].value("torch", std::string("?")) << "): the same iteration batched over "
             << pr.value("batch", 0) << " subjects, " << fixedDecimals(pr.value("median_ms", NAN), 2) << " ms per batch = "
             << fixedDecimals(ps, 3) << " ms per subject, " << fixedDecimals(315.0 * ps, 1) << " ms for 315 subjects.";
          if (!rows.empty()) {
            const double ours = rows.front()["per_subject_ms"].get<double>();
            md << " Kortex fft: " << fixedDecimals(ours, 3) << " ms per subject: " << fixedDecimals(ps / ours, 2) << "x.";
            j["peer_ratio_fft"] = ps / ours;
          }
          md << "\n";
          j["peer"] = pr;
        }
    }
    md << "\n";
  }

  // ---- Whole ---------------------------------------------------------------------------------------
  if (selected(opt.only, "Whole")) {
    md << "## Whole atlases (images on the host; the template comes back, the fields stay on the device)\n\n| cohort | schedule | iterations | seconds | final RMSE | min det | mean displacement RMS |\n"
       << "|---|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    auto row = [&](std::string const& name, std::vector<HostImage> const& imgs, std::vector<int> scales,
                   std::vector<int> iters) {
      AtlasParams p;
      p.greedy.scales = scales;
      p.greedy.iterations = iters;
      say("whole atlas: " + name);
      const auto [r, secs] = run(imgs, p);
      std::ostringstream sched;
      for (std::size_t k = 0; k < scales.size(); ++k) sched << (k ? " + " : "") << iters[k] << " at x" << scales[k];
      md << "| " << name << " | " << sched.str() << " | " << r.iterations << " | " << fixedDecimals(secs, 2) << " | "
         << fixedDecimals(r.history.back().mismatch, 4) << " | " << fixedDecimals(r.minJacobian) << " | " << fixedDecimals(r.meanDisplacementRms, 4)
         << " |\n";
      rows.push_back({{"cohort", name}, {"schedule", sched.str()}, {"iterations", r.iterations}, {"seconds", secs},
                      {"final_mismatch", r.history.back().mismatch}, {"min_jacobian", r.minJacobian},
                      {"mean_displacement_rms", r.meanDisplacementRms}});
      ++rep.measured;
      return secs;
    };
    const std::vector<int> multi = opt.tiny ? std::vector<int>{2, 3} : std::vector<int>{25, 50};
    const double whole = row(std::to_string(large) + " subjects", big, {2, 1}, multi);
    if (onDevice && large == 315)
      j["target_whole"] = {{"target_s", kTargetWholeS}, {"measured_s", whole}, {"met", whole <= kTargetWholeS}};
    const std::vector<HostImage> few(big.begin(), big.begin() + std::min<std::size_t>(big.size(), std::size_t(small)));
    const double tMulti = row(std::to_string(few.size()) + " subjects", few, {2, 1}, multi);
    const double tSingle = row(std::to_string(few.size()) + " subjects", few, {1}, {opt.tiny ? 8 : 200});
    md << "\nFig 13: single scale / multi-scale time " << fixedDecimals(tSingle / tMulti, 2) << "x (the paper: "
       << kPaperMultiscaleGain << "x).\n\n";
    j["whole"] = rows;
    j["multiscale_gain"] = {{"measured", tSingle / tMulti}, {"paper", kPaperMultiscaleGain}};
  }

  // ---- CPU -----------------------------------------------------------------------------------------
  if (selected(opt.only, "CPU")) {
    md << "## CPU reference (reference_cpu/Atlas.cpp), 2 subjects at " << describe(g) << "\n\n"
       << "| threads | iteration s (2 subjects) | per subject s | 315 subjects (x 315 / 2) s |\n|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    const std::vector<HostImage> two(big.begin(), big.begin() + 2);
    std::vector<int> threads{common::maxOmpThreads()};
    if (!opt.quick && !opt.tiny && common::maxOmpThreads() > 1) threads.insert(threads.begin(), 1);
    for (int th : threads) {
      common::OmpThreads scope(th);
      AtlasParams p;
      p.greedy.scales = {1};
      p.greedy.iterations = {2};
      HostImage t;
      std::vector<VectorField<Kokkos::HostSpace>> f;
      say("CPU reference, " + std::to_string(th) + " threads");
      const AtlasResult r = ref::buildAtlas(two, p, t, f);
      const double s = r.history[1].seconds - r.history[0].seconds;
      md << "| " << th << " | " << fixedDecimals(s, 2) << " | " << fixedDecimals(s / 2, 2) << " | " << fixedDecimals(s / 2 * 315, 0) << " |\n";
      rows.push_back({{"threads", th}, {"iteration_s_2_subjects", s}, {"per_subject_s", s / 2}});
      ++rep.measured;
    }
    j["cpu"] = rows;
    md << "\n";
  }
  // ---- Scaling ------------------------------------------------------------------------------------
  // One rank per GPU (under mpirun; one process alone gives the 1-GPU baseline): the whole
  // multi-scale atlas of 20 and 315 subjects split evenly over the ranks, every reduction path the
  // group can take, the time split (set-up, compute, sums over ranks: the max over ranks), the
  // template's hash (equal for every rank count and path: the fixed-point sums), and the run-time
  // model of core/Atlas.hpp from a dry run on each rank's device.
  if (selected(opt.only, "Scaling")) {
    const int K = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
    const std::vector<int> sizes = opt.tiny ? std::vector<int>{4, 6} : (onDevice ? std::vector<int>{small, large} : std::vector<int>{4, 6});
    const std::vector<int> scales{2, 1};
    const std::vector<int> iters = opt.tiny ? std::vector<int>{2, 3} : std::vector<int>{25, 50};
    const int dryIters = opt.tiny ? 3 : 4;
    const int dryLarge = opt.tiny ? 3 : 6;
    md << "## Scaling over " << K << (K == 1 ? " process" : " processes (one per GPU)") << ": whole atlas, "
       << iters[0] << " + " << iters[1] << " iterations at x2, x1\n\n"
       << "Group: " << (opt.comm ? opt.comm->describe() : std::string("1 process")) << ". Times are the max over ranks "
       << "(fenced; the sums include waiting for the slowest rank). Model: T = T_GPU + T_CPU + T_network (core/Atlas.hpp) "
       << "from a dry run (" << dryIters << " iterations per scale on 2 and " << dryLarge << " subjects on each rank's device, "
       << "alone) and the sums of one iteration timed on the group.\n\n"
       << "| subjects | ranks | path | subjects per rank | seconds | set-up s | compute s | sums s | iteration ms (x1) "
       << "| model s (GPU + CPU + network) | template FNV-1a |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    nlohmann::json rows = nlohmann::json::array();
    for (int n : sizes) {
      if (n < K) {
        md << "| " << n << " | " << K << " | skipped: fewer subjects than ranks | | | | | | | | |\n";
        continue;
      }
      // Even split (equal speeds); the dry run below measures whether the ranks differ.
      const std::vector<int> counts = atlasBalance(n, std::vector<double>(std::size_t(K), 1.0));
      int first = 0;
      for (int r = 0; r < rank; ++r) first += counts[std::size_t(r)];
      const int local = counts[std::size_t(rank)];
      std::vector<int> mine(static_cast<std::size_t>(local)), dry(static_cast<std::size_t>(dryLarge));
      for (int i = 0; i < local; ++i) mine[std::size_t(i)] = first + i;
      for (int i = 0; i < dryLarge; ++i) dry[std::size_t(i)] = (first + i) % n;
      say(std::to_string(n) + " subjects, rank " + std::to_string(rank) + " of " + std::to_string(K) + ": building " +
          std::to_string(local) + " subjects");
      const std::vector<HostImage> imgs = subjects(base, mine);
      // Dry run, this rank alone: iteration time on 2 and dryLarge subjects -> t0 + n ts per scale.
      AtlasRankCost cost;
      {
        const std::vector<HostImage> dryImgs = subjects(base, dry);
        AtlasParams p;
        p.greedy.scales = scales;
        p.greedy.iterations = {dryIters, dryIters};
        auto dryRun = [&](int m) {
          const std::vector<HostImage> some(dryImgs.begin(), dryImgs.begin() + m);
          HostImage t;
          std::vector<VectorField<Kokkos::HostSpace>> f;
          AtlasRun solo;
          solo.returnFields = false;
          return gpu::buildAtlas(exec, some, p, t, f, solo);
        };
        const AtlasResult a = dryRun(2), b = dryRun(dryLarge);
        const auto ta = iterationSecondsPerScale(a, scales.size()), tb = iterationSecondsPerScale(b, scales.size());
        for (std::size_t sc = 0; sc < scales.size(); ++sc) {
          const double ts = std::max(0.0, (tb[sc] - ta[sc]) / double(dryLarge - 2));
          cost.perSubjectS.push_back(ts);
          cost.fixedS.push_back(std::max(0.0, ta[sc] - 2.0 * ts));
        }
        cost.setupPerSubjectS = b.secondsSetup / double(dryLarge);
      }
      // Gather every rank's costs: [t0_s..., ts_s..., c] per rank.
      const std::size_t per = 2 * scales.size() + 1;
      std::vector<double> costSlots(per * std::size_t(K), 0.0);
      for (std::size_t sc = 0; sc < scales.size(); ++sc) {
        costSlots[per * std::size_t(rank) + sc] = cost.fixedS[sc];
        costSlots[per * std::size_t(rank) + scales.size() + sc] = cost.perSubjectS[sc];
      }
      costSlots[per * std::size_t(rank) + per - 1] = cost.setupPerSubjectS;
      if (comm) comm->sum(costSlots.data(), costSlots.size());
      AtlasCostModel model;
      model.iterations = iters;
      for (int r = 0; r < K; ++r) {
        AtlasRankCost c;
        for (std::size_t sc = 0; sc < scales.size(); ++sc) {
          c.fixedS.push_back(costSlots[per * std::size_t(r) + sc]);
          c.perSubjectS.push_back(costSlots[per * std::size_t(r) + scales.size() + sc]);
        }
        c.setupPerSubjectS = costSlots[per * std::size_t(r) + per - 1];
        model.ranks.push_back(c);
      }
      std::vector<AtlasReduction> paths{AtlasReduction::HostStaged};
      if (comm && onDevice) paths = {AtlasReduction::HostStaged, AtlasReduction::Nccl, AtlasReduction::DeviceMpi};
      for (AtlasReduction path : paths) {
        const std::string pathName = comm ? toString(path) : "none";
        if (comm && !comm->useReduction(path)) {
          md << "| " << n << " | " << K << " | " << pathName << " | | not available on this machine | | | | | | |\n";
          rows.push_back({{"subjects", n}, {"ranks", K}, {"path", pathName}, {"available", false}});
          continue;
        }
        // T_network: the two sums of one iteration (template: voxels; mean displacement: 3 voxels).
        model.networkS.clear();
        for (int f : scales) {
          const std::size_t v = std::size_t(scaledExtents(g, f).voxels());
          model.networkS.push_back(gpu::atlasSumSeconds(exec, comm, v, 5) + gpu::atlasSumSeconds(exec, comm, 3 * v, 5));
        }
        const auto pred = model.predict(counts);
        AtlasParams p;
        p.greedy.scales = scales;
        p.greedy.iterations = iters;
        AtlasRun run;
        run.comm = comm;
        run.first = first;
        run.total = n;
        run.returnFields = false;  // as in the Whole section: the template comes back
        HostImage t;
        std::vector<VectorField<Kokkos::HostSpace>> f;
        say(std::to_string(n) + " subjects over " + std::to_string(K) + " ranks, path " + pathName);
        exec.fence();
        if (comm) comm->barrier();
        const auto t0 = Clock::now();
        const AtlasResult r = gpu::buildAtlas(exec, imgs, p, t, f, run);
        exec.fence();
        if (comm) comm->barrier();
        const double wall = secondsSince(t0);
        const auto itS = iterationSecondsPerScale(r, scales.size());
        // Per rank: wall, set-up, compute, sums; the max and every rank's in the JSON.
        std::vector<double> slots(4 * std::size_t(K), 0.0);
        slots[4 * std::size_t(rank) + 0] = wall;
        slots[4 * std::size_t(rank) + 1] = r.secondsSetup;
        slots[4 * std::size_t(rank) + 2] = r.secondsCompute;
        slots[4 * std::size_t(rank) + 3] = r.secondsReduce;
        if (comm) comm->sum(slots.data(), slots.size());
        double mx[4] = {0, 0, 0, 0};
        nlohmann::json perRank = nlohmann::json::array();
        for (int q = 0; q < K; ++q) {
          for (int c = 0; c < 4; ++c) mx[c] = std::max(mx[c], slots[4 * std::size_t(q) + std::size_t(c)]);
          perRank.push_back({{"seconds", slots[4 * std::size_t(q)]}, {"setup_s", slots[4 * std::size_t(q) + 1]},
                             {"compute_s", slots[4 * std::size_t(q) + 2]}, {"reduce_s", slots[4 * std::size_t(q) + 3]},
                             {"subjects", counts[std::size_t(q)]}});
        }
        const std::string hash = fnv1a(t);
        if (!(r.minJacobian > 0.0f)) fail("a field folded (min det " + fixedDecimals(r.minJacobian) + ")");
        std::ostringstream cnt;
        cnt << counts.front();
        if (counts.back() != counts.front()) cnt << "-" << counts.back();
        md << "| " << n << " | " << K << " | " << pathName << " | " << cnt.str() << " | " << fixedDecimals(mx[0], 2) << " | "
           << fixedDecimals(mx[1], 2) << " | " << fixedDecimals(mx[2], 2) << " | " << fixedDecimals(mx[3], 2) << " | "
           << fixedDecimals(1e3 * itS.back(), 1) << " | " << fixedDecimals(pred.total(), 2) << " (" << fixedDecimals(pred.gpu, 2)
           << " + " << fixedDecimals(pred.cpu, 2) << " + " << fixedDecimals(pred.network, 2) << ") | `" << hash << "` |\n";
        nlohmann::json costs = nlohmann::json::array();
        for (auto const& c : model.ranks)
          costs.push_back({{"fixed_s", c.fixedS}, {"per_subject_s", c.perSubjectS}, {"setup_per_subject_s", c.setupPerSubjectS}});
        rows.push_back({{"subjects", n}, {"ranks", K}, {"path", pathName}, {"available", true}, {"counts", counts},
                        {"seconds", mx[0]}, {"setup_s", mx[1]}, {"compute_s", mx[2]}, {"reduce_s", mx[3]},
                        {"iteration_s_per_scale", itS}, {"per_rank", perRank}, {"template_fnv1a", hash},
                        {"final_mismatch", r.history.back().mismatch}, {"min_jacobian", r.minJacobian},
                        {"mean_displacement_rms", r.meanDisplacementRms},
                        {"model", {{"gpu_s", pred.gpu}, {"cpu_s", pred.cpu}, {"network_s", pred.network}, {"total_s", pred.total()},
                                   {"network_per_iteration_s", model.networkS}, {"ranks", costs}, {"iterations", iters}}}});
        ++rep.measured;
        if (!opt.dumpDir.empty() && rank == 0) {
          const fs::path out = fs::path(opt.dumpDir) / ("atlas_template_" + std::to_string(n) + "_ranks" + std::to_string(K) + "_" + pathName + ".f32");
          std::string bytes(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
          io::writeTextFileAtomic(out, bytes);
        }
      }
    }
    j["scaling"] = {{"ranks", K}, {"group", opt.comm ? opt.comm->describe() : std::string("1 process")}, {"grid", describe(g)},
                    {"schedule", {{"scales", scales}, {"iterations", iters}}}, {"rows", rows}};
    md << "\n";
  }
  // This report's own targets (the atlas's; the greedy iteration's are in bench greedy's report).
  for (const char* key : {"target_iteration", "target_whole"})
    if (j.contains(key))
      md << "Atlas target: " << (std::string(key) == "target_iteration" ? "one 315-subject iteration" : "the whole 315-subject atlas")
         << " <= " << j[key]["target_s"].get<double>() << " s: " << (j[key]["met"].get<bool>() ? "met" : "missed") << " ("
         << fixedDecimals(j[key]["measured_s"].get<double>(), 3) << " s).\n";
  common::finishReport(rep, j, md.str(), tStart, opt);
  return rep;
}

}  // namespace kortex::bench
