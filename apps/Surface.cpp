#include "apps/Surface.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "gpu/SurfaceNlm.hpp"
#include "io/ImageIO.hpp"
#include "io/Mesh.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

void checkWritable(std::string const& path, const char* what) {
  const fs::path p(path);
  if (fs::is_directory(p)) throw IoError(std::string(what) + " '" + path + "' is a directory, not a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir))
    throw IoError("cannot write '" + path + "': directory '" + dir.string() + "' does not exist");
  if (access(dir.c_str(), W_OK) != 0)
    throw IoError("cannot write '" + path + "': directory '" + dir.string() + "' is not writable");
}

std::string mib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

// phi from the input, as SurfaceOptions documents.
HostImage inputPhi(SurfaceOptions const& o) {
  if (io::isMeshPath(o.input)) {
    if (o.inputKind != "mask" || o.labelGiven || o.thresholdGiven)
      throw InvalidArgument("--input, --label and --threshold apply to image inputs, not to a mesh");
    const io::TriangleMesh mesh = io::readMesh(o.input);
    io::requireClosed(mesh, o.input);
    const int h = (o.params.patch - 1) / 2;
    const int margin = static_cast<int>(std::ceil(o.params.band)) + h + 2;
    const HostImage mask = io::meshToMask(mesh, o.spacing, margin);
    return ref::signedDistanceFromMask(mask);
  }
  HostImage img = io::readImage(o.input);
  if (img.geometry.dimension != 3) throw InvalidArgument("surface: '" + o.input + "' is 2D; a surface needs a 3D volume");
  if (o.inputKind == "phi") {
    if (o.labelGiven || o.thresholdGiven)
      throw InvalidArgument("--label and --threshold select a mask; they do not apply to --input phi");
    return img;
  }
  float* p = img.data.data();
  if (o.labelGiven || o.thresholdGiven) {
    for (Index i = 0; i < img.numVoxels(); ++i) {
      if (std::isnan(p[i])) throw InvalidArgument("surface: '" + o.input + "' has NaN at voxel " + std::to_string(i));
      p[i] = o.labelGiven ? (double(p[i]) == o.label ? 1.0f : 0.0f) : (double(p[i]) >= o.threshold ? 1.0f : 0.0f);
    }
  }
  try {
    return ref::signedDistanceFromMask(img);
  } catch (InvalidArgument const& e) {
    std::string msg = std::string(e.what()) + " in '" + o.input + "'";
    if (!o.labelGiven && !o.thresholdGiven && std::string(e.what()).find("not binary") != std::string::npos)
      msg += "; use --label L or --threshold T to select the inside, or --input phi for a signed distance";
    throw InvalidArgument(msg);
  }
}

class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(SurfaceNlmProgressInfo const& p) {
    if (quiet_) return;
    const int width = 24;
    const int filled = p.steps > 0 ? std::min(width, p.step * width / p.steps) : width;
    std::ostringstream s;
    s << "  " << std::left << std::setw(8) << p.stage << "[" << std::string(filled, '#')
      << std::string(width - filled, '.') << "] " << p.step << "/" << p.steps;
    if (tty_) {
      std::cerr << "\r" << s.str() << "   " << std::flush;
      dirty_ = true;
    } else if (p.step == p.steps) {
      std::cerr << s.str() << "\n";
    }
  }
  void end() {
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
  }

 private:
  bool quiet_, tty_, dirty_ = false;
};

}  // namespace

int cmdSurfaceDenoise(SurfaceOptions const& o) {
  using Clock = std::chrono::steady_clock;
  SurfaceNlmParams params = o.params;
  if (!o.variant.empty()) params.variant = parseSurfaceNlmVariant(o.variant);
  params.validate();
  const Backend backend = resolve(parseBackend(o.backend));
  if (!o.variant.empty() && backend == Backend::Cpu)
    throw InvalidArgument("--variant selects a Kokkos variant; it has no meaning with the CPU backend");
  if (o.inputKind != "mask" && o.inputKind != "phi")
    throw InvalidArgument("--input must be mask or phi, got '" + o.inputKind + "'");
  if (o.labelGiven && o.thresholdGiven) throw InvalidArgument("--label and --threshold exclude each other");
  if (!(o.spacing > 0.0) || !std::isfinite(o.spacing))
    throw InvalidArgument("--spacing must be a finite number > 0, got " + std::to_string(o.spacing));
  if (o.maxMemoryMiB < 0.0) throw InvalidArgument("--max-memory must be >= 0 MiB");
  if (fs::is_directory(o.input)) throw IoError("input '" + o.input + "' is a directory, not a file");
  if (!fs::exists(o.input)) throw IoError("input '" + o.input + "' does not exist");
  if (!io::isMeshPath(o.input)) io::requireSupportedExtension(o.input, io::Access::Read);
  checkWritable(o.output, "output");
  if (io::isMeshPath(o.output))
    throw InvalidArgument("OUT '" + o.output + "' is a mesh; OUT is the denoised phi image (use --out-mesh for the mesh)");
  io::requireSupportedExtension(o.output, io::Access::Write);
  if (!o.outMesh.empty()) {
    checkWritable(o.outMesh, "--out-mesh");
    if (!io::isMeshPath(o.outMesh))
      throw InvalidArgument("--out-mesh '" + o.outMesh + "' must end in .vtp, .stl or .obj");
    if (fs::absolute(o.outMesh) == fs::absolute(o.output)) throw InvalidArgument("--out-mesh and OUT are the same file");
  }

  const auto t0 = Clock::now();
  const HostImage phi = inputPhi(o);
  const double prepS = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::int64_t n = static_cast<std::int64_t>(ref::narrowBand(phi, params.band).size());
  const std::int64_t cap = static_cast<std::int64_t>(o.maxMemoryMiB * 1024.0 * 1024.0);
  if (!o.quiet)
    std::cout << "surface: " << phi.geometry.nx() << "x" << phi.geometry.ny() << "x" << phi.geometry.nz() << " grid, band "
              << n << " elements (|phi| <= " << params.band << "), patch " << params.patch << "^3, m "
              << params.neighbors << ", " << params.iterations << " iterations, " << toString(backend)
              << (backend == Backend::Kokkos ? std::string(" (") + toString(params.variant) + ")" : std::string())
              << std::endl;

  HostImage out;
  std::string summary;
  const auto t1 = Clock::now();
  if (backend == Backend::Cpu) {
    if (n > 0) {
      const std::int64_t need = ref::surfaceDenoiseBytes(n, params);
      const std::int64_t avail = cap > 0 ? cap : hostAvailableMemoryBytes();
      if (avail > 0 && need > avail)
        throw InvalidArgument("surface: the narrow band has " + std::to_string(n) + " elements; its search needs " +
                              mib(double(need)) + " of host memory but " + mib(double(avail)) +
                              " is available (lower --band or --neighbors)");
    }
    ref::SurfaceDenoiseInfo info;
    out = ref::surfaceDenoise(phi, params, &info);
    std::ostringstream s;
    s << "dt " << info.dt;
    summary = s.str();
  } else {
    using Exec = Kokkos::DefaultExecutionSpace;
    using Mem = Exec::memory_space;
    Exec exec;
    const auto in = Kokkos::create_mirror_view_and_copy(Mem(), phi.data);
    ImageView<Mem> dout("kortex::surface::out", in.extent(0), in.extent(1), in.extent(2));
    Progress bar(o.quiet);
    gpu::SurfaceNlmInfo info;
    try {
      gpu::surfaceDenoise(exec, ConstImageView<Mem>(in), dout, params, &info,
                          [&](SurfaceNlmProgressInfo const& p) { bar(p); }, nullptr, cap);
    } catch (...) {
      bar.end();
      throw;
    }
    bar.end();
    out = HostImage("kortex::surface::denoised", phi.geometry);
    out.metadata = phi.metadata;
    Kokkos::deep_copy(out.data, dout);
    std::ostringstream s;
    s << "search " << std::fixed << std::setprecision(3) << info.searchSeconds << " s (" << info.passes
      << " search launches, " << info.certificateFailures << " elements re-searched exactly), weights " << info.weightSeconds
      << " s, iterations " << info.iterateSeconds << " s, dt " << std::scientific << std::setprecision(4) << info.dt;
    summary = s.str();
  }
  const double runS = std::chrono::duration<double>(Clock::now() - t1).count();

  io::TriangleMesh mesh;
  if (!o.outMesh.empty()) mesh = io::zeroLevelSet(out);
  io::writeImage(out, o.output);
  if (!o.outMesh.empty()) {
    try {
      io::writeMesh(mesh, o.outMesh);
    } catch (...) {
      std::error_code ec;
      fs::remove(o.output, ec);  // no partial output
      throw;
    }
  }
  std::cout << "surface denoise: band " << n << " elements, " << std::fixed << std::setprecision(3) << runS
            << " s on " << (backend == Backend::Cpu ? "the CPU reference" : Kokkos::DefaultExecutionSpace::name())
            << " (input to phi " << prepS << " s); " << summary << "\n  wrote " << o.output;
  if (!o.outMesh.empty()) std::cout << " and " << o.outMesh << " (" << mesh.triangles.size() << " triangles)";
  std::cout << std::endl;
  return 0;
}

}  // namespace kortex::app
