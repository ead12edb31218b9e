#include "core/ImageOps.hpp"

#include "core/Errors.hpp"

namespace kortex {

ImageOpsVariant parseImageOpsVariant(std::string const& s) {
  if (s == "fused") return ImageOpsVariant::Fused;
  if (s == "binary") return ImageOpsVariant::Binary;
  throw InvalidArgument("unknown element-wise variant '" + s + "' (expected fused|binary)");
}

const char* toString(ImageOpsVariant v) {
  switch (v) {
    case ImageOpsVariant::Fused: return "Fused";
    case ImageOpsVariant::Binary: return "Binary";
  }
  return "?";
}

GradientVariant parseGradientVariant(std::string const& s) {
  if (s == "naive") return GradientVariant::Naive;
  if (s == "scratch-tiled") return GradientVariant::ScratchTiled;
  throw InvalidArgument("unknown gradient variant '" + s + "' (expected naive|scratch-tiled)");
}

const char* toString(GradientVariant v) {
  switch (v) {
    case GradientVariant::Naive: return "Naive";
    case GradientVariant::ScratchTiled: return "ScratchTiled";
  }
  return "?";
}

}  // namespace kortex
