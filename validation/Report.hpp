// Report helpers shared by the validation harness and the benchmarks: number formatting for
// Markdown tables and file names. The environment record, writability checks and atomic writes
// are io/Output.hpp's.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/Backend.hpp"

namespace kortex::validation {

// Number formatting for tables: fixed/scientific with `digits` significant digits;
// non-finite values print as "inf"/"-inf"/"nan".
std::string fmt(double v, int digits = 4);
std::string fmtMs(double ms);        // "0.0123", "12.3", "1234"
std::string fmtSci(double v);        // "1.2e-07"

// File-name friendly version of a device name: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3".
std::string sanitizeForFileName(std::string const& s);

}  // namespace kortex::validation
