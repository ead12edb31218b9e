// NIfTI-1 codec (.nii, .nii.gz) with ITK's orientation rule.
//
// Why not vtkNIFTIImageReader/Writer: the VTK reader reverses the slice order whenever qfac is
// -1 (the IXI volumes have pixdim[0] = -1), hands back matrices re-based on that reversed
// order, and does not apply scl_slope; the writer forces sform_code = 2 and recomputes the
// quaternion. Keeping voxel (i,j,k) of the file as voxel (i,j,k) of the array and writing codes
// and matrices back bit-exactly is simpler and safer with a direct codec: a 348-byte header,
// optional extensions up to vox_offset, then the voxels. zlib is the system's (no VTK needed:
// this codec is built in every configuration); gzread reads plain and gzip files alike.
// Displacement fields (readNiftiField / writeNiftiField) share the header and voxel code.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <zlib.h>

#include "io/IoDetail.hpp"

namespace kortex::io::detail {

namespace {

constexpr int kHeaderSize = 348;
constexpr int kNifti2HeaderSize = 540;

// NIfTI-1 data type codes.
enum : int {
  DT_BINARY = 1,
  DT_UINT8 = 2,
  DT_INT16 = 4,
  DT_INT32 = 8,
  DT_FLOAT32 = 16,
  DT_COMPLEX64 = 32,
  DT_FLOAT64 = 64,
  DT_RGB24 = 128,
  DT_INT8 = 256,
  DT_UINT16 = 512,
  DT_UINT32 = 768,
  DT_INT64 = 1024,
  DT_UINT64 = 1280,
  DT_FLOAT128 = 1536,
  DT_COMPLEX128 = 1792,
  DT_COMPLEX256 = 2048,
  DT_RGBA32 = 2304
};

// Raw header fields, already byte-swapped to host order.
struct Header {
  std::int16_t dim[8] = {0, 1, 1, 1, 1, 1, 1, 1};
  float pixdim[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  std::int16_t datatype = 0, bitpix = 0, intentCode = 0;
  float intent[3] = {0, 0, 0};
  float voxOffset = 0, sclSlope = 0, sclInter = 0;
  std::uint8_t xyztUnits = 0;
  std::int16_t qformCode = 0, sformCode = 0;
  float quatern[3] = {0, 0, 0};  // b, c, d
  float qoffset[3] = {0, 0, 0};  // x, y, z
  float srow[3][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  char descrip[81] = {0};
  char auxFile[25] = {0};
  char intentName[17] = {0};
  char magic[4] = {0, 0, 0, 0};
  bool swapped = false;
};

struct Mat44 {
  float m[4][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
};

template <class T>
T swapBytes(T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  for (std::size_t i = 0; 2 * i + 1 < sizeof(T); ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  std::memcpy(&v, b, sizeof(T));
  return v;
}

template <class T>
T field(unsigned char const* h, int offset, bool swap) {
  T v;
  std::memcpy(&v, h + offset, sizeof(T));
  return swap ? swapBytes(v) : v;
}

template <class T>
void put(unsigned char* h, int offset, T v) {
  std::memcpy(h + offset, &v, sizeof(T));
}

inline float fixedFloat(float v) { return std::isfinite(v) ? v : 0.0f; }  // niftilib FIXED_FLOAT

const char* typeName(int dt) {
  switch (dt) {
    case DT_UINT8:
      return "uint8";
    case DT_INT8:
      return "int8";
    case DT_INT16:
      return "int16";
    case DT_UINT16:
      return "uint16";
    case DT_INT32:
      return "int32";
    case DT_UINT32:
      return "uint32";
    case DT_INT64:
      return "int64";
    case DT_UINT64:
      return "uint64";
    case DT_FLOAT32:
      return "float32";
    case DT_FLOAT64:
      return "float64";
    default:
      return nullptr;
  }
}

int typeSize(int dt) {
  switch (dt) {
    case DT_UINT8:
    case DT_INT8:
      return 1;
    case DT_INT16:
    case DT_UINT16:
      return 2;
    case DT_INT32:
    case DT_UINT32:
    case DT_FLOAT32:
      return 4;
    case DT_INT64:
    case DT_UINT64:
    case DT_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

Header parseHeader(unsigned char const* h, fs::path const& file) {
  Header hd;
  const std::int32_t sizeofHdr = field<std::int32_t>(h, 0, false);
  if (sizeofHdr == kHeaderSize) {
    hd.swapped = false;
  } else if (swapBytes(sizeofHdr) == kHeaderSize) {
    hd.swapped = true;
  } else if (sizeofHdr == kNifti2HeaderSize || swapBytes(sizeofHdr) == kNifti2HeaderSize) {
    readError(file, "NIfTI-2 files are not supported (Kortex, like ITK, reads NIfTI-1)");
  } else {
    readError(file, "not a NIfTI-1 file (the header size field is " + std::to_string(sizeofHdr) +
                        ", not 348)");
  }
  const bool s = hd.swapped;
  std::memcpy(hd.magic, h + 344, 4);
  if (std::memcmp(hd.magic, "ni1\0", 4) == 0)
    readError(file,
              "this is the header of a two-file NIfTI pair (.hdr/.img); only single-file "
              ".nii/.nii.gz is supported");
  if (std::memcmp(hd.magic, "n+1\0", 4) != 0)
    readError(file, "not a NIfTI-1 file (no 'n+1' magic; Analyze 7.5 is not supported)");
  for (int i = 0; i < 8; ++i) hd.dim[i] = field<std::int16_t>(h, 40 + 2 * i, s);
  for (int i = 0; i < 3; ++i) hd.intent[i] = field<float>(h, 56 + 4 * i, s);
  hd.intentCode = field<std::int16_t>(h, 68, s);
  hd.datatype = field<std::int16_t>(h, 70, s);
  hd.bitpix = field<std::int16_t>(h, 72, s);
  for (int i = 0; i < 8; ++i) hd.pixdim[i] = field<float>(h, 76 + 4 * i, s);
  hd.voxOffset = field<float>(h, 108, s);
  hd.sclSlope = field<float>(h, 112, s);
  hd.sclInter = field<float>(h, 116, s);
  hd.xyztUnits = h[123];
  std::memcpy(hd.descrip, h + 148, 80);
  std::memcpy(hd.auxFile, h + 228, 24);
  hd.qformCode = field<std::int16_t>(h, 252, s);
  hd.sformCode = field<std::int16_t>(h, 254, s);
  for (int i = 0; i < 3; ++i) hd.quatern[i] = field<float>(h, 256 + 4 * i, s);
  for (int i = 0; i < 3; ++i) hd.qoffset[i] = field<float>(h, 268 + 4 * i, s);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) hd.srow[r][c] = field<float>(h, 280 + 16 * r + 4 * c, s);
  std::memcpy(hd.intentName, h + 328, 16);
  return hd;
}

// niftilib's nifti_quatern_to_mat44 (float results, double intermediate maths).
Mat44 quaternToMat44(float qb, float qc, float qd, float qx, float qy, float qz, float dx, float dy,
                     float dz, float qfac) {
  Mat44 R;
  double a, b = qb, c = qc, d = qd;
  R.m[3][0] = R.m[3][1] = R.m[3][2] = 0.0f;
  R.m[3][3] = 1.0f;
  a = 1.0l - (b * b + c * c + d * d);
  if (a < 1.e-7l) {
    a = 1.0l / std::sqrt(b * b + c * c + d * d);
    b *= a;
    c *= a;
    d *= a;
    a = 0.0l;
  } else {
    a = std::sqrt(a);
  }
  const double xd = (dx > 0.0) ? dx : 1.0l;
  const double yd = (dy > 0.0) ? dy : 1.0l;
  double zd = (dz > 0.0) ? dz : 1.0l;
  if (qfac < 0.0) zd = -zd;
  R.m[0][0] = static_cast<float>((a * a + b * b - c * c - d * d) * xd);
  R.m[0][1] = static_cast<float>(2.0l * (b * c - a * d) * yd);
  R.m[0][2] = static_cast<float>(2.0l * (b * d + a * c) * zd);
  R.m[1][0] = static_cast<float>(2.0l * (b * c + a * d) * xd);
  R.m[1][1] = static_cast<float>((a * a + c * c - b * b - d * d) * yd);
  R.m[1][2] = static_cast<float>(2.0l * (c * d - a * b) * zd);
  R.m[2][0] = static_cast<float>(2.0l * (b * d - a * c) * xd);
  R.m[2][1] = static_cast<float>(2.0l * (c * d + a * b) * yd);
  R.m[2][2] = static_cast<float>((a * a + d * d - c * c - b * b) * zd);
  R.m[0][3] = qx;
  R.m[1][3] = qy;
  R.m[2][3] = qz;
  return R;
}

// Header fields with niftilib's sanitising applied (bad pixdim -> 1, non-finite -> 0).
struct Transforms {
  float dx = 1, dy = 1, dz = 1;
  Mat44 qto, sto;
  int qformCode = 0, sformCode = 0;
};

Transforms transformsOf(Header const& hd) {
  Transforms t;
  float pd[4];
  for (int i = 1; i <= 3; ++i) {
    float v = hd.pixdim[i];
    if (i <= hd.dim[0] && (v == 0.0f || !std::isfinite(v))) v = 1.0f;
    pd[i] = v;
  }
  t.dx = pd[1];
  t.dy = pd[2];
  t.dz = pd[3];
  if (hd.qformCode <= 0) {
    t.qto.m[0][0] = t.dx;
    t.qto.m[1][1] = t.dy;
    t.qto.m[2][2] = t.dz;
    t.qto.m[3][3] = 1.0f;
    t.qformCode = 0;
  } else {
    const float qfac = (hd.pixdim[0] < 0.0f) ? -1.0f : 1.0f;
    t.qto = quaternToMat44(fixedFloat(hd.quatern[0]), fixedFloat(hd.quatern[1]),
                           fixedFloat(hd.quatern[2]), fixedFloat(hd.qoffset[0]),
                           fixedFloat(hd.qoffset[1]), fixedFloat(hd.qoffset[2]), t.dx, t.dy, t.dz,
                           qfac);
    t.qformCode = hd.qformCode;
  }
  if (hd.sformCode <= 0) {
    t.sformCode = 0;  // sto stays all zeros, as in niftilib's calloc'ed nifti_image
  } else {
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) t.sto.m[r][c] = hd.srow[r][c];
    t.sto.m[3][3] = 1.0f;
    t.sformCode = hd.sformCode;
  }
  return t;
}

double colNorm(Mat44 const& M, int c) {
  return std::sqrt(double(M.m[0][c]) * M.m[0][c] + double(M.m[1][c]) * M.m[1][c] +
                   double(M.m[2][c]) * M.m[2][c]);
}

double det3(double const a[3][3]) {
  return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
         a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
         a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
}

// ITK: the sform is an invertible affine whose column-normalised 3x3 is orthonormal (1e-4).
bool sformDecomposable(Transforms const& t) {
  if (t.sformCode <= 0) return false;  // all-zero sto: not affine (bottom row 0 0 0 0)
  double R[3][3];
  for (int c = 0; c < 3; ++c) {
    const double n = colNorm(t.sto, c);
    if (!(n > 0.0) || !std::isfinite(n)) return false;
    for (int r = 0; r < 3; ++r) R[r][c] = t.sto.m[r][c] / n;
  }
  if (!(std::abs(det3(R)) > 1e-6)) return false;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += R[i][k] * R[j][k];
      if (std::abs(s - (i == j ? 1.0 : 0.0)) > 1e-4) return false;
    }
  return true;
}

// ITK's first test: element-wise equal 3x3 (1e-5) and translations (L1 1e-7).
bool similarElementwise(Transforms const& t) {
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      if (std::abs(double(t.sto.m[r][c]) - t.qto.m[r][c]) > 1e-5) return false;
  double l1 = 0;
  for (int r = 0; r < 4; ++r) l1 += std::abs(double(t.sto.m[r][3]) - t.qto.m[r][3]);
  if (l1 > 1e-7) return false;
  for (int c = 0; c < 3; ++c)
    if (std::abs(double(t.sto.m[3][c]) - t.qto.m[3][c]) > 1e-7) return false;
  return true;
}

// ITK's second test (sform vs qform "very similar"): same column scales, same axis directions,
// same offsets, within 1e-4. ITK phrases it through SVDs of the two 3x3 blocks; this is the
// same comparison written directly.
bool similarGeometrically(Transforms const& t) {
  for (int c = 0; c < 3; ++c) {
    const double ns = colNorm(t.sto, c), nq = colNorm(t.qto, c);
    if (std::abs(ns - nq) > 1e-4 || !(ns > 0) || !(nq > 0)) return false;
    for (int r = 0; r < 3; ++r)
      if (std::abs(t.sto.m[r][c] / ns - t.qto.m[r][c] / nq) > 1e-4) return false;
  }
  for (int r = 0; r < 3; ++r)
    if (std::abs(double(t.sto.m[r][3]) - t.qto.m[r][3]) > 1e-4) return false;
  return true;
}

double spacingScale(std::uint8_t xyztUnits) {
  switch (xyztUnits & 0x07) {
    case 1:
      return 1e3;  // metre
    case 3:
      return 1e-3;  // micron
    default:
      return 1.0;  // mm or unknown
  }
}

// Geometry ITK reports for this header and these sizes (see ImageIO.hpp). `source` gets
// "sform", "qform" or "none".
Geometry itkGeometry(Header const& hd, Index nx, Index ny, Index nz, std::string& source,
                     fs::path const& file) {
  Geometry g = Geometry::fromSize(nx, ny, nz);
  const Transforms t = transformsOf(hd);
  const double scale = spacingScale(hd.xyztUnits);
  g.spacing = {std::abs(double(t.dx)) * scale, std::abs(double(t.dy)) * scale,
               std::abs(double(t.dz)) * scale};
  for (int i = std::max<int>(hd.dim[0], 1); i < 3; ++i)  // axes the file does not have
    if (!(g.spacing[i] > 0.0) || !std::isfinite(g.spacing[i])) g.spacing[i] = 1.0;
  if (t.qformCode == 0 && t.sformCode == 0) {
    source = "none";
    return g;  // origin 0, identity direction
  }
  bool preferS = similarElementwise(t);
  if (!preferS || t.sformCode != 0) {
    if (sformDecomposable(t)) {
      if (t.qformCode == 0 && t.sformCode != 0)
        preferS = true;
      else if (t.sformCode == 1)
        preferS = true;
      else if (t.qformCode != 0 && t.sformCode != 0)
        preferS = similarGeometrically(t);
    }
  }
  Mat44 M;
  if (preferS) {
    M = t.sto;
    source = "sform";
  } else if (t.qformCode != 0) {
    M = t.qto;
    source = "qform";
  } else {
    readError(file,
              "the sform is not a rotation with scaling (skewed or singular) and there is "
              "no qform, so the image has no orthonormal orientation (ITK rejects it too)");
  }
  // ITK uses min(dim[0], 3) axes; a 2D file (dim[0] == 2) keeps only the 2x2 block.
  const int nd = std::max(1, std::min<int>(hd.dim[0], 3));
  g.origin = {0.0, 0.0, 0.0};
  g.origin[0] = -double(M.m[0][3]) * scale;
  if (nd > 1) g.origin[1] = -double(M.m[1][3]) * scale;
  if (nd > 2) g.origin[2] = double(M.m[2][3]) * scale;
  double D[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  for (int c = 0; c < nd; ++c) {
    double v[3] = {0, 0, 0};
    double n = 0;
    for (int r = 0; r < nd; ++r) {
      v[r] = double(M.m[r][c]) * (r < 2 ? -1.0 : 1.0);
      n += v[r] * v[r];
    }
    n = std::sqrt(n);
    if (!(n > 0)) readError(file, "degenerate orientation matrix (a zero column)");
    for (int r = 0; r < nd; ++r) D[r][c] = v[r] / n + 0.0;  // + 0.0: no negative zeros
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) g.direction[r * 3 + c] = D[r][c];
  return g;
}

std::string matrixString(Mat44 const& M) {
  std::vector<double> v;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) v.push_back(M.m[r][c]);
  return formatFloats(v, true);
}

std::string trimmed(const char* s, std::size_t n) {
  std::string r(s, strnlen(s, n));
  while (!r.empty() && (r.back() == ' ')) r.pop_back();
  return r;
}

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f) gzclose(f);
  }
};

// zlib's last error, without the "<path>: " prefix zlib puts in front of it.
std::string gzMessage(gzFile f) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_ERRNO) return std::strerror(errno);
  if (err == Z_OK || !msg) return std::string();
  std::string s(msg);
  const auto colon = s.rfind(": ");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

// "truncated" for a gzip stream that ends early, else "corrupt compressed data (...)".
std::string gzProblem(std::string const& z) {
  if (z.find("unexpected end of file") != std::string::npos)
    return "truncated: the compressed stream ends early";
  return "corrupt compressed data (" + z + ")";
}

// Reads exactly n bytes; false on a short read.
bool gzReadFully(gzFile f, void* buf, std::size_t n) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 26));
    const int got = gzread(f, p, chunk);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool isGzip(fs::path const& file) {
  unsigned char b[2] = {0, 0};
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  const std::size_t n = std::fread(b, 1, 2, f);
  std::fclose(f);
  return n == 2 && b[0] == 0x1f && b[1] == 0x8b;
}

template <class T>
void convertChunk(unsigned char const* src, std::size_t count, bool swap, float* dst, bool scale,
                  double slope, double inter) {
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    if (swap) v = swapBytes(v);
    const double x = static_cast<double>(v);
    dst[i] = static_cast<float>(scale ? x * slope + inter : x);
  }
}

// Header fields that define orientation, as kept in the metadata (for writing back verbatim).
struct OrientationFields {
  int dim0 = 3;
  int qformCode = 0, sformCode = 0;
  float quatern[3] = {0, 0, 0}, qoffset[3] = {0, 0, 0}, qfac = 1;
  float pixdim[3] = {1, 1, 1};
  float srow[3][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  std::uint8_t xyztUnits = 2;
};

bool orientationFromMetadata(std::map<std::string, std::string> const& md, OrientationFields& o) {
  auto get = [&](const char* key, std::size_t n, std::vector<double>& v) {
    auto it = md.find(key);
    return it != md.end() && parseNumbers(it->second, n, v);
  };
  std::vector<double> v;
  if (!get("nifti.qform_code", 1, v)) return false;
  o.qformCode = static_cast<int>(v[0]);
  if (!get("nifti.sform_code", 1, v)) return false;
  o.sformCode = static_cast<int>(v[0]);
  if (!get("nifti.dim0", 1, v)) return false;
  o.dim0 = static_cast<int>(v[0]);
  if (!get("nifti.quatern", 3, v)) return false;
  for (int i = 0; i < 3; ++i) o.quatern[i] = static_cast<float>(v[i]);
  if (!get("nifti.qoffset", 3, v)) return false;
  for (int i = 0; i < 3; ++i) o.qoffset[i] = static_cast<float>(v[i]);
  if (!get("nifti.qfac", 1, v)) return false;
  o.qfac = static_cast<float>(v[0]);
  if (!get("nifti.pixdim", 3, v)) return false;
  for (int i = 0; i < 3; ++i) o.pixdim[i] = static_cast<float>(v[i]);
  if (!get("nifti.sform", 16, v)) return false;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) o.srow[r][c] = static_cast<float>(v[r * 4 + c]);
  if (!get("nifti.xyzt_units", 1, v)) return false;
  o.xyztUnits = static_cast<std::uint8_t>(v[0]);
  if (o.qformCode < 0 || o.sformCode < 0 || o.qformCode > 32767 || o.sformCode > 32767)
    return false;
  return o.dim0 >= 1 && o.dim0 <= 7;
}

Header headerFromOrientation(OrientationFields const& o) {
  Header hd;
  hd.dim[0] = static_cast<std::int16_t>(o.dim0);
  hd.pixdim[0] = o.qfac;
  for (int i = 0; i < 3; ++i) hd.pixdim[i + 1] = o.pixdim[i];
  hd.qformCode = static_cast<std::int16_t>(o.qformCode);
  hd.sformCode = static_cast<std::int16_t>(o.sformCode);
  for (int i = 0; i < 3; ++i) {
    hd.quatern[i] = o.quatern[i];
    hd.qoffset[i] = o.qoffset[i];
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) hd.srow[r][c] = o.srow[r][c];
  hd.xyztUnits = o.xyztUnits;
  return hd;
}

// Orientation fields for a geometry, as ITK's writer builds them: both qform and sform from the
// (orthogonalised) direction, LPS -> RAS, millimetres.
OrientationFields orientationFromGeometry(Geometry const& g, int qcode, int scode) {
  OrientationFields o;
  o.dim0 = 3;
  o.qformCode = qcode;
  o.sformCode = scode;
  o.xyztUnits = 2;  // mm (no time unit)
  // Orthogonalise the direction (polar decomposition, as nifti_mat44_to_quatern does).
  double Q[3][3];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) Q[r][c] = g.direction[r * 3 + c];
  for (int c = 0; c < 3; ++c) {  // normalise columns first
    double n = 0;
    for (int r = 0; r < 3; ++r) n += Q[r][c] * Q[r][c];
    n = std::sqrt(n);
    for (int r = 0; r < 3; ++r) Q[r][c] /= n;
  }
  for (int it = 0; it < 100; ++it) {  // Q <- (Q + Q^-T) / 2 until orthonormal
    double err = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double s = 0;
        for (int k = 0; k < 3; ++k) s += Q[k][i] * Q[k][j];
        err = std::max(err, std::abs(s - (i == j ? 1.0 : 0.0)));
      }
    if (err < 1e-12) break;
    const double d = det3(Q);
    double invT[3][3];  // inverse transpose = cofactor matrix / det
    invT[0][0] = (Q[1][1] * Q[2][2] - Q[1][2] * Q[2][1]) / d;
    invT[0][1] = -(Q[1][0] * Q[2][2] - Q[1][2] * Q[2][0]) / d;
    invT[0][2] = (Q[1][0] * Q[2][1] - Q[1][1] * Q[2][0]) / d;
    invT[1][0] = -(Q[0][1] * Q[2][2] - Q[0][2] * Q[2][1]) / d;
    invT[1][1] = (Q[0][0] * Q[2][2] - Q[0][2] * Q[2][0]) / d;
    invT[1][2] = -(Q[0][0] * Q[2][1] - Q[0][1] * Q[2][0]) / d;
    invT[2][0] = (Q[0][1] * Q[1][2] - Q[0][2] * Q[1][1]) / d;
    invT[2][1] = -(Q[0][0] * Q[1][2] - Q[0][2] * Q[1][0]) / d;
    invT[2][2] = (Q[0][0] * Q[1][1] - Q[0][1] * Q[1][0]) / d;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) Q[r][c] = 0.5 * (Q[r][c] + invT[r][c]);
  }
  // RAS rotation: negate the first two rows.
  double R[3][3];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) R[r][c] = (r < 2 ? -1.0 : 1.0) * Q[r][c];
  const double offset[3] = {-g.origin[0], -g.origin[1], g.origin[2]};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) o.srow[r][c] = static_cast<float>(R[r][c] * g.spacing[c]);
    o.srow[r][3] = static_cast<float>(offset[r]);
  }
  // Quaternion (nifti_mat44_to_quatern on the orthonormal R).
  double P[3][3];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) P[r][c] = R[r][c];
  o.qfac = 1.0f;
  if (det3(P) < 0) {
    o.qfac = -1.0f;
    for (int r = 0; r < 3; ++r) P[r][2] = -P[r][2];
  }
  const double r11 = P[0][0], r12 = P[0][1], r13 = P[0][2];
  const double r21 = P[1][0], r22 = P[1][1], r23 = P[1][2];
  const double r31 = P[2][0], r32 = P[2][1], r33 = P[2][2];
  double a = r11 + r22 + r33 + 1.0, b, c, d;
  if (a > 0.5) {
    a = 0.5 * std::sqrt(a);
    b = 0.25 * (r32 - r23) / a;
    c = 0.25 * (r13 - r31) / a;
    d = 0.25 * (r21 - r12) / a;
  } else {
    const double xd = 1.0 + r11 - (r22 + r33), yd = 1.0 + r22 - (r11 + r33),
                 zd = 1.0 + r33 - (r11 + r22);
    if (xd > 1.0) {
      b = 0.5 * std::sqrt(xd);
      c = 0.25 * (r12 + r21) / b;
      d = 0.25 * (r13 + r31) / b;
      a = 0.25 * (r32 - r23) / b;
    } else if (yd > 1.0) {
      c = 0.5 * std::sqrt(yd);
      b = 0.25 * (r12 + r21) / c;
      d = 0.25 * (r23 + r32) / c;
      a = 0.25 * (r13 - r31) / c;
    } else {
      d = 0.5 * std::sqrt(zd);
      b = 0.25 * (r13 + r31) / d;
      c = 0.25 * (r23 + r32) / d;
      a = 0.25 * (r21 - r12) / d;
    }
    if (a < 0.0) {
      b = -b;
      c = -c;
      d = -d;
    }
  }
  o.quatern[0] = static_cast<float>(b);
  o.quatern[1] = static_cast<float>(c);
  o.quatern[2] = static_cast<float>(d);
  for (int i = 0; i < 3; ++i) {
    o.qoffset[i] = static_cast<float>(offset[i]);
    o.pixdim[i] = static_cast<float>(g.spacing[i]);
  }
  return o;
}

// Opens `file` (plain or gzip) and reads and parses its header; every failure is an IoError.
Header openNifti(fs::path const& file, GzFile& in, bool& gz, std::uintmax_t& size) {
  gz = isGzip(file);
  size = fileSize(file);
  in.f = gzopen(file.c_str(), "rb");
  if (!in.f) readError(file, "cannot open it (" + std::string(std::strerror(errno)) + ")");
  gzbuffer(in.f, 1u << 18);
  unsigned char raw[kHeaderSize] = {0};
  const int got = gzread(in.f, raw, kHeaderSize);
  if (got < 4) {
    const std::string z = gzMessage(in.f);
    readError(file, z.empty() ? "too short to be a NIfTI file (" + std::to_string(size) + " bytes)"
                              : gzProblem(z));
  }
  // A wrong size field is reported as "not NIfTI" even when the file is also short.
  if (got < kHeaderSize) {
    const std::int32_t sz = field<std::int32_t>(raw, 0, false);
    if (sz != kHeaderSize && swapBytes(sz) != kHeaderSize)
      (void)parseHeader(raw, file);  // reports "not a NIfTI-1 file"
    readError(file, "truncated: the file ends inside the 348-byte NIfTI header (" +
                        std::to_string(got) + " bytes)");
  }
  return parseHeader(raw, file);
}

// dim[0] in 1..7 and every used dim[i] > 0.
void checkDims(Header const& hd, fs::path const& file) {
  const int ndim = hd.dim[0];
  if (ndim < 1 || ndim > 7)
    readError(file, "corrupt NIfTI header: dim[0] = " + std::to_string(ndim) + " (must be 1..7)");
  for (int i = 1; i <= ndim; ++i)
    if (hd.dim[i] <= 0)
      readError(file,
                "zero-size image: dim[" + std::to_string(i) + "] = " + std::to_string(hd.dim[i]));
}

std::string shapeOf(Header const& hd) {
  std::string shape;
  for (int i = 1; i <= hd.dim[0]; ++i) shape += (i > 1 ? "x" : "") + std::to_string(hd.dim[i]);
  return shape;
}

// Bytes per stored value of a real scalar type; any other datatype is an IoError.
int elementSize(Header const& hd, fs::path const& file) {
  const int esize = typeSize(hd.datatype);
  if (esize == 0) {
    switch (hd.datatype) {
      case DT_RGB24:
      case DT_RGBA32:
        readError(file, "has RGB/RGBA voxels; Kortex filters take scalar images");
      case DT_COMPLEX64:
      case DT_COMPLEX128:
      case DT_COMPLEX256:
        readError(file, "has complex voxels; Kortex filters take real scalar images");
      case DT_BINARY:
        readError(file, "1-bit (DT_BINARY) voxels are not supported");
      case DT_FLOAT128:
        readError(file, "128-bit float voxels are not supported");
      default:
        readError(file, "corrupt NIfTI header: unknown datatype " + std::to_string(hd.datatype));
    }
  }
  return esize;
}

// Byte offset of the voxels; for a plain file also checks that `count` values fit.
std::uint64_t dataOffset(Header const& hd, fs::path const& file, bool gz, std::uintmax_t size,
                         std::uint64_t count, int esize) {
  if (!std::isfinite(hd.voxOffset) || hd.voxOffset < 0 || hd.voxOffset > 1e12)
    readError(file, "corrupt NIfTI header: vox_offset = " + std::to_string(hd.voxOffset));
  const std::uint64_t voxOffset =
      std::max<std::uint64_t>(kHeaderSize, static_cast<std::uint64_t>(hd.voxOffset));
  const std::uint64_t nbytes = count * static_cast<std::uint64_t>(esize);
  if (!gz && size < voxOffset + nbytes)
    readError(file, "truncated: the header promises " + std::to_string(nbytes) +
                        " bytes of voxel data from byte " + std::to_string(voxOffset) +
                        " but the file has " + std::to_string(size) + " bytes");
  return voxOffset;
}

// Reads `count` stored values from vox_offset into out[0..count) as float, scl_slope/scl_inter
// applied (slope 0 or non-finite: none), then (gzip) reads to the end so the CRC is checked.
void readValues(GzFile& in, Header const& hd, fs::path const& file, bool gz,
                std::uint64_t voxOffset, std::uint64_t count, int esize, float* out) {
  std::uint64_t skip = voxOffset - kHeaderSize;
  std::vector<unsigned char> buf(std::size_t(1) << 22);
  while (skip > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip, buf.size()));
    if (!gzReadFully(in.f, buf.data(), n)) {
      const std::string z = gzMessage(in.f);
      readError(file, z.empty() ? "truncated: the file ends before vox_offset (" +
                                      std::to_string(voxOffset) + ")"
                                : gzProblem(z));
    }
    skip -= n;
  }
  const std::uint64_t nbytes = count * static_cast<std::uint64_t>(esize);
  double slope = hd.sclSlope, inter = hd.sclInter;
  const bool scale = std::isfinite(slope) && slope != 0.0 && std::isfinite(inter) &&
                     !(slope == 1.0 && inter == 0.0);
  const std::size_t perChunk = buf.size() / static_cast<std::size_t>(esize);
  std::uint64_t done = 0;
  while (done < count) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(perChunk, count - done));
    if (!gzReadFully(in.f, buf.data(), n * esize)) {
      const std::string z = gzMessage(in.f);
      readError(file, z.empty()
                          ? "truncated: the voxel data ends after " + std::to_string(done * esize) +
                                " of " + std::to_string(nbytes) + " bytes"
                          : gzProblem(z));
    }
    float* dst = out + done;
    const bool sw = hd.swapped;
    switch (hd.datatype) {
      case DT_UINT8:
        convertChunk<std::uint8_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_INT8:
        convertChunk<std::int8_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_INT16:
        convertChunk<std::int16_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_UINT16:
        convertChunk<std::uint16_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_INT32:
        convertChunk<std::int32_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_UINT32:
        convertChunk<std::uint32_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_INT64:
        convertChunk<std::int64_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_UINT64:
        convertChunk<std::uint64_t>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_FLOAT32:
        convertChunk<float>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      case DT_FLOAT64:
        convertChunk<double>(buf.data(), n, sw, dst, scale, slope, inter);
        break;
      default:
        break;
    }
    done += n;
  }
  if (gz) {
    // Read to the end of the gzip stream so that its CRC is checked: a corrupted member is
    // reported even when the damage is past the voxels we needed.
    while (true) {
      const int r = gzread(in.f, buf.data(), static_cast<unsigned>(buf.size()));
      if (r <= 0) {
        const std::string z = gzMessage(in.f);
        if (r < 0 || !z.empty()) readError(file, gzProblem(z));
        break;
      }
    }
  }
}

// NIfTI-1 intent codes of vector images (nifti1.h).
constexpr int kIntentDispVect = 1006;  // NIFTI_INTENT_DISPVECT: displacement vectors (RAS)
constexpr int kIntentVector = 1007;    // NIFTI_INTENT_VECTOR: generic vectors (ITK writes these)

// A 348-byte header + 4-byte extension flag for float32 data, orientation fields `o`.
void fillHeader(unsigned char (&h)[kHeaderSize + 4], OrientationFields const& o,
                std::int16_t const (&dim)[8], float const (&pixdim)[8], int intentCode,
                std::uint8_t xyztUnits, std::string const& descrip, std::string const& auxFile,
                std::string const& intentName) {
  std::memset(h, 0, sizeof h);
  put<std::int32_t>(h, 0, kHeaderSize);
  h[38] = 'r';  // "regular", as niftilib writes
  for (int i = 0; i < 8; ++i) put<std::int16_t>(h, 40 + 2 * i, dim[i]);
  put<std::int16_t>(h, 68, static_cast<std::int16_t>(intentCode));
  put<std::int16_t>(h, 70, static_cast<std::int16_t>(DT_FLOAT32));
  put<std::int16_t>(h, 72, 32);
  for (int i = 0; i < 8; ++i) put<float>(h, 76 + 4 * i, pixdim[i]);
  put<float>(h, 108, float(kHeaderSize + 4));  // vox_offset 352
  put<float>(h, 112, 1.0f);                    // scl_slope
  put<float>(h, 116, 0.0f);                    // scl_inter
  h[123] = xyztUnits;
  auto text = [&](std::string const& s, int offset, std::size_t max) {
    std::memcpy(h + offset, s.data(), std::min(s.size(), max - 1));
  };
  text(descrip, 148, 80);
  text(auxFile, 228, 24);
  text(intentName, 328, 16);
  put<std::int16_t>(h, 252, static_cast<std::int16_t>(o.qformCode));
  put<std::int16_t>(h, 254, static_cast<std::int16_t>(o.sformCode));
  for (int i = 0; i < 3; ++i) put<float>(h, 256 + 4 * i, o.quatern[i]);
  for (int i = 0; i < 3; ++i) put<float>(h, 268 + 4 * i, o.qoffset[i]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) put<float>(h, 280 + 16 * r + 4 * c, o.srow[r][c]);
  std::memcpy(h + 344, "n+1\0", 4);
  // bytes 348..351: extension flag = 0 (no extensions)
}

// Writes header + float32 data to tmpFile (gzip when the target is .nii.gz); IoError on failure.
// The caller's AtomicOutput removes the temporary on failure, so the target is never touched.
void writeFile(unsigned char const (&h)[kHeaderSize + 4], float const* data, std::size_t count,
               fs::path const& tmpFile, fs::path const& target) {
  const std::size_t nbytes = count * sizeof(float);
  const bool gz = extensionOf(target) == ".nii.gz";
  if (gz) {
    GzFile outf;
    outf.f = gzopen(tmpFile.c_str(), "wb6");
    if (!outf.f)
      writeError(target, "cannot create the file (" + std::string(std::strerror(errno)) + ")");
    gzbuffer(outf.f, 1u << 18);
    auto write = [&](const void* p, std::size_t n) {
      const auto* c = static_cast<const unsigned char*>(p);
      while (n > 0) {
        const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 26));
        if (gzwrite(outf.f, c, chunk) != static_cast<int>(chunk))
          writeError(target, "write failed (" + gzMessage(outf.f) + ")");
        c += chunk;
        n -= chunk;
      }
    };
    write(h, sizeof h);
    write(data, nbytes);
    const int rc = gzclose(outf.f);
    outf.f = nullptr;
    if (rc != Z_OK) writeError(target, "write failed while finishing the gzip stream");
  } else {
    std::FILE* f = std::fopen(tmpFile.c_str(), "wb");
    if (!f)
      writeError(target, "cannot create the file (" + std::string(std::strerror(errno)) + ")");
    const bool ok = std::fwrite(h, 1, sizeof h, f) == sizeof h &&
                    std::fwrite(data, 1, nbytes, f) == nbytes;
    const int err = errno;
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed)
      writeError(target, "write failed (" + std::string(std::strerror(ok ? errno : err)) + ")");
  }
}

}  // namespace

HostImage readNifti(fs::path const& file) {
  GzFile in;
  bool gz = false;
  std::uintmax_t size = 0;
  const Header hd = openNifti(file, in, gz, size);

  // --- dimensions ---
  checkDims(hd, file);
  const int ndim = hd.dim[0];
  int effective = ndim;
  while (effective > 3 && hd.dim[effective] == 1) --effective;  // trailing singleton dims
  if (effective > 3) {
    if ((hd.intentCode == kIntentVector || hd.intentCode == kIntentDispVect) && ndim >= 5 &&
        hd.dim[5] > 1)
      readError(file, "is a vector image (intent_code " + std::to_string(hd.intentCode) + ", " +
                          std::to_string(hd.dim[5]) + " components per voxel, " + shapeOf(hd) +
                          "), e.g. a displacement field; Kortex filters take 2D or 3D scalar "
                          "images (read displacement fields with readDisplacementField)");
    readError(file, "has " + std::to_string(effective) + " dimensions (" + shapeOf(hd) +
                        "); Kortex filters take 2D or 3D scalar images");
  }
  const Index nx = hd.dim[1], ny = ndim >= 2 ? hd.dim[2] : 1, nz = ndim >= 3 ? hd.dim[3] : 1;

  // --- data type, location and size ---
  const int esize = elementSize(hd, file);
  const std::uint64_t nvox = static_cast<std::uint64_t>(nx) * ny * nz;
  const std::uint64_t voxOffset = dataOffset(hd, file, gz, size, nvox, esize);

  // --- geometry (ITK's rule) ---
  std::string source;
  const Geometry g = itkGeometry(hd, nx, ny, nz, source, file);
  HostImage img;
  try {
    img = allocateImage(g, file, "kortex::io::nifti");
  } catch (IoError const&) {
    throw;
  } catch (std::exception const& e) {
    readError(file, "cannot allocate " + describe(g) + " (" + e.what() + ")");
  }

  // --- voxels ---
  readValues(in, hd, file, gz, voxOffset, nvox, esize, img.data.data());

  // --- metadata (enough to write the same header back) ---
  const Transforms t = transformsOf(hd);
  auto& md = img.metadata;
  md["nifti.dim0"] = std::to_string(ndim);
  md["nifti.qform_code"] = std::to_string(hd.qformCode);
  md["nifti.sform_code"] = std::to_string(hd.sformCode);
  md["nifti.qform"] = matrixString(t.qto);
  Mat44 srow;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) srow.m[r][c] = hd.srow[r][c];
  srow.m[3][3] = 1.0f;
  md["nifti.sform"] = matrixString(srow);
  md["nifti.quatern"] = formatFloats({hd.quatern[0], hd.quatern[1], hd.quatern[2]}, true);
  md["nifti.qoffset"] = formatFloats({hd.qoffset[0], hd.qoffset[1], hd.qoffset[2]}, true);
  md["nifti.qfac"] = hd.pixdim[0] < 0 ? "-1" : "1";
  md["nifti.pixdim"] = formatFloats({hd.pixdim[1], hd.pixdim[2], hd.pixdim[3]}, true);
  md["nifti.xyzt_units"] = std::to_string(hd.xyztUnits);
  md["nifti.descrip"] = trimmed(hd.descrip, 80);
  md["nifti.aux_file"] = trimmed(hd.auxFile, 24);
  md["nifti.intent_code"] = std::to_string(hd.intentCode);
  md["nifti.intent_name"] = trimmed(hd.intentName, 16);
  md["nifti.datatype"] = typeName(hd.datatype);
  md["nifti.scl_slope"] = formatFloats({hd.sclSlope}, true);
  md["nifti.scl_inter"] = formatFloats({hd.sclInter}, true);
  md["nifti.orientation_source"] = source;
  return img;
}

void writeNifti(HostImage const& image, fs::path const& tmpFile, fs::path const& target) {
  const Geometry& g = image.geometry;
  for (Index n : g.size)
    if (n > 32767)
      writeError(target, "NIfTI-1 holds at most 32767 voxels per axis; image is " + describe(g));
  const auto& md = image.metadata;

  // Verbatim header fields if they still describe this geometry, else ITK's construction.
  OrientationFields o;
  bool verbatim = false;
  const bool haveFields = orientationFromMetadata(md, o);
  // dim[0] > 3 can only have had singleton trailing dims (else it was rejected): write 3.
  if (haveFields) o.dim0 = std::min(o.dim0, 3);
  if (haveFields && (o.dim0 >= 3 || g.nz() == 1) && (o.dim0 >= 2 || g.ny() == 1)) {
    try {
      std::string src;
      const Geometry back =
          itkGeometry(headerFromOrientation(o), g.nx(), g.ny(), g.nz(), src, target);
      verbatim = back.sameGrid(g, 1e-6);
    } catch (IoError const&) {
      verbatim = false;
    }
  }
  if (!verbatim) {
    int qc = 1, sc = 1;
    std::vector<double> v;
    auto it = md.find("nifti.qform_code");
    if (it != md.end() && parseNumbers(it->second, 1, v) && v[0] > 0 && v[0] < 32768)
      qc = static_cast<int>(v[0]);
    it = md.find("nifti.sform_code");
    if (it != md.end() && parseNumbers(it->second, 1, v) && v[0] > 0 && v[0] < 32768)
      sc = static_cast<int>(v[0]);
    o = orientationFromGeometry(g, qc, sc);
  }

  const std::int16_t dim[8] = {static_cast<std::int16_t>(o.dim0),
                               static_cast<std::int16_t>(g.nx()),
                               static_cast<std::int16_t>(g.ny()),
                               static_cast<std::int16_t>(g.nz()),
                               1,
                               1,
                               1,
                               1};
  auto intIn = [&](const char* key, int def) {
    std::vector<double> v;
    auto it = md.find(key);
    return (it != md.end() && parseNumbers(it->second, 1, v) && v[0] >= -32768 && v[0] < 32768)
               ? static_cast<int>(v[0])
               : def;
  };
  auto textIn = [&](const char* key, const char* def) {
    auto it = md.find(key);
    return it != md.end() ? it->second : std::string(def);
  };
  const float pixdim[8] = {o.qfac, o.pixdim[0], o.pixdim[1], o.pixdim[2], 1, 1, 1, 1};
  unsigned char h[kHeaderSize + 4];
  fillHeader(h, o, dim, pixdim, intIn("nifti.intent_code", 0), o.xyztUnits,
             textIn("nifti.descrip", "Kortex"), textIn("nifti.aux_file", ""),
             textIn("nifti.intent_name", ""));
  writeFile(h, image.data.data(), static_cast<std::size_t>(g.numVoxels()), tmpFile, target);
}

// ---- displacement fields (see io/ImageIO.hpp for the convention and its ITK sources) ----

VectorField<Kokkos::HostSpace> readNiftiField(fs::path const& file) {
  GzFile in;
  bool gz = false;
  std::uintmax_t size = 0;
  const Header hd = openNifti(file, in, gz, size);
  checkDims(hd, file);
  const int ndim = hd.dim[0];
  const std::string expected =
      "; a displacement field is a NIfTI vector image as ITK/ANTs write it (intent_code 1007 "
      "NIFTI_INTENT_VECTOR or 1006 NIFTI_INTENT_DISPVECT, dim[0] = 5, dim[4] = 1, dim[5] = 3 "
      "components, a 3D grid)";
  if (hd.intentCode != kIntentVector && hd.intentCode != kIntentDispVect) {
    const bool scalar = ndim <= 4;
    readError(file, "is not a displacement field: it holds " +
                        (scalar ? std::string("a scalar image")
                                : "a " + std::to_string(ndim) + "D array") +
                        " (" + shapeOf(hd) + ", intent_code " + std::to_string(hd.intentCode) +
                        ")" + expected);
  }
  if (ndim != 5)
    readError(file, "is not a displacement field: vector intent_code " +
                        std::to_string(hd.intentCode) + " but dim[0] = " + std::to_string(ndim) +
                        " (" + shapeOf(hd) + ")" + expected);
  if (hd.dim[4] != 1)
    readError(file, "holds a series of " + std::to_string(hd.dim[4]) +
                        " vector images (dim[4] = " + std::to_string(hd.dim[4]) +
                        "); Kortex reads one displacement field" + expected);
  if (hd.dim[5] != 3)
    readError(file, "has " + std::to_string(hd.dim[5]) +
                        " components per voxel; a 3D displacement field has 3" + expected);
  const Index nx = hd.dim[1], ny = hd.dim[2], nz = hd.dim[3];
  if (nz < 2 || ny < 2)
    readError(file, "is a " + std::string(nz < 2 && ny < 2 ? "1D" : "2D") +
                        " vector image (" + shapeOf(hd) +
                        "); Kortex reads 3D displacement fields" + expected);

  const int esize = elementSize(hd, file);
  const std::uint64_t nvox = static_cast<std::uint64_t>(nx) * ny * nz;
  const std::uint64_t voxOffset = dataOffset(hd, file, gz, size, 3 * nvox, esize);

  // Geometry: ITK's rule, on the 3 spatial axes (ITK takes the image dimension from dim[1..3]
  // for vector intents; dim[0] = 5 here would not change min(dim[0], 3) = 3 anyway).
  std::string source;
  const Geometry g = itkGeometry(hd, nx, ny, nz, source, file);
  VectorField<Kokkos::HostSpace> f;
  try {
    g.validate();
    f = VectorField<Kokkos::HostSpace>("kortex::io::displacementField", g, 3);
  } catch (std::exception const& e) {
    readError(file, "cannot hold the field on " + describe(g) + " (" + e.what() + ")");
  }
  // NIfTI stores dim[5] slowest: the three components one after the other, each (nz, ny, nx)
  // with x fastest: exactly VectorField's layout (3, nz, ny, nx), LayoutRight.
  readValues(in, hd, file, gz, voxOffset, 3 * nvox, esize, f.data.data());
  if (hd.intentCode == kIntentDispVect) {
    // NIFTI_INTENT_DISPVECT holds RAS vectors: negate x and y (RAS -> LPS), as ITK >= 5.4's
    // ConvertRASDisplacementVectors (on by default) does.
    float* p = f.data.data();
    for (std::uint64_t i = 0; i < 2 * nvox; ++i) p[i] = -p[i];
  }
  return f;
}

void writeNiftiField(VectorField<Kokkos::HostSpace> const& field, fs::path const& tmpFile,
                     fs::path const& target) {
  const Geometry& g = field.geometry;
  for (Index n : g.size)
    if (n > 32767)
      writeError(target, "NIfTI-1 holds at most 32767 voxels per axis; field is " + describe(g));
  // ITK's writer: qform = sform from the geometry, codes NIFTI_XFORM_SCANNER_ANAT (1) when the
  // image has no "qform_code"/"sform_code" metadata (ANTs sets none).
  const OrientationFields o = orientationFromGeometry(g, 1, 1);
  const std::int16_t dim[8] = {5,
                               static_cast<std::int16_t>(g.nx()),
                               static_cast<std::int16_t>(g.ny()),
                               static_cast<std::int16_t>(g.nz()),
                               1,
                               3,
                               1,
                               1};
  // pixdim[4..7] stay 0: ITK sets pixdim only for the image's own axes, on a header that
  // nifti_simple_init_nim zeroed.
  const float pixdim[8] = {o.qfac, o.pixdim[0], o.pixdim[1], o.pixdim[2], 0, 0, 0, 0};
  constexpr std::uint8_t kMmAndSeconds = 2 | 8;  // NIFTI_UNITS_MM | NIFTI_UNITS_SEC, as ITK
  unsigned char h[kHeaderSize + 4];
  fillHeader(h, o, dim, pixdim, kIntentVector, kMmAndSeconds, "Kortex displacement field", "",
             "");
  writeFile(h, field.data.data(), static_cast<std::size_t>(3 * g.numVoxels()), tmpFile, target);
}

}  // namespace kortex::io::detail
