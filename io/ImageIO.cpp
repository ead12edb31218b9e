// Format dispatch, atomic output, windowing to 8 bits and the PNG montage.
#include "io/ImageIO.hpp"
#include "io/Output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <system_error>

#include <kortex/Config.hpp>

#include "io/IoDetail.hpp"

namespace kortex::io {

namespace detail {

[[noreturn]] void readError(fs::path const& file, std::string const& what) {
  throw IoError("cannot read '" + file.string() + "': " + what);
}

[[noreturn]] void beyondFloat32(fs::path const& file, std::uint64_t voxel, bool scaled) {
  readError(file, "voxel " + std::to_string(voxel) + " holds a value beyond the float32 range (" +
                      (scaled ? "after its rescaling; " : "") +
                      "Kortex computes in float32 and would make it infinite)");
}

[[noreturn]] void writeError(fs::path const& file, std::string const& what) {
  throw IoError("cannot write '" + file.string() + "': " + what);
}

std::string extensionOf(fs::path const& path) {
  std::string name = path.filename().string();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto endsWith = [&](std::string const& s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  for (const char* two : {".nii.gz", ".hdr.gz", ".img.gz"})
    if (endsWith(two)) return two;
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  return name.substr(dot);
}

void requireReadableFile(fs::path const& file) {
  std::error_code ec;
  const auto st = fs::status(file, ec);
  if (ec || !fs::exists(st)) readError(file, "no such file");
  if (fs::is_directory(st)) readError(file, "is a directory, not an image file");
  if (!fs::is_regular_file(st)) readError(file, "is not a regular file");
  if (::access(file.c_str(), R_OK) != 0) readError(file, "no permission to read it");
}

std::uintmax_t fileSize(fs::path const& file) {
  std::error_code ec;
  const auto n = fs::file_size(file, ec);
  if (ec) readError(file, "cannot get its size (" + ec.message() + ")");
  return n;
}

std::string formatFloats(std::vector<double> const& values, bool asFloat32) {
  std::string s;
  char buf[64];
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (asFloat32)
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(values[i])));
    else
      std::snprintf(buf, sizeof buf, "%.17g", values[i]);
    if (i) s += ' ';
    s += buf;
  }
  return s;
}

CapturedStderr::CapturedStderr(std::string library) : library_(std::move(library)) {
  std::fflush(stderr);
  tmp_ = std::tmpfile();
  if (tmp_) {
    saved_ = stderr;
    stderr = tmp_;
  }
}

CapturedStderr::~CapturedStderr() {
  restore();
  if (tmp_) std::fclose(tmp_);
}

void CapturedStderr::restore() {
  if (!saved_) return;
  std::fflush(tmp_);
  stderr = saved_;
  saved_ = nullptr;
}

std::string CapturedStderr::said() {
  restore();
  if (!tmp_) return {};
  std::string all;
  std::rewind(tmp_);
  char buf[512];
  while (std::fgets(buf, sizeof buf, tmp_)) all += buf;
  std::string out, line;
  auto flush = [&] {
    for (const char* p : {"** ERROR: ", "** ERROR ", "** NIFTI: ", "** "})
      if (line.rfind(p, 0) == 0) line = line.substr(std::strlen(p));
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (!line.empty() && out.find(line) == std::string::npos) out += (out.empty() ? "" : "; ") + line;
    line.clear();
  };
  for (char c : all) {
    if (c == '\n')
      flush();
    else
      line += c;
  }
  flush();
  return out;
}

std::string CapturedStderr::quoted() {
  const std::string s = said();
  return s.empty() ? std::string() : " (" + library_ + ": " + s + ")";
}

std::string formatReadable(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

bool parseNumbers(std::string const& text, std::size_t count, std::vector<double>& out) {
  out.clear();
  const char* p = text.c_str();
  while (true) {
    while (*p == ' ' || *p == '\t' || *p == ',') ++p;
    if (!*p) break;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(p, &end);
    if (end == p || errno == ERANGE) return false;
    out.push_back(v);
    p = end;
  }
  return out.size() == count;
}

HostImage allocateImage(Geometry const& g, fs::path const& file, char const* label) {
  try {
    g.validate();
  } catch (InvalidArgument const& e) {
    readError(file, std::string("invalid image geometry: ") + e.what());
  }
  return HostImage(label, g);
}

void checkWritable(HostImage const& image, fs::path const& file) {
  try {
    image.geometry.validate();
  } catch (InvalidArgument const& e) {
    writeError(file, std::string("invalid image geometry: ") + e.what());
  }
  const auto& g = image.geometry;
  if (!image.data.data() || image.data.extent(0) != static_cast<std::size_t>(g.nz()) ||
      image.data.extent(1) != static_cast<std::size_t>(g.ny()) ||
      image.data.extent(2) != static_cast<std::size_t>(g.nx()))
    throw InvalidArgument("cannot write '" + file.string() + "': image data (" +
                          std::to_string(image.data.extent(2)) + "x" +
                          std::to_string(image.data.extent(1)) + "x" +
                          std::to_string(image.data.extent(0)) + ") does not match its geometry (" +
                          describe(g) + ")");
}

namespace {
void syncPath(fs::path const& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}
}  // namespace

AtomicOutput::AtomicOutput(fs::path const& target) : target_(target) {
  if (target.empty()) writeError(target, "empty file name");
  if (!target.has_filename() || target.filename() == "." || target.filename() == "..")
    writeError(target, "the path names a directory, not a file");
  std::error_code ec;
  if (fs::is_directory(target, ec)) writeError(target, "the path is a directory");
  dir_ = target.parent_path();
  if (dir_.empty()) dir_ = ".";
  const auto st = fs::status(dir_, ec);
  if (!fs::exists(st)) writeError(target, "directory '" + dir_.string() + "' does not exist");
  if (!fs::is_directory(st)) writeError(target, "'" + dir_.string() + "' is not a directory");
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    writeError(target, "no permission to write in directory '" + dir_.string() + "'");
  if (fs::exists(target, ec) && !fs::is_regular_file(target, ec))
    writeError(target, "the target exists and is not a regular file");
  for (int attempt = 0;; ++attempt) {
    tmp_ = temporaryName(dir_);
    if (fs::create_directory(tmp_, ec)) break;
    if (attempt >= 8 || ec != std::errc::file_exists)
      writeError(target, "cannot create a temporary directory in '" + dir_.string() + "' (" +
                             (ec ? ec.message() : std::string("exists")) + ")");
  }
}

AtomicOutput::~AtomicOutput() {
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void AtomicOutput::commit(std::vector<std::string> const& names) {
  for (auto const& n : names) {
    std::error_code ec;
    if (!fs::is_regular_file(tmp_ / n, ec))
      writeError(target_, "internal error: temporary file '" + n + "' was not produced");
    syncPath(tmp_ / n, false);
  }
  for (auto const& n : names) {
    std::error_code ec;
    fs::rename(tmp_ / n, dir_ / n, ec);
    if (ec) writeError(dir_ / n, "cannot move the finished file into place (" + ec.message() + ")");
  }
  syncPath(dir_, true);
  committed_ = true;
}

std::recursive_mutex& ioMutex() {
  static std::recursive_mutex m;
  return m;
}

}  // namespace detail

namespace {

using namespace detail;

constexpr bool kHaveVtk = KORTEX_HAVE_VTK != 0;

struct FormatInfo {
  const char* ext;
  const char* name;
  bool readable;
  bool writable;
  bool needsVtk;  // compiled only in builds with VTK (VtkFormats.cpp)
};
constexpr FormatInfo kFormats[] = {
    {".nii", "NIfTI", true, true, false},
    {".nii.gz", "NIfTI", true, true, false},
    {".hdr", "NIfTI pair", true, true, false},
    {".img", "NIfTI pair", true, true, false},
    {".hdr.gz", "NIfTI pair", true, true, false},
    {".img.gz", "NIfTI pair", true, true, false},
    {".mha", "MetaImage", true, true, true},
    {".mhd", "MetaImage", true, true, true},
    {".vti", "VTK XML image data", true, true, true},
    {".png", "PNG", true, true, true},
    {".jpg", "JPEG", true, true, true},
    {".jpeg", "JPEG", true, true, true},
    {".dcm", "DICOM", true, false, false},
};

FormatInfo const* formatOf(std::string const& ext) {
  for (auto const& f : kFormats)
    if (ext == f.ext) return &f;
  return nullptr;
}

}  // namespace

bool detail::isNiftiExtension(std::string const& ext) {
  FormatInfo const* f = formatOf(ext);
  return f && std::strncmp(f->name, "NIfTI", 5) == 0;
}

namespace {

// Readable / writable by the format and present in this build.
bool supported(std::string const& ext, Access access) {
  FormatInfo const* f = formatOf(ext);
  if (!f || (f->needsVtk && !kHaveVtk)) return false;
  return access == Access::Read ? f->readable : f->writable;
}

// The error readImage / writeImage give for an extension they cannot handle (nothing if they can).
void checkExtension(fs::path const& path, Access access) {
  const std::string ext = extensionOf(path);
  if (supported(ext, access)) return;
  FormatInfo const* f = formatOf(ext);
  const bool read = access == Access::Read;
  if (f && f->needsVtk && !kHaveVtk && (read ? f->readable : f->writable))
    throw Unsupported("cannot " + std::string(read ? "read" : "write") + " '" + path.string() +
                      "': " + f->name + " (" + ext +
                      ") needs a Kortex build with VTK and this one has none; NIfTI (.nii, "
                      ".nii.gz, .hdr/.img) is always available" +
                      (read ? ", and DICOM (.dcm) too" : ""));
  const std::string what =
      ext.empty() ? std::string("no file extension")
                  : (read ? "unknown extension '" + ext + "'"
                          : "unknown or read-only extension '" + ext + "'");
  const std::string list = "; Kortex " + std::string(read ? "reads " : "writes ") +
                           supportedExtensions(access);
  if (read) readError(path, what + list);
  writeError(path, what + list);
}

// [lo, hi] window for 8-bit output: display.min/max metadata, else the finite data range.
// Returns false for a constant image without a window. (Unused in builds without VTK.)
[[maybe_unused]] bool displayWindow(HostImage const& image, double& lo, double& hi) {
  auto itMin = image.metadata.find("display.min");
  auto itMax = image.metadata.find("display.max");
  if (itMin != image.metadata.end() && itMax != image.metadata.end()) {
    std::vector<double> a, b;
    if (parseNumbers(itMin->second, 1, a) && parseNumbers(itMax->second, 1, b) &&
        std::isfinite(a[0]) && std::isfinite(b[0]) && b[0] > a[0]) {
      lo = a[0];
      hi = b[0];
      return true;
    }
  }
  lo = std::numeric_limits<double>::infinity();
  hi = -lo;
  const float* p = image.data.data();
  for (Index i = 0; i < image.numVoxels(); ++i) {
    if (!std::isfinite(p[i])) continue;
    lo = std::min(lo, double(p[i]));
    hi = std::max(hi, double(p[i]));
  }
  if (!(hi > lo)) {
    if (!std::isfinite(lo)) lo = hi = 0.0;
    return false;
  }
  return true;
}

inline std::uint8_t toByte(double v, double lo, double hi, bool windowed) {
  if (!std::isfinite(v)) {
    if (std::isnan(v)) return 0;
    return v > 0 ? 255 : 0;
  }
  double t = windowed ? (v - lo) / (hi - lo) * 255.0 : v;
  t = std::min(255.0, std::max(0.0, t));
  return static_cast<std::uint8_t>(std::lround(t));
}

}  // namespace

bool isSupportedExtension(std::filesystem::path const& path, Access access) {
  return supported(extensionOf(path), access);
}

void requireSupportedExtension(std::filesystem::path const& path, Access access) {
  checkExtension(path, access);
}

std::string imageStem(std::filesystem::path const& path) {
  const std::string name = path.filename().string();
  const std::string ext = extensionOf(path);
  if (!ext.empty() && formatOf(ext) && name.size() > ext.size()) return name.substr(0, name.size() - ext.size());
  return path.stem().string();
}

std::string supportedExtensions(Access access) {
  std::string s;
  for (auto const& f : kFormats) {
    if (!supported(f.ext, access)) continue;
    if (!s.empty()) s += ", ";
    s += f.ext;
  }
  return s;
}

namespace {
bool isDicomFile(fs::path const& f) {
  if (extensionOf(f) == ".dcm") return true;
  std::ifstream in(f, std::ios::binary);
  char magic[132] = {0};
  return in.read(magic, 132) && std::memcmp(magic + 128, "DICM", 4) == 0;
}

std::vector<std::string>& defaultSeries() {
  static std::vector<std::string> s;
  return s;
}

std::vector<std::string> chosenSeries(ReadOptions const& options) {
  return options.series.empty() ? defaultSeries() : options.series;
}
}  // namespace

void setDicomSeries(std::vector<std::string> const& series) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  defaultSeries() = series;
}

HostImage readImageSeries(std::vector<std::filesystem::path> const& files, ReadOptions const& options) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  if (files.empty()) throw IoError("an image series needs at least one file");
  for (auto const& f : files) {
    requireReadableFile(f);
    if (!isDicomFile(f)) readError(f, "is not a DICOM file: a series is read from DICOM slices");
  }
  HostImage img = readDicomSeries(files, files.size() == 1 ? files.front() : files.front().parent_path() / "",
                                  chosenSeries(options));
  img.metadata["io.format"] = img.geometry.dimension == 3 ? "dicom-series" : "dicom";
  return img;
}

HostImage readImage(std::filesystem::path const& path, ReadOptions const& options) {
  std::unique_lock<std::recursive_mutex> lock(ioMutex());
  std::error_code ec;
  const std::string dirExt = extensionOf(path);
  const bool imageNamed = std::any_of(std::begin(kFormats), std::end(kFormats), [&](auto const& f) { return dirExt == f.ext; });
  if (fs::is_directory(path, ec) && !imageNamed) {
    // A folder (without an image extension: "x.nii/" is a mistake, refused below as a directory):
    // the DICOM slices in it, one series, stacked into a volume.
    std::vector<fs::path> files;
    for (auto const& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && isDicomFile(e.path())) files.push_back(e.path());
    if (ec) readError(path, "cannot list the folder (" + ec.message() + ")");
    std::sort(files.begin(), files.end());
    HostImage img = readDicomSeries(files, path, chosenSeries(options));
    img.metadata["io.format"] = img.geometry.dimension == 3 ? "dicom-series" : "dicom";
    return img;
  }
  requireReadableFile(path);
  const std::string ext = extensionOf(path);
  if (!imageNamed && isDicomFile(path)) {  // a DICOM slice named without .dcm (as scanners write them)
    HostImage img = readDicom(path);
    img.metadata["io.format"] = "dicom";
    return img;
  }
  checkExtension(path, Access::Read);
  if (fileSize(path) == 0) readError(path, "the file is empty (0 bytes)");
  HostImage img;
  std::string format;
  if (isNiftiExtension(ext)) {
    lock.unlock();  // NIfTI: held around the library's calls only (io/Nifti.cpp)
    img = readNifti(path);
    format = "nifti";
  } else if (ext == ".dcm") {
    img = readDicom(path);
    format = "dicom";
  } else {
#if KORTEX_HAVE_VTK
    if (ext == ".mha" || ext == ".mhd") {
      img = readMetaImage(path);
      format = "metaimage";
    } else if (ext == ".vti") {
      img = readVti(path);
      format = "vti";
    } else if (ext == ".png") {
      img = readPngOrJpeg(path, true);
      format = "png";
    } else {
      img = readPngOrJpeg(path, false);
      format = "jpeg";
    }
#else
    readError(path, "internal error: no reader for '" + ext + "'");  // checkExtension threw
#endif
  }
  img.metadata["io.format"] = format;
  return img;
}

void writeImage(HostImage const& image, std::filesystem::path const& path) {
  std::unique_lock<std::recursive_mutex> lock(ioMutex());
  const std::string ext = extensionOf(path);
  checkExtension(path, Access::Write);
  checkWritable(image, path);
  AtomicOutput out(path);
  const std::string name = path.filename().string();
  if (isNiftiExtension(ext)) {
    lock.unlock();  // NIfTI: held around the library's calls only (io/Nifti.cpp), so files compress in parallel
    out.commit(writeNifti(image, out));
    return;
  }
#if KORTEX_HAVE_VTK
  if (ext == ".mha" || ext == ".mhd") {
    out.commit(writeMetaImage(image, out));
  } else if (ext == ".vti") {
    writeVti(image, out.temporary(name), path);
    out.commit({name});
  } else {
    if (image.geometry.dimension != 2)
      writeError(path, "PNG/JPEG hold 2D images; this image is " + describe(image.geometry));
    if (image.geometry.nx() > 65535 || image.geometry.ny() > 65535)
      writeError(path, "image too large for PNG/JPEG (" + describe(image.geometry) + ")");
    double lo = 0, hi = 0;
    const bool windowed = displayWindow(image, lo, hi);
    const Index n = image.numVoxels();
    std::vector<std::uint8_t> px(static_cast<std::size_t>(n));
    const float* p = image.data.data();
    for (Index i = 0; i < n; ++i) px[i] = toByte(p[i], lo, hi, windowed);
    writeGrey8(px, static_cast<int>(image.geometry.nx()), static_cast<int>(image.geometry.ny()),
               out.temporary(name), path, ext == ".png");
    out.commit({name});
  }
#endif
}

void writePngMontage(std::vector<HostImage> const& panels, std::filesystem::path const& path,
                     float lo, float hi) {
  std::lock_guard<std::recursive_mutex> lock(ioMutex());
  const bool pgm = extensionOf(path) == ".pgm";
  if (extensionOf(path) != ".png" && !pgm) writeError(path, "a montage is written as PNG (.png) or PGM (.pgm)");
  if (!pgm) checkExtension(path, Access::Write);  // PNG needs VTK
  if (panels.empty()) writeError(path, "no panels to put in the montage");
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo))
    writeError(path, "the intensity window [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "] must be finite with lo < hi");
  const Geometry& g0 = panels.front().geometry;
  for (std::size_t k = 0; k < panels.size(); ++k) {
    checkWritable(panels[k], path);
    const Geometry& g = panels[k].geometry;
    if (g.dimension != 2)
      writeError(path, "montage panel " + std::to_string(k) + " is not 2D (" + describe(g) + ")");
    if (g.nx() != g0.nx() || g.ny() != g0.ny())
      writeError(path, "montage panels differ in size: panel 0 is " + describe(g0) + ", panel " +
                           std::to_string(k) + " is " + describe(g));
  }
  constexpr int kSeparator = 2;  // pixels between panels
  const Index nx = g0.nx(), ny = g0.ny();
  const Index width =
      nx * static_cast<Index>(panels.size()) + kSeparator * static_cast<Index>(panels.size() - 1);
  if (width > 65535 || ny > 65535) writeError(path, "montage too large for PNG");
  AtomicOutput out(path);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(width * ny), 255);
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const float* p = panels[k].data.data();
    const Index x0 = static_cast<Index>(k) * (nx + kSeparator);
    for (Index j = 0; j < ny; ++j)
      for (Index i = 0; i < nx; ++i) px[j * width + x0 + i] = toByte(p[j * nx + i], lo, hi, true);
  }
  const std::string name = path.filename().string();
  if (pgm) {  // binary netpbm: "P5 width height 255", then the rows from the top
    std::ofstream f(out.temporary(name), std::ios::binary);
    f << "P5\n" << width << " " << ny << "\n255\n";
    f.write(reinterpret_cast<const char*>(px.data()), std::streamsize(px.size()));
    f.close();
    if (!f) writeError(path, "could not write the montage");
    out.commit({name});
    return;
  }
#if KORTEX_HAVE_VTK
  writeGrey8(px, static_cast<int>(width), static_cast<int>(ny), out.temporary(name), path, true);
  out.commit({name});
#endif
}

}  // namespace kortex::io
