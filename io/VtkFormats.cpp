// Formats handled through VTK: MetaImage (VTK's bundled metaio, the library ITK uses too),
// VTK XML image data, PNG and JPEG, and the VTK part of io/Mesh.hpp (.vtp/.stl/.obj meshes and the
// zero level set of phi). VTK's messages never reach stderr: a capturing
// vtkOutputWindow is installed and each algorithm gets error/warning observers; what they say is
// quoted in the IoError.
#include <vtkCellArray.h>
#include <vtkCleanPolyData.h>
#include <vtkCommand.h>
#include <vtkDataArray.h>
#include <vtkErrorCode.h>
#include <vtkFlyingEdges3D.h>
#include <vtkFloatArray.h>
#include <vtkImageData.h>
#include <vtkJPEGReader.h>
#include <vtkJPEGWriter.h>
#include <vtkLogger.h>
#include <vtkMatrix3x3.h>
#include <vtkOBJReader.h>
#include <vtkOBJWriter.h>
#include <vtkObjectFactory.h>
#include <vtkOutputWindow.h>
#include <vtkPNGReader.h>
#include <vtkPNGWriter.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkPolyData.h>
#include <vtkSTLReader.h>
#include <vtkSTLWriter.h>
#include <vtkSmartPointer.h>
#include <vtkTriangleFilter.h>
#include <vtkUnsignedCharArray.h>
#include <vtkXMLImageDataReader.h>
#include <vtkXMLImageDataWriter.h>
#include <vtkXMLPolyDataReader.h>
#include <vtkXMLPolyDataWriter.h>
#include <vtkmetaio/metaImage.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>

#include "io/IoDetail.hpp"
#include "vtk_zlib.h"

namespace kortex::io::detail {

namespace {

// --- capture of VTK's and metaio's own messages -------------------------------------------

std::string& captured() {
  static std::string text;
  return text;
}

// VTK formats messages as "ERROR: In <file>, line <n>\n<Class> (<address>): <text>\n\n", and
// pipeline errors append a dump of the request; keep only the first line of <text>.
void appendCaptured(const char* t) {
  if (!t) return;
  std::string s(t);
  if (s.rfind("ERROR: In ", 0) == 0 || s.rfind("Warning: In ", 0) == 0 ||
      s.rfind("Generic Warning: In ", 0) == 0) {
    const auto nl = s.find('\n');
    s = nl == std::string::npos ? std::string() : s.substr(nl + 1);
  }
  const auto colon = s.find("): ");
  if (colon != std::string::npos && colon < 120) s = s.substr(colon + 3);
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s = s.substr(0, nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  if (s.empty()) return;
  auto& c = captured();
  if (c.size() < 4000) c += (c.empty() ? "" : " | ") + s;
}

class CaptureOutputWindow : public vtkOutputWindow {
 public:
  static CaptureOutputWindow* New();
  vtkTypeMacro(CaptureOutputWindow, vtkOutputWindow);
  void DisplayText(const char* t) override { appendCaptured(t); }
  void DisplayErrorText(const char* t) override { appendCaptured(t); }
  void DisplayWarningText(const char* t) override { appendCaptured(t); }
  void DisplayGenericWarningText(const char* t) override { appendCaptured(t); }
  void DisplayDebugText(const char*) override {}

 protected:
  CaptureOutputWindow() = default;
};
vtkStandardNewMacro(CaptureOutputWindow);

void installOutputWindow() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto w = vtkSmartPointer<CaptureOutputWindow>::New();
    vtkOutputWindow::SetInstance(w);
    // VTK 9 also sends every error to vtkLogger (loguru), which prints to stderr by itself.
    vtkLogger::SetStderrVerbosity(vtkLogger::VERBOSITY_OFF);
  });
}

// Observer for ErrorEvent/WarningEvent on one algorithm: with an observer, VTK does not print.
class MessageObserver : public vtkCommand {
 public:
  static MessageObserver* New() { return new MessageObserver; }
  void Execute(vtkObject*, unsigned long event, void* data) override {
    if (event == vtkCommand::ErrorEvent) errors = true;
    if (event == vtkCommand::WarningEvent) warnings = true;
    appendCaptured(static_cast<const char*>(data));
  }
  bool errors = false;
  bool warnings = false;
};

// Clears the capture buffer and watches an algorithm.
struct VtkWatch {
  vtkSmartPointer<MessageObserver> obs = vtkSmartPointer<MessageObserver>::New();
  VtkWatch() {
    installOutputWindow();
    captured().clear();
  }
  void watch(vtkObject* o) {
    o->AddObserver(vtkCommand::ErrorEvent, obs);
    o->AddObserver(vtkCommand::WarningEvent, obs);
  }
  bool failed() const { return obs->errors; }
  bool warned() const { return obs->warnings; }
  std::string detail() const {
    auto const& c = captured();
    return c.empty() ? std::string() : " (" + c + ")";
  }
};

// metaio writes to std::cerr / std::cout; redirect both while it runs.
struct StreamCapture {
  std::ostringstream buf;
  std::streambuf* oldErr;
  std::streambuf* oldOut;
  StreamCapture() : oldErr(std::cerr.rdbuf(buf.rdbuf())), oldOut(std::cout.rdbuf(buf.rdbuf())) {}
  ~StreamCapture() {
    std::cerr.rdbuf(oldErr);
    std::cout.rdbuf(oldOut);
  }
  std::string detail() const {
    std::string s = buf.str();
    for (auto& ch : s)
      if (ch == '\n') ch = ' ';
    while (!s.empty() && s.back() == ' ') s.pop_back();
    if (s.size() > 400) s = s.substr(0, 400) + "...";
    return s.empty() ? std::string() : " (" + s + ")";
  }
};

bool pure2D(Geometry const& g) {
  const auto& d = g.direction;
  return g.dimension == 2 && d[2] == 0.0 && d[5] == 0.0 && d[6] == 0.0 && d[7] == 0.0 &&
         d[8] == 1.0 && g.origin[2] == 0.0;
}

// Copies a VTK scalar array (1 component) into img (x fastest, as VTK stores it).
void copyScalars(vtkDataArray* a, HostImage& img, fs::path const& file) {
  float* out = img.data.data();
  const vtkIdType n = a->GetNumberOfTuples();
  for (vtkIdType i = 0; i < n; ++i) {
    const double v = a->GetComponent(i, 0);
    out[i] = static_cast<float>(v);
    if (std::isinf(out[i]) && std::isfinite(v)) beyondFloat32(file, std::uint64_t(i));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MetaImage
// ---------------------------------------------------------------------------------------------

namespace {

// metaio accepts a short data file without complaint, so check the size of uncompressed data
// first: "ElementDataFile = LOCAL" data follows that line; otherwise it is a separate file.
void checkMetaImageDataSize(fs::path const& file) {
  vtkmetaio::MetaImage hdr;
  bool ok = false;
  std::string detail;
  {
    StreamCapture cap;
    ok = hdr.Read(file.c_str(), false);
    detail = cap.detail();
  }
  if (!ok) readError(file, "not a valid MetaImage file" + detail);
  if (hdr.CompressedData()) return;  // zlib detects a truncated stream itself
  const int t = hdr.ElementType();
  if (t < vtkmetaio::MET_CHAR || t > vtkmetaio::MET_DOUBLE || hdr.NDims() < 1) return;
  std::uintmax_t expected = static_cast<std::uintmax_t>(vtkmetaio::MET_ValueTypeSize[t]) *
                            static_cast<std::uintmax_t>(std::max(1, hdr.ElementNumberOfChannels()));
  for (int i = 0; i < hdr.NDims(); ++i)
    expected *= static_cast<std::uintmax_t>(std::max(0, hdr.DimSize(i)));
  const std::string name = hdr.ElementDataFileName();
  std::uintmax_t available = 0;
  if (name == "LOCAL" || name == "Local" || name == "local") {
    std::ifstream in(file, std::ios::binary);
    std::string line;
    std::uintmax_t offset = 0;
    bool found = false;
    while (std::getline(in, line)) {
      offset += line.size() + 1;
      if (line.rfind("ElementDataFile", 0) == 0) {
        found = true;
        break;
      }
    }
    if (!found) return;
    const auto size = fileSize(file);
    available = size > offset ? size - offset : 0;
  } else if (name.find('%') == std::string::npos && name.rfind("LIST", 0) != 0) {
    fs::path data(name);
    if (data.is_relative()) data = file.parent_path() / data;
    std::error_code ec;
    if (!fs::is_regular_file(data, ec))
      readError(file, "its data file '" + data.string() + "' does not exist");
    available = fileSize(data);
    if (hdr.HeaderSize() > 0)
      available = available > std::uintmax_t(hdr.HeaderSize()) ? available - hdr.HeaderSize() : 0;
  } else {
    return;  // multi-file data sets: metaio checks each file
  }
  if (available < expected)
    readError(file, "truncated: " + std::to_string(expected) + " bytes of voxel data expected, " +
                        std::to_string(available) + " found");
}

}  // namespace

HostImage readMetaImage(fs::path const& file) {
  checkMetaImageDataSize(file);
  vtkmetaio::MetaImage mi;
  bool ok = false;
  std::string detail;
  {
    StreamCapture cap;
    ok = mi.Read(file.c_str(), true);
    detail = cap.detail();
  }
  if (!ok)
    readError(file, "not a valid MetaImage file, or its data is missing or truncated" + detail);
  const int nd = mi.NDims();
  if (nd < 1 || nd > 10) readError(file, "corrupt MetaImage header: NDims = " + std::to_string(nd));
  std::string shape;
  for (int i = 0; i < nd; ++i) {
    shape += (i ? "x" : "") + std::to_string(mi.DimSize(i));
    if (mi.DimSize(i) <= 0) readError(file, "zero-size image (" + shape + "...)");
  }
  int effective = nd;
  while (effective > 3 && mi.DimSize(effective - 1) == 1) --effective;
  if (effective > 3)
    readError(file, "has " + std::to_string(effective) + " dimensions (" + shape +
                        "); Kortex filters take 2D or 3D scalar images");
  if (mi.ElementNumberOfChannels() != 1)
    readError(file, "has " + std::to_string(mi.ElementNumberOfChannels()) +
                        " components per voxel; Kortex filters take scalar images");
  const int t = mi.ElementType();
  if (t < vtkmetaio::MET_CHAR || t > vtkmetaio::MET_DOUBLE)
    readError(file, "unsupported MetaImage ElementType");
  if (!mi.ElementData()) readError(file, "MetaImage has no voxel data");

  const int n3 = std::min(nd, 3);
  Geometry g =
      Geometry::fromSize(mi.DimSize(0), n3 > 1 ? mi.DimSize(1) : 1, n3 > 2 ? mi.DimSize(2) : 1);
  for (int i = 0; i < n3; ++i) {
    g.spacing[i] = mi.ElementSpacing(i);
    g.origin[i] = mi.Position(i);
  }
  // ITK: direction axis ii (column ii) = TransformMatrix row ii.
  for (int ii = 0; ii < n3; ++ii)
    for (int jj = 0; jj < n3; ++jj) g.direction[jj * 3 + ii] = mi.TransformMatrix(ii, jj);
  HostImage img = allocateImage(g, file, "kortex::io::metaimage");
  float* out = img.data.data();
  const Index n = g.numVoxels();
  for (Index i = 0; i < n; ++i) {
    const double v = mi.ElementData(i);
    out[i] = static_cast<float>(v);
    if (std::isinf(out[i]) && std::isfinite(v)) beyondFloat32(file, std::uint64_t(i));
  }
  img.metadata["metaimage.element_type"] = vtkmetaio::MET_ValueTypeName[t];
  return img;
}

std::vector<std::string> writeMetaImage(HostImage const& image, AtomicOutput const& out) {
  const Geometry& g = image.geometry;
  const fs::path target = out.target();
  const std::string name = target.filename().string();
  const bool mhd = extensionOf(target) == ".mhd";
  const int nd = pure2D(g) ? 2 : 3;
  for (Index s : g.size)
    if (s > 0x7fffffff) writeError(target, "image too large for MetaImage");
  int dims[3] = {static_cast<int>(g.nx()), static_cast<int>(g.ny()), static_cast<int>(g.nz())};
  double spacing[3] = {g.spacing[0], g.spacing[1], g.spacing[2]};
  vtkmetaio::MetaImage mi(nd, dims, spacing, vtkmetaio::MET_FLOAT, 1,
                          const_cast<float*>(image.data.data()));
  mi.SetDoublePrecision(17);
  double origin[3] = {g.origin[0], g.origin[1], g.origin[2]};
  mi.Position(origin);
  double tm[9];
  for (int ii = 0; ii < nd; ++ii)
    for (int jj = 0; jj < nd; ++jj) tm[ii * nd + jj] = g.direction[jj * 3 + ii];
  mi.TransformMatrix(tm);
  mi.BinaryData(true);
  mi.CompressedData(false);
  std::string dataName;
  if (mhd) {
    dataName = target.stem().string() + ".raw";
    if (dataName == name) writeError(target, "the header and data file names would clash");
  }
  bool ok = false;
  std::string detail;
  {
    StreamCapture cap;
    ok = mi.Write(out.temporary(name).c_str(), mhd ? dataName.c_str() : "LOCAL", true);
    detail = cap.detail();
  }
  if (!ok) writeError(target, "MetaImage write failed" + detail);
  if (mhd) return {dataName, name};  // data first, then the header that names it
  return {name};
}

// ---------------------------------------------------------------------------------------------
// VTK XML image data
// ---------------------------------------------------------------------------------------------

HostImage readVti(fs::path const& file) {
  VtkWatch w;
  auto r = vtkSmartPointer<vtkXMLImageDataReader>::New();
  w.watch(r);
  if (!r->CanReadFile(file.c_str()))
    readError(file, "not a VTK XML image data (.vti) file" + w.detail());
  r->SetFileName(file.c_str());
  r->Update();
  vtkImageData* im = r->GetOutput();
  if (w.failed() || r->GetErrorCode() != vtkErrorCode::NoError || !im)
    readError(file, "corrupt or truncated .vti file" + w.detail());
  int ext[6];
  im->GetExtent(ext);
  const Index nx = ext[1] - ext[0] + 1, ny = ext[3] - ext[2] + 1, nz = ext[5] - ext[4] + 1;
  if (nx <= 0 || ny <= 0 || nz <= 0)
    readError(file, "zero-size image (extent " + std::to_string(ext[0]) + ".." +
                        std::to_string(ext[1]) + ", " + std::to_string(ext[2]) + ".." +
                        std::to_string(ext[3]) + ", " + std::to_string(ext[4]) + ".." +
                        std::to_string(ext[5]) + ")");
  vtkPointData* pd = im->GetPointData();
  vtkDataArray* a = pd ? pd->GetScalars() : nullptr;
  if (!a && pd && pd->GetNumberOfArrays() > 0) a = pd->GetArray(0);
  if (!a) readError(file, "the .vti file has no point data array");
  if (a->GetNumberOfComponents() != 1)
    readError(file, "array '" + std::string(a->GetName() ? a->GetName() : "") + "' has " +
                        std::to_string(a->GetNumberOfComponents()) +
                        " components; Kortex filters take scalar images");
  if (a->GetNumberOfTuples() != nx * ny * nz)
    readError(file, "corrupt .vti file: the data array has " +
                        std::to_string(a->GetNumberOfTuples()) + " values for " +
                        std::to_string(nx * ny * nz) + " points" + w.detail());
  Geometry g = Geometry::fromSize(nx, ny, nz);
  double sp[3], org[3];
  im->GetSpacing(sp);
  im->GetOrigin(org);
  const double* d = im->GetDirectionMatrix()->GetData();  // row-major, columns = axes
  for (int i = 0; i < 9; ++i) g.direction[i] = d[i];
  for (int i = 0; i < 3; ++i) g.spacing[i] = sp[i];
  // A non-zero extent start moves index 0: origin += D * diag(spacing) * start.
  for (int r = 0; r < 3; ++r) {
    double o = org[r];
    for (int c = 0; c < 3; ++c) o += d[r * 3 + c] * sp[c] * ext[2 * c];
    g.origin[r] = o;
  }
  HostImage img = allocateImage(g, file, "kortex::io::vti");
  copyScalars(a, img, file);
  if (a->GetName()) img.metadata["vti.array_name"] = a->GetName();
  return img;
}

void writeVti(HostImage const& image, fs::path const& tmpFile, fs::path const& target) {
  VtkWatch w;
  const Geometry& g = image.geometry;
  auto im = vtkSmartPointer<vtkImageData>::New();
  im->SetDimensions(static_cast<int>(g.nx()), static_cast<int>(g.ny()), static_cast<int>(g.nz()));
  im->SetSpacing(g.spacing.data());
  im->SetOrigin(g.origin.data());
  im->SetDirectionMatrix(g.direction.data());
  auto a = vtkSmartPointer<vtkFloatArray>::New();
  auto it = image.metadata.find("vti.array_name");
  a->SetName(it != image.metadata.end() && !it->second.empty() ? it->second.c_str() : "scalars");
  a->SetNumberOfComponents(1);
  // Zero-copy: VTK only reads this buffer (save = 1: VTK must not free it).
  a->SetArray(const_cast<float*>(image.data.data()), g.numVoxels(), 1);
  im->GetPointData()->SetScalars(a);
  auto wr = vtkSmartPointer<vtkXMLImageDataWriter>::New();
  w.watch(wr);
  wr->SetInputData(im);
  wr->SetFileName(tmpFile.c_str());
  wr->SetDataModeToAppended();
  wr->EncodeAppendedDataOff();
  wr->SetCompressorTypeToZLib();
  const int ok = wr->Write();
  if (!ok || w.failed() || wr->GetErrorCode() != vtkErrorCode::NoError)
    writeError(target, "VTK XML write failed" + w.detail());
}

// ---------------------------------------------------------------------------------------------
// PNG / JPEG
// ---------------------------------------------------------------------------------------------

namespace {

std::uint32_t be32(unsigned char const* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// libpng inside VTK 9.1 can crash on a truncated file, and libjpeg only warns; so the container
// structure is checked here first: PNG chunks complete with valid CRCs up to IEND; JPEG starts
// with SOI and ends with EOI.
void checkContainer(fs::path const& file, bool png) {
  std::vector<unsigned char> b;
  {
    std::ifstream in(file, std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (png) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (b.size() < 8 || std::memcmp(b.data(), sig, 8) != 0) readError(file, "not a PNG file");
    std::size_t pos = 8;
    bool end = false;
    while (!end) {
      if (b.size() - pos < 12)
        readError(file, "truncated PNG file (it ends before the IEND chunk)");
      const std::uint32_t len = be32(&b[pos]);
      if (len > b.size() - pos - 12)
        readError(file, "truncated PNG file (a chunk runs past the end of the file)");
      const std::uint32_t crc = be32(&b[pos + 8 + len]);
      const auto computed = static_cast<std::uint32_t>(
          crc32(crc32(0L, Z_NULL, 0), &b[pos + 4], static_cast<uInt>(len + 4)));
      if (crc != computed) readError(file, "corrupt PNG file (chunk CRC mismatch)");
      end = std::memcmp(&b[pos + 4], "IEND", 4) == 0;
      pos += 12 + len;
    }
  } else {
    if (b.size() < 4 || b[0] != 0xFF || b[1] != 0xD8) readError(file, "not a JPEG file");
    std::size_t last = b.size();
    while (last > 2 &&
           (b[last - 1] == 0 || b[last - 1] == '\n' || b[last - 1] == '\r' || b[last - 1] == ' '))
      --last;  // tolerate padding after EOI
    if (last < 4 || b[last - 2] != 0xFF || b[last - 1] != 0xD9)
      readError(file, "truncated JPEG file (no end-of-image marker)");
  }
}

}  // namespace

HostImage readPngOrJpeg(fs::path const& file, bool png) {
  checkContainer(file, png);
  VtkWatch w;
  vtkSmartPointer<vtkImageReader2> r;
  if (png)
    r = vtkSmartPointer<vtkPNGReader>::New();
  else
    r = vtkSmartPointer<vtkJPEGReader>::New();
  w.watch(r);
  if (!r->CanReadFile(file.c_str()))
    readError(file, std::string("not a ") + (png ? "PNG" : "JPEG") + " file" + w.detail());
  r->SetFileName(file.c_str());
  r->Update();
  vtkImageData* im = r->GetOutput();
  // A decoder warning means damaged data (libjpeg: "Corrupt JPEG data ..."): refuse it.
  if (w.failed() || w.warned() || r->GetErrorCode() != vtkErrorCode::NoError || !im)
    readError(file,
              std::string("corrupt or truncated ") + (png ? "PNG" : "JPEG") + " file" + w.detail());
  int dims[3];
  im->GetDimensions(dims);
  if (dims[0] <= 0 || dims[1] <= 0 || dims[2] != 1)
    readError(file, "zero-size or malformed image" + w.detail());
  vtkDataArray* a = im->GetPointData() ? im->GetPointData()->GetScalars() : nullptr;
  const Index nx = dims[0], ny = dims[1];
  if (!a || a->GetNumberOfTuples() != nx * ny)
    readError(file, "decoder returned no pixel data" + w.detail());
  const int nc = a->GetNumberOfComponents();
  if (nc < 1 || nc > 4)
    readError(file, "has " + std::to_string(nc) + " colour channels; Kortex reads grey or RGB");
  const double maxValue = a->GetDataType() == VTK_UNSIGNED_SHORT ? 65535.0 : 255.0;
  if (nc == 2 || nc == 4) {  // alpha: accepted only when fully opaque
    for (vtkIdType i = 0; i < nx * ny; ++i)
      if (a->GetComponent(i, nc - 1) != maxValue)
        readError(file,
                  "has transparent pixels (an alpha channel); Kortex reads opaque grey or "
                  "RGB images only");
  }
  HostImage img =
      allocateImage(Geometry::make2D(nx, ny), file, png ? "kortex::io::png" : "kortex::io::jpeg");
  float* out = img.data.data();
  // VTK puts the last file row at j = 0; ITK (and Kortex) keep the first file row at j = 0.
  for (Index j = 0; j < ny; ++j) {
    const Index vj = ny - 1 - j;
    for (Index i = 0; i < nx; ++i) {
      const vtkIdType t = vj * nx + i;
      float v;
      if (nc <= 2) {
        v = static_cast<float>(a->GetComponent(t, 0));
      } else {  // ITK's RGB -> luminance weights (itk::ConvertPixelBuffer)
        const float rr = static_cast<float>(a->GetComponent(t, 0));
        const float gg = static_cast<float>(a->GetComponent(t, 1));
        const float bb = static_cast<float>(a->GetComponent(t, 2));
        v = static_cast<float>((2125.0f * rr + 7154.0f * gg + 721.0f * bb) / 10000.0f);
      }
      out[j * nx + i] = v;
    }
  }
  auto& md = img.metadata;
  md["display.min"] = "0";
  md["display.max"] = maxValue == 255.0 ? "255" : "65535";
  md["image.components"] = std::to_string(nc);
  if (nc >= 3) md["image.colour_conversion"] = "luminance 0.2125 R + 0.7154 G + 0.0721 B";
  return img;
}

void writeGrey8(std::vector<std::uint8_t> const& pixels, int width, int height,
                fs::path const& tmpFile, fs::path const& target, bool png) {
  VtkWatch w;
  auto im = vtkSmartPointer<vtkImageData>::New();
  im->SetDimensions(width, height, 1);
  auto a = vtkSmartPointer<vtkUnsignedCharArray>::New();
  a->SetNumberOfComponents(1);
  a->SetNumberOfTuples(static_cast<vtkIdType>(width) * height);
  // VTK writers put j = 0 at the bottom of the file: flip so that our row 0 is the top row.
  for (int j = 0; j < height; ++j)
    std::memcpy(a->GetPointer(static_cast<vtkIdType>(height - 1 - j) * width),
                pixels.data() + static_cast<std::size_t>(j) * width,
                static_cast<std::size_t>(width));
  a->SetName("pixels");
  im->GetPointData()->SetScalars(a);
  vtkSmartPointer<vtkImageWriter> wr;
  if (png) {
    wr = vtkSmartPointer<vtkPNGWriter>::New();
  } else {
    auto j = vtkSmartPointer<vtkJPEGWriter>::New();
    j->SetQuality(95);
    j->ProgressiveOff();
    wr = j;
  }
  w.watch(wr);
  wr->SetInputData(im);
  wr->SetFileName(tmpFile.c_str());
  wr->Write();
  if (w.failed() || wr->GetErrorCode() != vtkErrorCode::NoError)
    writeError(target, std::string(png ? "PNG" : "JPEG") + " write failed" + w.detail());
}

// ---------------------------------------------------------------------------------------------
// Meshes (io/Mesh.hpp)
// ---------------------------------------------------------------------------------------------

namespace {

// Triangles (3-point polygons) and all points of a poly data set.
TriangleMesh toTriangleMesh(vtkPolyData* pd) {
  TriangleMesh m;
  vtkPoints* pts = pd->GetPoints();
  const vtkIdType np = pts ? pts->GetNumberOfPoints() : 0;
  m.points.resize(static_cast<std::size_t>(np));
  for (vtkIdType i = 0; i < np; ++i) pts->GetPoint(i, m.points[static_cast<std::size_t>(i)].data());
  vtkCellArray* polys = pd->GetPolys();
  if (!polys) return m;
  m.triangles.reserve(static_cast<std::size_t>(polys->GetNumberOfCells()));
  vtkIdType n = 0;
  vtkIdType const* ids = nullptr;
  for (polys->InitTraversal(); polys->GetNextCell(n, ids);)
    if (n == 3) m.triangles.push_back({std::int64_t(ids[0]), std::int64_t(ids[1]), std::int64_t(ids[2])});
  return m;
}

// VTK's STL reader reads a truncated binary file without complaint (it stops at the end of the
// data), so the structure is checked here first. Binary STL: 80-byte header, uint32 triangle
// count (little endian), 50 bytes per triangle; its count field has a zero byte for any count
// below 2^24, so a NUL among the first 512 bytes marks a binary file. Otherwise the file must be
// ASCII STL ("solid ..."), which VTK parses and checks itself.
void checkStl(fs::path const& file) {
  const std::uintmax_t size = fileSize(file);
  std::vector<unsigned char> head(static_cast<std::size_t>(std::min<std::uintmax_t>(size, 512)));
  {
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
    if (!in) readError(file, "cannot read its first bytes");
  }
  const bool binary = size >= 84 && std::memchr(head.data(), 0, head.size()) != nullptr;
  if (binary) {
    const std::uint64_t count = std::uint64_t(head[80]) | (std::uint64_t(head[81]) << 8) |
                                (std::uint64_t(head[82]) << 16) | (std::uint64_t(head[83]) << 24);
    const std::uint64_t expected = 84 + 50 * count;
    if (size < expected)
      readError(file, "truncated binary STL file: its header announces " + std::to_string(count) +
                          " triangles (" + std::to_string(expected) + " bytes), the file has " +
                          std::to_string(size) + " bytes");
    return;
  }
  std::size_t i = 0;
  while (i < head.size() && std::isspace(head[i])) ++i;
  static const char solid[] = "solid";
  bool ascii = head.size() - i >= 5;
  for (std::size_t k = 0; ascii && k < 5; ++k)
    ascii = std::tolower(head[i + k]) == solid[k];
  if (!ascii)
    readError(file, "not an STL file (neither binary STL nor ASCII STL starting with 'solid')");
}

}  // namespace

TriangleMesh readMeshVtk(fs::path const& file, std::string const& ext) {
  VtkWatch w;
  vtkSmartPointer<vtkAlgorithm> reader;
  if (ext == ".vtp") {
    auto r = vtkSmartPointer<vtkXMLPolyDataReader>::New();
    w.watch(r);
    if (!r->CanReadFile(file.c_str()))
      readError(file, "not a VTK XML poly data (.vtp) file" + w.detail());
    r->SetFileName(file.c_str());
    reader = r;
  } else if (ext == ".stl") {
    checkStl(file);
    auto r = vtkSmartPointer<vtkSTLReader>::New();
    w.watch(r);
    r->SetFileName(file.c_str());
    r->MergingOn();  // STL repeats each corner per facet: share exactly coincident points
    reader = r;
  } else {
    auto r = vtkSmartPointer<vtkOBJReader>::New();
    w.watch(r);
    r->SetFileName(file.c_str());
    reader = r;
  }
  auto tri = vtkSmartPointer<vtkTriangleFilter>::New();
  w.watch(tri);
  tri->SetInputConnection(reader->GetOutputPort());
  tri->PassVertsOff();
  tri->PassLinesOff();
  tri->Update();
  vtkPolyData* pd = tri->GetOutput();
  if (w.failed() || reader->GetErrorCode() != vtkErrorCode::NoError || !pd)
    readError(file, "corrupt or truncated " + ext + " file" + w.detail());
  return toTriangleMesh(pd);
}

void writeMeshVtk(TriangleMesh const& mesh, fs::path const& tmpFile, fs::path const& target,
                  std::string const& ext) {
  VtkWatch w;
  auto pts = vtkSmartPointer<vtkPoints>::New();
  pts->SetDataTypeToDouble();
  pts->SetNumberOfPoints(static_cast<vtkIdType>(mesh.points.size()));
  for (std::size_t i = 0; i < mesh.points.size(); ++i)
    pts->SetPoint(static_cast<vtkIdType>(i), mesh.points[i].data());
  auto polys = vtkSmartPointer<vtkCellArray>::New();
  polys->AllocateExact(static_cast<vtkIdType>(mesh.triangles.size()),
                       static_cast<vtkIdType>(mesh.triangles.size()) * 3);
  for (auto const& t : mesh.triangles) {
    const vtkIdType ids[3] = {static_cast<vtkIdType>(t[0]), static_cast<vtkIdType>(t[1]),
                              static_cast<vtkIdType>(t[2])};
    polys->InsertNextCell(3, ids);
  }
  auto pd = vtkSmartPointer<vtkPolyData>::New();
  pd->SetPoints(pts);
  pd->SetPolys(polys);
  int ok = 0;
  unsigned long error = vtkErrorCode::NoError;
  if (ext == ".vtp") {
    auto wr = vtkSmartPointer<vtkXMLPolyDataWriter>::New();
    w.watch(wr);
    wr->SetInputData(pd);
    wr->SetFileName(tmpFile.c_str());
    wr->SetDataModeToAppended();
    wr->EncodeAppendedDataOff();
    wr->SetCompressorTypeToZLib();
    ok = wr->Write();
    error = wr->GetErrorCode();
  } else if (ext == ".stl") {
    auto wr = vtkSmartPointer<vtkSTLWriter>::New();
    w.watch(wr);
    wr->SetInputData(pd);
    wr->SetFileName(tmpFile.c_str());
    wr->SetFileTypeToBinary();
    ok = wr->Write();
    error = wr->GetErrorCode();
  } else {
    auto wr = vtkSmartPointer<vtkOBJWriter>::New();
    w.watch(wr);
    wr->SetInputData(pd);
    wr->SetFileName(tmpFile.c_str());
    ok = wr->Write();
    error = wr->GetErrorCode();
  }
  if (!ok || w.failed() || error != vtkErrorCode::NoError)
    writeError(target, "mesh write (" + ext + ") failed" + w.detail());
}

TriangleMesh contourZeroIndexSpace(HostImage const& phi) {
  VtkWatch w;
  const Geometry& g = phi.geometry;
  auto im = vtkSmartPointer<vtkImageData>::New();
  im->SetDimensions(static_cast<int>(g.nx()), static_cast<int>(g.ny()), static_cast<int>(g.nz()));
  im->SetSpacing(1.0, 1.0, 1.0);  // index space; world mapping is done by the caller
  im->SetOrigin(0.0, 0.0, 0.0);
  auto a = vtkSmartPointer<vtkFloatArray>::New();
  a->SetName("phi");
  a->SetNumberOfComponents(1);
  // Zero-copy: VTK only reads this buffer (save = 1: VTK must not free it).
  a->SetArray(const_cast<float*>(phi.data.data()), g.numVoxels(), 1);
  im->GetPointData()->SetScalars(a);
  auto fe = vtkSmartPointer<vtkFlyingEdges3D>::New();
  w.watch(fe);
  fe->SetInputData(im);
  fe->SetNumberOfContours(1);
  fe->SetValue(0, 0.0);
  fe->ComputeNormalsOff();
  fe->ComputeGradientsOff();
  fe->ComputeScalarsOff();
  fe->InterpolateAttributesOff();
  // Exactly coincident points (phi == 0 at a voxel) merged; triangles that collapse become
  // lines/points and are dropped by toTriangleMesh.
  auto clean = vtkSmartPointer<vtkCleanPolyData>::New();
  w.watch(clean);
  clean->SetInputConnection(fe->GetOutputPort());
  clean->PointMergingOn();
  clean->ToleranceIsAbsoluteOn();
  clean->SetAbsoluteTolerance(0.0);
  clean->Update();
  if (w.failed() || !clean->GetOutput())
    throw InvalidArgument("zeroLevelSet: contouring phi failed" + w.detail());
  return toTriangleMesh(clean->GetOutput());
}

}  // namespace kortex::io::detail
