// Single-slice DICOM reader (uncompressed, little endian), Part 10 files only.
//
// Why not vtkDICOMImageReader: it gives no access to the transfer syntax, NumberOfFrames,
// SamplesPerPixel or the pixel padding value, returns garbage instead of an error for compressed
// or truncated files, and flips the rows (VTK's lower-left origin). The subset of DICOM needed for
// one grey slice is small: the meta group (explicit VR little endian), then a flat scan of the
// top-level data set in the declared encoding, skipping sequences, up to (7FE0,0010).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/IoDetail.hpp"

namespace kortex::io::detail {

namespace {

constexpr std::uint32_t kUndefined = 0xFFFFFFFFu;

inline std::uint32_t tagOf(std::uint16_t g, std::uint16_t e) {
  return (std::uint32_t(g) << 16) | e;
}

class Parser {
 public:
  Parser(std::vector<unsigned char> const& b, fs::path const& file) : b_(b), file_(file) {}

  std::uint16_t u16(std::size_t pos) const {
    need(pos, 2);
    return static_cast<std::uint16_t>(b_[pos] | (b_[pos + 1] << 8));
  }
  std::uint32_t u32(std::size_t pos) const {
    need(pos, 4);
    return std::uint32_t(b_[pos]) | (std::uint32_t(b_[pos + 1]) << 8) |
           (std::uint32_t(b_[pos + 2]) << 16) | (std::uint32_t(b_[pos + 3]) << 24);
  }
  void need(std::size_t pos, std::size_t n) const {
    if (pos > b_.size() || n > b_.size() - pos)
      readError(file_,
                "truncated or corrupt DICOM file (a data element runs past the end of "
                "the file at byte " +
                    std::to_string(b_.size()) + ")");
  }

  struct Element {
    std::uint32_t tag = 0;
    char vr[3] = {0, 0, 0};
    std::uint32_t length = 0;
    std::size_t value = 0;  // position of the value
  };

  // Reads the element header at pos (explicit or implicit VR little endian).
  Element element(std::size_t pos, bool explicitVR) const {
    Element el;
    el.tag = tagOf(u16(pos), u16(pos + 2));
    const bool delimiter = (el.tag >> 16) == 0xFFFE;
    if (explicitVR && !delimiter) {
      need(pos + 4, 2);
      el.vr[0] = static_cast<char>(b_[pos + 4]);
      el.vr[1] = static_cast<char>(b_[pos + 5]);
      const std::string vr(el.vr, 2);
      static const char* longVRs[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ",
                                      "SV", "UC", "UN", "UR", "UT", "UV"};
      bool isLong = false;
      for (auto* l : longVRs) isLong = isLong || vr == l;
      if (isLong) {
        el.length = u32(pos + 8);
        el.value = pos + 12;
      } else {
        if (!std::isupper(static_cast<unsigned char>(el.vr[0])) ||
            !std::isupper(static_cast<unsigned char>(el.vr[1])))
          readError(file_, "corrupt DICOM data set (invalid value representation at byte " +
                               std::to_string(pos + 4) + ")");
        el.length = u16(pos + 6);
        el.value = pos + 8;
      }
    } else {
      el.length = u32(pos + 4);
      el.value = pos + 8;
    }
    return el;
  }

  // Skips an undefined-length sequence (or encapsulated pixel data) starting at pos; returns the
  // position after its delimiter.
  std::size_t skipSequence(std::size_t pos, bool explicitVR, int depth) const {
    if (depth > 64) readError(file_, "corrupt DICOM data set (sequences nested too deeply)");
    while (true) {
      const std::uint32_t tag = tagOf(u16(pos), u16(pos + 2));
      const std::uint32_t len = u32(pos + 4);
      pos += 8;
      if (tag == tagOf(0xFFFE, 0xE0DD)) return pos;
      if (tag != tagOf(0xFFFE, 0xE000))
        readError(file_, "corrupt DICOM sequence (expected an item at byte " +
                             std::to_string(pos - 8) + ")");
      if (len != kUndefined) {
        need(pos, len);
        pos += len;
      } else {
        pos = skipItem(pos, explicitVR, depth + 1);
      }
    }
  }

  // Skips the elements of an undefined-length item up to its delimiter.
  std::size_t skipItem(std::size_t pos, bool explicitVR, int depth) const {
    while (true) {
      const Element el = element(pos, explicitVR);
      if (el.tag == tagOf(0xFFFE, 0xE00D)) return el.value;
      pos = skipValue(el, explicitVR, depth);
    }
  }

  std::size_t skipValue(Element const& el, bool explicitVR, int depth) const {
    if (el.length == kUndefined) {
      // An undefined-length UN holds an implicit VR sequence (PS3.5 6.2.2).
      const bool inner = explicitVR && !(el.vr[0] == 'U' && el.vr[1] == 'N');
      return skipSequence(el.value, inner, depth + 1);
    }
    need(el.value, el.length);
    return el.value + el.length;
  }

 private:
  std::vector<unsigned char> const& b_;
  fs::path const& file_;
};

std::string trimValue(std::vector<unsigned char> const& b, std::size_t pos, std::size_t len) {
  std::string s(reinterpret_cast<const char*>(b.data()) + pos, len);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// The file meta information (group 0002, explicit VR little endian) of a Part 10 file whose DICM
// marker was checked: returns the transfer syntax UID; `pos` receives where the data set starts.
std::string readMetaHeader(Parser const& p, std::vector<unsigned char> const& b, fs::path const& file, std::size_t& pos) {
  pos = 132;
  std::string syntax;
  if (pos + 4 > b.size() || p.u16(pos) != 0x0002)
    readError(file, "corrupt DICOM meta header (it does not start with group 0002)");
  while (pos + 4 <= b.size() && p.u16(pos) == 0x0002) {
    const auto el = p.element(pos, true);
    if (el.length == kUndefined) readError(file, "corrupt DICOM meta header (an element of undefined length)");
    p.need(el.value, el.length);
    if (el.tag == tagOf(0x0002, 0x0010)) syntax = trimValue(b, el.value, el.length);
    pos = el.value + el.length;
  }
  if (syntax.empty()) readError(file, "corrupt DICOM meta header (no transfer syntax)");
  return syntax;
}

// Backslash-separated decimal strings.
std::vector<double> numbersOf(std::string const& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '\\')) {
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    if (end == part.c_str()) return {};
    v.push_back(x);
  }
  return v;
}

}  // namespace

namespace {

// A Part 10 file's bytes, its 'DICM' marker checked.
std::vector<unsigned char> partTenBytes(fs::path const& file) {
  std::vector<unsigned char> b;
  {
    std::ifstream in(file, std::ios::binary);
    if (!in) readError(file, "cannot open it");
    b.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) readError(file, "read error");
  }
  if (b.size() < 132 || std::memcmp(b.data() + 128, "DICM", 4) != 0)
    readError(file, "not a DICOM Part 10 file (no 'DICM' marker at byte 128)");
  return b;
}

HostImage readDicomKortexBytes(std::vector<unsigned char> const& b, fs::path const& file);

}  // namespace

std::string checkDicomStructure(fs::path const& file) {
  const std::vector<unsigned char> b = partTenBytes(file);
  Parser p(b, file);
  std::size_t pos = 0;
  const std::string syntax = readMetaHeader(p, b, file, pos);
  // Big endian and deflated data sets are left to the decoder; every other syntax is little
  // endian, implicit VR for 1.2.840.10008.1.2 only.
  if (syntax == "1.2.840.10008.1.2.2" || syntax == "1.2.840.10008.1.2.1.99") return syntax;
  const bool explicitVR = syntax != "1.2.840.10008.1.2";
  bool pixels = false;
  while (pos < b.size()) {
    if (b.size() - pos < 8) break;  // trailing padding
    const auto el = p.element(pos, explicitVR);
    if ((el.tag >> 16) == 0x0002)
      readError(file, "corrupt DICOM data set (a meta header element at byte " + std::to_string(pos) + ")");
    if (el.tag == tagOf(0x7FE0, 0x0010)) {
      if (el.length == kUndefined)
        p.skipSequence(el.value, explicitVR, 1);  // encapsulated fragments
      else
        p.need(el.value, el.length);
      pixels = true;
      break;
    }
    if (el.tag == tagOf(0x0028, 0x0002) && el.length >= 2 && p.u16(el.value) != 1)
      readError(file, "colour DICOM (SamplesPerPixel = " + std::to_string(p.u16(el.value)) +
                          "); Kortex filters take grey-level images");
    pos = p.skipValue(el, explicitVR, 0);
  }
  if (!pixels) readError(file, "no pixel data (7FE0,0010) in this DICOM file");
  return syntax;
}

}  // namespace kortex::io::detail

namespace kortex::io {
const char* dicomDecoder() {
#if KORTEX_HAVE_GDCM
  return "gdcm";
#else
  return "kortex";
#endif
}
}  // namespace kortex::io

namespace kortex::io::detail {

void requireDecoded(fs::path const& file, DicomPixelFormat const& f, std::size_t beyond, std::size_t count) {
  if (beyond >= count) return;
  if (!std::isfinite(f.slope) || !std::isfinite(f.intercept))
    readError(file, "RescaleSlope / RescaleIntercept is not a finite number");
  beyondFloat32(file, beyond, true);
}

std::size_t decodeDicomPixels(unsigned char const* src, std::size_t count, DicomPixelFormat const& f, float* out) {
  std::size_t beyond = count;
  const int shift = f.highBit + 1 - f.bitsStored;
  const std::uint64_t mask = f.bitsStored >= 32 ? 0xFFFFFFFFull : ((1ull << f.bitsStored) - 1);
  const std::size_t bytesPer = std::size_t(f.bitsAllocated / 8);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t raw = 0;
    for (std::size_t k = 0; k < bytesPer; ++k) raw |= std::uint64_t(src[i * bytesPer + k]) << (8 * k);
    const std::uint64_t v = (raw >> shift) & mask;
    double value = static_cast<double>(v);
    if (f.isSigned && ((v >> (f.bitsStored - 1)) & 1u))
      value = static_cast<double>(static_cast<std::int64_t>(v) - (std::int64_t(1) << f.bitsStored));
    const double x = value * f.slope + f.intercept;
    out[i] = static_cast<float>(x);
    if (beyond == count && !std::isfinite(out[i])) beyond = i;
  }
  return beyond;
}

void setDicomMetadata(std::map<std::string, std::string>& md, std::string const& transferSyntax,
                      std::function<std::string(std::uint16_t, std::uint16_t)> const& str, DicomPixelFormat const& f,
                      std::optional<std::uint16_t> padding) {
  md["dicom.transfer_syntax"] = transferSyntax;
  md["dicom.modality"] = str(0x0008, 0x0060);
  md["dicom.photometric_interpretation"] = str(0x0028, 0x0004);
  md["dicom.rescale_slope"] = formatFloats({f.slope}, false);
  md["dicom.rescale_intercept"] = formatFloats({f.intercept}, false);
  md["dicom.bits_stored"] = std::to_string(f.bitsStored);
  const std::pair<const char*, std::array<std::uint16_t, 2>> optional[] = {
      {"dicom.slice_thickness", {0x0018, 0x0050}},          {"dicom.gantry_tilt", {0x0018, 0x1120}},
      {"dicom.image_position_patient", {0x0020, 0x0032}},   {"dicom.image_orientation_patient", {0x0020, 0x0037}},
      {"dicom.window_center", {0x0028, 0x1050}},            {"dicom.window_width", {0x0028, 0x1051}},
      {"dicom.series_instance_uid", {0x0020, 0x000E}},      {"dicom.series_description", {0x0008, 0x103E}},
      {"dicom.series_number", {0x0020, 0x0011}},            {"dicom.frame_of_reference_uid", {0x0020, 0x0052}}};
  for (auto const& [key, tag] : optional) {
    const std::string v = str(tag[0], tag[1]);
    if (!v.empty()) md[key] = v;
  }
  if (padding) {
    const double v = f.isSigned ? double(static_cast<std::int16_t>(*padding)) : double(*padding);
    md["dicom.pixel_padding_value"] = formatFloats({v * f.slope + f.intercept}, false);
  }
}

HostImage readDicom(fs::path const& file) {
#if KORTEX_HAVE_GDCM
  // Uncompressed little-endian slices (most CT and MR series) go through Kortex's own reader,
  // which bounds-checks every element; GDCM decodes the rest, on files whose structure was
  // checked first (it asserts, ending the process, on some broken ones).
  // The file is read once here; only its meta header decides (the own reader bounds-checks the rest).
  const std::vector<unsigned char> b = partTenBytes(file);
  std::size_t pos = 0;
  const std::string syntax = readMetaHeader(Parser(b, file), b, file, pos);
  if (syntax == "1.2.840.10008.1.2" || syntax == "1.2.840.10008.1.2.1") return readDicomKortexBytes(b, file);
  return readDicomGdcm(file);
#else
  return readDicomKortex(file);
#endif
}

HostImage readDicomKortex(fs::path const& file) { return readDicomKortexBytes(partTenBytes(file), file); }

namespace {

HostImage readDicomKortexBytes(std::vector<unsigned char> const& b, fs::path const& file) {
  Parser p(b, file);

  // --- file meta information: explicit VR little endian, group 0002 ---
  std::size_t pos = 0;
  const std::string transferSyntax = readMetaHeader(p, b, file, pos);
  bool explicitVR = true;
  if (transferSyntax == "1.2.840.10008.1.2") {
    explicitVR = false;
  } else if (transferSyntax == "1.2.840.10008.1.2.1") {
    explicitVR = true;
  } else if (transferSyntax == "1.2.840.10008.1.2.2") {
    readError(file, "big-endian DICOM (transfer syntax 1.2.840.10008.1.2.2) is not supported");
  } else if (transferSyntax == "1.2.840.10008.1.2.1.99") {
    readError(file, "deflated DICOM (transfer syntax 1.2.840.10008.1.2.1.99) is not supported");
  } else {
    readError(file, "compressed DICOM (transfer syntax " + transferSyntax +
                        ") is not supported; decompress it first (e.g. 'gdcmconv --raw' or "
                        "'dcmdjpeg')");
  }

  // --- top-level data set ---
  std::map<std::uint32_t, std::pair<std::size_t, std::uint32_t>> values;  // tag -> (pos, len)
  std::size_t pixelPos = 0;
  std::uint32_t pixelLen = 0;
  bool havePixels = false;
  while (pos < b.size()) {
    if (b.size() - pos < 8) break;  // trailing padding
    const auto el = p.element(pos, explicitVR);
    if (el.tag == tagOf(0x7FE0, 0x0010)) {
      if (el.length == kUndefined)
        readError(file, "encapsulated (compressed) pixel data in an uncompressed transfer syntax");
      pixelPos = el.value;
      pixelLen = el.length;
      havePixels = true;
      break;
    }
    if (el.length != kUndefined && el.value <= b.size() && el.length <= b.size() - el.value)
      values[el.tag] = {el.value, el.length};
    pos = p.skipValue(el, explicitVR, 0);
  }
  if (!havePixels) readError(file, "no pixel data (7FE0,0010) in this DICOM file");

  auto has = [&](std::uint16_t g, std::uint16_t e) { return values.count(tagOf(g, e)) > 0; };
  auto str = [&](std::uint16_t g, std::uint16_t e) {
    auto it = values.find(tagOf(g, e));
    return it == values.end() ? std::string() : trimValue(b, it->second.first, it->second.second);
  };
  auto us = [&](std::uint16_t g, std::uint16_t e, int def) -> int {
    auto it = values.find(tagOf(g, e));
    if (it == values.end()) return def;
    if (it->second.second < 2)
      readError(file,
                "corrupt DICOM attribute (" + std::to_string(g) + "," + std::to_string(e) + ")");
    return p.u16(it->second.first);
  };
  auto ds = [&](std::uint16_t g, std::uint16_t e) { return numbersOf(str(g, e)); };

  const int rows = us(0x0028, 0x0010, 0), cols = us(0x0028, 0x0011, 0);
  if (!has(0x0028, 0x0010) || !has(0x0028, 0x0011))
    readError(file, "DICOM file has no Rows/Columns attributes");
  if (rows <= 0 || cols <= 0)
    readError(file, "zero-size image (" + std::to_string(cols) + "x" + std::to_string(rows) + ")");
  const int samples = us(0x0028, 0x0002, 1);
  if (samples != 1)
    readError(file, "colour DICOM (SamplesPerPixel = " + std::to_string(samples) +
                        "); Kortex filters take grey scalar images");
  int frames = 1;
  if (has(0x0028, 0x0008)) {
    const auto f = numbersOf(str(0x0028, 0x0008));
    if (f.size() == 1) frames = static_cast<int>(f[0]);
  }
  if (frames != 1)
    readError(file, "multi-frame DICOM (" + std::to_string(frames) +
                        " frames); Kortex reads one slice per .dcm file");
  const int bitsAllocated = us(0x0028, 0x0100, 0);
  if (bitsAllocated != 8 && bitsAllocated != 16 && bitsAllocated != 32)
    readError(file, "unsupported BitsAllocated = " + std::to_string(bitsAllocated));
  const int bitsStored = us(0x0028, 0x0101, bitsAllocated);
  const int highBit = us(0x0028, 0x0102, bitsStored - 1);
  const bool isSigned = us(0x0028, 0x0103, 0) == 1;
  if (bitsStored < 1 || bitsStored > bitsAllocated || highBit < bitsStored - 1 ||
      highBit >= bitsAllocated)
    readError(file, "inconsistent BitsStored/HighBit (" + std::to_string(bitsStored) + "/" +
                        std::to_string(highBit) + " in " + std::to_string(bitsAllocated) +
                        " bits)");

  const std::size_t bytesPer = static_cast<std::size_t>(bitsAllocated / 8);
  const std::size_t expected = static_cast<std::size_t>(rows) * cols * bytesPer;
  if (pixelLen < expected)
    readError(file, "pixel data has " + std::to_string(pixelLen) + " bytes, " +
                        std::to_string(cols) + "x" + std::to_string(rows) + "x" +
                        std::to_string(bitsAllocated) + "-bit needs " + std::to_string(expected));
  if (pixelPos > b.size() || b.size() - pixelPos < expected)
    readError(file, "truncated: the pixel data needs " + std::to_string(expected) +
                        " bytes from byte " + std::to_string(pixelPos) + " but the file has " +
                        std::to_string(b.size()) + " bytes");

  double slope = 1.0, intercept = 0.0;
  if (has(0x0028, 0x1053)) {
    const auto v = ds(0x0028, 0x1053);
    if (v.size() != 1 || !std::isfinite(v[0])) readError(file, "invalid RescaleSlope");
    slope = v[0];
  }
  if (has(0x0028, 0x1052)) {
    const auto v = ds(0x0028, 0x1052);
    if (v.size() != 1 || !std::isfinite(v[0])) readError(file, "invalid RescaleIntercept");
    intercept = v[0];
  }

  // --- geometry (what ITK/GDCM report for one slice) ---
  Geometry g = Geometry::make2D(cols, rows);
  std::vector<double> ps = ds(0x0028, 0x0030);
  if (ps.size() != 2) ps = ds(0x0018, 0x1164);  // ImagerPixelSpacing
  if (ps.size() == 2) {
    if (!(ps[0] > 0) || !(ps[1] > 0) || !std::isfinite(ps[0]) || !std::isfinite(ps[1]))
      readError(file, "invalid PixelSpacing '" + str(0x0028, 0x0030) + "'");
    g.spacing = {ps[1], ps[0], 1.0};  // DICOM: row spacing (y) first, then column spacing (x)
  }
  const auto ipp = ds(0x0020, 0x0032);
  if (ipp.size() == 3) g.origin = {ipp[0], ipp[1], ipp[2]};
  const auto iop = ds(0x0020, 0x0037);
  if (!iop.empty()) {
    if (iop.size() != 6)
      readError(file, "invalid ImageOrientationPatient '" + str(0x0020, 0x0037) + "'");
    double r[3] = {iop[0], iop[1], iop[2]}, c[3] = {iop[3], iop[4], iop[5]};
    const double nr = std::sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
    const double nc = std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
    if (!(nr > 0.5) || !(nc > 0.5) || !std::isfinite(nr) || !std::isfinite(nc))
      readError(file, "invalid ImageOrientationPatient '" + str(0x0020, 0x0037) + "'");
    for (int i = 0; i < 3; ++i) {
      r[i] /= nr;
      c[i] /= nc;
    }
    const double n[3] = {r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2],
                         r[0] * c[1] - r[1] * c[0]};
    g.direction = {r[0], c[0], n[0], r[1], c[1], n[1], r[2], c[2], n[2]};
  }

  HostImage img = allocateImage(g, file, "kortex::io::dicom");
  const DicomPixelFormat fmt{bitsAllocated, bitsStored, highBit, isSigned, slope, intercept};
  requireDecoded(file, fmt, decodeDicomPixels(b.data() + pixelPos, static_cast<std::size_t>(rows) * cols, fmt, img.data.data()),
                 static_cast<std::size_t>(rows) * cols);
  std::optional<std::uint16_t> padding;
  if (has(0x0028, 0x0120)) {
    auto it = values.find(tagOf(0x0028, 0x0120));
    if (it->second.second >= 2) padding = p.u16(it->second.first);
  }
  setDicomMetadata(img.metadata, transferSyntax, [&](std::uint16_t g, std::uint16_t e) { return has(g, e) ? str(g, e) : std::string(); },
                   fmt, padding);
  img.metadata["dicom.decoder"] = "kortex";
  return img;
}

}  // namespace

}  // namespace kortex::io::detail

namespace kortex::io::detail {

namespace {

std::vector<double> metaNumbers(HostImage const& s, const char* key) {
  auto it = s.metadata.find(key);
  return it == s.metadata.end() ? std::vector<double>{} : numbersOf(it->second);
}

}  // namespace

namespace {

// One series of a folder: SeriesInstanceUID, then image size and orientation (a localizer holds
// several orientations under one UID).
struct SeriesGroup {
  std::string uid, description, number;
  std::vector<std::size_t> members;  // indices into the slices
};

std::string metaOf(HostImage const& s, const char* key) {
  auto it = s.metadata.find(key);
  return it == s.metadata.end() ? std::string() : it->second;
}

// The stack a slice belongs to within its series: image size and orientation (to 1e-3).
std::string stackKey(HostImage const& s) {
  std::string key = std::to_string(s.geometry.nx()) + "x" + std::to_string(s.geometry.ny());
  for (double v : metaNumbers(s, "dicom.image_orientation_patient")) key += "|" + formatReadable(std::round(v * 1e3) / 1e3, 3);
  return key;
}

// Groups `members` of `slices` by key(slice), in order of first appearance.
template <class Key>
std::vector<SeriesGroup> groupBy(std::vector<HostImage> const& slices, std::vector<std::size_t> const& members, Key key) {
  std::vector<SeriesGroup> groups;
  std::map<std::string, std::size_t> index;
  for (std::size_t k : members) {
    const auto [it, added] = index.emplace(key(slices[k]), groups.size());
    if (added) {
      SeriesGroup g;
      g.uid = metaOf(slices[k], "dicom.series_instance_uid");
      g.description = metaOf(slices[k], "dicom.series_description");
      g.number = metaOf(slices[k], "dicom.series_number");
      groups.push_back(g);
    }
    groups[it->second].members.push_back(k);
  }
  return groups;
}

std::string listSeries(std::vector<SeriesGroup> const& groups, std::vector<HostImage> const& slices) {
  std::string out;
  for (auto const& g : groups) {
    HostImage const& s = slices[g.members.front()];
    out += (out.empty() ? "" : "; ") + (g.uid.empty() ? std::string("(no SeriesInstanceUID)") : g.uid);
    if (!g.number.empty()) out += " #" + g.number;
    if (!g.description.empty()) out += " '" + g.description + "'";
    out += ": " + std::to_string(g.members.size()) + " slice" + (g.members.size() == 1 ? "" : "s") + " of " +
           std::to_string(s.geometry.nx()) + "x" + std::to_string(s.geometry.ny());
  }
  return out;
}

// "UID: n slices of WxH; ..." for groups of one series split by FrameOfReferenceUID.
std::string listFrames(std::vector<SeriesGroup> const& groups, std::vector<HostImage> const& slices) {
  std::string out;
  for (auto const& g : groups) {
    HostImage const& s = slices[g.members.front()];
    const std::string frame = metaOf(s, "dicom.frame_of_reference_uid");
    out += (out.empty() ? "" : "; ") + (frame.empty() ? std::string("(no FrameOfReferenceUID)") : frame);
    out += ": " + std::to_string(g.members.size()) + " slice" + (g.members.size() == 1 ? "" : "s") + " of " +
           std::to_string(s.geometry.nx()) + "x" + std::to_string(s.geometry.ny());
  }
  return out;
}

// Decimal places of the least precise number in a DICOM DS value list ("12.25\\-3.5" -> 1).
int decimalsOf(std::string const& ds) {
  int least = 16;
  std::size_t i = 0;
  while (i < ds.size()) {
    std::size_t j = ds.find('\\', i);
    if (j == std::string::npos) j = ds.size();
    const std::string v = ds.substr(i, j - i);
    const auto e = v.find_first_of("eE");
    const auto dot = v.find('.');
    int d = 0;
    if (dot != std::string::npos) {
      std::size_t end = e == std::string::npos ? v.size() : e;
      while (end > dot + 1 && v[end - 1] == ' ') --end;
      d = int(end - dot - 1);
    }
    if (e != std::string::npos) d -= std::atoi(v.c_str() + e + 1);
    least = std::min(least, d);
    i = j + 1;
  }
  return least;
}

}  // namespace

HostImage readDicomSeries(std::vector<fs::path> const& allFiles, fs::path const& what,
                          std::vector<std::string> const& chosenSeries) {
  if (allFiles.empty()) readError(what, "holds no DICOM file (.dcm or a 'DICM' marker at byte 128)");
  std::vector<HostImage> allSlices;
  for (auto const& f : allFiles) allSlices.push_back(readDicom(f));
  // One series: by SeriesInstanceUID, then one stack of one size and orientation. Several: the
  // chosen one, else refused with the list, never stacked together.
  std::vector<std::size_t> everyone(allSlices.size());
  for (std::size_t k = 0; k < everyone.size(); ++k) everyone[k] = k;
  const std::vector<SeriesGroup> series =
      groupBy(allSlices, everyone, [](HostImage const& s) { return metaOf(s, "dicom.series_instance_uid"); });
  const SeriesGroup* chosen = series.size() == 1 ? &series.front() : nullptr;
  for (auto const& g : series)
    if (std::find(chosenSeries.begin(), chosenSeries.end(), g.uid) != chosenSeries.end()) chosen = &g;
  if (!chosen && !chosenSeries.empty())
    readError(what, "holds " + std::to_string(series.size()) + " DICOM series and none is the one asked for (" +
                        chosenSeries.front() + (chosenSeries.size() > 1 ? ", ..." : "") + "): " +
                        listSeries(series, allSlices));
  if (!chosen)
    readError(what, "holds " + std::to_string(series.size()) +
                        " DICOM series; choose one by its SeriesInstanceUID: " + listSeries(series, allSlices));
  // Within the series, one frame of reference: slices of two acquisitions (two patient coordinate
  // systems, e.g. interleaved under one SeriesInstanceUID) are never stacked together.
  const std::vector<SeriesGroup> frames = groupBy(
      allSlices, chosen->members, [](HostImage const& s) { return metaOf(s, "dicom.frame_of_reference_uid"); });
  if (frames.size() > 1)
    readError(what, "is not one series: its SeriesInstanceUID " +
                        (chosen->uid.empty() ? std::string("(none)") : chosen->uid) + " holds " +
                        std::to_string(frames.size()) +
                        " frames of reference (FrameOfReferenceUID (0020,0052): separate acquisitions, "
                        "positions in different patient coordinates); Kortex stacks one: " +
                        listFrames(frames, allSlices));
  const std::vector<SeriesGroup> stacks = groupBy(allSlices, chosen->members, stackKey);
  if (stacks.size() > 1)
    readError(what, "is not one series: it holds " + std::to_string(stacks.size()) +
                        " stacks of other image sizes or orientations under one SeriesInstanceUID (e.g. a "
                        "localizer); Kortex stacks one: " + listSeries(stacks, allSlices));
  std::vector<SeriesGroup> picked = stacks;
  std::vector<HostImage> slices;
  std::vector<fs::path> files;
  for (std::size_t k : picked.front().members) {
    slices.push_back(std::move(allSlices[k]));
    files.push_back(allFiles[k]);
  }
  if (slices.size() == 1) return slices.front();  // one slice: the 2D image
  // Every slice: same size, pixel spacing, orientation and modality; a position.
  HostImage const& s0 = slices.front();
  const Geometry& g0 = s0.geometry;
  const auto iop0 = metaNumbers(s0, "dicom.image_orientation_patient");
  for (std::size_t k = 0; k < slices.size(); ++k) {
    const Geometry& g = slices[k].geometry;
    const std::string name = files[k].filename().string();
    if (g.nx() != g0.nx() || g.ny() != g0.ny())
      readError(what, "is not one series: " + name + " is " + std::to_string(g.nx()) + "x" + std::to_string(g.ny()) + ", " +
                          files[0].filename().string() + " is " + std::to_string(g0.nx()) + "x" + std::to_string(g0.ny()));
    if (std::abs(g.spacing[0] - g0.spacing[0]) > 1e-4 * g0.spacing[0] || std::abs(g.spacing[1] - g0.spacing[1]) > 1e-4 * g0.spacing[1])
      readError(what, "is not one series: " + name + " has another pixel spacing");
    if (metaNumbers(slices[k], "dicom.image_position_patient").size() != 3 ||
        metaNumbers(slices[k], "dicom.image_orientation_patient").size() != 6)
      readError(what, "cannot be stacked: " + name + " has no ImagePositionPatient / ImageOrientationPatient");
    const auto iop = metaNumbers(slices[k], "dicom.image_orientation_patient");
    for (int i = 0; i < 6; ++i)
      if (std::abs(iop[std::size_t(i)] - iop0[std::size_t(i)]) > 1e-4)
        readError(what, "is not one series: " + name + " has another ImageOrientationPatient");
    if (slices[k].metadata["dicom.modality"] != s0.metadata.at("dicom.modality"))
      readError(what, "is not one series: " + name + " has modality " + slices[k].metadata["dicom.modality"]);
    auto tilt = slices[k].metadata.find("dicom.gantry_tilt");
    if (tilt != slices[k].metadata.end()) {
      const auto t = numbersOf(tilt->second);
      if (t.size() == 1 && std::abs(t[0]) > 0.01)
        readError(what, "was acquired with a gantry tilt of " + tilt->second +
                            " degrees: its slices are sheared, not stacked along their normal; Kortex does not "
                            "resample tilted series");
    }
  }
  // Order along the slice normal n (the third direction column): d_k = n . IPP_k.
  const double n[3] = {g0.direction[2], g0.direction[5], g0.direction[8]};
  std::vector<std::pair<double, std::size_t>> order;
  for (std::size_t k = 0; k < slices.size(); ++k) {
    const auto p = metaNumbers(slices[k], "dicom.image_position_patient");
    order.emplace_back(n[0] * p[0] + n[1] * p[1] + n[2] * p[2], k);
  }
  std::sort(order.begin(), order.end());
  std::vector<double> gaps;
  for (std::size_t k = 1; k < order.size(); ++k) {
    const double d = order[k].first - order[k - 1].first;
    if (!(d > 1e-3 * std::min(g0.spacing[0], g0.spacing[1])))
      readError(what, "has two slices at the same position along the slice normal (" +
                          files[order[k - 1].second].filename().string() + ", " + files[order[k].second].filename().string() + ")");
    gaps.push_back(d);
  }
  const double mean = (order.back().first - order.front().first) / double(gaps.size());
  const auto [lo, hi] = std::minmax_element(gaps.begin(), gaps.end());
  // Evenness is judged against the precision the positions are written with: each coordinate of
  // ImagePositionPatient is rounded to q = 10^-decimals, so a position along the normal is off by
  // up to |n|_1 q / 2 and two gaps can differ by twice a gap's error, 2 |n|_1 q; plus 1 % of the
  // spacing and 0.01 mm for rounding done before the file was written.
  int decimals = 16;
  for (auto const& s : slices) {
    auto it = s.metadata.find("dicom.image_position_patient");
    if (it != s.metadata.end()) decimals = std::min(decimals, decimalsOf(it->second));
  }
  const double q = std::pow(10.0, -std::clamp(decimals, -3, 16));
  const double l1 = std::abs(n[0]) + std::abs(n[1]) + std::abs(n[2]);
  constexpr double kEvenSpacing = 1e-2;    // relative: 1 % of the slice spacing
  constexpr double kEvenSpacingMm = 1e-2;  // absolute, mm (dcm2niix's order of tolerance)
  const double allowed = 2.0 * l1 * q + kEvenSpacing * mean + kEvenSpacingMm;
  if (*hi - *lo > allowed)
    readError(what, "has uneven slice spacing: gaps from " + formatReadable(*lo) + " to " + formatReadable(*hi) +
                        " mm along the slice normal (spread " + formatReadable(*hi - *lo, 3) + " mm, allowed " +
                        formatReadable(allowed, 3) + " mm for positions written to " + formatReadable(q, 3) +
                        " mm); Kortex stacks evenly spaced slices only");
  // The positions must move along the normal: an in-plane drift is a tilt (or a skewed stack).
  const auto pFirst = metaNumbers(slices[order.front().second], "dicom.image_position_patient");
  const auto pLast = metaNumbers(slices[order.back().second], "dicom.image_position_patient");
  double inPlane = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double r = (pLast[std::size_t(i)] - pFirst[std::size_t(i)]) - (order.back().first - order.front().first) * n[i];
    inPlane += r * r;
  }
  const double length = order.back().first - order.front().first;
  const double angle = std::atan2(std::sqrt(inPlane), length) * 180.0 / 3.14159265358979323846;
  constexpr double kMaxTiltDegrees = 0.05;  // a real tilt is degrees; this is rounding of positions
  // Rounding alone moves the first and last positions by up to sqrt(3) q / 2 each.
  const double roundingDrift = std::sqrt(3.0) * q;
  if (angle > kMaxTiltDegrees && std::sqrt(inPlane) > roundingDrift)
    readError(what, "is sheared: its slice positions drift " + formatReadable(angle, 3) +
                        " degrees off the slice normal (a gantry tilt); Kortex does not resample tilted series");
  Geometry g = Geometry::make3D(g0.nx(), g0.ny(), Index(slices.size()));
  g.spacing = {g0.spacing[0], g0.spacing[1], mean};
  g.origin = {pFirst[0], pFirst[1], pFirst[2]};
  g.direction = g0.direction;
  HostImage vol = allocateImage(g, what, "kortex::io::dicom_series");
  const std::size_t plane = std::size_t(g0.nx()) * std::size_t(g0.ny());
  for (std::size_t k = 0; k < order.size(); ++k) {
    HostImage const& s = slices[order[k].second];
    std::copy(s.data.data(), s.data.data() + plane, vol.data.data() + k * plane);
  }
  vol.metadata = slices[order.front().second].metadata;
  vol.metadata.erase("dicom.image_position_patient");
  vol.metadata["dicom.series_slices"] = std::to_string(slices.size());
  vol.metadata["dicom.slice_spacing"] = formatFloats({mean}, false);
  return vol;
}

}  // namespace kortex::io::detail
