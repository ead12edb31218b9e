// kortex.apply (python/kortex/__init__.py): pipeline/Apply.hpp's job on numpy arrays and paths.
// The conventions of the native module (python/KortexModule.cpp): arrays (z, y, x), any real dtype
// read as float32; geometry (x, y, z), LPS; InvalidArgument -> ValueError, IoError -> OSError.
// bindApply is called once from KortexModule.cpp's module definition.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Kokkos_Core.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/Apply.hpp"
#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "pipeline/Apply.hpp"
#include "pipeline/JobFiles.hpp"

namespace py = pybind11;
using namespace kortex;

namespace {

using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using ImageArg = std::variant<std::string, py::array>;
using Numbers = std::optional<std::vector<double>>;

void finalizeKokkos() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}
// As the other jobs: Kokkos starts at the first job and stops at interpreter exit.
void session() {
  if (Kokkos::is_initialized()) return;
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::initialize();
  py::module_::import("atexit").attr("register")(py::cpp_function(&finalizeKokkos));
}

Geometry geometryOf(py::buffer_info const& b, Numbers const& spacing, Numbers const& origin, Numbers const& direction,
                    const char* what) {
  if (b.ndim != 3)
    throw InvalidArgument(std::string(what) + ": apply takes 3D arrays (z, y, x), got " + std::to_string(b.ndim) + " dimensions");
  Geometry g = Geometry::make3D(Index(b.shape[2]), Index(b.shape[1]), Index(b.shape[0]));
  auto take = [&](Numbers const& v, const char* name, std::size_t n, double* dst) {
    if (!v) return;
    if (v->size() != n)
      throw InvalidArgument(std::string(what) + ": " + name + " needs " + std::to_string(n) + " values, got " + std::to_string(v->size()));
    std::copy(v->begin(), v->end(), dst);
  };
  take(spacing, "spacing", 3, g.spacing.data());
  take(origin, "origin", 3, g.origin.data());
  take(direction, "direction (row-major 3x3)", 9, g.direction.data());
  g.validate();
  return g;
}

// An array, used in place when float32 C-contiguous (kept alive by `keep`).
HostImage imageOf(py::array const& given, Numbers const& spacing, Numbers const& origin, Numbers const& direction, Array& keep,
                  const char* what) {
  const char kind = given.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
    throw InvalidArgument(std::string(what) + ": the array has dtype " + std::string(py::str(given.dtype())) +
                          "; Kortex takes arrays of real numbers");
  keep = Array::ensure(given);
  if (!keep) throw InvalidArgument(std::string(what) + ": not a numeric array");
  const py::buffer_info b = keep.request();
  HostImage img;
  img.geometry = geometryOf(b, spacing, origin, direction, what);
  img.data = ImageView<Kokkos::HostSpace>(static_cast<float*>(b.ptr), img.geometry.nz(), img.geometry.ny(), img.geometry.nx());
  return img;
}

py::dict resultDict(pipeline::ApplyResult const& r) {
  const Geometry& g = r.image.geometry;
  py::array_t<float> a({py::ssize_t(g.nz()), py::ssize_t(g.ny()), py::ssize_t(g.nx())});
  std::copy(r.image.data.data(), r.image.data.data() + r.image.data.size(), a.mutable_data());
  py::dict d;
  d["array"] = a;
  d["spacing"] = std::vector<double>(g.spacing.begin(), g.spacing.end());
  d["origin"] = std::vector<double>(g.origin.begin(), g.origin.end());
  d["direction"] = std::vector<double>(g.direction.begin(), g.direction.end());
  d["metadata"] = r.image.metadata;
  d["backend"] = std::string(toString(r.backend));
  d["execution_space"] = r.executionSpace;
  d["seconds"] = r.seconds;
  return d;
}

// An image argument as a job input: a path is the job's to read (spacing, origin and direction go
// with arrays only); an array is taken in memory (`keep` holds it).
pipeline::ImageInput imageInput(ImageArg const& arg, Numbers const& spacing, Numbers const& origin, Numbers const& direction,
                                Array& keep, const char* what) {
  pipeline::ImageInput in;
  if (auto const* path = std::get_if<std::string>(&arg)) {
    if (spacing || origin || direction)
      throw InvalidArgument(std::string(what) + ": spacing, origin and direction go with arrays; a file brings its own geometry");
    in.path = *path;
  } else {
    in.image = imageOf(std::get<py::array>(arg), spacing, origin, direction, keep, what);
  }
  return in;
}

// kortex.apply: the apply job (pipeline/Apply.hpp) of these arguments.
py::dict applyPy(ImageArg const& input, ImageArg const& reference, std::vector<std::string> const& transforms,
                 std::optional<std::string> const& out, std::string const& interpolation, std::string const& backend,
                 Numbers inputSpacing, Numbers inputOrigin, Numbers inputDirection, Numbers referenceSpacing,
                 Numbers referenceOrigin, Numbers referenceDirection, std::optional<std::string> const& qc) {
  session();
  pipeline::ApplyJob job;
  job.interpolation = parseApplyInterpolation(interpolation);
  job.backend = parseBackend(backend);
  for (auto const& t : transforms) job.transforms.push_back(pipeline::parseTransformSpec(t));
  if (out) job.output = *out;
  if (qc) job.qc = *qc;
  Array keepIn, keepRef;
  job.input = imageInput(input, inputSpacing, inputOrigin, inputDirection, keepIn, "input");
  job.reference = imageInput(reference, referenceSpacing, referenceOrigin, referenceDirection, keepRef, "reference");
  pipeline::ApplyResult r;
  {
    py::gil_scoped_release release;
    r = pipeline::runApplyJob(job);
  }
  return resultDict(r);
}

}  // namespace

void bindApply(py::module_& m) {
  m.def("apply", &applyPy, py::arg("input"), py::arg("reference"), py::arg("transforms"), py::kw_only(),
        py::arg("out") = py::none(), py::arg("interpolation") = std::string(toString(ApplyInterpolation::Linear)),
        py::arg("backend") = std::string(toString(pipeline::ApplyJob{}.backend)), py::arg("input_spacing") = py::none(),
        py::arg("input_origin") = py::none(), py::arg("input_direction") = py::none(),
        py::arg("reference_spacing") = py::none(), py::arg("reference_origin") = py::none(),
        py::arg("reference_direction") = py::none(), py::arg("qc") = py::none(),
        "pipeline::applyTransforms on arrays or paths (python/kortex/__init__.py apply documents it)");
}
