#include "pipeline/Apply.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Timing.hpp"
#include "gpu/imageops/Resample.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "io/Transform.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/detail/JsonReader.hpp"
#include "reference_cpu/Resample.hpp"

namespace kortex::pipeline {

namespace fs = std::filesystem;

namespace {

void requireVolume(Geometry const& g, const char* what, bool cells) {
  if (g.dimension != 3) throw InvalidArgument(std::string("apply: the ") + what + " must be a 3D image, got " + describe(g));
  if (cells && (g.nx() < 2 || g.ny() < 2 || g.nz() < 2))
    throw InvalidArgument(std::string("apply: the ") + what + " needs at least 2 voxels along every axis, got " + describe(g));
}

// The integer type a label or nearest result is written in: the input file's own integer type, else
// the smallest of uint8, int16, int32 that holds every value (io::writeImage falls back to float32
// where a value is not an integer of that type).
std::string labelDatatypeOf(HostImage const& input) {
  auto it = input.metadata.find("nifti.datatype");
  if (it != input.metadata.end())
    for (const char* t : {"uint8", "int8", "int16", "uint16", "int32", "uint32"})
      if (it->second == t) return t;
  float lo = 0.0f, hi = 0.0f;
  const float* v = input.data.data();
  for (std::size_t k = 0; k < input.data.size(); ++k) lo = std::min(lo, v[k]), hi = std::max(hi, v[k]);
  if (lo >= 0.0f && hi <= 255.0f) return "uint8";
  if (lo >= -32768.0f && hi <= 32767.0f) return "int16";
  return "int32";
}

std::string transformName(std::size_t k, fs::path const& p) {
  return "transform " + std::to_string(k + 1) + " ('" + p.string() + "')";
}

template <class Exec>
HostImage resampleKokkos(Exec const& exec, HostImage const& input, Geometry const& reference, TransformChain const& chain,
                         ApplyInterpolation interpolation) {
  using Mem = typename Exec::memory_space;
  auto dInput = Kokkos::create_mirror_view_and_copy(Mem(), input.data);
  Kokkos::View<float*, Mem> dFields("kortex::apply::fields", std::size_t(chain.fieldFloats()));
  std::size_t offset = 0;
  for (auto const& t : chain.transforms) {
    if (t.kind != ChainKind::Field) continue;
    const std::size_t n = t.field.data.size();
    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> src(t.field.data.data(), n);
    Kokkos::deep_copy(exec, Kokkos::subview(dFields, std::make_pair(offset, offset + n)), src);
    offset += n;
  }
  ImageView<Mem> dOut("kortex::apply::out", reference.nz(), reference.ny(), reference.nx());
  gpu::resample(exec, ConstImageView<Mem>(dInput), gpu::PackedFieldsOf<Exec>(dFields),
                applyChainCoeffs(chain, reference, input.geometry), interpolation, dOut);
  exec.fence();
  HostImage out("kortex::apply::out", reference);
  Kokkos::deep_copy(out.data, dOut);
  return out;
}

}  // namespace

TransformSpec parseTransformSpec(std::string const& text) {
  TransformSpec s;
  if (text.empty() || text.front() != '[') {
    s.path = text;
    return s;
  }
  const auto comma = text.rfind(',');
  if (text.back() != ']' || comma == std::string::npos)
    throw InvalidArgument("transform '" + text + "': the bracketed form is [FILE,0] or [FILE,1] (1: the inverse)");
  const std::string flag = text.substr(comma + 1, text.size() - comma - 2);
  if (flag != "0" && flag != "1")
    throw InvalidArgument("transform '" + text + "': the flag after the comma is 0 (as is) or 1 (the inverse), got '" + flag + "'");
  s.path = text.substr(1, comma - 1);
  s.inverse = flag == "1";
  if (s.path.empty()) throw InvalidArgument("transform '" + text + "': no file name");
  return s;
}

TransformChain readTransformChain(std::vector<TransformSpec> const& specs) {
  TransformChain chain;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    io::TransformFile f = io::readTransform(specs[k].path);
    ChainTransform t;
    t.name = transformName(k, specs[k].path);
    if (f.kind == io::TransformFileKind::Field) {
      if (specs[k].inverse)
        throw InvalidArgument(t.name + ": the inverse of a displacement field is not available (it is not the field "
                              "negated); register the other way round, or give the inverse field");
      t.kind = ChainKind::Field;
      t.field = std::move(f.field);
    } else {
      t.kind = ChainKind::Affine;
      t.matrix = specs[k].inverse ? inverseAffine(f.matrix, t.name) : f.matrix;
    }
    chain.transforms.push_back(std::move(t));
  }
  return chain;
}

ApplyResult applyTransforms(HostImage const& input, Geometry const& reference, TransformChain const& chain,
                            ApplyInterpolation interpolation, Backend backend) {
  {
    kx::ScopedRegion region("kortex::apply::validate");
    if (input.data.data() == nullptr || input.numVoxels() == 0) throw InvalidArgument("apply: the input image is empty");
    requireVolume(input.geometry, "input image", true);
    reference.validate();
    requireVolume(reference, "reference grid", false);
    requireFinite(input, "the input image");
    if (interpolation == ApplyInterpolation::Label) requireIntegerLabels(input, "the input image");
    chain.validate();
  }
  kx::ScopedRegion region("kortex::apply::resample");
  ApplyResult r;
  r.backend = resolve(backend);
  const auto t0 = Clock::now();
  if (r.backend == Backend::Cpu) {
    r.executionSpace = "OpenMP reference";
    r.image = ref::resample(input, reference, chain, interpolation);
  } else {
    using Exec = Kokkos::DefaultExecutionSpace;
    r.executionSpace = Exec::name();
    r.image = resampleKokkos(Exec(), input, reference, chain, interpolation);
  }
  r.seconds = secondsSince(t0);
  r.image.metadata = input.metadata;
  if (interpolation != ApplyInterpolation::Linear) r.image.metadata["kortex.label_datatype"] = labelDatatypeOf(input);
  return r;
}

namespace {

std::string specText(TransformSpec const& t) { return t.inverse ? "[" + t.path.string() + ",1]" : t.path.string(); }

}  // namespace

nlohmann::json toJson(ApplyJob const& job) {
  nlohmann::json transforms = nlohmann::json::array();
  for (auto const& t : job.transforms) transforms.push_back(specText(t));
  return {{"job", "apply"},
          {"input", toJson(job.input)},
          {"reference", toJson(job.reference)},
          {"output", job.output.string()},
          {"qc", job.qc.string()},
          {"transforms", transforms},
          {"interpolation", toString(job.interpolation)},
          {"backend", toString(job.backend)}};
}

ApplyJob applyJobFromJson(nlohmann::json const& j) {
  ApplyJob job;
  detail::JsonReader r(j, "apply job");
  r.jobKind("apply");
  job.input.path = inputPathFromJson(r.raw("input"), "apply job", "input");
  job.reference.path = inputPathFromJson(r.raw("reference"), "apply job", "reference");
  r.path("output", job.output)
      .path("qc", job.qc)
      .choice("interpolation", job.interpolation, parseApplyInterpolation)
      .choice("backend", job.backend, parseBackend);
  if (nlohmann::json const* t = r.raw("transforms")) {
    if (!t->is_array()) r.wrongType("transforms", "a list of transform files", *t);
    for (auto const& e : *t) {
      if (!e.is_string()) r.wrongType("transforms", "a list of transform files", *t);
      job.transforms.push_back(parseTransformSpec(e.get<std::string>()));
    }
  }
  r.done();
  return job;
}

ApplyResult runApplyJob(ApplyJob const& job) {
  {
    kx::ScopedRegion region("kortex::apply::check");
    if (job.transforms.empty()) throw InvalidArgument("apply: no transform given (at least one is needed)");
    requireImageInput(job.input, "input image", "apply");
    requireImageInput(job.reference, "reference image", "apply");
    std::vector<JobFile> inputs;
    if (!job.input.inMemory()) inputs.push_back({"image", job.input.path});
    if (!job.reference.inMemory()) inputs.push_back({"reference image", job.reference.path});
    for (std::size_t k = 0; k < job.transforms.size(); ++k) {
      const fs::path& p = job.transforms[k].path;
      requireInputFile(p, "transform " + std::to_string(k + 1));
      if (!io::isTransformExtension(p))
        throw IoError(transformName(k, p) + ": unknown transform file extension; Kortex reads ITK transforms (.txt, "
                      ".tfm), ITK/ANTs .mat files and displacement fields (.nii, .nii.gz)");
      inputs.push_back({"transform " + std::to_string(k + 1), p});
    }
    if (!job.output.empty()) {
      io::requireWritableFile(job.output, "output");
      io::requireSupportedExtension(job.output, io::Access::Write);
    }
    if (!job.qc.empty()) {
      if (fs::exists(job.qc) && !fs::is_directory(job.qc))
        throw IoError("the QC report's folder '" + job.qc.string() + "' is a file");
      io::requireWritableFile(job.qc / "index.html", "QC report", true);
    }
    requireDistinctFiles(inputs, {{"output", job.output}, {"QC report", job.qc.empty() ? fs::path() : job.qc / "index.html"}});
  }
  HostImage input, reference;
  TransformChain chain;
  {
    kx::ScopedRegion region("kortex::apply::read");
    input = readImageInput(job.input);
    reference = readImageInput(job.reference);
    chain = readTransformChain(job.transforms);
  }
  ApplyResult r = applyTransforms(input, reference.geometry, chain, job.interpolation, job.backend);
  if (!job.qc.empty()) r.qc = applyQc(job, input, reference, r);
  if (!job.output.empty() || !job.qc.empty()) {
    kx::ScopedRegion region("kortex::apply::write");
    std::vector<PlannedOutput> out = {{"output", job.output, [&](fs::path const& p) { io::writeImage(r.image, p); }}};
    for (auto const& f : r.qc.files)
      out.push_back({"QC report", job.qc / f.name, [&f](fs::path const& p) {
                       io::writeTextFileAtomic(p, std::string(f.bytes.begin(), f.bytes.end()));
                     }});
    writeAllOrNone(out);
  }
  return r;
}

}  // namespace kortex::pipeline
