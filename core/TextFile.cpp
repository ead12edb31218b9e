#include "core/TextFile.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <unistd.h>

#include "core/Errors.hpp"

namespace kortex {

void writeTextFileAtomic(std::filesystem::path const& path, std::string const& content) {
  namespace fs = std::filesystem;
  if (path.empty()) throw IoError("output path is empty");
  if (fs::is_directory(path)) throw IoError("cannot write '" + path.string() + "': it is a directory");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir))
    throw IoError("cannot write '" + path.string() + "': directory '" + dir.string() +
                  "' does not exist");
  std::random_device rd;
  const fs::path tmp = dir / (".kortex-tmp-" + std::to_string(getpid()) + "-" +
                              std::to_string(rd()) + "-" + path.filename().string());
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os)
      throw IoError("cannot write '" + path.string() + "': " + std::strerror(errno));
    os << content;
    os.flush();
    if (!os) {
      os.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw IoError("failed writing '" + path.string() + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    throw IoError("cannot write '" + path.string() + "': " + ec.message());
  }
}

}  // namespace kortex
