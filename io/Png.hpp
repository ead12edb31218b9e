// PNG files for pictures (the QC reports, pipeline/Qc.hpp), written without VTK: GPU servers have no
// VTK, and the pictures must be written wherever a registration runs. The PNG container is a few
// chunks (signature, IHDR, IDAT, IEND, each with its CRC-32); its one hard part, deflate, is zlib's,
// which kortex_io already needs for .nii.gz. So no new dependency (libpng would add one the GPU images
// lack, for a writer of 8-bit pictures that needs none of its options).
//   writePng: 8-bit grey (1 channel), RGB (3) or RGBA (4), non-interlaced, each row filtered with
//             filter 0 (none); written atomically (io/Output.hpp). encodePng gives the bytes.
//   readPng:  any non-interlaced 8-bit grey / RGB / RGBA PNG (every row filter); for tests and checks.
// Errors: InvalidArgument for a bad picture (sizes, channels, data length); IoError for files and
// for anything readPng cannot take (naming the file and why).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kortex::io {

struct Picture {
  int width = 0, height = 0, channels = 3;  // 1, 3 or 4
  std::vector<std::uint8_t> pixels;         // row-major, top row first, channels interleaved
  Picture() = default;
  Picture(int w, int h, int c) : width(w), height(h), channels(c), pixels(std::size_t(w) * h * c, 0) {}
  std::uint8_t* at(int x, int y) { return pixels.data() + (std::size_t(y) * width + x) * channels; }
  const std::uint8_t* at(int x, int y) const { return pixels.data() + (std::size_t(y) * width + x) * channels; }
};

std::vector<std::uint8_t> encodePng(Picture const& p);
void writePng(Picture const& p, std::filesystem::path const& path);
Picture readPng(std::filesystem::path const& path);
Picture decodePng(std::vector<std::uint8_t> const& bytes, std::string const& what = "PNG data");

}  // namespace kortex::io
