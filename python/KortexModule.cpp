// The `kortex` Python package's native module (`kortex._kortex`, pybind11): the product jobs of
// pipeline/ on numpy arrays and on file paths. Conventions (python/kortex/__init__.py documents
// them for users):
//   arrays   index order (z, y, x) for 3D and (y, x) for 2D, as the files' voxel (i, j, k) sits
//            at array[k, j, i] (the layout of Kortex's images); any real dtype, read as float32.
//            A float32 C-contiguous array is used in place (zero-copy); others are converted once.
//            Results come back as new float32 arrays (a copy: Kortex's buffers live in Kokkos
//            allocations, which must not outlive the module's Kokkos session).
//   geometry spacing / origin in (x, y, z) order, mm; direction row-major 3x3 (columns = axes),
//            LPS, as core/Image.hpp. A path instead of an array reads the file with its geometry.
//   errors   the library's messages unchanged: InvalidArgument -> ValueError, IoError -> OSError,
//            Unsupported -> NotImplementedError, anything else -> RuntimeError.
// Kokkos is initialised at the first job (if the process has not) and finalised at interpreter exit.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "pipeline/Atlas.hpp"
#include "pipeline/Denoise.hpp"
#include "pipeline/ParamsJson.hpp"
#include "pipeline/Inverse.hpp"
#include "pipeline/Register.hpp"
#include "pipeline/RegisterCohort.hpp"
#include "pipeline/RegisterJob.hpp"
#include "pipeline/Surface.hpp"

namespace py = pybind11;
using namespace kortex;

namespace {

using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
// An image argument: an array (with optional geometry) or a path.
using ImageArg = std::variant<std::string, py::array>;

struct GeometryArgs {
  std::optional<std::vector<double>> spacing, origin, direction;
};

Geometry geometryOf(py::buffer_info const& b, GeometryArgs const& ga) {
  Geometry g;
  if (b.ndim == 3) {
    g = Geometry::make3D(Index(b.shape[2]), Index(b.shape[1]), Index(b.shape[0]));
  } else if (b.ndim == 2) {
    g = Geometry::make2D(Index(b.shape[1]), Index(b.shape[0]));
  } else {
    throw InvalidArgument("an image array must be 2D (y, x) or 3D (z, y, x), got " + std::to_string(b.ndim) + " dimensions");
  }
  auto take = [&](std::optional<std::vector<double>> const& v, const char* what, std::size_t want, auto&& set) {
    if (!v) return;
    if (v->size() != want && !(want == 3 && g.dimension == 2 && v->size() == 2))
      throw InvalidArgument(std::string(what) + " needs " + std::to_string(want) + " values, got " + std::to_string(v->size()));
    set(*v);
  };
  take(ga.spacing, "spacing", 3, [&](std::vector<double> const& v) {
    for (std::size_t a = 0; a < v.size(); ++a) g.spacing[a] = v[a];
  });
  take(ga.origin, "origin", 3, [&](std::vector<double> const& v) {
    for (std::size_t a = 0; a < v.size(); ++a) g.origin[a] = v[a];
  });
  if (ga.direction) {
    if (ga.direction->size() != 9) throw InvalidArgument("direction needs 9 values (row-major 3x3), got " + std::to_string(ga.direction->size()));
    for (std::size_t a = 0; a < 9; ++a) g.direction[a] = (*ga.direction)[a];
  }
  g.validate();
  return g;
}

// The image of an argument. `keep` holds the float32 array the image's unmanaged view points into
// (the caller's own array when it is float32 and C-contiguous: zero-copy). Job inputs must be
// finite; a file may hold NaN and Inf (finiteOnly = false, for write).
HostImage imageOf(ImageArg const& arg, GeometryArgs const& ga, Array& keep, bool finiteOnly = true) {
  if (auto const* path = std::get_if<std::string>(&arg)) {
    if (ga.spacing || ga.origin || ga.direction)
      throw InvalidArgument("spacing, origin and direction go with arrays; a file brings its own geometry");
    return io::readImage(*path);
  }
  py::array const& given = std::get<py::array>(arg);
  const char kind = given.dtype().kind();
  if (kind == 'c')
    throw InvalidArgument("the image array is complex (" + std::string(py::str(given.dtype())) +
                          "); Kortex takes real images: pass its real part, imaginary part or magnitude");
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
    throw InvalidArgument("the image array has dtype " + std::string(py::str(given.dtype())) +
                          "; Kortex takes arrays of real numbers");
  keep = Array::ensure(given);
  if (!keep) throw InvalidArgument("the image is not a numeric array");
  const py::buffer_info b = keep.request();
  HostImage img;
  img.geometry = geometryOf(b, ga);
  img.data = ImageView<Kokkos::HostSpace>(static_cast<float*>(b.ptr), img.geometry.nz(), img.geometry.ny(), img.geometry.nx());
  for (std::size_t k = 0; finiteOnly && k < img.data.size(); ++k)
    if (!std::isfinite(img.data.data()[k])) {
      // Every job refuses NaN/Inf with its own message; the arrays from Python are checked here
      // so that the message names the argument.
      throw InvalidArgument("the image array contains NaN or infinite values (first at flat index " + std::to_string(k) + ")");
    }
  return img;
}

py::array_t<float> arrayOf(HostImage const& img) {
  std::vector<py::ssize_t> shape;
  if (img.geometry.dimension == 3) shape = {py::ssize_t(img.geometry.nz()), py::ssize_t(img.geometry.ny()), py::ssize_t(img.geometry.nx())};
  else shape = {py::ssize_t(img.geometry.ny()), py::ssize_t(img.geometry.nx())};
  py::array_t<float> out(shape);
  std::copy(img.data.data(), img.data.data() + img.data.size(), out.mutable_data());
  return out;
}

py::array_t<float> arrayOf(VectorField<Kokkos::HostSpace> const& f) {
  py::array_t<float> out({py::ssize_t(f.data.extent(0)), py::ssize_t(f.data.extent(1)), py::ssize_t(f.data.extent(2)),
                          py::ssize_t(f.data.extent(3))});
  std::copy(f.data.data(), f.data.data() + f.data.size(), out.mutable_data());
  return out;
}

py::dict geometryDict(Geometry const& g) {
  py::dict d;
  d["spacing"] = std::vector<double>(g.spacing.begin(), g.spacing.begin() + g.dimension);
  // origin keeps z for 2D images too: a slice's position in the volume it came from.
  d["origin"] = std::vector<double>(g.origin.begin(), g.origin.end());
  d["direction"] = std::vector<double>(g.direction.begin(), g.direction.end());
  return d;
}

GeometryArgs geometryArgs(std::optional<std::vector<double>> spacing, std::optional<std::vector<double>> origin,
                          std::optional<std::vector<double>> direction) {
  return GeometryArgs{std::move(spacing), std::move(origin), std::move(direction)};
}

// Kokkos starts at the first job (not at import: no device context for a process that only
// imports the package) and stops at interpreter exit.
void finalizeKokkos() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}
void session() {
  if (Kokkos::is_initialized()) return;
  setenv("OMP_PROC_BIND", "false", 0);  // Kokkos' OpenMP back end warns when it is unset
  Kokkos::initialize();
  py::module_::import("atexit").attr("register")(py::cpp_function(&finalizeKokkos));
}

// A job's result without the GIL held during the job (other Python threads run meanwhile).
template <class Job>
auto released(Job&& job) {
  py::gil_scoped_release release;
  return job();
}

// ---- the jobs ---------------------------------------------------------------------------------------

io::ReadOptions readOptions(std::optional<std::variant<std::string, std::vector<std::string>>> const& series) {
  io::ReadOptions o;
  if (!series) return o;
  if (auto const* one = std::get_if<std::string>(&*series))
    o.series = {*one};
  else
    o.series = std::get<std::vector<std::string>>(*series);
  return o;
}

py::dict readImageDict(std::string const& path, std::optional<std::variant<std::string, std::vector<std::string>>> const& series) {
  session();
  HostImage img = io::readImage(path, readOptions(series));
  py::dict d = geometryDict(img.geometry);
  d["array"] = arrayOf(img);
  d["metadata"] = img.metadata;
  return d;
}

py::dict readSeries(std::vector<std::string> const& files,
                    std::optional<std::variant<std::string, std::vector<std::string>>> const& series) {
  session();
  std::vector<std::filesystem::path> paths(files.begin(), files.end());
  HostImage img = io::readImageSeries(paths, readOptions(series));
  py::dict d = geometryDict(img.geometry);
  d["array"] = arrayOf(img);
  d["metadata"] = img.metadata;
  return d;
}

// A (3, z, y, x) array: a displacement field (world mm, LPS; the register job's field), written as
// the NIfTI vector image ITK and ANTs read (io::writeDisplacementField).
void writeFieldArray(std::string const& path, py::array const& array, GeometryArgs const& ga,
                     std::optional<std::map<std::string, std::string>> const& metadata) {
  if (metadata) throw InvalidArgument("a displacement field carries no metadata");
  Array keep = Array::ensure(array);
  if (!keep) throw InvalidArgument("the field is not a numeric array");
  const py::buffer_info b = keep.request();
  if (b.shape[0] != 3)
    throw InvalidArgument("a 4D array is written as a displacement field of shape (3, z, y, x); got " +
                          std::to_string(b.shape[0]) + " components");
  const py::buffer_info grid(nullptr, sizeof(float), py::format_descriptor<float>::format(), 3,
                             {b.shape[1], b.shape[2], b.shape[3]}, {b.strides[1], b.strides[2], b.strides[3]});
  VectorField<Kokkos::HostSpace> f("kortex::python::field", geometryOf(grid, ga), 3);
  std::copy(static_cast<const float*>(b.ptr), static_cast<const float*>(b.ptr) + f.data.size(), f.data.data());
  py::gil_scoped_release release;
  io::writeDisplacementField(f, path);
}

py::dict readFieldDict(std::string const& path) {
  session();
  const VectorField<Kokkos::HostSpace> f = io::readDisplacementField(path);
  py::dict d = geometryDict(f.geometry);
  d["array"] = arrayOf(f);
  return d;
}

void writeArray(std::string const& path, py::array array, std::optional<std::vector<double>> spacing,
                std::optional<std::vector<double>> origin, std::optional<std::vector<double>> direction,
                std::optional<std::map<std::string, std::string>> metadata);

void writeImageArray(std::string const& path, py::array array, std::optional<std::vector<double>> spacing,
           std::optional<std::vector<double>> origin, std::optional<std::vector<double>> direction,
           std::optional<std::map<std::string, std::string>> metadata) {
  session();
  try {
    writeArray(path, array, std::move(spacing), std::move(origin), std::move(direction), std::move(metadata));
  } catch (InvalidArgument const& e) {  // the geometry or the array: the message names the file
    throw InvalidArgument("cannot write '" + path + "': " + e.what());
  }
}

void writeArray(std::string const& path, py::array array, std::optional<std::vector<double>> spacing,
                std::optional<std::vector<double>> origin, std::optional<std::vector<double>> direction,
                std::optional<std::map<std::string, std::string>> metadata) {
  if (array.ndim() == 4) return writeFieldArray(path, array, geometryArgs(spacing, origin, direction), metadata);
  Array keep;
  HostImage img = imageOf(ImageArg(array), geometryArgs(spacing, origin, direction), keep, false);
  if (metadata) img.metadata = *metadata;
  py::gil_scoped_release release;
  io::writeImage(img, path);
}

// Python values as JSON, directly (a NaN or infinity stays a number, for the job's own check to
// name; text JSON has neither): dicts, lists, tuples, bools, ints, floats, strings, None.
nlohmann::json jsonOf(py::handle v) {
  if (v.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<std::int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::dict>(v)) {
    nlohmann::json o = nlohmann::json::object();
    for (auto const& [k, x] : v.cast<py::dict>()) o[py::str(k).cast<std::string>()] = jsonOf(x);
    return o;
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    nlohmann::json a = nlohmann::json::array();
    for (auto const& x : v) a.push_back(jsonOf(x));
    return a;
  }
  if (py::hasattr(v, "item")) return jsonOf(v.attr("item")());  // a numpy scalar
  throw InvalidArgument("a parameter has the Python type " + std::string(py::str(v.get_type().attr("__name__"))) +
                        "; numbers, strings, bools and lists are taken");
}
// An image input of a job: a path is the job's to read; an array is taken in memory (`keep` holds it).
pipeline::ImageInput imageInput(ImageArg const& arg, std::optional<std::vector<double>> spacing, Array& keep) {
  pipeline::ImageInput in;
  if (auto const* path = std::get_if<std::string>(&arg)) {
    if (spacing) throw InvalidArgument("spacing goes with arrays; a file brings its own geometry");
    in.path = *path;
  } else {
    in.image = imageOf(arg, geometryArgs(std::move(spacing), {}, {}), keep);
  }
  return in;
}

// kortex.denoise_bilateral / denoise_nlm / denoise_multires: the denoise job (pipeline/Denoise.hpp)
// of the description python/kortex builds (its JSON, without the image), the image a path or an
// array; returns the result (and writes the job's output when named).
py::array_t<float> denoiseJob(py::dict const& description, ImageArg const& image, std::optional<std::vector<double>> spacing) {
  session();
  pipeline::DenoiseJob job = pipeline::denoiseJobFromJson(jsonOf(description));
  Array keep;
  job.input = imageInput(image, std::move(spacing), keep);
  job.keepResult = true;
  return arrayOf(released([&] { return pipeline::runDenoiseJob(job); }).image);
}

py::array_t<double> matrixOf(Matrix4 const& m) {
  py::array_t<double> a({py::ssize_t(4), py::ssize_t(4)});
  std::copy(m.begin(), m.end(), a.mutable_data());
  return a;
}

py::dict registerResultDict(pipeline::RegisterJobResult const& r);

// kortex.register_greedy / register_unbiased: the register job (pipeline/RegisterJob.hpp) of the
// description python/kortex builds (the job's JSON, without its images), the images given as paths
// or arrays. Returns the job's results as arrays, with its report.
py::dict registerJob(py::dict const& description, ImageArg const& fixed, ImageArg const& moving,
                     std::optional<std::vector<double>> fixedSpacing, std::optional<std::vector<double>> movingSpacing,
                     std::optional<ImageArg> fixedMask, std::optional<ImageArg> movingMask) {
  session();
  pipeline::RegisterJob job = pipeline::registerJobFromJson(jsonOf(description));
  Array kf, km, kfm, kmm;
  // A mask array takes its image's spacing (a mask file brings its own geometry).
  auto spacingFor = [](ImageArg const& mask, std::optional<std::vector<double>> const& sp) {
    return std::holds_alternative<std::string>(mask) ? std::nullopt : sp;
  };
  if (fixedMask) job.fixedMask = imageInput(*fixedMask, spacingFor(*fixedMask, fixedSpacing), kfm);
  if (movingMask) job.movingMask = imageInput(*movingMask, spacingFor(*movingMask, movingSpacing), kmm);
  job.fixed = imageInput(fixed, std::move(fixedSpacing), kf);
  job.moving = imageInput(moving, std::move(movingSpacing), km);
  job.keepResults = true;
  return registerResultDict(released([&] { return pipeline::runRegisterJob(job); }));
}

// kortex.register_greedy with a list of moving images: the register cohort job
// (pipeline/RegisterCohort.hpp) of the description python/kortex builds; returns one dict per
// subject (register's; a skipped subject's: moving, error) and the cohort's report.
py::dict registerCohortJob(py::dict const& description, ImageArg const& fixed, std::vector<ImageArg> const& moving,
                           std::optional<std::vector<double>> fixedSpacing,
                           std::optional<std::vector<double>> movingSpacing, std::optional<ImageArg> fixedMask) {
  session();
  pipeline::RegisterCohortJob job = pipeline::registerCohortJobFromJson(jsonOf(description));
  Array kf, kfm;
  if (fixedMask)
    job.fixedMask = imageInput(*fixedMask, std::holds_alternative<std::string>(*fixedMask) ? std::nullopt : fixedSpacing, kfm);
  std::vector<Array> km(moving.size());
  job.fixed = imageInput(fixed, std::move(fixedSpacing), kf);
  for (std::size_t i = 0; i < moving.size(); ++i) job.moving.push_back(imageInput(moving[i], movingSpacing, km[i]));
  job.keepResults = true;
  const pipeline::RegisterCohortResult r = released([&] { return pipeline::runRegisterCohort(job); });
  py::list subjects;
  for (auto const& s : r.subjects) {
    if (s.result) {
      subjects.append(registerResultDict(*s.result));
    } else {
      py::dict d;
      d["moving"] = s.moving;
      d["error"] = s.error;
      subjects.append(d);
    }
  }
  py::dict d;
  d["subjects"] = subjects;
  d["pairs_per_second"] = r.pairsPerSecond();
  d["concurrent_pairs"] = r.concurrentPairs;
  d["report"] = py::module_::import("json").attr("loads")(pipeline::toJson(r).dump());
  return d;
}

py::dict registerResultDict(pipeline::RegisterJobResult const& r) {
  py::dict d;
  d["warped"] = arrayOf(r.warped);
  d["displacement"] = arrayOf(r.field);  // (3, z, y, x), the deformable part, world mm, LPS (ITK/ANTs)
  d["composite_displacement"] = arrayOf(r.composite);  // (3, z, y, x), the whole map (--out-composite)
  d["jacobian"] = arrayOf(r.jacobian);
  d["affine"] = matrixOf(r.affineWorld);  // 4x4, fixed world -> moving world (the --out-affine file)
  if (r.inverse) {
    d["inverse_displacement"] = arrayOf(r.inverseField);  // moving grid, the whole map's inverse
    d["inverse_consistency"] = py::dict(py::arg("mean") = r.consistency.mean, py::arg("p99") = r.consistency.p99,
                                        py::arg("max") = r.consistency.max, py::arg("voxels") = r.consistency.voxels,
                                        py::arg("unconverged") = r.inverse->stats.unconverged,
                                        py::arg("max_residual") = r.inverse->stats.maxResidual);
  }
  d["backend"] = std::string(toString(r.pair.backend));
  d["execution_space"] = r.pair.executionSpace;
  d["seconds"] = r.pair.secondsTotal;
  d["report"] = py::module_::import("json").attr("loads")(pipeline::toJson(r).dump());
  std::vector<std::string> written;
  for (auto const& p : r.written) written.push_back(p.string());
  d["written"] = written;
  return d;
}

py::array_t<float> surfacePhiFromMask(ImageArg const& mask, std::optional<double> label, std::optional<double> threshold,
                                      std::optional<std::vector<double>> spacing) {
  session();
  Array keep;
  const HostImage in = imageOf(mask, geometryArgs(spacing, {}, {}), keep);
  return arrayOf(released([&] { return pipeline::surfacePhiFromMask(in, label, threshold); }));
}

// kortex.surface_denoise: the surface job (pipeline/Surface.hpp) of the description python/kortex
// builds (its JSON, without the input), the input a path or an array; returns the denoised phi.
py::array_t<float> surfaceJob(py::dict const& description, ImageArg const& input, std::optional<std::vector<double>> spacing) {
  session();
  pipeline::SurfaceJob job = pipeline::surfaceJobFromJson(jsonOf(description));
  Array keep;
  job.input = imageInput(input, std::move(spacing), keep);
  job.keepResult = true;
  return arrayOf(released([&] { return pipeline::runSurfaceJob(job); }).image);
}

// The cohort of atlas_build: all paths -> a job over files (each read by the job); otherwise every
// image in memory (arrays used in place, dicts with their geometry, paths read here), no temporary files.
void setCohort(pipeline::AtlasJob& job, std::vector<py::object> const& images, std::vector<Array>& keep) {
  bool allPaths = true;
  for (auto const& im : images) allPaths = allPaths && py::isinstance<py::str>(im);
  if (allPaths) {
    for (auto const& im : images) job.images.push_back(im.cast<std::string>());
    return;
  }
  keep.resize(images.size());
  for (std::size_t k = 0; k < images.size(); ++k) {
    py::object const& im = images[k];
    if (py::isinstance<py::str>(im)) {
      job.imageData.push_back(io::readImage(im.cast<std::string>()));
    } else if (py::isinstance<py::dict>(im)) {
      py::dict d = im.cast<py::dict>();
      auto opt = [&](const char* key) -> std::optional<std::vector<double>> {
        if (!d.contains(key) || d[key].is_none()) return std::nullopt;
        return d[key].cast<std::vector<double>>();
      };
      if (!d.contains("array")) throw InvalidArgument("atlas image " + std::to_string(k) + ": a dict needs an 'array'");
      job.imageData.push_back(imageOf(ImageArg(d["array"].cast<py::array>()), geometryArgs(opt("spacing"), opt("origin"), opt("direction")),
                                      keep[k]));
    } else {
      job.imageData.push_back(imageOf(ImageArg(im.cast<py::array>()), GeometryArgs{}, keep[k]));
    }
  }
}

// kortex.atlas_build: the atlas job (pipeline/Atlas.hpp) of the description python/kortex builds (its
// JSON, without the cohort) and the cohort (paths, arrays or read's dicts: setCohort).
py::dict atlasBuild(py::dict const& description, std::vector<py::object> images) {
  session();
  pipeline::AtlasJob job = pipeline::atlasJobFromJson(jsonOf(description));
  std::vector<Array> keep;  // arrays the in-memory images point into, alive until the job ends
  setCohort(job, images, keep);
  const pipeline::AtlasJobResult r = released([&] { return pipeline::runAtlasJob(job, nullptr); });
  py::dict t = geometryDict(r.templateImage.geometry);
  t["array"] = arrayOf(r.templateImage);
  t["metadata"] = r.templateImage.metadata;
  py::dict d;
  d["template"] = t;
  d["report"] = py::module_::import("json").attr("loads")(pipeline::toJson(r).dump());
  return d;
}

// The defaults python/kortex takes for its signatures: the params structs' and the jobs' own.
py::object defaults() {
  const pipeline::AtlasJob job;
  const pipeline::RegisterJob reg;
  const nlohmann::json j = {
      {"greedy", pipeline::toJson(GreedyParams{})},
      {"backend", toString(Backend::Auto)},
      {"surface", pipeline::toJson(SurfaceNlmParams{})},
      {"bilateral", pipeline::toJson(BilateralParams{})},
      {"nlm", pipeline::toJson(NlmParams{})},
      {"multires", pipeline::toJson(MultiresParams{})},
      {"register", {{"affine", reg.useAffine}, {"affine_metric", toString(reg.affineMetric)},
                    {"mi_bins", reg.miBins}, {"bias_correct_mm", reg.biasSigmaMm}, {"greedy", pipeline::toJson(reg.greedy)},
                    {"unbiased", pipeline::toJson(reg.fluid)}}},
      {"atlas", {{"affine", job.useAffine},
                 {"clip", job.clip},
                 {"checkpoint_every", job.checkpointEvery},
                 {"resume", job.resume},
                 {"max_memory", job.maxMemoryMiB}}}};
  return py::module_::import("json").attr("loads")(j.dump());
}

}  // namespace

void bindApply(py::module_& m);  // python/Apply.cpp: kortex.apply

PYBIND11_MODULE(_kortex, m) {
  m.doc() = "Kortex native module: the product jobs on numpy arrays and file paths (see kortex.__doc__)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (InvalidArgument const& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (IoError const& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (Unsupported const& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    }
  });
  m.attr("execution_space") = std::string(Kokkos::DefaultExecutionSpace::name());
  m.attr("dicom_decoder") = std::string(io::dicomDecoder());
  m.attr("has_gpu_backend") = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Kokkos::DefaultExecutionSpace::memory_space>::accessible;

  m.def("read", &readImageDict, py::arg("path"), py::kw_only(), py::arg("series") = py::none(),
        "Read an image: dict(array, spacing, origin, direction, metadata). series: the SeriesInstanceUID "
        "(or a list of them) to read where a DICOM folder holds several series");
  m.def("read_series", &readSeries, py::arg("files"), py::kw_only(), py::arg("series") = py::none(),
        "Read DICOM slice files (any order) as one 3D volume: dict(array, spacing, origin, direction, metadata). "
        "series: the SeriesInstanceUID to read where the files hold several series");
  m.def("write", &writeImageArray, py::arg("path"), py::arg("array"), py::kw_only(), py::arg("spacing") = py::none(),
        py::arg("origin") = py::none(), py::arg("direction") = py::none(), py::arg("metadata") = py::none(),
        "Write an array as an image (atomic; the format from the extension)");
  m.def("read_field", &readFieldDict, py::arg("path"),
        "Read a displacement field (ITK/ANTs NIfTI vector image, world mm, LPS): dict(array (3, z, y, x), "
        "spacing, origin, direction)");
  m.def("denoise", &denoiseJob, py::arg("job"), py::arg("image"), py::kw_only(), py::arg("spacing"),
        "The denoise job (pipeline/Denoise.hpp) of a description (its JSON, without the image)");
  // register_greedy, register_unbiased and atlas_build: python/kortex gives them their signatures
  // (defaults from defaults()).
  m.def("defaults", &defaults, "The parameter defaults of the jobs (the C++ structs'), as python/kortex uses them");
  m.def("register", &registerJob, py::arg("job"), py::arg("fixed"), py::arg("moving"), py::kw_only(),
        py::arg("fixed_spacing"), py::arg("moving_spacing"), py::arg("fixed_mask") = py::none(),
        py::arg("moving_mask") = py::none(),
        "The register job (pipeline/RegisterJob.hpp) of a description (its JSON, without the images)");
  m.def("register_cohort", &registerCohortJob, py::arg("job"), py::arg("fixed"), py::arg("moving"), py::kw_only(),
        py::arg("fixed_spacing"), py::arg("moving_spacing"), py::arg("fixed_mask") = py::none(),
        "The register cohort job (pipeline/RegisterCohort.hpp) of a description (its JSON, without the images)");
  m.def("surface_phi_from_mask", &surfacePhiFromMask, py::arg("mask"), py::kw_only(), py::arg("label") = py::none(),
        py::arg("threshold") = py::none(), py::arg("spacing") = py::none());
  m.def("surface", &surfaceJob, py::arg("job"), py::arg("input"), py::kw_only(), py::arg("spacing"),
        "The surface job (pipeline/Surface.hpp) of a description (its JSON, without the input)");
  m.def("atlas_build", &atlasBuild, py::arg("job"), py::arg("images"),
        "The atlas job (pipeline/Atlas.hpp) of a description (its JSON, without the cohort) and a cohort");
  bindApply(m);
}
