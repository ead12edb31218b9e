#include "pipeline/Register.hpp"
#include "core/Timing.hpp"
#include "core/WorkerPool.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <cmath>
#include <map>
#include <set>

#include "core/Apply.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Intensity.hpp"
#include "gpu/affine/Affine.hpp"
#include "pipeline/ParamsJson.hpp"
#include "gpu/greedy/Greedy.hpp"
#include "gpu/registration/Registration.hpp"
#include "reference_cpu/Affine.hpp"
#include "reference_cpu/Greedy.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::pipeline {

namespace {


void requireVolume(HostImage const& img, const char* name) {
  if (img.data.data() == nullptr || img.numVoxels() == 0)
    throw InvalidArgument(std::string("registration: the ") + name + " image is empty");
  if (img.geometry.dimension != 3)
    throw InvalidArgument(std::string("registration: the ") + name + " image must be 3D, got " +
                          describe(img.geometry));
}

// Fraction of fixed voxels whose mapped point lies inside the moving volume.
double overlapFraction(AffineTransform const& t, Geometry const& fixed, Geometry const& moving) {
  Index inside = 0;
  const Index nx = fixed.nx(), ny = fixed.ny(), nz = fixed.nz();
#pragma omp parallel for reduction(+ : inside) collapse(2)
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const auto q = t.apply({double(x), double(y), double(z)});
        if (affineInside(q.data(), int(moving.nx()), int(moving.ny()), int(moving.nz()))) ++inside;
      }
  return double(inside) / double(fixed.numVoxels());
}

bool insideGrid(std::array<double, 3> const& q, Geometry const& g) {
  return affineInside(q.data(), int(g.nx()), int(g.ny()), int(g.nz()));
}

// `img` extended at the high end of every axis to the extents of `g` by the clamp rule.
HostImage padToGrid(HostImage const& img, Geometry const& g) {
  HostImage out("kortex::registerPair::padded", g);
  const Index nz = img.geometry.nz(), ny = img.geometry.ny(), nx = img.geometry.nx();
  const auto in = img.data;
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x)
        out.data(z, y, x) = in(std::min(z, nz - 1), std::min(y, ny - 1), std::min(x, nx - 1));
  return out;
}

// The padded greedy field cropped to the fixed grid.
void cropField(VectorField<Kokkos::HostSpace> const& padded, VectorField<Kokkos::HostSpace>& out) {
  const auto d = out.data;
  const auto p = padded.data;
#pragma omp parallel for collapse(2)
  for (Index c = 0; c < 3; ++c)
    for (Index z = 0; z < Index(d.extent(1)); ++z)
      for (Index y = 0; y < Index(d.extent(2)); ++y)
        for (Index x = 0; x < Index(d.extent(3)); ++x) d(c, z, y, x) = p(c, z, y, x);
}

// The greedy stage's masks on the fixed grid, 0 / 1 (each empty when not given): the fixed mask, and
// the moving mask carried onto the fixed grid by the affine stage's map (nearest voxel; 0 outside the
// moving volume), which the greedy stage carries further with the deformation.
struct GreedyMasks {
  HostImage fixed, moving;
};

GreedyMasks greedyMasks(RegistrationPipelineOptions const& opt, RegistrationPipelineResult const& r) {
  auto binary = [](HostImage const& in, const char* label) {
    HostImage out(label, in.geometry);
    for (Index i = 0; i < out.numVoxels(); ++i) out.data.data()[i] = in.data.data()[i] != 0.0f ? 1.0f : 0.0f;
    return out;
  };
  GreedyMasks m;
  if (opt.masks.fixed.data.data()) m.fixed = binary(opt.masks.fixed, "kortex::registerPair::fixedMask");
  if (opt.masks.moving.data.data())
    m.moving = binary(ref::resampleAffineLabels(opt.masks.moving, r.fixedGrid, r.affine), "kortex::registerPair::movingMask");
  return m;
}

// The greedy stage on either back end: the padded grid and the masks padded to it; registerGreedy(grid,
// fixedMask, movingMask) pads the images, registers and crops the field into r.u (the reference on the
// host, the Kokkos back end on its device).
template <class Register>
void greedyStage(HostImage const& fixedN, RegistrationPipelineOptions const& opt, RegistrationPipelineResult& r,
                 Register&& registerGreedy) {
  r.greedyGrid = greedyPaddedGrid(fixedN.geometry, opt.greedy);
  const GreedyMasks masks = greedyMasks(opt, r);
  auto pad = [&r](HostImage const& mask) { return mask.data.data() ? padToGrid(mask, r.greedyGrid) : HostImage(); };
  const HostImage fixedMask = pad(masks.fixed), movingMask = pad(masks.moving);
  r.greedy = registerGreedy(r.greedyGrid, fixedMask.data.data() ? &fixedMask : nullptr,
                            movingMask.data.data() ? &movingMask : nullptr);
}

// The affine stage: the preset transform, the back end's affine registration, or none (the
// header alignment already in r.affine).
// The symmetric mode fits the affine part both ways (a deformable greedy registration with
// GreedyParams::symmetric; the job refuses masks with it).
bool symmetricAffine(RegistrationPipelineOptions const& opt) {
  return opt.method == RegistrationMethod::Greedy && opt.useFluid && opt.greedy.symmetric;
}

// registerAffine(params, reverse): the back end's affine registration of the moving image to the
// fixed one, or of the fixed image to the moving one when `reverse`.
template <class Register>
void affineStage(RegistrationPipelineOptions const& opt, RegistrationPipelineResult& r, Register&& registerAffine) {
  const auto t0 = Clock::now();
  if (opt.presetAffine) {
    r.affine = *opt.presetAffine;
  } else if (opt.useAffine) {
    // The stage gets the job's normalised images (the same as normalising the originals with
    // opt.intensity): each image is checked and normalised once.
    AffineParams ap = opt.affine;
    ap.intensity = opt.intensity;
    ap.normalise = false;
    r.affineResult = registerAffine(ap, false);
    if (symmetricAffine(opt)) {
      // The symmetric mode's affine part: the mean of the forward fit and the reverse fit inverted
      // (core/Affine.hpp affineMean), so that the pair with its images exchanged gets its inverse.
      const AffineResult reverse = registerAffine(ap, true);
      r.affineResult.world = affineMean(r.affineResult.world, inverseAffine(reverse.world, "the reverse affine fit"));
      r.affineResult.transform = fromWorldMatrix(r.affineResult.world, r.fixedGrid, r.movingGrid);
      r.affineResult.evaluations += reverse.evaluations;
      r.affineResult.batches += reverse.batches;
    }
    r.affine = r.affineResult.transform;
    r.affineRan = true;
  }
  r.secondsAffine = secondsSince(t0);
}

// Stages 2-3 on the Kokkos back end: the affine stage and the moving image resampled onto the fixed
// grid (r.movingResampled; the device copy is returned for the fluid stage).
template <class Exec>
ImageView<typename Exec::memory_space> alignKokkos(Exec const& exec, HostImage const& movingN, HostImage const& fixedN,
                                                   RegistrationPipelineOptions const& opt, RegistrationPipelineResult& r) {
  using Mem = typename Exec::memory_space;
  r.executionSpace = Exec::name();
  affineStage(opt, r, [&](AffineParams const& ap, bool reverse) {
    return reverse ? gpu::affineRegister(exec, fixedN, movingN, ap, opt.affineProgress)
                   : gpu::affineRegister(exec, movingN, fixedN, ap, opt.affineProgress, opt.masks);
  });
  const Geometry& fixed = r.fixedGrid;
  const auto t0 = Clock::now();
  // Every copy and allocation on exec's queue (no device-wide fence: pairs may run concurrently).
  ImageView<Mem> dMoving(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string("kortex::registerPair::moving")),
                         movingN.data.extent(0), movingN.data.extent(1), movingN.data.extent(2));
  Kokkos::deep_copy(exec, dMoving, movingN.data);
  ImageView<Mem> dResampled(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string("kortex::registerPair::movingResampled")),
                            fixed.nz(), fixed.ny(), fixed.nx());
  gpu::resampleAffine(exec, ConstImageView<Mem>(dMoving), r.affine, dResampled);
  r.movingResampled = HostImage("kortex::registerPair::movingResampled", fixed);
  Kokkos::deep_copy(exec, r.movingResampled.data, dResampled);
  exec.fence();
  r.secondsResample = secondsSince(t0);
  r.u = VectorField<Kokkos::HostSpace>("kortex::registerPair::u", fixed, 3);
  return dResampled;
}

// Stage 4 on the Kokkos back end: the greedy or unbiased fluid registration of the aligned pair.
template <class Exec>
void fluidKokkos(Exec const& exec, ImageView<typename Exec::memory_space> dResampled, HostImage const& fixedN,
                 RegistrationPipelineOptions const& opt, RegistrationPipelineResult& r,
                 gpu::GreedyWorkspace<Exec>* workspace) {
  using Mem = typename Exec::memory_space;
  const Geometry& fixed = r.fixedGrid;
  const auto t0 = Clock::now();
  if (opt.method == RegistrationMethod::Greedy) {
    gpu::GreedyWorkspace<Exec> local;
    gpu::GreedyWorkspace<Exec>& ws = workspace ? *workspace : local;
    ws.speculation = opt.greedySpeculation;
    ws.recording = opt.greedyRecording;
    // The aligned moving image is on the device already (dResampled).
    greedyStage(fixedN, opt, r, [&](Geometry const& grid, HostImage const* fixedMask, HostImage const* movingMask) {
      return gpu::greedyRegisterOnGrid(exec, ConstImageView<Mem>(dResampled), fixedN, grid, r.u, opt.greedy,
                                       opt.greedyProgress, &ws, fixedMask, movingMask);
    });
  } else {
    auto dFixed = Kokkos::create_mirror_view_and_copy(Mem(), fixedN.data);
    gpu::Field<Mem> dU("kortex::registerPair::dU", 3, fixed.nz(), fixed.ny(), fixed.nx());
    gpu::FluidRegistration<Exec> reg(exec, fixed, opt.fluid);
    r.fluid = reg.run(ConstImageView<Mem>(dResampled), ConstImageView<Mem>(dFixed), dU, opt.progress);
    Kokkos::deep_copy(r.u.data, dU);
  }
  r.secondsFluid = secondsSince(t0);
}

// Stages 2-3 on the CPU reference.
void alignReference(HostImage const& movingN, HostImage const& fixedN, RegistrationPipelineOptions const& opt,
                    RegistrationPipelineResult& r) {
  r.executionSpace = "OpenMP reference (" + std::to_string(omp_get_max_threads()) + " threads)";
  affineStage(opt, r, [&](AffineParams const& ap, bool reverse) {
    return reverse ? ref::affineRegister(fixedN, movingN, ap, opt.affineProgress)
                   : ref::affineRegister(movingN, fixedN, ap, opt.affineProgress, opt.masks);
  });
  const auto t0 = Clock::now();
  r.movingResampled = ref::resampleAffine(movingN, r.fixedGrid, r.affine);
  r.secondsResample = secondsSince(t0);
  r.u = VectorField<Kokkos::HostSpace>("kortex::registerPair::u", r.fixedGrid, 3);
}

// Stage 4 on the CPU reference.
void fluidReference(HostImage const& fixedN, RegistrationPipelineOptions const& opt, RegistrationPipelineResult& r) {
  const auto t0 = Clock::now();
  if (opt.method == RegistrationMethod::Greedy)
    greedyStage(fixedN, opt, r, [&](Geometry const& grid, HostImage const* fixedMask, HostImage const* movingMask) {
      VectorField<Kokkos::HostSpace> padded;
      const GreedyResult g = ref::greedyRegister(padToGrid(r.movingResampled, grid), padToGrid(fixedN, grid), padded,
                                                 opt.greedy, opt.greedyProgress, fixedMask, movingMask);
      cropField(padded, r.u);
      return g;
    });
  else
    r.fluid = ref::fluidRegister(r.movingResampled, fixedN, r.u, opt.fluid, opt.progress);
  r.secondsFluid = secondsSince(t0);
}

// Stage 1 and the header alignment: both images normalised (r.fixedNormalised), r.affine the
// header alignment with its overlap checked. Returns the normalised moving image.
// `fixedN`: the fixed image normalised already (several pairs share it), else null.
HostImage prepareAlignment(HostImage const& moving, HostImage const& fixed, RegistrationPipelineOptions const& opt,
                           RegistrationPipelineResult& r, HostImage const* fixedN = nullptr) {
  r.method = opt.method;
  r.backend = resolve(opt.backend);
  r.fixedGrid = fixed.geometry;
  r.movingGrid = moving.geometry;
  const auto t0 = Clock::now();
  HostImage movingN = normaliseIntensity(moving, opt.intensity, "moving image");
  r.fixedNormalised = fixedN ? *fixedN : normaliseIntensity(fixed, opt.intensity, "fixed image");
  r.secondsNormalise = secondsSince(t0);
  r.affine = initialTransform(fixed.geometry, moving.geometry);
  r.overlapStart = overlapFraction(r.affine, fixed.geometry, moving.geometry);
  if (r.overlapStart < kMinOverlap)
    throw InvalidArgument("registration: no overlap after alignment: only " + std::to_string(100.0 * r.overlapStart) +
                          " % of the fixed voxels map inside the moving image through the image headers (need " +
                          std::to_string(100.0 * kMinOverlap) + " %); check the files' orientation");
  return movingN;
}

// What one worker of runPairs keeps from pair to pair (the greedy stage's device workspace).
struct PairWorkspace {
  gpu::GreedyWorkspace<Kokkos::DefaultExecutionSpace> greedy;
};

// Stages 1-4 (the fluid stage when `fluid`), validated inputs; the Kokkos stages on `exec`.
RegistrationPipelineResult runPair(HostImage const& moving, HostImage const& fixed, RegistrationPipelineOptions const& opt,
                                   bool fluid, Kokkos::DefaultExecutionSpace const& exec = {},
                                   HostImage const* fixedN = nullptr, PairWorkspace* workspace = nullptr) {
  kx::ScopedRegion region("kortex::register::pair");
  const auto tStart = Clock::now();
  RegistrationPipelineResult r;
  const HostImage movingN = prepareAlignment(moving, fixed, opt, r, fixedN);
  if (r.backend == Backend::Cpu) {
    {
      kx::ScopedRegion align("kortex::register::align");
      alignReference(movingN, r.fixedNormalised, opt, r);
    }
    kx::ScopedRegion deform("kortex::register::deform");
    if (fluid) fluidReference(r.fixedNormalised, opt, r);
  } else {
    auto dResampled = [&] {
      kx::ScopedRegion align("kortex::register::align");
      return alignKokkos(exec, movingN, r.fixedNormalised, opt, r);
    }();
    kx::ScopedRegion deform("kortex::register::deform");
    if (fluid) fluidKokkos(exec, dResampled, r.fixedNormalised, opt, r, workspace ? &workspace->greedy : nullptr);
  }
  if (!fluid) {
    r.fluid.initial = r.fluid.final = RegistrationEnergy{};
    r.fluid.stop = StopReason::IterationCap;
  }
  r.secondsTotal = secondsSince(tStart);
  return r;
}

// registerPair's greedy workspace, kept from one call to the next (the registration's device images,
// fields and FFT plans, as each cohort worker keeps its own): a process that registers pair after pair
// on one grid with one set of parameters allocates and plans once. One entry for the process, taken by
// a call (a concurrent call makes its own) and put back after; made again when the grid or the
// parameters change, released before Kokkos finalizes and when a cohort starts (runPairs plans its
// device memory from what is free).
struct PairWorkspaceCache {
  std::mutex mutex;
  std::string key;  // the padded grid and the greedy parameters the workspace was made for
  std::unique_ptr<PairWorkspace> ws;
  bool hooked = false;
};
PairWorkspaceCache& pairWorkspaceCache() {
  static PairWorkspaceCache cache;
  return cache;
}
void releaseCachedPairWorkspace() {
  PairWorkspaceCache& c = pairWorkspaceCache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.ws.reset();
  c.key.clear();
}
std::string pairWorkspaceKey(Geometry const& fixed, RegistrationPipelineOptions const& opt) {
  return describe(greedyPaddedGrid(fixed, opt.greedy)) + " " + toJson(opt.greedy).dump() + " " +
         std::to_string(opt.greedySpeculation) + (opt.greedyRecording ? " recorded" : "");
}

}  // namespace

void releaseRegisterPairWorkspace() { releaseCachedPairWorkspace(); }

void validatePairOptions(Geometry const& fixed, RegistrationPipelineOptions const& opt) {
  if (opt.useFluid && opt.method == RegistrationMethod::Greedy)
    opt.greedy.validateFor(greedyPaddedGrid(fixed, opt.greedy));
  else if (opt.useFluid)
    opt.fluid.validateFor(fixed);
  if (opt.useAffine) opt.affine.validate();
  opt.intensity.validate();
}

RegistrationPipelineResult registerPair(HostImage const& moving, HostImage const& fixed,
                                        RegistrationPipelineOptions const& opt) {
  requireVolume(moving, "moving");
  requireVolume(fixed, "fixed");
  validatePairOptions(fixed.geometry, opt);
  const bool greedyOnDevice =
      opt.useFluid && opt.method == RegistrationMethod::Greedy && resolve(opt.backend) == Backend::Kokkos;
  if (!greedyOnDevice) return runPair(moving, fixed, opt, opt.useFluid);
  PairWorkspaceCache& cache = pairWorkspaceCache();
  const std::string key = pairWorkspaceKey(fixed.geometry, opt);
  std::unique_ptr<PairWorkspace> ws;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.ws && cache.key == key) ws = std::move(cache.ws);
    if (!cache.hooked) {
      Kokkos::push_finalize_hook(releaseCachedPairWorkspace);
      cache.hooked = true;
    }
  }
  if (!ws) ws = std::make_unique<PairWorkspace>();
  RegistrationPipelineResult r = runPair(moving, fixed, opt, true, {}, nullptr, ws.get());
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.ws = std::move(ws);
  cache.key = key;
  return r;
}

std::int64_t greedyPairDeviceBytes(Geometry const& fixed, Geometry const& moving, GreedyParams const& params) {
  // alignKokkos, while a worker's greedy workspace (runPairs) is held: the affine stage's pyramids
  // (both images' smoothed levels, <= 8/7 of each, and while one is built its level chain and two double
  // workspaces, <= 5.2 floats per voxel of the larger image), then the moving image and the resampled
  // one; then the greedy stage's workspace on the padded grid.
  const std::int64_t m = moving.numVoxels(), f = fixed.numVoxels();
  const std::int64_t alignBytes = std::int64_t(sizeof(float)) * (2 * (m + f) + 6 * std::max(m, f));
  return alignBytes + gpu::greedyRegistrationBytes(greedyPaddedGrid(fixed, params), params);
}

RegistrationPipelineResult alignPair(HostImage const& moving, HostImage const& fixed, RegistrationPipelineOptions const& opt) {
  requireVolume(moving, "moving");
  requireVolume(fixed, "fixed");
  return runPair(moving, fixed, opt, false);
}

int runPairs(int n, HostImage const& fixed, RegistrationPipelineOptions const& opt, bool fluid, int maxConcurrent,
             std::function<void(int, PairRun const&)> const& work, std::function<bool(int)> const& ready) {
  using Exec = Kokkos::DefaultExecutionSpace;
  requireVolume(fixed, "fixed");
  const HostImage fixedN = normaliseIntensity(fixed, opt.intensity, "fixed image");
  std::atomic<int> started{0};
  const int workers = std::max(1, std::min({n, maxConcurrent, kMaxConcurrentPairs}));
  std::vector<PairWorkspace> workspaces(static_cast<std::size_t>(workers));  // one per worker, kept between its pairs
  auto one = [&](int i, Exec const& exec, PairWorkspace& ws) {
    ++started;
    const PairRun run = [&](HostImage const& moving) {
      requireVolume(moving, "moving");
      RegistrationPipelineResult r = runPair(moving, fixed, opt, fluid, exec, &fixedN, &ws);
      exec.fence();
      return r;
    };
    work(i, run);
  };
  const bool concurrent = resolve(opt.backend) != Backend::Cpu && kx::hasConcurrentInstances<Exec> && workers > 1;
  auto inOrder = [&](Exec const& exec) {
    for (int i = 0; i < n; ++i) {
      one(i, exec, workspaces.front());
      if (!ready(i)) break;
    }
    workspaces.clear();
    return started.load();
  };
  if (!concurrent) return inOrder(Exec());
  // Workers take the next pair from a shared counter, each on its own instance (stream); their
  // host work (normalisation, pyramids, outputs) gets an equal share of the OpenMP threads.
  // The pairs mostly wait on their instances (each metric evaluation is read back), so there may be
  // more workers than cores.
  const int ompShare = std::max(1, omp_get_max_threads() / workers);
  Exec().fence();
  const std::vector<Exec> instances = kx::partitionSpace(Exec(), workers);
  WorkerPool pool(workers + 1);  // thread 0 (the caller) reports; the others run pairs
  if (pool.size() == 1) return inOrder(instances.front());
  std::atomic<int> next{0};
  std::mutex m;
  std::condition_variable cv;
  std::vector<char> done(std::size_t(n), 0);
  auto runWorker = [&](int w) {
    omp_set_num_threads(ompShare);
    for (int i = next++; i < n; i = next++) {
      one(i, instances[std::size_t(w)], workspaces[std::size_t(w)]);
      {
        std::lock_guard<std::mutex> lock(m);
        done[std::size_t(i)] = 1;
      }
      cv.notify_all();
    }
  };
  // Pairs are reported in index order as they become ready; `ready` may stop new pairs.
  auto report = [&] {
    for (int i = 0; i < n; ++i) {
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return done[std::size_t(i)] != 0; });
      }
      if (!ready(i)) {
        next = n;  // no new pair starts; those running finish
        return;
      }
    }
  };
  pool.run([&](int t) { t == 0 ? report() : runWorker(t - 1); });
  workspaces.clear();  // before the instances they were made on
  return started.load();
}

std::vector<RegistrationPipelineResult> alignPairs(std::vector<HostImage const*> const& moving, HostImage const& fixed,
                                                   RegistrationPipelineOptions const& opt,
                                                   std::vector<std::string> const& labels,
                                                   std::function<void(int)> const& done) {
  const int n = int(moving.size());
  if (labels.size() != moving.size()) throw InvalidArgument("alignPairs: one label per moving image is needed");
  std::vector<RegistrationPipelineResult> out(moving.size());
  std::vector<std::exception_ptr> failed(moving.size());
  std::exception_ptr first;
  auto work = [&](int i, PairRun const& run) {
    try {
      out[std::size_t(i)] = run(*moving[std::size_t(i)]);
    } catch (...) {
      failed[std::size_t(i)] = std::current_exception();
    }
  };
  // The first failure (by index) is raised, its message prefixed with the pair's label.
  auto ready = [&](int i) {
    try {
      if (failed[std::size_t(i)]) {
        try {
          std::rethrow_exception(failed[std::size_t(i)]);
        } catch (InvalidArgument const& e) {
          throw InvalidArgument(labels[std::size_t(i)] + ": " + e.what());
        }
      }
      if (done) done(i);
      return true;
    } catch (...) {
      first = std::current_exception();
      return false;
    }
  };
  runPairs(n, fixed, opt, false, kMaxConcurrentPairs, work, ready);
  if (first) std::rethrow_exception(first);
  return out;
}

const char* toString(RegistrationMethod m) { return m == RegistrationMethod::Greedy ? "greedy" : "unbiased"; }

const char* toString(RegistrationTransform t) {
  switch (t) {
    case RegistrationTransform::Rigid: return "rigid";
    case RegistrationTransform::Similarity: return "similarity";
    case RegistrationTransform::Affine: return "affine";
    case RegistrationTransform::Deformable: return "deformable";
  }
  return "?";
}

RegistrationTransform parseRegistrationTransform(std::string const& s) {
  for (auto t : {RegistrationTransform::Rigid, RegistrationTransform::Similarity, RegistrationTransform::Affine,
                 RegistrationTransform::Deformable})
    if (s == toString(t)) return t;
  throw InvalidArgument("the transform must be rigid, similarity, affine or deformable, got '" + s + "'");
}

Geometry greedyPaddedGrid(Geometry const& fixed, GreedyParams const& params) {
  Geometry g = fixed;
  for (int a = 0; a < 3; ++a) g.size[a] = greedyExtentFor(g.size[a], params);
  return g;
}

std::array<double, 3> mapPoint(RegistrationPipelineResult const& r, Index x, Index y, Index z) {
  return r.affine.apply({double(x) - r.u.data(0, z, y, x), double(y) - r.u.data(1, z, y, x),
                         double(z) - r.u.data(2, z, y, x)});
}

std::array<double, 3> mapPoint(RegistrationPipelineResult const& r, std::array<double, 3> const& p) {
  float grad[3];
  std::array<double, 3> q{};
  for (int c = 0; c < 3; ++c) {
    auto comp = Kokkos::subview(r.u.data, c, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    q[c] = p[c] - regSampleTrilinear(comp, float(p[0]), float(p[1]), float(p[2]), grad);
  }
  return r.affine.apply(q);
}

HostImage warpedMoving(RegistrationPipelineResult const& r, HostImage const& movingOriginal) {
  if (!movingOriginal.geometry.sameGrid(r.movingGrid))
    throw InvalidArgument("warpedMoving: the image is not on the registered moving grid");
  HostImage out("kortex::registration::warped", r.fixedGrid);
  out.metadata = movingOriginal.metadata;
  const Geometry& g = r.fixedGrid;
  const auto mv = movingOriginal.data;
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const auto q = mapPoint(r, x, y, z);
        out.data(z, y, x) = insideGrid(q, r.movingGrid) ? static_cast<float>(affineSample(mv, q.data(), nullptr)) : 0.0f;
      }
  return out;
}

HostImage warpedLabels(RegistrationPipelineResult const& r, HostImage const& movingLabels) {
  if (!movingLabels.geometry.sameGrid(r.movingGrid))
    throw InvalidArgument("warpedLabels: the label map is not on the registered moving grid");
  HostImage out("kortex::registration::labels", r.fixedGrid);
  const Geometry& g = r.fixedGrid;
  const Geometry& m = r.movingGrid;
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const auto q = mapPoint(r, x, y, z);
        const Index kx = Index(std::floor(q[0] + 0.5)), ky = Index(std::floor(q[1] + 0.5)),
                    kz = Index(std::floor(q[2] + 0.5));
        const bool in = kx >= 0 && kx < m.nx() && ky >= 0 && ky < m.ny() && kz >= 0 && kz < m.nz();
        out.data(z, y, x) = in ? movingLabels.data(kz, ky, kx) : 0.0f;
      }
  return out;
}

LabelDice meanLabelDice(HostImage const& fixedLabels, HostImage const& warped) {
  if (!fixedLabels.geometry.sameGrid(warped.geometry)) throw InvalidArgument("label Dice: label maps on different grids");
  std::map<int, std::array<Index, 3>> counts;  // label -> |A|, |B|, |A n B|
  const float* a = fixedLabels.data.data();
  const float* b = warped.data.data();
  // Labels come in runs: the last label's counts are kept at hand (map entries never move), and a
  // whole-number value is read without lround.
  auto label = [](float v) { return std::fabs(v) < 1e9f && v == float(int(v)) ? int(v) : int(std::lround(v)); };
  int lastA = 0, lastB = 0;
  std::array<Index, 3>*ca = nullptr, *cb = nullptr;
  for (Index i = 0; i < fixedLabels.numVoxels(); ++i) {
    const int la = label(a[i]), lb = label(b[i]);
    if (la != 0) {
      if (ca == nullptr || la != lastA) ca = &counts[lastA = la];
      (*ca)[0]++;
      if (la == lb) (*ca)[2]++;
    }
    if (lb != 0) {
      if (cb == nullptr || lb != lastB) cb = &counts[lastB = lb];
      (*cb)[1]++;
    }
  }
  LabelDice d;
  double sum = 0;
  for (auto const& [label, c] : counts) {
    if (c[0] == 0) continue;
    sum += 2.0 * c[2] / double(c[0] + c[1]);
    ++d.labels;
  }
  d.mean = d.labels ? sum / d.labels : 0.0;
  return d;
}

VectorField<Kokkos::HostSpace> worldDisplacement(RegistrationPipelineResult const& r) {
  const Geometry& g = r.fixedGrid;
  VectorField<Kokkos::HostSpace> d("kortex::registration::displacement", g, 3);
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const auto wm = indexToWorld(r.movingGrid, mapPoint(r, x, y, z));
        const auto wf = indexToWorld(g, {double(x), double(y), double(z)});
        for (int c = 0; c < 3; ++c) d.data(c, z, y, x) = static_cast<float>(wm[c] - wf[c]);
      }
  return d;
}

HostImage headMask(RegistrationPipelineResult const& r, double threshold) {
  HostImage m("kortex::registration::mask", r.fixedGrid);
  const float* f = r.fixedNormalised.data.data();
  float* o = m.data.data();
  for (Index i = 0; i < m.numVoxels(); ++i) o[i] = f[i] > threshold ? 1.0f : 0.0f;
  return m;
}

HostImage jacobianMap(RegistrationPipelineResult const& r) {
  HostImage out("kortex::registration::jacobian", r.fixedGrid);
  ref::jacobianDeterminant(r.u.data, out.data);
  return out;
}

nlohmann::json toJson(RegistrationPipelineResult const& r) {
  nlohmann::json j;
  j["backend"] = toString(r.backend);
  j["execution_space"] = r.executionSpace;
  j["fixed_grid"] = describe(r.fixedGrid);
  j["moving_grid"] = describe(r.movingGrid);
  j["overlap_start"] = r.overlapStart;
  if (r.affineRan) {
    j["affine"] = {{"metric", toString(r.affineResult.metric)},
                   {"metric_initial", r.affineResult.valueInitial},
                   {"metric_final", r.affineResult.valueFinal},
                   {"overlap", r.affineResult.overlap},
                   {"evaluations", r.affineResult.evaluations},
                   {"batches", r.affineResult.batches},
                   {"levels", r.affineResult.levelsUsed},
                   {"world_matrix", r.affineResult.world}};
  }
  j["method"] = toString(r.method);
  if (r.method == RegistrationMethod::Greedy) {
    nlohmann::json scales = nlohmann::json::array();
    for (auto const& sc : r.greedy.scales)
      scales.push_back({{"factor", sc.factor}, {"iterations", sc.iterations}, {"rmse_start", sc.rmseStart},
                        {"rmse_end", sc.rmseEnd}, {"stop", toString(sc.stop)}, {"seconds", sc.seconds}});
    j["greedy"] = {{"iterations", r.greedy.iterations}, {"refused", r.greedy.refused},
                   {"min_jacobian", r.greedy.minJacobian}, {"padded_grid", describe(r.greedyGrid)},
                   {"scales", scales}};
    if (r.greedy.midpointInverse.points > 0)  // the symmetric mode
      j["greedy"]["midpoint_inverse"] = {{"points", r.greedy.midpointInverse.points},
                                         {"unconverged", r.greedy.midpointInverse.unconverged},
                                         {"max_residual", r.greedy.midpointInverse.maxResidual}};
  }
  j["fluid"] = {{"iterations", r.fluid.iterations},
                {"accepted", r.fluid.accepted},
                {"rejected", r.fluid.rejected},
                {"stop", toString(r.fluid.stop)},
                {"energy_initial", r.fluid.initial.total},
                {"energy_final", r.fluid.final.total},
                {"min_jacobian", r.fluid.final.minJacobian}};
  j["seconds"] = {{"normalise", r.secondsNormalise}, {"affine", r.secondsAffine},
                  {"resample", r.secondsResample},   {"fluid", r.secondsFluid},
                  {"total", r.secondsTotal}};
  return j;
}

}  // namespace kortex::pipeline
