// Atomic text output (reports, JSON, Markdown): write a temporary file in the target's
// directory, then rename it over the target. A failure never leaves a partial file.
#pragma once

#include <filesystem>
#include <string>

namespace kortex {

// Throws IoError (missing directory, no permission, target is a directory, write failure).
void writeTextFileAtomic(std::filesystem::path const& path, std::string const& content);

}  // namespace kortex
