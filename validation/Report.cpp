#include "validation/Report.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/Boundary.hpp"
#include "core/Errors.hpp"

namespace kortex::validation {

namespace fs = std::filesystem;

std::string fmt(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  const double a = std::abs(v);
  if (v == 0.0) {
    os << "0";
  } else if (a >= 1e-3 && a < 1e6) {
    // Fixed with `digits` significant digits.
    const int mag = static_cast<int>(std::floor(std::log10(a)));
    const int dec = std::max(0, digits - 1 - mag);
    os << std::fixed << std::setprecision(dec) << v;
  } else {
    os << std::scientific << std::setprecision(std::max(0, digits - 1)) << v;
  }
  return os.str();
}

std::string fmtMs(double ms) {
  if (!std::isfinite(ms)) return fmt(ms);
  std::ostringstream os;
  if (ms >= 100.0)
    os << std::fixed << std::setprecision(1) << ms;
  else if (ms >= 1.0)
    os << std::fixed << std::setprecision(3) << ms;
  else
    os << std::fixed << std::setprecision(4) << ms;
  return os.str();
}

std::string fmtSci(double v) {
  if (!std::isfinite(v)) return fmt(v);
  std::ostringstream os;
  os << std::scientific << std::setprecision(1) << v;
  return os.str();
}

std::string sanitizeForFileName(std::string const& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_';
    if (ok)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace kortex::validation
