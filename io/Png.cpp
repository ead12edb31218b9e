// PNG pictures through zlib (io/Png.hpp).
#include "io/Png.hpp"

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "core/Errors.hpp"
#include "io/Output.hpp"

namespace kortex::io {

namespace {

constexpr std::uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(std::uint8_t(v >> s));
}

std::uint32_t get32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

void chunk(std::vector<std::uint8_t>& out, const char* type, std::vector<std::uint8_t> const& data) {
  put32(out, std::uint32_t(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, std::uint32_t(crc32(0L, out.data() + start, uInt(out.size() - start))));
}

std::uint8_t colourType(int channels) { return channels == 1 ? 0 : channels == 3 ? 2 : 6; }

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

}  // namespace

std::vector<std::uint8_t> encodePng(Picture const& p) {
  if (p.width <= 0 || p.height <= 0 || !(p.channels == 1 || p.channels == 3 || p.channels == 4))
    throw InvalidArgument("PNG: a picture needs a positive size and 1, 3 or 4 channels, got " + std::to_string(p.width) +
                          "x" + std::to_string(p.height) + "x" + std::to_string(p.channels));
  const std::size_t row = std::size_t(p.width) * p.channels;
  if (p.pixels.size() != row * std::size_t(p.height))
    throw InvalidArgument("PNG: the picture holds " + std::to_string(p.pixels.size()) + " bytes, its size needs " +
                          std::to_string(row * std::size_t(p.height)));
  std::vector<std::uint8_t> raw;
  raw.reserve((row + 1) * std::size_t(p.height));
  for (int y = 0; y < p.height; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), p.pixels.begin() + std::ptrdiff_t(row * y), p.pixels.begin() + std::ptrdiff_t(row * (y + 1)));
  }
  uLongf packed = compressBound(uLong(raw.size()));
  std::vector<std::uint8_t> idat(packed);
  // zlib level 1: a QC report's pictures 0.13 -> 0.08 s on 2 cores for 1.2 -> 1.4 MB (an IXI pair
  // at 2 mm); the report's time counts against the registration's.
  if (compress2(idat.data(), &packed, raw.data(), uLong(raw.size()), 1) != Z_OK) throw IoError("PNG: zlib failed to compress");
  idat.resize(packed);
  std::vector<std::uint8_t> out(kSignature, kSignature + 8), ihdr;
  put32(ihdr, std::uint32_t(p.width));
  put32(ihdr, std::uint32_t(p.height));
  ihdr.insert(ihdr.end(), {8, colourType(p.channels), 0, 0, 0});  // depth, colour, deflate, filters, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", idat);
  chunk(out, "IEND", {});
  return out;
}

void writePng(Picture const& p, std::filesystem::path const& path) {
  const auto bytes = encodePng(p);
  writeTextFileAtomic(path, std::string(bytes.begin(), bytes.end()));
}

Picture decodePng(std::vector<std::uint8_t> const& b, std::string const& what) {
  auto fail = [&](std::string const& why) -> IoError { return IoError(what + ": not a PNG this reader takes (" + why + ")"); };
  if (b.size() < 8 || !std::equal(kSignature, kSignature + 8, b.begin())) throw fail("no PNG signature");
  Picture p;
  std::vector<std::uint8_t> idat;
  bool header = false, end = false;
  for (std::size_t at = 8; at + 12 <= b.size() && !end;) {
    const std::uint32_t n = get32(&b[at]);
    if (at + 12 + std::size_t(n) > b.size()) throw fail("a chunk runs past the end");
    const std::string type(b.begin() + std::ptrdiff_t(at + 4), b.begin() + std::ptrdiff_t(at + 8));
    const std::uint8_t* d = &b[at + 8];
    if (std::uint32_t(crc32(0L, &b[at + 4], uInt(n + 4))) != get32(d + n)) throw fail("bad CRC in " + type);
    if (type == "IHDR") {
      if (n != 13 || d[8] != 8 || d[10] != 0 || d[11] != 0 || d[12] != 0) throw fail("not 8-bit, non-interlaced");
      p.width = int(get32(d));
      p.height = int(get32(d + 4));
      p.channels = d[9] == 0 ? 1 : d[9] == 2 ? 3 : d[9] == 6 ? 4 : 0;
      if (p.channels == 0 || p.width <= 0 || p.height <= 0) throw fail("colour type or size");
      header = true;
    } else if (type == "IDAT") {
      idat.insert(idat.end(), d, d + n);
    } else if (type == "IEND") {
      end = true;
    }
    at += 12 + std::size_t(n);
  }
  if (!header || !end) throw fail("no IHDR or IEND");
  const std::size_t row = std::size_t(p.width) * p.channels;
  std::vector<std::uint8_t> raw((row + 1) * std::size_t(p.height));
  uLongf size = uLongf(raw.size());
  if (uncompress(raw.data(), &size, idat.data(), uLong(idat.size())) != Z_OK || size != raw.size())
    throw fail("the image data does not inflate to its size");
  p.pixels.assign(row * std::size_t(p.height), 0);
  const int bpp = p.channels;
  for (int y = 0; y < p.height; ++y) {
    const std::uint8_t f = raw[(row + 1) * std::size_t(y)];
    const std::uint8_t* in = &raw[(row + 1) * std::size_t(y) + 1];
    std::uint8_t* out = &p.pixels[row * std::size_t(y)];
    const std::uint8_t* up = y > 0 ? out - row : nullptr;
    for (std::size_t i = 0; i < row; ++i) {
      const int a = i >= std::size_t(bpp) ? out[i - bpp] : 0, u = up ? up[i] : 0,
                c = up && i >= std::size_t(bpp) ? up[i - bpp] : 0;
      int v = in[i];
      switch (f) {
        case 0: break;
        case 1: v += a; break;
        case 2: v += u; break;
        case 3: v += (a + u) / 2; break;
        case 4: v += paeth(a, u, c); break;
        default: throw fail("row filter " + std::to_string(f));
      }
      out[i] = std::uint8_t(v);
    }
  }
  return p;
}

Picture readPng(std::filesystem::path const& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) throw IoError("cannot read '" + path.string() + "'");
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  return decodePng(bytes, "'" + path.string() + "'");
}

}  // namespace kortex::io
