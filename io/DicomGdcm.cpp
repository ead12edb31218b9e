// One DICOM slice through GDCM (builds that find it: KORTEX_HAVE_GDCM): every transfer syntax GDCM
// decodes (uncompressed little and big endian, implicit VR, RLE, JPEG baseline / lossless,
// JPEG-LS, JPEG 2000, deflate). The same image, geometry, metadata and refusals as Kortex's own
// reader of uncompressed slices (Dicom.cpp), which builds without GDCM use.
#include <gdcmImage.h>
#include <gdcmImageReader.h>
#include <gdcmPhotometricInterpretation.h>
#include <gdcmPixelFormat.h>
#include <gdcmStringFilter.h>
#include <gdcmSwapCode.h>
#include <gdcmTrace.h>
#include <gdcmTransferSyntax.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "io/IoDetail.hpp"

namespace kortex::io::detail {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && s[b] == ' ') ++b;
  return s.substr(b);
}

}  // namespace

HostImage readDicomGdcm(fs::path const& file) {
  {
    std::ifstream in(file, std::ios::binary);
    char head[132] = {0};
    if (!in.read(head, 132) || std::memcmp(head + 128, "DICM", 4) != 0)
      readError(file, "not a DICOM Part 10 file (no 'DICM' marker at byte 128)");
  }
  checkDicomStructure(file);
  gdcm::Trace::SetDebug(false);  // the message below says what went wrong, once
  gdcm::Trace::SetWarning(false);
  gdcm::Trace::SetError(false);
  gdcm::ImageReader reader;
  reader.SetFileName(file.string().c_str());
  {
    CapturedStderr codecs("GDCM");  // its codecs (libjpeg, OpenJPEG, CharLS) print to stderr
    if (!reader.Read())
      readError(file, "cannot read it as a DICOM image (truncated or corrupt file, or no pixel data)" + codecs.quoted());
  }
  const gdcm::Image& im = reader.GetImage();
  gdcm::StringFilter sf;
  sf.SetFile(reader.GetFile());
  gdcm::DataSet const& ds = reader.GetFile().GetDataSet();
  auto has = [&](std::uint16_t g, std::uint16_t e) { return ds.FindDataElement(gdcm::Tag(g, e)); };
  auto str = [&](std::uint16_t g, std::uint16_t e) { return has(g, e) ? trim(sf.ToString(gdcm::Tag(g, e))) : std::string(); };

  const gdcm::TransferSyntax ts = reader.GetFile().GetHeader().GetDataSetTransferSyntax();
  const std::string uid = ts.GetString() ? trim(ts.GetString()) : std::string("?");
  const unsigned int* dims = im.GetDimensions();
  const unsigned int frames = im.GetNumberOfDimensions() > 2 ? dims[2] : 1;
  if (frames != 1)
    readError(file, "multi-frame DICOM (" + std::to_string(frames) + " frames); Kortex reads one slice per .dcm file");
  const gdcm::PixelFormat pf = im.GetPixelFormat();
  if (pf.GetSamplesPerPixel() != 1)
    readError(file, "colour DICOM (SamplesPerPixel = " + std::to_string(pf.GetSamplesPerPixel()) +
                        "); Kortex filters take grey-level images");
  const auto pi = im.GetPhotometricInterpretation();
  if (pi != gdcm::PhotometricInterpretation::MONOCHROME1 && pi != gdcm::PhotometricInterpretation::MONOCHROME2)
    readError(file, std::string("photometric interpretation ") + gdcm::PhotometricInterpretation::GetPIString(pi) +
                        " is not a grey-level image");
  const int cols = int(dims[0]), rows = int(dims[1]);
  if (cols <= 0 || rows <= 0) readError(file, "zero-size image (" + std::to_string(cols) + "x" + std::to_string(rows) + ")");
  const int bitsAllocated = pf.GetBitsAllocated(), bitsStored = pf.GetBitsStored(), highBit = pf.GetHighBit();
  const bool isSigned = pf.GetPixelRepresentation() == 1;
  if (bitsAllocated != 8 && bitsAllocated != 16 && bitsAllocated != 32)
    readError(file, "unsupported BitsAllocated = " + std::to_string(bitsAllocated));
  if (bitsStored < 1 || bitsStored > bitsAllocated || highBit < bitsStored - 1 || highBit >= bitsAllocated)
    readError(file, "inconsistent BitsStored/HighBit (" + std::to_string(bitsStored) + "/" + std::to_string(highBit) + " in " +
                        std::to_string(bitsAllocated) + " bits)");

  // The pixel data as the transfer syntax says: fragments when compressed, all the bytes when not.
  const std::size_t expected = std::size_t(rows) * cols * std::size_t(bitsAllocated / 8);
  if (!has(0x7FE0, 0x0010)) readError(file, "no pixel data (7FE0,0010) in this DICOM file");
  const gdcm::DataElement& pixels = ds.GetDataElement(gdcm::Tag(0x7FE0, 0x0010));
  if (ts.IsEncapsulated() && !pixels.GetSequenceOfFragments())
    readError(file, "transfer syntax " + uid + " is compressed but the pixel data is not encapsulated (corrupt file)");
  if (!ts.IsEncapsulated()) {
    const gdcm::ByteValue* bv = pixels.GetByteValue();
    const std::uint64_t onDisk = std::uint64_t(fs::file_size(file));
    if (!bv || bv->GetLength() < expected || onDisk < expected)
      readError(file, "truncated: the pixel data holds " + std::to_string(bv ? std::uint64_t(bv->GetLength()) : std::uint64_t(0)) + " of " +
                          std::to_string(expected) + " bytes");
  }
  std::vector<char> buf(im.GetBufferLength());
  std::string codecSaid;
  {
    // A codec may print and still decode (GDCM retries a 12-bit JPEG after the 8-bit codec
    // refused it): its words go into the message on failure, into the metadata otherwise.
    CapturedStderr codecs("GDCM");
    const bool decoded = buf.size() >= expected && im.GetBuffer(buf.data());
    codecSaid = codecs.said();
    if (!decoded)
      readError(file, "cannot decode its pixel data (transfer syntax " + uid + (ts.IsEncapsulated() ? ", compressed" : "") +
                          ": truncated or corrupt data)" + (codecSaid.empty() ? std::string() : " (GDCM: " + codecSaid + ")"));
  }
  const double slope = im.GetSlope(), intercept = im.GetIntercept();
  if (!std::isfinite(slope) || !std::isfinite(intercept)) readError(file, "invalid RescaleSlope / RescaleIntercept");

  Geometry g = Geometry::make2D(cols, rows);
  const double* sp = im.GetSpacing();
  if (sp && sp[0] > 0 && sp[1] > 0 && std::isfinite(sp[0]) && std::isfinite(sp[1])) g.spacing = {sp[0], sp[1], 1.0};
  const double* o = im.GetOrigin();
  if (o) g.origin = {o[0], o[1], o[2]};
  const double* dc = im.GetDirectionCosines();
  if (dc) {
    double r[3] = {dc[0], dc[1], dc[2]}, c[3] = {dc[3], dc[4], dc[5]};
    const double nr = std::sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]), nc = std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
    if (!(nr > 0.5) || !(nc > 0.5) || !std::isfinite(nr) || !std::isfinite(nc))
      readError(file, "invalid ImageOrientationPatient '" + str(0x0020, 0x0037) + "'");
    for (int i = 0; i < 3; ++i) {
      r[i] /= nr;
      c[i] /= nc;
    }
    const double n[3] = {r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2], r[0] * c[1] - r[1] * c[0]};
    g.direction = {r[0], c[0], n[0], r[1], c[1], n[1], r[2], c[2], n[2]};
  }
  HostImage img = allocateImage(g, file, "kortex::io::dicom");
  // GDCM hands the decoded values in host (little-endian) byte order.
  const DicomPixelFormat fmt{bitsAllocated, bitsStored, highBit, isSigned, slope, intercept};
  requireDecoded(file, fmt,
                 decodeDicomPixels(reinterpret_cast<const unsigned char*>(buf.data()), std::size_t(rows) * cols, fmt,
                                   img.data.data()),
                 std::size_t(rows) * cols);
  std::optional<std::uint16_t> padding;
  if (has(0x0028, 0x0120)) {
    const gdcm::ByteValue* bv = ds.GetDataElement(gdcm::Tag(0x0028, 0x0120)).GetByteValue();
    if (bv && bv->GetLength() >= 2) {
      std::uint16_t raw = 0;
      std::memcpy(&raw, bv->GetPointer(), 2);
      if (ts.GetSwapCode() == gdcm::SwapCode::BigEndian) raw = std::uint16_t((raw >> 8) | (raw << 8));
      padding = raw;
    }
  }
  setDicomMetadata(img.metadata, uid, str, fmt, padding);
  if (!codecSaid.empty()) img.metadata["dicom.decoder_messages"] = codecSaid;
  img.metadata["dicom.decoder"] = "gdcm";
  return img;
}

}  // namespace kortex::io::detail
