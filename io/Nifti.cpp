// NIfTI through nifti_clib (nifti2_io + znzlib): NIfTI-1 and NIfTI-2, single files (.nii,
// .nii.gz) and header/data pairs (.hdr + .img, either gzipped); Analyze 7.5 pairs are read too.
//
// The library parses and builds the headers (byte order, versions, pairs, extensions, the qform
// matrix from the quaternion and back, its sanity checks). Kortex adds what its guarantees need:
//   * ITK's orientation rule on the library's qto/sto matrices (see io/ImageIO.hpp);
//   * one IoError per bad file. nifti_clib prints some errors on stderr whatever its debug level,
//     so every call into it runs with stderr captured (LibraryCall) and what it said is quoted in
//     the message instead; the checks below run first so that the usual faults get a precise one;
//   * the files: voxels read here through zlib, converted to float with scl_slope/scl_inter, a
//     gzip stream read to its end so that its CRC is checked; the header the library built and
//     the voxels written here, every short write and the final close checked (nifti_image_write
//     itself reports nothing, and 3.0.1 writes a single NIfTI-2 file's voxels over its header);
//   * header fields written back verbatim when they still describe the image (exact round trip).
// Why not VTK's NIfTI reader: it reverses the slice order when qfac is -1, drops scl_slope and its
// writer rewrites the codes; voxel (i,j,k) of the file must stay voxel (i,j,k) of the array.

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include <nifti2_io.h>
#include <zlib.h>

#include "io/IoDetail.hpp"

namespace kortex::io::detail {

namespace {

// --- the library: quiet, and its stderr captured around each call ---------------------------------

void configureLibrary() {
  static const bool done = [] {
    nifti_set_debug_level(0);       // no chit-chat; errors still print (captured below)
    nifti_set_allow_upper_fext(1);  // A.NII.GZ, B.HDR
    return true;
  }();
  (void)done;
}

// Every call into nifti_clib: the I/O lock held (the capture redirects the process's stderr; a
// NIfTI read holds the lock only here, so files are read and decompressed in parallel), the
// library configured, its stderr messages captured (io/IoDetail.hpp).
struct IoLock {
  std::lock_guard<std::recursive_mutex> held{ioMutex()};
};
class LibraryCall : private IoLock, public CapturedStderr {
 public:
  LibraryCall() : CapturedStderr("nifti_clib") { configureLibrary(); }
};

struct NimDeleter {
  void operator()(nifti_image* nim) const {
    if (!nim) return;
    nim->data = nullptr;  // never owned by the library here
    nifti_image_free(nim);
  }
};
using Nim = std::unique_ptr<nifti_image, NimDeleter>;

// --- data types ---------------------------------------------------------------------------------

const char* typeName(int dt) {
  switch (dt) {
    case NIFTI_TYPE_UINT8: return "uint8";
    case NIFTI_TYPE_INT8: return "int8";
    case NIFTI_TYPE_INT16: return "int16";
    case NIFTI_TYPE_UINT16: return "uint16";
    case NIFTI_TYPE_INT32: return "int32";
    case NIFTI_TYPE_UINT32: return "uint32";
    case NIFTI_TYPE_INT64: return "int64";
    case NIFTI_TYPE_UINT64: return "uint64";
    case NIFTI_TYPE_FLOAT32: return "float32";
    case NIFTI_TYPE_FLOAT64: return "float64";
    default: return "unknown";
  }
}

// Bytes per stored value of a real scalar type, 0 for anything else.
int typeSize(int dt) {
  switch (dt) {
    case NIFTI_TYPE_UINT8:
    case NIFTI_TYPE_INT8: return 1;
    case NIFTI_TYPE_INT16:
    case NIFTI_TYPE_UINT16: return 2;
    case NIFTI_TYPE_INT32:
    case NIFTI_TYPE_UINT32:
    case NIFTI_TYPE_FLOAT32: return 4;
    case NIFTI_TYPE_INT64:
    case NIFTI_TYPE_UINT64:
    case NIFTI_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

int elementSize(int datatype, fs::path const& file) {
  const int esize = typeSize(datatype);
  if (esize != 0) return esize;
  switch (datatype) {
    case NIFTI_TYPE_RGB24:
    case NIFTI_TYPE_RGBA32:
      readError(file, "has RGB/RGBA voxels; Kortex filters take scalar images");
    case NIFTI_TYPE_COMPLEX64:
    case NIFTI_TYPE_COMPLEX128:
    case NIFTI_TYPE_COMPLEX256:
      readError(file, "has complex voxels; Kortex filters take real scalar images");
    case DT_BINARY:
      readError(file, "1-bit (DT_BINARY) voxels are not supported");
    case NIFTI_TYPE_FLOAT128:
      readError(file, "128-bit float voxels are not supported");
    default:
      readError(file, "corrupt NIfTI header: unknown datatype " + std::to_string(datatype));
  }
}

// --- gzip helpers (the voxels are read through zlib directly) -----------------------------------

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

// Reads up to n bytes; returns how many were read (short at end of file or on an error).
std::size_t gzReadUpTo(gzFile f, void* buf, std::size_t n) {
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 26));
    const int got = gzread(f, p + done, chunk);
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
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
T swapBytes(T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  std::memcpy(&v, b, sizeof(T));
  return v;
}

// Why the library could not read a header: the precise reason when it is one of the usual ones.
[[noreturn]] void unreadableHeader(fs::path const& file, std::string const& said) {
  const std::string ext = extensionOf(file);
  if (isGzip(file) && !(ext.size() > 3 && ext.compare(ext.size() - 3, 3, ".gz") == 0))
    readError(file, "is gzip-compressed but its name does not end in '.gz' (NIfTI readers choose "
                    "decompression by the name): rename it to '" +
                        file.filename().string() + ".gz'");
  char* found = nifti_findhdrname(file.c_str());
  if (!found)
    readError(file, "no NIfTI header found for it (the data file of a pair is read through the "
                    ".hdr of the same name)" + said);
  const fs::path hdr(found);
  std::free(found);
  GzFile in;
  in.f = gzopen(hdr.c_str(), "rb");
  if (!in.f) readError(file, "cannot open '" + hdr.string() + "' (" + std::strerror(errno) + ")");
  unsigned char raw[540] = {0};
  const std::size_t got = gzReadUpTo(in.f, raw, sizeof raw);
  const std::string z = gzMessage(in.f);
  if (got < 4) {
    if (!z.empty()) readError(file, gzProblem(z));
    readError(file, "too short to be a NIfTI file (" + std::to_string(got) + " bytes)");
  }
  std::int32_t size = 0;
  std::memcpy(&size, raw, 4);
  const std::int32_t swapped = swapBytes(size);
  for (int expected : {348, 540}) {
    if (size == expected || swapped == expected) {
      if (got < static_cast<std::size_t>(expected)) {
        if (!z.empty() && z.find("unexpected end of file") == std::string::npos)
          readError(file, gzProblem(z));
        readError(file, "truncated: the file ends inside the " + std::to_string(expected) +
                            "-byte NIfTI-" + (expected == 348 ? "1" : "2") + " header (" +
                            std::to_string(got) + " bytes)");
      }
      readError(file, "not a valid NIfTI-" + std::string(expected == 348 ? "1" : "2") +
                          " header (its size field says so but its magic does not)" + said);
    }
  }
  readError(file, "not a NIfTI-1 or NIfTI-2 file (the header size field is " +
                      std::to_string(size) + ", not 348 or 540)");
}

// --- the header -----------------------------------------------------------------------------------

// What the checks need from the raw header, in host byte order.
struct RawHeader {
  int version = 1;        // 1 or 2
  bool analyze = false;   // a 348-byte header without a NIfTI magic: Analyze 7.5
  bool single = false;    // magic "n+1" / "n+2": header and voxels in one file
  std::int64_t dim[8] = {0, 1, 1, 1, 1, 1, 1, 1};
  double pixdim[8] = {0, 1, 1, 1, 1, 1, 1, 1};
  int datatype = 0, intentCode = 0;
  double voxOffset = 0;
  std::uint64_t voxels = 0;  // dim[1] * ... * dim[dim[0]], overflow-checked (checkHeader)
  // The transforms as stored (nifti_clib turns a non-finite quatern or qoffset into 0; these keep
  // it, for requireFiniteTransforms). Not used for Analyze, which has neither.
  int qformCode = 0, sformCode = 0;
  double quatern[3] = {0, 0, 0}, qoffset[3] = {0, 0, 0}, srow[3][4] = {};
  double qfac = 1;  // the sign of pixdim[0], as nifti_clib reads it
};

template <class Header>
void copyTransforms(Header const& h, RawHeader& r) {
  r.qformCode = h.qform_code;
  r.sformCode = h.sform_code;
  const double q[3] = {h.quatern_b, h.quatern_c, h.quatern_d};
  const double o[3] = {h.qoffset_x, h.qoffset_y, h.qoffset_z};
  for (int i = 0; i < 3; ++i) {
    r.quatern[i] = q[i];
    r.qoffset[i] = o[i];
  }
  for (int c = 0; c < 4; ++c) {
    r.srow[0][c] = h.srow_x[c];
    r.srow[1][c] = h.srow_y[c];
    r.srow[2][c] = h.srow_z[c];
  }
  r.qfac = h.pixdim[0] < 0 ? -1.0 : 1.0;
}

RawHeader readRawHeader(fs::path const& file) {
  LibraryCall call;
  int nver = -1;
  void* h = nifti_read_header(file.c_str(), &nver, 0);
  const std::string said = call.quoted();
  if (!h) unreadableHeader(file, said);
  RawHeader r;
  if (nver == 2) {
    auto* n2 = static_cast<nifti_2_header*>(h);
    if (n2->sizeof_hdr != 540) swap_nifti_header(n2, 2);
    r.version = 2;
    r.single = n2->magic[1] == '+';
    for (int i = 0; i < 8; ++i) r.dim[i] = n2->dim[i];
    for (int i = 0; i < 8; ++i) r.pixdim[i] = n2->pixdim[i];
    r.datatype = n2->datatype;
    r.intentCode = n2->intent_code;
    r.voxOffset = static_cast<double>(n2->vox_offset);
    copyTransforms(*n2, r);
  } else if (nver == 0 || nver == 1) {
    auto* n1 = static_cast<nifti_1_header*>(h);
    if (n1->sizeof_hdr != 348) swap_nifti_header(n1, nver);
    r.version = 1;
    r.analyze = nver == 0;
    r.single = !r.analyze && n1->magic[1] == '+';
    for (int i = 0; i < 8; ++i) r.dim[i] = n1->dim[i];
    for (int i = 0; i < 8; ++i) r.pixdim[i] = n1->pixdim[i];
    r.datatype = n1->datatype;
    r.intentCode = r.analyze ? 0 : n1->intent_code;
    r.voxOffset = n1->vox_offset;
    if (!r.analyze) copyTransforms(*n1, r);
  } else {
    std::free(h);
    unreadableHeader(file, said);
  }
  std::free(h);
  return r;
}

std::string shapeOf(RawHeader const& hd) {
  std::string shape;
  for (int i = 1; i <= hd.dim[0]; ++i) shape += (i > 1 ? "x" : "") + std::to_string(hd.dim[i]);
  return shape;
}

// The largest voxel array a header may declare: 2^48 values (256 TiB of float32), far past any
// real image and far from 64-bit overflow in every byte count computed from it.
constexpr std::uint64_t kMaxNiftiValues = std::uint64_t(1) << 48;

// Before anything is allocated or indexed: dim[0] in 1..7, every used dim[i] > 0, their product
// computed without overflow and at most kMaxNiftiValues, a finite vox_offset, and a single
// file's voxels starting after its header (352 / 544 bytes: the header and the extension flag).
void checkHeader(RawHeader& hd, fs::path const& file) {
  const auto ndim = hd.dim[0];
  if (ndim < 1 || ndim > 7)
    readError(file, "corrupt NIfTI header: dim[0] = " + std::to_string(ndim) + " (must be 1..7)");
  for (int i = 1; i <= ndim; ++i)
    if (hd.dim[i] <= 0)
      readError(file,
                "zero-size image: dim[" + std::to_string(i) + "] = " + std::to_string(hd.dim[i]));
  std::uint64_t n = 1;
  for (int i = 1; i <= ndim; ++i) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(hd.dim[i]), &n) || n > kMaxNiftiValues)
      readError(file, "corrupt NIfTI header: the dimensions " + shapeOf(hd) +
                          " declare more than 2^48 voxels (not a real image)");
  }
  hd.voxels = n;
  if (!std::isfinite(hd.voxOffset) || hd.voxOffset < 0 || hd.voxOffset > 1e15)
    readError(file, "corrupt NIfTI header: vox_offset = " + std::to_string(hd.voxOffset));
  const double headerEnd = hd.version == 2 ? 544 : 352;
  if (hd.single && hd.voxOffset < headerEnd)
    readError(file, "corrupt NIfTI header: vox_offset = " + formatReadable(hd.voxOffset) +
                        " puts the voxels inside the " + std::to_string(int(headerEnd) - 4) +
                        "-byte header of a single-file NIfTI-" + std::to_string(hd.version) +
                        " (it must be at least " + std::to_string(int(headerEnd)) + ")");
}

// The header through the library (file names of a pair, qto/sto, scaling), after our checks.
Nim readHeader(fs::path const& file) {
  LibraryCall call;
  Nim nim(nifti_image_read(file.c_str(), 0));
  const std::string said = call.quoted();
  if (!nim) readError(file, "corrupt NIfTI header" + (said.empty() ? " (nifti_clib refuses it)" : said));
  if (!nim->iname) readError(file, "no data file found for this NIfTI header" + said);
  return nim;
}

// --- orientation (ITK's rule) ------------------------------------------------------------------

// What the rule looks at: qto = quaternion matrix (qform_code > 0) or diag(pixdim); sto = srow
// (sform_code > 0) or zeros, as in nifti_clib's nifti_image.
struct Transforms {
  double dx = 1, dy = 1, dz = 1;
  nifti_dmat44 qto{}, sto{};
  int qformCode = 0, sformCode = 0;
  // pixdim[1..3] as stored was 0, NaN or Inf (nifti_clib then puts 1 in dx/dy/dz and qto): the
  // spacing along that axis is unknown, and so is every transform built from it.
  bool badPixdim[3] = {false, false, false};
};

bool usablePixdim(double v) { return std::isfinite(v) && v != 0.0; }

Transforms transformsOf(nifti_image const& nim, RawHeader const& raw) {
  Transforms t;
  t.dx = nim.dx;
  t.dy = nim.dy;
  t.dz = nim.dz;
  t.qformCode = std::max(nim.qform_code, 0);
  t.sformCode = std::max(nim.sform_code, 0);
  t.qto = nim.qto_xyz;
  if (t.sformCode > 0) t.sto = nim.sto_xyz;  // else all zeros
  for (int i = 0; i < 3; ++i) t.badPixdim[i] = !usablePixdim(raw.pixdim[i + 1]);
  return t;
}

double colNorm(nifti_dmat44 const& M, int c) {
  return std::sqrt(M.m[0][c] * M.m[0][c] + M.m[1][c] * M.m[1][c] + M.m[2][c] * M.m[2][c]);
}

double det3(double const a[3][3]) {
  return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
         a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
         a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
}

// ITK: the sform is an invertible affine whose column-normalised 3x3 is orthonormal (1e-4).
bool sformDecomposable(Transforms const& t) {
  if (t.sformCode <= 0) return false;  // all-zero sto: not affine
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
      if (std::abs(t.sto.m[r][c] - t.qto.m[r][c]) > 1e-5) return false;
  double l1 = 0;
  for (int r = 0; r < 4; ++r) l1 += std::abs(t.sto.m[r][3] - t.qto.m[r][3]);
  if (l1 > 1e-7) return false;
  for (int c = 0; c < 3; ++c)
    if (std::abs(t.sto.m[3][c] - t.qto.m[3][c]) > 1e-7) return false;
  return true;
}

// ITK's second test (sform vs qform "very similar"): same column scales, same axis directions,
// same offsets, within 1e-4 (ITK phrases it through SVDs of the two 3x3 blocks).
bool similarGeometrically(Transforms const& t) {
  for (int c = 0; c < 3; ++c) {
    const double ns = colNorm(t.sto, c), nq = colNorm(t.qto, c);
    if (std::abs(ns - nq) > 1e-4 || !(ns > 0) || !(nq > 0)) return false;
    for (int r = 0; r < 3; ++r)
      if (std::abs(t.sto.m[r][c] / ns - t.qto.m[r][c] / nq) > 1e-4) return false;
  }
  for (int r = 0; r < 3; ++r)
    if (std::abs(t.sto.m[r][3] - t.qto.m[r][3]) > 1e-4) return false;
  return true;
}

// True when the top-left n x n block of M has non-zero, mutually orthogonal columns (1e-4 of
// their lengths): a rotation with scaling within those n axes.
bool orthonormalBlock(nifti_dmat44 const& M, int n) {
  double len[3] = {0, 0, 0};
  for (int c = 0; c < n; ++c) {
    for (int r = 0; r < n; ++r) len[c] += M.m[r][c] * M.m[r][c];
    len[c] = std::sqrt(len[c]);
    if (!(len[c] > 0) || !std::isfinite(len[c])) return false;
  }
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      double dot = 0;
      for (int r = 0; r < n; ++r) dot += M.m[r][a] * M.m[r][b];
      if (std::abs(dot) > 1e-4 * len[a] * len[b]) return false;
    }
  // and the block's columns carry (nearly) all of each column's length: no out-of-plane part
  for (int c = 0; c < n; ++c) {
    double full = 0;
    for (int r = 0; r < 3; ++r) full += M.m[r][c] * M.m[r][c];
    if (std::abs(std::sqrt(full) - len[c]) > 1e-4 * std::sqrt(full)) return false;
  }
  return true;
}

double spacingScale(int xyzUnits) {
  switch (xyzUnits & 0x07) {
    case NIFTI_UNITS_METER: return 1e3;
    case NIFTI_UNITS_MICRON: return 1e-3;
    default: return 1.0;  // mm or unknown
  }
}

// The orientation part of itkGeometry: which transform ITK's rule picks, and the origin and
// direction it gives, for a spacing already decided.
Geometry orientedGeometry(Transforms const& t, int dim0, int xyzUnits, Index nx, Index ny, Index nz,
                          std::string& source, fs::path const& file, std::array<double, 3> const& spacing);

// Geometry ITK reports for these transforms and sizes (see ImageIO.hpp). `source` gets "sform",
// "qform" or "none".
Geometry itkGeometry(Transforms const& t, int dim0, int xyzUnits, Index nx, Index ny, Index nz,
                     std::string& source, fs::path const& file) {
  Geometry g = Geometry::fromSize(nx, ny, nz);
  const double scale = spacingScale(xyzUnits);
  g.spacing = {std::abs(t.dx) * scale, std::abs(t.dy) * scale, std::abs(t.dz) * scale};
  const Index sizes[3] = {nx, ny, nz};
  // An unknown pixdim matters on an axis the file has with more than one voxel (the spacing of a
  // single slice places no voxel). Then the qform and the pixdim-only geometry are unusable: the
  // sform gives the spacing and orientation, or the file is refused. Nothing is invented.
  int unknownAxis = -1;
  for (int i = 0; i < std::min(std::max(dim0, 1), 3); ++i)
    if (t.badPixdim[i] && sizes[i] > 1 && unknownAxis < 0) unknownAxis = i;
  for (int i = 0; i < 3; ++i)  // axes the file does not have, single slices: 1 mm if unknown
    if (!(g.spacing[i] > 0.0) || !std::isfinite(g.spacing[i]) || (t.badPixdim[i] && unknownAxis < 0))
      g.spacing[i] = 1.0;
  if (unknownAxis >= 0) {
    const std::string what = "pixdim[" + std::to_string(unknownAxis + 1) + "] is not a spacing (0, NaN or infinite)";
    if (!sformDecomposable(t))
      readError(file, what + (t.sformCode > 0 ? " and the sform is not a rotation with scaling"
                                              : " and there is no sform") +
                          ", so the voxel spacing along axis " + std::to_string(unknownAxis + 1) +
                          " is unknown");
    for (int i = 0; i < std::min(dim0, 3); ++i)
      if (t.badPixdim[i]) g.spacing[i] = colNorm(t.sto, i) * scale;
    Transforms fromS = t;
    fromS.qformCode = 0;  // the qform was built from the unknown spacing
    return orientedGeometry(fromS, dim0, xyzUnits, nx, ny, nz, source, file, g.spacing);
  }
  return orientedGeometry(t, dim0, xyzUnits, nx, ny, nz, source, file, g.spacing);
}

Geometry orientedGeometry(Transforms const& t, int dim0, int xyzUnits, Index nx, Index ny, Index nz,
                          std::string& source, fs::path const& file, std::array<double, 3> const& spacing) {
  Geometry g = Geometry::fromSize(nx, ny, nz);
  const double scale = spacingScale(xyzUnits);
  g.spacing = spacing;
  if (t.qformCode == 0 && t.sformCode == 0) {
    source = "none";
    return g;  // origin 0, identity direction
  }
  bool preferS = similarElementwise(t);
  if (!preferS || t.sformCode != 0) {
    if (sformDecomposable(t)) {
      if (t.qformCode == 0 && t.sformCode != 0)
        preferS = true;
      else if (t.sformCode == NIFTI_XFORM_SCANNER_ANAT)
        preferS = true;
      else if (t.qformCode != 0 && t.sformCode != 0)
        preferS = similarGeometrically(t);
    }
  }
  nifti_dmat44 M;
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
  // ITK uses min(dim[0], 3) axes; a 2D file (dim[0] == 2) keeps only the 2x2 block (and, unlike
  // ITK, its z offset). A 2D slice
  // that is oblique out of its plane has no orthonormal 2x2 block: it keeps the whole 3x3
  // matrix and its z position (what the file states, as nibabel reads it).
  int nd = std::max(1, std::min(dim0, 3));
  if (nd == 2 && !orthonormalBlock(M, 2)) nd = 3;
  g.origin = {0.0, 0.0, 0.0};
  g.origin[0] = -M.m[0][3] * scale;
  if (nd > 1) g.origin[1] = -M.m[1][3] * scale;
  // z too for a 2D slice (ITK's 2D image drops it): the slice's position is part of the file.
  if (nd > 1) g.origin[2] = M.m[2][3] * scale;
  double D[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  for (int c = 0; c < nd; ++c) {
    double v[3] = {0, 0, 0};
    double n = 0;
    for (int r = 0; r < nd; ++r) {
      v[r] = M.m[r][c] * (r < 2 ? -1.0 : 1.0);
      n += v[r] * v[r];
    }
    n = std::sqrt(n);
    if (!(n > 0) || !std::isfinite(n))
      readError(file, "the " + source + " maps image axis " + std::to_string(c + 1) +
                          " to no direction (a zero or non-finite column), so the image has no "
                          "orientation");
    for (int r = 0; r < nd; ++r) D[r][c] = v[r] / n + 0.0;  // + 0.0: no negative zeros
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) g.direction[r * 3 + c] = D[r][c];
  return g;
}

// Every transform the header declares (code > 0) must place the image: a non-finite origin or
// direction entry is refused by Geometry's one rule, whichever transform ITK's rule then picks
// (the other is kept in the metadata and would be written back). The raw fields are checked:
// nifti_clib turns a non-finite quatern or qoffset into 0, an image 84 mm off read without a word.
void requireFiniteTransforms(RawHeader const& raw, int xyzUnits, fs::path const& file) {
  if (raw.analyze) return;
  const double scale = spacingScale(xyzUnits);
  auto check = [&](const char* name, int code, nifti_dmat44 const& M) {
    std::array<double, 3> origin{};
    std::array<double, 9> direction{};
    for (int r = 0; r < 3; ++r) origin[r] = (r < 2 ? -1.0 : 1.0) * M.m[r][3] * scale + 0.0;  // RAS -> LPS
    for (int c = 0; c < 3; ++c) {
      const double n = colNorm(M, c);
      for (int r = 0; r < 3; ++r)
        direction[r * 3 + c] = (r < 2 ? -1.0 : 1.0) * M.m[r][c] / (n > 0 && std::isfinite(n) ? n : 1.0) + 0.0;
    }
    try {
      Geometry::requireFinitePlacement(origin, direction);
    } catch (InvalidArgument const& e) {
      readError(file, std::string("invalid image geometry in the ") + name + " (" + name + "_code " +
                          std::to_string(code) + "): " + e.what());
    }
  };
  if (raw.qformCode > 0)  // unit spacings: pixdim has its own rule (itkGeometry)
    check("qform", raw.qformCode,
          nifti_quatern_to_dmat44(raw.quatern[0], raw.quatern[1], raw.quatern[2], raw.qoffset[0],
                                  raw.qoffset[1], raw.qoffset[2], 1.0, 1.0, 1.0, raw.qfac));
  if (raw.sformCode > 0) {
    nifti_dmat44 S{};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) S.m[r][c] = raw.srow[r][c];
    S.m[3][3] = 1.0;
    check("sform", raw.sformCode, S);
  }
}

// --- metadata <-> header fields -----------------------------------------------------------------

std::string matrixString(nifti_dmat44 const& M, bool asFloat32) {
  std::vector<double> v;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) v.push_back(M.m[r][c]);
  return formatFloats(v, asFloat32);
}

std::string trimmed(const char* s, std::size_t n) {
  std::string r(s, strnlen(s, n));
  while (!r.empty() && (r.back() == ' ')) r.pop_back();
  return r;
}

// Header fields that define orientation, as kept in the metadata (for writing back verbatim).
struct OrientationFields {
  int dim0 = 3;
  int qformCode = 0, sformCode = 0;
  double quatern[3] = {0, 0, 0}, qoffset[3] = {0, 0, 0}, qfac = 1;
  double pixdim[3] = {1, 1, 1};
  double srow[3][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  int xyztUnits = NIFTI_UNITS_MM;
};

// Every number a header would be written with is finite (else it is rebuilt from the geometry).
bool finiteFields(OrientationFields const& o) {
  for (int i = 0; i < 3; ++i)
    if (!std::isfinite(o.quatern[i]) || !std::isfinite(o.qoffset[i]) || !std::isfinite(o.pixdim[i])) return false;
  for (auto const& row : o.srow)
    for (double v : row)
      if (!std::isfinite(v)) return false;
  return true;
}

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
  for (int i = 0; i < 3; ++i) o.quatern[i] = v[i];
  if (!get("nifti.qoffset", 3, v)) return false;
  for (int i = 0; i < 3; ++i) o.qoffset[i] = v[i];
  if (!get("nifti.qfac", 1, v)) return false;
  o.qfac = v[0] < 0 ? -1.0 : 1.0;
  if (!get("nifti.pixdim", 3, v)) return false;
  for (int i = 0; i < 3; ++i) o.pixdim[i] = v[i];
  if (!get("nifti.sform", 16, v)) return false;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) o.srow[r][c] = v[r * 4 + c];
  if (!get("nifti.xyzt_units", 1, v)) return false;
  o.xyztUnits = static_cast<int>(v[0]) & 0xff;
  if (o.qformCode < 0 || o.sformCode < 0 || o.qformCode > 32767 || o.sformCode > 32767)
    return false;
  return o.dim0 >= 1 && o.dim0 <= 7;
}

// What a file written with `o` reads back as (NIfTI-1 keeps float32, NIfTI-2 doubles).
Transforms transformsOf(OrientationFields const& o, int version) {
  auto stored = [&](double v) { return version == 1 ? double(float(v)) : v; };
  Transforms t;
  double pd[3];
  for (int i = 0; i < 3; ++i) {
    double v = stored(std::abs(o.pixdim[i]));
    t.badPixdim[i] = !usablePixdim(v);
    if (i < o.dim0 && t.badPixdim[i]) v = 1.0;  // as nifti_clib reads it
    pd[i] = v;
  }
  t.dx = pd[0];
  t.dy = pd[1];
  t.dz = pd[2];
  t.qformCode = o.qformCode;
  t.sformCode = o.sformCode;
  if (o.qformCode > 0) {
    t.qto = nifti_quatern_to_dmat44(stored(o.quatern[0]), stored(o.quatern[1]), stored(o.quatern[2]),
                                    stored(o.qoffset[0]), stored(o.qoffset[1]), stored(o.qoffset[2]),
                                    t.dx, t.dy, t.dz, o.qfac);
  } else {
    t.qto.m[0][0] = t.dx;
    t.qto.m[1][1] = t.dy;
    t.qto.m[2][2] = t.dz;
    t.qto.m[3][3] = 1.0;
  }
  if (o.sformCode > 0) {
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) t.sto.m[r][c] = stored(o.srow[r][c]);
    t.sto.m[3][3] = 1.0;
  }
  return t;
}

// Orientation fields for a geometry, as ITK's writer builds them: both qform and sform from the
// (orthogonalised) direction, LPS -> RAS, millimetres.
OrientationFields orientationFromGeometry(Geometry const& g, int qcode, int scode) {
  OrientationFields o;
  o.dim0 = 3;
  o.qformCode = qcode;
  o.sformCode = scode;
  o.xyztUnits = NIFTI_UNITS_MM;
  // Columns normalised, then the nearest orthogonal matrix (polar decomposition).
  nifti_dmat33 Q;
  for (int c = 0; c < 3; ++c) {
    double n = 0;
    for (int r = 0; r < 3; ++r) n += g.direction[r * 3 + c] * g.direction[r * 3 + c];
    n = std::sqrt(n);
    for (int r = 0; r < 3; ++r) Q.m[r][c] = g.direction[r * 3 + c] / n;
  }
  Q = nifti_dmat33_polar(Q);
  // RAS: negate the first two rows.
  const double offset[3] = {-g.origin[0], -g.origin[1], g.origin[2]};
  nifti_dmat44 R{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) R.m[r][c] = (r < 2 ? -1.0 : 1.0) * Q.m[r][c];
    R.m[r][3] = offset[r];
  }
  R.m[3][3] = 1.0;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) o.srow[r][c] = R.m[r][c] * g.spacing[c];
    o.srow[r][3] = offset[r];
  }
  double dx, dy, dz;  // unit columns: the spacing is set below, as ITK does
  nifti_dmat44_to_quatern(R, &o.quatern[0], &o.quatern[1], &o.quatern[2], &o.qoffset[0],
                          &o.qoffset[1], &o.qoffset[2], &dx, &dy, &dz, &o.qfac);
  for (int i = 0; i < 3; ++i) o.pixdim[i] = g.spacing[i];
  return o;
}

// --- voxels -------------------------------------------------------------------------------------

// Stored values -> float, scaled when `scale`. Returns the index of the first value that is finite
// but beyond float32's range (it would become +-inf), or count when there is none.
template <class T>
std::size_t convertChunk(unsigned char const* src, std::size_t count, bool swap, float* dst,
                         bool scale, double slope, double inter) {
  std::size_t beyond = count;
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    if (swap) v = swapBytes(v);
    const double x = scale ? static_cast<double>(v) * slope + inter : static_cast<double>(v);
    dst[i] = static_cast<float>(x);
    if (beyond == count && std::isfinite(x) && std::isinf(dst[i])) beyond = i;
  }
  return beyond;
}

// Where the voxels are, checked before anything is allocated: the data file exists and can hold
// the declared bytes (a gzip stream cannot expand more than kMaxDeflateRatio times).
struct DataSource {
  fs::path data;
  bool pair = false, gz = false;
  std::uint64_t offset = 0, nbytes = 0;
  std::string where;  // " in its data file 'x.img'" for a pair
};

// deflate's largest expansion is 1032:1 (RFC 1951: a 258-byte match costs at least 2 bits);
// gzip adds a header and trailer.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

DataSource locateData(nifti_image const& nim, RawHeader const& raw, fs::path const& file,
                      std::uint64_t count, int esize) {
  DataSource s;
  s.data = fs::path(nim.iname);
  s.pair = fs::path(nim.fname) != s.data;
  s.where = s.pair ? " in its data file '" + s.data.filename().string() + "'" : "";
  std::error_code ec;
  if (s.pair && !fs::exists(s.data, ec))
    readError(file, "the data file '" + s.data.filename().string() +
                        "' of this header/data pair is missing");
  s.gz = isGzip(s.data);
  // A pair's voxels start at its vox_offset (usually 0); nifti_clib 3.0.1 reports 544 for a
  // NIfTI-2 pair, taking it for a single file. A single file's offset is its vox_offset, checked
  // to lie past the header (checkHeader).
  s.offset = static_cast<std::uint64_t>(
      raw.single ? raw.voxOffset
                 : (s.pair ? raw.voxOffset
                           : static_cast<double>(std::max<std::int64_t>(nim.iname_offset, 0))));
  s.nbytes = count * static_cast<std::uint64_t>(esize);  // count <= 3 * 2^48, esize <= 8
  const std::uintmax_t size = fileSize(s.data);
  if (!s.gz && size < s.offset + s.nbytes)
    readError(file, "truncated: the header promises " + std::to_string(s.nbytes) +
                        " bytes of voxel data from byte " + std::to_string(s.offset) + s.where +
                        " but the file has " + std::to_string(size) + " bytes");
  if (s.gz && (s.offset + s.nbytes) / kMaxDeflateRatio > size + 64)
    readError(file, "truncated: the header promises " + std::to_string(s.nbytes) +
                        " bytes of voxel data from byte " + std::to_string(s.offset) + s.where +
                        " but the compressed file has " + std::to_string(size) +
                        " bytes, which cannot expand to that many");
  return s;
}

// Reads `count` stored values from the data file (the header file itself for a single file)
// into out[0..count) as float, scl_slope/scl_inter applied (slope 0 or non-finite: none), then
// (gzip) reads to the end so that the CRC is checked. Messages name `file`, the user's path.
void readValues(nifti_image const& nim, DataSource const& src, fs::path const& file,
                std::uint64_t count, int esize, float* out) {
  const fs::path& data = src.data;
  const bool gz = src.gz;
  const std::uint64_t offset = src.offset, nbytes = src.nbytes;
  const std::string& where = src.where;
  GzFile in;
  in.f = gzopen(data.c_str(), "rb");
  if (!in.f) readError(file, "cannot open '" + data.string() + "' (" + std::strerror(errno) + ")");
  gzbuffer(in.f, 1u << 18);
  std::vector<unsigned char> buf(std::size_t(1) << 22);
  for (std::uint64_t skip = offset; skip > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip, buf.size()));
    if (gzReadUpTo(in.f, buf.data(), n) != n) {
      const std::string z = gzMessage(in.f);
      readError(file, z.empty() ? "truncated: the file ends before vox_offset (" +
                                      std::to_string(offset) + ")" + where
                                : gzProblem(z));
    }
    skip -= n;
  }
  const double slope = nim.scl_slope, inter = nim.scl_inter;
  const bool scale = std::isfinite(slope) && slope != 0.0 && std::isfinite(inter) &&
                     !(slope == 1.0 && inter == 0.0);
  const bool sw = nim.byteorder != nifti_short_order();
  const std::size_t perChunk = buf.size() / static_cast<std::size_t>(esize);
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(perChunk, count - done));
    if (gzReadUpTo(in.f, buf.data(), n * esize) != n * esize) {
      const std::string z = gzMessage(in.f);
      readError(file, z.empty() ? "truncated: the voxel data ends after " +
                                      std::to_string(done * esize) + " of " +
                                      std::to_string(nbytes) + " bytes" + where
                                : gzProblem(z));
    }
    float* dst = out + done;
    std::size_t beyond = n;
    switch (nim.datatype) {
      case NIFTI_TYPE_UINT8: beyond = convertChunk<std::uint8_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_INT8: beyond = convertChunk<std::int8_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_INT16: beyond = convertChunk<std::int16_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_UINT16: beyond = convertChunk<std::uint16_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_INT32: beyond = convertChunk<std::int32_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_UINT32: beyond = convertChunk<std::uint32_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_INT64: beyond = convertChunk<std::int64_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_UINT64: beyond = convertChunk<std::uint64_t>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_FLOAT32: beyond = convertChunk<float>(buf.data(), n, sw, dst, scale, slope, inter); break;
      case NIFTI_TYPE_FLOAT64: beyond = convertChunk<double>(buf.data(), n, sw, dst, scale, slope, inter); break;
      default: break;
    }
    if (beyond < n) beyondFloat32(file, done + beyond, scale);
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

// --- writing ------------------------------------------------------------------------------------

// The files a target name stands for: one (.nii, .nii.gz) or a pair (header, data).
struct OutputNames {
  bool pair = false;
  std::string header, data;  // equal for a single file
};

OutputNames outputNames(fs::path const& target) {
  const std::string name = target.filename().string();
  const std::string ext = extensionOf(target);
  OutputNames n;
  if (ext == ".nii" || ext == ".nii.gz") {
    n.header = n.data = name;
    return n;
  }
  n.pair = true;
  const std::string stem = name.substr(0, name.size() - ext.size());
  const std::string gz = ext.size() > 4 ? name.substr(name.size() - 3) : "";  // ".gz" as typed
  const bool headerNamed = ext.rfind(".hdr", 0) == 0;
  const std::string typed = name.substr(stem.size(), 4);  // ".hdr" / ".img" in the user's case
  const bool upper = typed != ext.substr(0, 4);
  n.header = headerNamed ? name : stem + (upper ? ".HDR" : ".hdr") + gz;
  n.data = headerNamed ? stem + (upper ? ".IMG" : ".img") + gz : name;
  return n;
}

// Writes the buffers one after the other to `file` (gzip when its name ends in .gz), checking
// every write and the close; IoError naming `target` on failure. The caller's AtomicOutput
// removes the temporary directory on failure, so the target is never touched.
void writeBuffers(fs::path const& file,
                  std::vector<std::pair<unsigned char const*, std::size_t>> const& parts,
                  fs::path const& target) {
  const std::string ext = extensionOf(file);
  const bool gz = ext.size() > 3 && ext.compare(ext.size() - 3, 3, ".gz") == 0;
  if (gz) {
    GzFile outf;
    // Level 1 with run-length matching (zlib's Z_RLE, mode "R"): float volumes hold few repeated
    // strings, so level 6's search costs time for ~2 % of size (docs/io.md: an atlas's outputs
    // written 3.9x faster, 2 % larger); any gzip reader decompresses it.
    outf.f = gzopen(file.c_str(), "wb1R");
    if (!outf.f)
      writeError(target, "cannot create the file (" + std::string(std::strerror(errno)) + ")");
    gzbuffer(outf.f, 1u << 18);
    for (auto const& [p0, n0] : parts) {
      const unsigned char* p = p0;
      std::size_t n = n0;
      while (n > 0) {
        const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 26));
        if (gzwrite(outf.f, p, chunk) != static_cast<int>(chunk))
          writeError(target, "write failed (" + gzMessage(outf.f) + ")");
        p += chunk;
        n -= chunk;
      }
    }
    const int rc = gzclose(outf.f);
    outf.f = nullptr;
    if (rc != Z_OK) writeError(target, "write failed while finishing the gzip stream");
  } else {
    std::FILE* f = std::fopen(file.c_str(), "wb");
    if (!f)
      writeError(target, "cannot create the file (" + std::string(std::strerror(errno)) + ")");
    bool ok = true;
    int err = 0;
    for (auto const& [p, n] : parts)
      if (ok && std::fwrite(p, 1, n, f) != n) {
        ok = false;
        err = errno;
      }
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed)
      writeError(target, "write failed (" + std::string(std::strerror(ok ? errno : err)) + ")");
  }
}

void setText(char* dst, std::size_t size, std::string const& s) {
  std::memset(dst, 0, size);
  std::memcpy(dst, s.data(), std::min(s.size(), size - 1));
}

// Everything a Kortex NIfTI file says besides its voxels (float32 always).
struct HeaderSpec {
  int version = 1;
  std::int64_t dim[8] = {3, 1, 1, 1, 1, 1, 1, 1};
  double pixdimRest = 1.0;  // pixdim[4..7]
  OrientationFields o;
  int intentCode = 0;
  std::string descrip, auxFile, intentName;
  int datatype = NIFTI_TYPE_FLOAT32;  // or an integer type (labels: every value integral and in range)
};

// The integer type a label image is written in (metadata "kortex.label_datatype", e.g. "int16"),
// when every voxel is an integer its range holds; else float32. Only the integer types below.
int labelDatatype(HostImage const& image) {
  auto it = image.metadata.find("kortex.label_datatype");
  if (it == image.metadata.end()) return NIFTI_TYPE_FLOAT32;
  static const std::pair<const char*, int> types[] = {{"uint8", NIFTI_TYPE_UINT8},   {"int8", NIFTI_TYPE_INT8},
                                                      {"int16", NIFTI_TYPE_INT16},   {"uint16", NIFTI_TYPE_UINT16},
                                                      {"int32", NIFTI_TYPE_INT32},   {"uint32", NIFTI_TYPE_UINT32}};
  int dt = NIFTI_TYPE_FLOAT32;
  for (auto const& [name, code] : types)
    if (it->second == name) dt = code;
  if (dt == NIFTI_TYPE_FLOAT32) return dt;
  double lo = 0, hi = 0;
  switch (dt) {
    case NIFTI_TYPE_UINT8: lo = 0, hi = 255; break;
    case NIFTI_TYPE_INT8: lo = -128, hi = 127; break;
    case NIFTI_TYPE_INT16: lo = -32768, hi = 32767; break;
    case NIFTI_TYPE_UINT16: lo = 0, hi = 65535; break;
    case NIFTI_TYPE_INT32: lo = -2147483648.0, hi = 2147483647.0; break;
    default: lo = 0, hi = 4294967295.0; break;
  }
  const float* v = image.data.data();
  for (std::size_t k = 0; k < image.data.size(); ++k)
    if (!(v[k] >= lo && v[k] <= hi && double(v[k]) == std::floor(double(v[k])))) return NIFTI_TYPE_FLOAT32;
  return dt;
}

// The voxels in `datatype` (float32 as they are; an integer type converted, values checked by
// labelDatatype), native byte order.
std::vector<unsigned char> voxelBytes(float const* data, std::size_t count, int datatype) {
  std::vector<unsigned char> out;
  auto put = [&](auto tag) {
    using T = decltype(tag);
    out.resize(count * sizeof(T));
    T* o = reinterpret_cast<T*>(out.data());
    for (std::size_t k = 0; k < count; ++k) o[k] = static_cast<T>(data[k]);
  };
  switch (datatype) {
    case NIFTI_TYPE_UINT8: put(std::uint8_t{}); break;
    case NIFTI_TYPE_INT8: put(std::int8_t{}); break;
    case NIFTI_TYPE_INT16: put(std::int16_t{}); break;
    case NIFTI_TYPE_UINT16: put(std::uint16_t{}); break;
    case NIFTI_TYPE_INT32: put(std::int32_t{}); break;
    case NIFTI_TYPE_UINT32: put(std::uint32_t{}); break;
    default: out.assign(reinterpret_cast<unsigned char const*>(data), reinterpret_cast<unsigned char const*>(data) + count * sizeof(float));
  }
  return out;
}

// Writes header and data into out's temporary directory; returns the names to commit, the data
// file of a pair first (so that a header never names a data file that is not there yet).
std::vector<std::string> writeVoxelsNifti(HeaderSpec const& spec, float const* data,
                                         std::size_t count, AtomicOutput const& out) {
  const fs::path& target = out.target();
  const OutputNames names = outputNames(target);
  std::int64_t dims[8];
  for (int i = 0; i < 8; ++i) dims[i] = spec.dim[i];
  Nim nim;
  {
    LibraryCall call;
    nim.reset(nifti_make_new_nim(dims, spec.datatype, 0));
    if (!nim) writeError(target, "cannot build the NIfTI header" + call.quoted());
  }
  nifti_image& n = *nim;
  // Unused axes have size 1 (nifti_make_new_nim leaves those past dim[0] at 0; ITK writes 1).
  std::int64_t* sizes[8] = {nullptr, &n.nx, &n.ny, &n.nz, &n.nt, &n.nu, &n.nv, &n.nw};
  for (int i = 1; i < 8; ++i) *sizes[i] = n.dim[i] = std::max<std::int64_t>(spec.dim[i], 1);
  n.nifti_type = spec.version == 2 ? (names.pair ? NIFTI_FTYPE_NIFTI2_2 : NIFTI_FTYPE_NIFTI2_1)
                                   : (names.pair ? NIFTI_FTYPE_NIFTI1_2 : NIFTI_FTYPE_NIFTI1_1);
  n.byteorder = nifti_short_order();
  const OrientationFields& o = spec.o;
  n.dx = n.pixdim[1] = o.pixdim[0];
  n.dy = n.pixdim[2] = o.pixdim[1];
  n.dz = n.pixdim[3] = o.pixdim[2];
  n.dt = n.du = n.dv = n.dw = spec.pixdimRest;
  for (int i = 4; i < 8; ++i) n.pixdim[i] = spec.pixdimRest;
  n.scl_slope = 1.0;
  n.scl_inter = 0.0;
  n.cal_min = n.cal_max = 0.0;
  n.xyz_units = XYZT_TO_SPACE(o.xyztUnits);
  n.time_units = XYZT_TO_TIME(o.xyztUnits);
  n.qform_code = o.qformCode;
  n.quatern_b = o.quatern[0];
  n.quatern_c = o.quatern[1];
  n.quatern_d = o.quatern[2];
  n.qoffset_x = o.qoffset[0];
  n.qoffset_y = o.qoffset[1];
  n.qoffset_z = o.qoffset[2];
  n.qfac = o.qfac < 0 ? -1.0 : 1.0;
  n.sform_code = o.sformCode;
  n.sto_xyz = nifti_dmat44{};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) n.sto_xyz.m[r][c] = o.srow[r][c];
  n.sto_xyz.m[3][3] = 1.0;
  n.intent_code = spec.intentCode;
  n.intent_p1 = n.intent_p2 = n.intent_p3 = 0.0;
  setText(n.descrip, sizeof n.descrip, spec.descrip);
  setText(n.aux_file, sizeof n.aux_file, spec.auxFile);
  setText(n.intent_name, sizeof n.intent_name, spec.intentName);

  // The library builds the header; the files are written here so that every failure is seen
  // (nifti_image_write reports none, and nifti_clib 3.0.1 misplaces a NIfTI-2 file's voxels).
  // Voxels of a single file start after the header and the 4-byte extension flag, at a multiple
  // of 16 (352 or 544); a pair's data file holds voxels only. (Set here: nifti_clib 3.0.1's
  // nifti_set_iname_offset knows no single-file NIfTI-2.)
  n.iname_offset = names.pair ? 0 : (spec.version == 2 ? 544 : 352);
  std::vector<unsigned char> header;
  {
    LibraryCall call;
    int bad = 0;
    if (spec.version == 2) {
      nifti_2_header h2;
      bad = nifti_convert_nim2n2hdr(nim.get(), &h2);
      // The standard's magic is "n+2\0" / "ni2\0" followed by "\r\n\032\n" (a transfer check,
      // as in PNG); nifti_clib leaves those four bytes zero.
      const char eol[4] = {'\r', '\n', '\032', '\n'};
      std::memcpy(h2.magic + 4, eol, 4);
      header.assign(reinterpret_cast<unsigned char*>(&h2), reinterpret_cast<unsigned char*>(&h2) + sizeof h2);
    } else {
      nifti_1_header h1;
      bad = nifti_convert_nim2n1hdr(nim.get(), &h1);
      header.assign(reinterpret_cast<unsigned char*>(&h1), reinterpret_cast<unsigned char*>(&h1) + sizeof h1);
    }
    if (bad) writeError(target, "cannot build the NIfTI header" + call.quoted());
  }
  header.resize(header.size() + 4, 0);  // extension flag: no extensions
  const std::vector<unsigned char> voxels = voxelBytes(data, count, spec.datatype);
  const std::size_t nbytes = voxels.size();
  const auto* bytes = voxels.data();
  if (names.pair) {
    writeBuffers(out.temporary(names.data), {{bytes, nbytes}}, target);
    writeBuffers(out.temporary(names.header), {{header.data(), header.size()}}, target);
  } else {
    const std::size_t offset = static_cast<std::size_t>(n.iname_offset);
    if (offset < header.size()) writeError(target, "internal error: voxel offset inside the header");
    header.resize(offset, 0);
    writeBuffers(out.temporary(names.header), {{header.data(), header.size()}, {bytes, nbytes}}, target);
  }
  if (names.pair) return {names.data, names.header};
  return {names.header};
}

// NIfTI-1 holds at most 32767 voxels per axis; larger images are written as NIfTI-2.
int versionFor(Geometry const& g, std::map<std::string, std::string> const& md) {
  for (Index n : g.size)
    if (n > 32767) return 2;
  auto it = md.find("nifti.version");
  return (it != md.end() && it->second == "2") ? 2 : 1;
}

// NIfTI intent codes of vector images (nifti1.h).
constexpr int kIntentDispVect = NIFTI_INTENT_DISPVECT;  // 1006: displacement vectors (RAS)
constexpr int kIntentVector = NIFTI_INTENT_VECTOR;      // 1007: generic vectors (ITK writes these)

// The raw header with the checks common to images and fields.
RawHeader openNifti(fs::path const& file) {
  RawHeader raw = readRawHeader(file);
  checkHeader(raw, file);
  return raw;
}

}  // namespace

HostImage readNifti(fs::path const& file) {
  const RawHeader hd = openNifti(file);

  // --- dimensions ---
  const int ndim = static_cast<int>(hd.dim[0]);
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
  const int esize = elementSize(hd.datatype, file);

  const Nim header = readHeader(file);
  const nifti_image& nim = *header;

  // --- geometry (ITK's rule) ---
  requireFiniteTransforms(hd, nim.xyz_units, file);
  std::string source;
  const Transforms t = transformsOf(nim, hd);
  const int xyzt = nim.xyz_units | nim.time_units;
  const Geometry g = itkGeometry(t, ndim, nim.xyz_units, nx, ny, nz, source, file);
  const DataSource src = locateData(nim, hd, file, hd.voxels, esize);
  HostImage img;
  try {
    img = allocateImage(g, file, "kortex::io::nifti");
  } catch (IoError const&) {
    throw;
  } catch (std::exception const& e) {
    readError(file, "cannot allocate " + describe(g) + " (" + e.what() + ")");
  }

  // --- voxels ---
  readValues(nim, src, file, hd.voxels, esize, img.data.data());

  // --- metadata (enough to write the same header back) ---
  const bool f32 = hd.version == 1;  // NIfTI-1 stores float32 fields, NIfTI-2 doubles
  auto& md = img.metadata;
  md["nifti.version"] = hd.analyze ? "analyze" : std::to_string(hd.version);
  md["nifti.dim0"] = std::to_string(ndim);
  md["nifti.qform_code"] = std::to_string(t.qformCode);
  md["nifti.sform_code"] = std::to_string(t.sformCode);
  md["nifti.qform"] = matrixString(t.qto, f32);
  nifti_dmat44 srow = t.sto;
  srow.m[3][3] = 1.0;
  md["nifti.sform"] = matrixString(srow, f32);
  md["nifti.quatern"] = formatFloats({nim.quatern_b, nim.quatern_c, nim.quatern_d}, f32);
  md["nifti.qoffset"] = formatFloats({nim.qoffset_x, nim.qoffset_y, nim.qoffset_z}, f32);
  md["nifti.qfac"] = nim.qfac < 0 ? "-1" : "1";
  md["nifti.pixdim"] = formatFloats({nim.dx, nim.dy, nim.dz}, f32);
  md["nifti.xyzt_units"] = std::to_string(xyzt);
  md["nifti.descrip"] = trimmed(nim.descrip, sizeof nim.descrip);
  md["nifti.aux_file"] = trimmed(nim.aux_file, sizeof nim.aux_file);
  md["nifti.intent_code"] = std::to_string(nim.intent_code);
  md["nifti.intent_name"] = trimmed(nim.intent_name, sizeof nim.intent_name);
  md["nifti.datatype"] = typeName(nim.datatype);
  md["nifti.scl_slope"] = formatFloats({nim.scl_slope}, f32);
  md["nifti.scl_inter"] = formatFloats({nim.scl_inter}, f32);
  md["nifti.orientation_source"] = source;
  return img;
}

std::vector<std::string> writeNifti(HostImage const& image, AtomicOutput const& out) {
  const fs::path& target = out.target();
  const Geometry& g = image.geometry;
  const auto& md = image.metadata;
  HeaderSpec spec;
  spec.version = versionFor(g, md);

  // Verbatim header fields if they still describe this geometry, else ITK's construction.
  OrientationFields o;
  bool verbatim = false;
  const bool haveFields = orientationFromMetadata(md, o);
  // dim[0] > 3 can only have had singleton trailing dims (else it was rejected): write 3.
  if (haveFields) o.dim0 = std::min(o.dim0, 3);
  // (A header whose pixdim was not a spacing, or with a non-finite field, is rebuilt, never
  // written back.)
  bool spacings = haveFields && finiteFields(o);
  for (int i = 0; haveFields && i < std::min(o.dim0, 3); ++i) spacings = spacings && usablePixdim(o.pixdim[i]);
  if (haveFields && spacings && (o.dim0 >= 3 || g.nz() == 1) && (o.dim0 >= 2 || g.ny() == 1)) {
    try {
      std::string src;
      const Geometry back = itkGeometry(transformsOf(o, spec.version), o.dim0,
                                        XYZT_TO_SPACE(o.xyztUnits), g.nx(), g.ny(), g.nz(), src,
                                        target);
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
  spec.o = o;
  const std::int64_t dim[8] = {o.dim0, g.nx(), g.ny(), g.nz(), 1, 1, 1, 1};
  std::copy(std::begin(dim), std::end(dim), spec.dim);
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
  spec.intentCode = intIn("nifti.intent_code", 0);
  spec.descrip = textIn("nifti.descrip", "Kortex");
  spec.auxFile = textIn("nifti.aux_file", "");
  spec.intentName = textIn("nifti.intent_name", "");
  spec.datatype = labelDatatype(image);
  return writeVoxelsNifti(spec, image.data.data(), static_cast<std::size_t>(g.numVoxels()), out);
}

// ---- displacement fields (see io/ImageIO.hpp for the convention and its ITK sources) ----

VectorField<Kokkos::HostSpace> readNiftiField(fs::path const& file) {
  const RawHeader hd = openNifti(file);
  const int ndim = static_cast<int>(hd.dim[0]);
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
  const int esize = elementSize(hd.datatype, file);

  const Nim header = readHeader(file);
  const nifti_image& nim = *header;
  // Geometry: ITK's rule, on the 3 spatial axes (ITK takes the image dimension from dim[1..3]
  // for vector intents; dim[0] = 5 here would not change min(dim[0], 3) = 3 anyway).
  requireFiniteTransforms(hd, nim.xyz_units, file);
  std::string source;
  const Geometry g = itkGeometry(transformsOf(nim, hd), 3, nim.xyz_units, nx, ny, nz, source, file);
  const DataSource src = locateData(nim, hd, file, hd.voxels, esize);
  VectorField<Kokkos::HostSpace> f;
  try {
    g.validate();
    f = VectorField<Kokkos::HostSpace>("kortex::io::displacementField", g, 3);
  } catch (std::exception const& e) {
    readError(file, "cannot hold the field on " + describe(g) + " (" + e.what() + ")");
  }
  // NIfTI stores dim[5] slowest: the three components one after the other, each (nz, ny, nx)
  // with x fastest: exactly VectorField's layout (3, nz, ny, nx), LayoutRight.
  const std::uint64_t nvox = static_cast<std::uint64_t>(nx) * ny * nz;
  readValues(nim, src, file, hd.voxels, esize, f.data.data());
  if (hd.intentCode == kIntentDispVect) {
    // NIFTI_INTENT_DISPVECT holds RAS vectors: negate x and y (RAS -> LPS), as ITK >= 5.4's
    // ConvertRASDisplacementVectors (on by default) does.
    float* p = f.data.data();
    for (std::uint64_t i = 0; i < 2 * nvox; ++i) p[i] = -p[i];
  }
  return f;
}

std::vector<std::string> writeNiftiField(VectorField<Kokkos::HostSpace> const& field,
                                         AtomicOutput const& out) {
  const Geometry& g = field.geometry;
  HeaderSpec spec;
  spec.version = versionFor(g, {});
  // ITK's writer: qform = sform from the geometry, codes NIFTI_XFORM_SCANNER_ANAT (1) when the
  // image has no "qform_code"/"sform_code" metadata (ANTs sets none); mm and s.
  spec.o = orientationFromGeometry(g, 1, 1);
  spec.o.xyztUnits = NIFTI_UNITS_MM | NIFTI_UNITS_SEC;
  const std::int64_t dim[8] = {5, g.nx(), g.ny(), g.nz(), 1, 3, 1, 1};
  std::copy(std::begin(dim), std::end(dim), spec.dim);
  // pixdim[4..7] stay 0: ITK sets pixdim only for the image's own axes, on a header that
  // nifti_simple_init_nim zeroed.
  spec.pixdimRest = 0.0;
  spec.intentCode = kIntentVector;
  spec.descrip = "Kortex displacement field";
  return writeVoxelsNifti(spec, field.data.data(), static_cast<std::size_t>(3 * g.numVoxels()), out);
}

}  // namespace kortex::io::detail
