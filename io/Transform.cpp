// Transform files (io/Transform.hpp): ITK text, ITK/ANTs MATLAB level-4 .mat, NIfTI fields.
#include "io/Transform.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

#include "io/ImageIO.hpp"
#include "io/IoDetail.hpp"

namespace kortex::io {

namespace {

using namespace detail;

// A transform file is a few hundred bytes; anything far larger is not one.
constexpr std::uintmax_t kMaxTransformFileBytes = 1u << 20;

const char* const kAcceptedTypes[] = {"AffineTransform_double_3_3", "AffineTransform_float_3_3",
                                      "MatrixOffsetTransformBase_double_3_3",
                                      "MatrixOffsetTransformBase_float_3_3"};

std::string acceptedList() {
  return "AffineTransform_double_3_3, AffineTransform_float_3_3, MatrixOffsetTransformBase_double_3_3 or "
         "MatrixOffsetTransformBase_float_3_3";
}

bool acceptedType(std::string const& t) {
  for (const char* a : kAcceptedTypes)
    if (t == a) return true;
  return false;
}

void requireAcceptedType(fs::path const& path, std::string const& type) {
  if (type.rfind("CompositeTransform", 0) == 0)
    readError(path, "it is a composite transform (" + type +
                        "); Kortex reads one affine transform per file: list the parts as separate transforms");
  if (!acceptedType(type))
    readError(path, "transform type '" + type + "' is not supported; Kortex applies " + acceptedList() +
                        " and displacement fields (NIfTI)");
}

std::string readAll(fs::path const& path) {
  requireReadableFile(path);
  const auto size = fileSize(path);
  if (size == 0) readError(path, "the file is empty (0 bytes)");
  if (size > kMaxTransformFileBytes)
    readError(path, "the file has " + std::to_string(size) + " bytes, far more than a transform file holds");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) readError(path, "reading failed");
  if (bytes.size() != size) readError(path, "reading failed (short read)");
  return bytes;
}

// Exactly `count` finite numbers separated by white space.
std::vector<double> parseParameters(fs::path const& path, std::string const& text, std::size_t count, const char* what) {
  std::istringstream is(text);
  std::vector<double> v;
  std::string tok;
  while (is >> tok) {
    char* end = nullptr;
    const double x = std::strtod(tok.c_str(), &end);
    if (end == tok.c_str() || *end != '\0') readError(path, std::string(what) + ": '" + tok + "' is not a number");
    if (!std::isfinite(x))
      readError(path, std::string(what) + " " + std::to_string(v.size()) + " is not finite (" + tok + ")");
    v.push_back(x);
  }
  if (v.size() != count)
    readError(path, std::string(what) + ": " + std::to_string(v.size()) + " numbers, an affine 3D transform has " +
                        std::to_string(count));
  return v;
}

std::string trimmed(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

TransformFile readItkText(fs::path const& path) {
  const std::string text = readAll(path);
  std::istringstream is(text);
  std::string line;
  bool first = true;
  std::vector<std::string> types;
  std::string parameters, fixed;
  int parameterLines = 0, fixedLines = 0;
  while (std::getline(is, line)) {
    line = trimmed(line);
    if (line.empty()) continue;
    if (first) {
      if (line.rfind("#Insight Transform File", 0) != 0)
        readError(path, "not an ITK transform file (the first line should be '#Insight Transform File V1.0')");
      first = false;
      continue;
    }
    if (line[0] == '#') continue;
    auto value = [&](const char* key) -> std::optional<std::string> {
      const std::size_t n = std::strlen(key);
      if (line.compare(0, n, key) != 0) return std::nullopt;
      return trimmed(line.substr(n));
    };
    if (auto t = value("Transform:")) {
      types.push_back(*t);
    } else if (auto p = value("Parameters:")) {
      parameters = *p;
      ++parameterLines;
    } else if (auto f = value("FixedParameters:")) {
      fixed = *f;
      ++fixedLines;
    } else {
      readError(path, "unexpected line '" + line.substr(0, 60) + "' in an ITK transform file");
    }
  }
  if (first) readError(path, "the file holds only white space");
  if (types.empty()) readError(path, "the file names no transform (no 'Transform:' line)");
  requireAcceptedType(path, types.front());
  if (types.size() > 1)
    readError(path, "the file holds " + std::to_string(types.size()) +
                        " transforms; Kortex reads one per file: list each as its own transform");
  if (parameterLines != 1 || fixedLines != 1)
    readError(path, "an affine transform needs one 'Parameters:' and one 'FixedParameters:' line");
  const auto p = parseParameters(path, parameters, 12, "parameter");
  const auto c = parseParameters(path, fixed, 3, "fixed parameter");
  TransformFile t;
  t.kind = TransformFileKind::Affine;
  t.type = types.front();
  t.matrix = itkAffineMatrix(p.data(), c.data());
  return t;
}

// ---- MATLAB level 4 ------------------------------------------------------------------------------

std::int32_t int32At(std::string const& b, std::size_t at, bool bigEndian) {
  unsigned char u[4];
  std::memcpy(u, b.data() + at, 4);
  if (bigEndian) std::swap(u[0], u[3]), std::swap(u[1], u[2]);
  std::int32_t v;
  std::memcpy(&v, u, 4);
  return v;
}

double realAt(std::string const& b, std::size_t at, bool bigEndian, bool single) {
  const int n = single ? 4 : 8;
  unsigned char u[8];
  std::memcpy(u, b.data() + at, std::size_t(n));
  if (bigEndian)
    for (int i = 0; i < n / 2; ++i) std::swap(u[i], u[n - 1 - i]);
  if (single) {
    float f;
    std::memcpy(&f, u, 4);
    return f;
  }
  double d;
  std::memcpy(&d, u, 8);
  return d;
}

struct MatVariable {
  std::string name;
  std::vector<double> values;
};

// One variable at `at`; advances `at` past it.
MatVariable readMatVariable(fs::path const& path, std::string const& b, std::size_t& at) {
  constexpr std::size_t kHeader = 20;
  if (b.size() - at < kHeader) readError(path, "truncated MATLAB variable header at byte " + std::to_string(at));
  // Byte order: the type's thousands digit, read in the order it claims (0: little, 1: big endian).
  bool big = false;
  std::int32_t type = int32At(b, at, false);
  if (type < 0 || type >= 1000) {
    type = int32At(b, at, true);
    big = true;
    if (type < 1000 || type >= 2000)
      readError(path, "not a MATLAB level-4 file (ITK/ANTs .mat): no valid variable header at byte " + std::to_string(at));
  }
  const int kind = type % 10, precision = (type / 10) % 10, storage = (type / 100) % 10;
  const std::int32_t rows = int32At(b, at + 4, big), cols = int32At(b, at + 8, big), imag = int32At(b, at + 12, big),
                     namlen = int32At(b, at + 16, big);
  if (kind != 0 || storage > 1 || precision > 1)
    readError(path, "MATLAB variable type " + std::to_string(type) +
                        " is not a numeric float64/float32 matrix (ITK/ANTs write those only)");
  if (imag != 0) readError(path, "a complex MATLAB variable; transform parameters are real");
  if (cols != 1 || rows < 0 || rows > 4096)
    readError(path, "a MATLAB variable of " + std::to_string(rows) + "x" + std::to_string(cols) +
                        "; ITK/ANTs store transform parameters as one column");
  if (namlen < 1 || namlen > 256) readError(path, "a MATLAB variable name of " + std::to_string(namlen) + " bytes");
  at += kHeader;
  if (b.size() - at < std::size_t(namlen)) readError(path, "truncated MATLAB variable name");
  if (b[at + std::size_t(namlen) - 1] != '\0') readError(path, "a MATLAB variable name without its terminating NUL");
  MatVariable v;
  v.name = std::string(b.data() + at);
  at += std::size_t(namlen);
  const std::size_t bytesEach = precision == 1 ? 4 : 8;
  if ((b.size() - at) / bytesEach < std::size_t(rows))
    readError(path, "truncated: the variable '" + v.name + "' needs " + std::to_string(rows) + " values");
  for (std::int32_t i = 0; i < rows; ++i, at += bytesEach) {
    const double x = realAt(b, at, big, precision == 1);
    if (!std::isfinite(x))
      readError(path, "value " + std::to_string(i) + " of the variable '" + v.name + "' is not finite");
    v.values.push_back(x);
  }
  return v;
}

TransformFile readMatlab(fs::path const& path) {
  const std::string b = readAll(path);
  if (b.rfind("MATLAB 5.0 MAT-file", 0) == 0 || b.rfind("MATLAB 7", 0) == 0)
    readError(path, "a MATLAB 5/7 file; ITK and ANTs write transforms as MATLAB level-4 .mat files");
  std::vector<MatVariable> vars;
  std::size_t at = 0;
  while (at < b.size()) vars.push_back(readMatVariable(path, b, at));
  if (vars.empty()) readError(path, "no MATLAB variable");
  requireAcceptedType(path, vars.front().name);
  if (vars.size() != 2)
    readError(path, "the file holds " + std::to_string(vars.size()) +
                        " variables; an ITK/ANTs affine .mat holds two (the parameters and 'fixed')");
  if (vars[1].name != "fixed")
    readError(path, "the second variable is '" + vars[1].name + "'; ITK/ANTs name the centre 'fixed'");
  if (vars[0].values.size() != 12)
    readError(path, "'" + vars[0].name + "' has " + std::to_string(vars[0].values.size()) +
                        " parameters; an affine 3D transform has 12");
  if (vars[1].values.size() != 3)
    readError(path, "'fixed' has " + std::to_string(vars[1].values.size()) + " values; a 3D centre has 3");
  TransformFile t;
  t.kind = TransformFileKind::Affine;
  t.type = vars[0].name;
  t.matrix = itkAffineMatrix(vars[0].values.data(), vars[1].values.data());
  return t;
}

}  // namespace

bool isTransformExtension(std::filesystem::path const& path) {
  const std::string ext = extensionOf(path);
  return ext == ".txt" || ext == ".tfm" || ext == ".mat" || isNiftiExtension(ext);
}

TransformFile readTransform(std::filesystem::path const& path) {
  const std::string ext = extensionOf(path);
  if (ext == ".txt" || ext == ".tfm") return readItkText(path);
  if (ext == ".mat") return readMatlab(path);
  if (isNiftiExtension(ext)) {
    TransformFile t;
    t.kind = TransformFileKind::Field;
    t.type = "displacement field";
    t.field = readDisplacementField(path);
    return t;
  }
  requireReadableFile(path);
  readError(path, "unknown transform file extension '" + ext +
                      "'; Kortex reads ITK transforms (.txt, .tfm), ITK/ANTs .mat files and displacement fields "
                      "(.nii, .nii.gz)");
}

Matrix4 itkAffineMatrix(double const* p, double const* c) {
  Matrix4 m{};
  for (int i = 0; i < 3; ++i) {
    double offset = p[9 + i] + c[i];
    for (int j = 0; j < 3; ++j) {
      m[4 * i + j] = p[3 * i + j];
      offset -= p[3 * i + j] * c[j];
    }
    m[4 * i + 3] = offset;
  }
  m[15] = 1.0;
  return m;
}

}  // namespace kortex::io
