// Fuzz test of the NIfTI and DICOM readers (issue 26): seeded random corruption of the header
// fields, element lengths and file lengths of real files (IXI and CT from ../shared/data, plus
// nibabel's and pydicom's own test files where those packages are installed). Every case must be
// read (an image whose data matches its geometry) or refused with one IoError / InvalidArgument /
// Unsupported of one line that names the file: never a crash, a hang (each case runs under an
// alarm), another exception type, or a sanitizer report. CMake builds this binary, and kortex_io's
// sources with it, with -fsanitize=address,undefined (KORTEX_FUZZ_SANITIZE).
//
// KORTEX_FUZZ_CASES scales the number of cases (default 1: about 4000).
#define BOOST_TEST_MODULE FuzzReaders
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

// The sanitizers' defaults when the binary runs without ctest's environment (on a GPU machine):
// protect_shadow_gap=0 lets the CUDA driver map the address range AddressSanitizer reserves
// (without it cudaGetDeviceCount fails with "out of memory" when Kokkos initialises CUDA).
extern "C" const char* __asan_default_options() { return "protect_shadow_gap=0:detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"; }

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "TestUtils.hpp"
#include "io/ImageIO.hpp"

using namespace kortex;
namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

constexpr unsigned kCaseAlarmSeconds = 30;  // a case reads a few hundred kB: seconds mean a hang

volatile sig_atomic_t gCase = -1;
void onAlarm(int) {
  static const char msg[] = "tstFuzzReaders: a case hung (alarm); see the last case printed\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(3);
}

int scale() {
  const char* s = std::getenv("KORTEX_FUZZ_CASES");
  return s ? std::max(1, std::atoi(s)) : 1;
}

fs::path data(std::string const& sub) { return test::dataDir() / sub; }

Bytes slurp(fs::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes gunzip(fs::path const& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  Bytes out;
  unsigned char buf[1 << 16];
  int n;
  while (f && (n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  if (f) gzclose(f);
  return out;
}

void spit(fs::path const& p, Bytes const& b, bool gz = false) {
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb1");
    if (!b.empty()) gzwrite(f, b.data(), unsigned(b.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

template <class T>
void put(Bytes& b, std::size_t at, T v) {
  if (at + sizeof(T) <= b.size()) std::memcpy(b.data() + at, &v, sizeof(T));
}
template <class T>
T get(Bytes const& b, std::size_t at) {
  T v{};
  if (at + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// What the readers did over all cases.
struct Tally {
  int cases = 0, read = 0, refused = 0;
  std::map<std::string, int> reasons;  // first words of the refusals
};

// Reads `path` (the case's file or folder); fails the test on anything but an image or one clean
// refusal naming the file.
void readCase(fs::path const& path, std::string const& label, Tally& t) {
  ++t.cases;
  if (std::getenv("KORTEX_FUZZ_TRACE")) std::cerr << label << " " << path << std::endl;
  alarm(kCaseAlarmSeconds);
  try {
    const HostImage img = io::readImage(path);
    alarm(0);
    img.geometry.validate();
    BOOST_TEST_REQUIRE(img.data.extent(0) == std::size_t(img.geometry.nz()), label);
    BOOST_TEST_REQUIRE(img.data.extent(1) == std::size_t(img.geometry.ny()), label);
    BOOST_TEST_REQUIRE(img.data.extent(2) == std::size_t(img.geometry.nx()), label);
    ++t.read;
    return;
  } catch (IoError const& e) {
    alarm(0);
    const std::string m = e.what();
    BOOST_TEST_REQUIRE(m.find('\n') == std::string::npos, label << ": a message of several lines: " << m);
    BOOST_TEST_REQUIRE(m.find(path.filename().string()) != std::string::npos, label << ": the message does not name the file: " << m);
    const auto colon = m.find("': ");
    t.reasons[m.substr(colon == std::string::npos ? 0 : colon + 3, 24)]++;
  } catch (InvalidArgument const& e) {
    alarm(0);
    BOOST_TEST_REQUIRE(std::string(e.what()).find('\n') == std::string::npos, label << ": " << e.what());
    t.reasons["InvalidArgument"]++;
  } catch (Unsupported const& e) {
    alarm(0);
    t.reasons["Unsupported"]++;
  } catch (std::exception const& e) {
    alarm(0);
    BOOST_FAIL(label << ": an exception other than IoError/InvalidArgument/Unsupported: " << typeid(e).name() << ": "
                     << e.what());
  }
  ++t.refused;
}

void report(std::string const& what, Tally const& t) {
  std::cout << what << ": " << t.cases << " cases, " << t.read << " read, " << t.refused << " refused\n";
  for (auto const& [r, n] : t.reasons) std::cout << "    " << n << "  " << r << "\n";
}

// ---- NIfTI ----------------------------------------------------------------------------------------

// Header fields (offset, bytes, kind) of NIfTI-1 and NIfTI-2 (nifti1.h, nifti2.h): i = integer,
// f = float; the values a case writes are chosen by kind.
struct Field {
  std::size_t offset;
  int bytes;
  char kind;
};
const std::vector<Field> kNifti1Fields = {
    {0, 4, 'i'},   {40, 2, 'i'},  {42, 2, 'i'},  {44, 2, 'i'},  {46, 2, 'i'},  {48, 2, 'i'},  {50, 2, 'i'},
    {68, 2, 'i'},  {70, 2, 'i'},  {72, 2, 'i'},  {76, 4, 'f'},  {80, 4, 'f'},  {84, 4, 'f'},  {88, 4, 'f'},
    {108, 4, 'f'}, {112, 4, 'f'}, {116, 4, 'f'}, {123, 1, 'i'}, {252, 2, 'i'}, {254, 2, 'i'}, {256, 4, 'f'},
    {260, 4, 'f'}, {264, 4, 'f'}, {268, 4, 'f'}, {272, 4, 'f'}, {276, 4, 'f'}, {280, 4, 'f'}, {284, 4, 'f'},
    {296, 4, 'f'}, {300, 4, 'f'}, {312, 4, 'f'}, {316, 4, 'f'}, {324, 4, 'f'}, {344, 4, 'i'}, {348, 4, 'i'},
    {352, 4, 'i'}, {356, 4, 'i'}};
const std::vector<Field> kNifti2Fields = {
    {0, 4, 'i'},   {12, 2, 'i'},  {14, 2, 'i'},  {16, 8, 'i'},  {24, 8, 'i'},  {32, 8, 'i'},  {40, 8, 'i'},
    {48, 8, 'i'},  {104, 8, 'f'}, {112, 8, 'f'}, {120, 8, 'f'}, {128, 8, 'f'}, {168, 8, 'i'}, {176, 8, 'f'},
    {184, 8, 'f'}, {344, 4, 'i'}, {348, 4, 'i'}, {352, 8, 'f'}, {360, 8, 'f'}, {400, 8, 'f'}, {440, 8, 'f'},
    {500, 4, 'i'}, {504, 4, 'i'}, {540, 4, 'i'}};

std::int64_t interestingInt(std::mt19937_64& rng, std::int64_t current) {
  static const std::int64_t values[] = {0, 1, -1, 2, 3, 4, 5, 7, 8, 16, 255, 256, 348, 352, 540, 544, 32767, -32768,
                                        65535, 2147483647, -2147483647 - 1, std::int64_t(1) << 31,
                                        std::int64_t(1) << 32, std::int64_t(1) << 40, std::int64_t(1) << 62,
                                        std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()};
  switch (rng() % 3) {
    case 0: return values[rng() % (sizeof values / sizeof values[0])];
    case 1: return current + std::int64_t(rng() % 9) - 4;
    default: return std::int64_t(rng());
  }
}

double interestingFloat(std::mt19937_64& rng, double current) {
  static const double values[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 1e38, 3.5e38, 1e300,
                                  std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(), 348.0, 352.0, 544.0, 1e12, -352.0};
  switch (rng() % 3) {
    case 0: return values[rng() % (sizeof values / sizeof values[0])];
    case 1: return current * (1.0 + double(int(rng() % 5) - 2) * 0.25);
    default: {
      std::uint64_t bits = rng();
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
  }
}

void mutateField(Bytes& b, Field const& f, std::mt19937_64& rng) {
  if (f.kind == 'i') {
    std::int64_t cur = 0;
    std::memcpy(&cur, b.data() + f.offset, std::min<std::size_t>(8, f.bytes));
    const std::int64_t v = interestingInt(rng, cur);
    if (f.bytes == 1) put<std::int8_t>(b, f.offset, std::int8_t(v));
    if (f.bytes == 2) put<std::int16_t>(b, f.offset, std::int16_t(v));
    if (f.bytes == 4) put<std::int32_t>(b, f.offset, std::int32_t(v));
    if (f.bytes == 8) put<std::int64_t>(b, f.offset, v);
  } else if (f.bytes == 4) {
    put<float>(b, f.offset, float(interestingFloat(rng, get<float>(b, f.offset))));
  } else {
    put<double>(b, f.offset, interestingFloat(rng, get<double>(b, f.offset)));
  }
}

// One corrupted copy of a NIfTI file's bytes.
Bytes corruptNifti(Bytes b, bool nifti2, std::mt19937_64& rng) {
  auto const& fields = nifti2 ? kNifti2Fields : kNifti1Fields;
  const int edits = 1 + int(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    const unsigned what = rng() % 10;
    if (what < 7) {
      Field const& f = fields[rng() % fields.size()];
      if (f.offset + f.bytes <= b.size()) mutateField(b, f, rng);
    } else if (what == 7) {
      b.resize(rng() % (b.size() + 1));  // cut anywhere
    } else if (what == 8) {
      const std::size_t at = rng() % std::min<std::size_t>(b.size(), nifti2 ? 560 : 400);
      if (at < b.size()) b[at] ^= static_cast<unsigned char>(1u << (rng() % 8));
    } else {
      b.resize(b.size() + rng() % 4096, static_cast<unsigned char>(rng()));  // trailing bytes
    }
  }
  return b;
}

// A real header on a small block of voxels: dims set to (n, n, n), data cut to fit (keeps the
// file's extension and offsets; the fuzz cases stay fast).
Bytes shrinkNifti1(Bytes b, int n) {
  if (b.size() < 352) return b;
  put<std::int16_t>(b, 40, 3);
  for (int i = 1; i <= 3; ++i) put<std::int16_t>(b, 40 + 2 * i, std::int16_t(n));
  for (int i = 4; i <= 7; ++i) put<std::int16_t>(b, 40 + 2 * i, 1);
  const auto offset = static_cast<std::size_t>(get<float>(b, 108));
  const int bitpix = get<std::int16_t>(b, 72);
  b.resize(std::min(b.size(), offset + std::size_t(n) * n * n * std::max(1, bitpix / 8)));
  return b;
}

struct NiftiSeed {
  std::string name;
  Bytes bytes;  // uncompressed single file, or a header of a pair
  Bytes img;    // a pair's data file (empty for a single file)
  bool nifti2 = false;
};

std::vector<NiftiSeed> niftiSeeds() {
  std::vector<NiftiSeed> seeds;
  const fs::path ixi = data("mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz");
  if (fs::exists(ixi)) seeds.push_back({"ixi", shrinkNifti1(gunzip(ixi), 20), {}, false});
  const fs::path labels = data("mri/ixi_2mm_labels");
  if (fs::is_directory(labels))
    for (auto const& e : fs::directory_iterator(labels)) {
      seeds.push_back({"dlmuse", shrinkNifti1(gunzip(e.path()), 16), {}, false});
      break;
    }
  const fs::path nib = "/usr/lib/python3/dist-packages/nibabel/tests/data";
  for (const char* f : {"anatomical.nii", "standard.nii.gz", "example_nifti2.nii.gz", "example4d.nii.gz"}) {
    if (!fs::exists(nib / f)) continue;
    Bytes b = std::string(f).size() > 3 && std::string(f).substr(std::strlen(f) - 3) == ".gz" ? gunzip(nib / f) : slurp(nib / f);
    const bool two = get<std::int32_t>(b, 0) == 540;
    if (b.size() > 200000) b.resize(200000);  // keep cases fast; truncation is a case anyway
    seeds.push_back({f, b, {}, two});
  }
  if (fs::exists(nib / "analyze.hdr") && fs::exists(nib / "analyze.img"))
    seeds.push_back({"analyze", slurp(nib / "analyze.hdr"), slurp(nib / "analyze.img"), false});
  return seeds;
}

// ---- DICOM ----------------------------------------------------------------------------------------

// A top-level data element of an explicit-VR little-endian file: where its length field and
// value are.
struct Element {
  std::uint16_t group, element;
  std::size_t lengthAt;
  int lengthBytes;
  std::size_t valueAt;
  std::uint32_t length;
  std::string vr;
};

std::vector<Element> elements(Bytes const& b) {
  std::vector<Element> out;
  std::size_t pos = 132;
  bool explicitVr = true;
  while (pos + 8 <= b.size()) {
    Element e{};
    e.group = get<std::uint16_t>(b, pos);
    e.element = get<std::uint16_t>(b, pos + 2);
    if (e.group != 0x0002 && out.size() > 0 && out.back().group == 0x0002) {
      // after the meta group: implicit VR if the next bytes do not look like a VR
      explicitVr = std::isupper(b[pos + 4]) && std::isupper(b[pos + 5]);
    }
    if (explicitVr) {
      e.vr = std::string(reinterpret_cast<const char*>(&b[pos + 4]), 2);
      const bool longForm = e.vr == "OB" || e.vr == "OW" || e.vr == "SQ" || e.vr == "UN" || e.vr == "UT" ||
                            e.vr == "OF" || e.vr == "OD" || e.vr == "OL" || e.vr == "UC" || e.vr == "UR";
      if (longForm) {
        e.lengthAt = pos + 8, e.lengthBytes = 4, e.valueAt = pos + 12;
        e.length = get<std::uint32_t>(b, pos + 8);
      } else {
        e.lengthAt = pos + 6, e.lengthBytes = 2, e.valueAt = pos + 8;
        e.length = get<std::uint16_t>(b, pos + 6);
      }
    } else {
      e.lengthAt = pos + 4, e.lengthBytes = 4, e.valueAt = pos + 8;
      e.length = get<std::uint32_t>(b, pos + 4);
    }
    out.push_back(e);
    if (e.length == 0xFFFFFFFFu || e.group == 0x7FE0) break;  // sequences of undefined length, pixels: stop
    pos = e.valueAt + e.length;
  }
  return out;
}

Bytes corruptDicom(Bytes b, std::mt19937_64& rng) {
  const std::vector<Element> els = elements(b);
  const int edits = 1 + int(rng() % 3);
  static const char digits[] = "0123456789.-+eE\\ nNaIf";
  static const char* syntaxes[] = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2",
                                   "1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.5", "1.2.840.10008.1.2.4.90",
                                   "1.2.840.10008.1.2.1.99", "9.9"};
  for (int e = 0; e < edits && !els.empty(); ++e) {
    const unsigned what = rng() % 10;
    Element const& el = els[rng() % els.size()];
    if (what < 3 && el.length >= 2 && el.length <= 8 && el.valueAt + 2 <= b.size()) {
      // a binary value (US/UL/SS: rows, columns, bits, pixel representation, ...)
      put<std::uint16_t>(b, el.valueAt, static_cast<std::uint16_t>(interestingInt(rng, get<std::uint16_t>(b, el.valueAt))));
    } else if (what < 6 && el.length > 0 && el.length < 256) {
      // a text value (DS/IS: positions, spacing, slope, frames; UIDs)
      for (std::uint32_t k = 0; k < el.length && el.valueAt + k < b.size(); ++k)
        if (rng() % 3 == 0) b[el.valueAt + k] = static_cast<unsigned char>(digits[rng() % (sizeof digits - 1)]);
    } else if (what < 8) {
      // a length field
      const std::uint32_t values[] = {0u, 1u, 2u, el.length + 1, el.length - 1, el.length * 2, 0xFFFFFFFFu, 0x7FFFFFFFu,
                                      static_cast<std::uint32_t>(rng())};
      const std::uint32_t v = values[rng() % 9];
      if (el.lengthBytes == 2) put<std::uint16_t>(b, el.lengthAt, static_cast<std::uint16_t>(v));
      else put<std::uint32_t>(b, el.lengthAt, v);
    } else if (what == 8) {
      b.resize(132 + rng() % (b.size() - 131));  // cut anywhere past the preamble
    } else {
      for (auto const& t : els)  // the transfer syntax
        if (t.group == 0x0002 && t.element == 0x0010 && t.valueAt + t.length <= b.size()) {
          const std::string s = syntaxes[rng() % 8];
          for (std::uint32_t k = 0; k < t.length; ++k) b[t.valueAt + k] = k < s.size() ? s[k] : 0;
        }
    }
  }
  return b;
}

std::vector<std::pair<std::string, Bytes>> dicomSeeds() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  for (const char* f : {"ct/pydicom_CT_small.dcm", "ct/head_ge/01.dcm"})
    if (fs::exists(data(f))) seeds.emplace_back(f, slurp(data(f)));
  const fs::path pyd = "/usr/lib/python3/dist-packages/pydicom/data/test_files";
  for (const char* f : {"MR_small.dcm", "MR_small_implicit.dcm", "MR_small_RLE.dcm", "JPEG2000.dcm", "JPGExtended.dcm"})
    if (fs::exists(pyd / f)) seeds.emplace_back(f, slurp(pyd / f));
  return seeds;
}

// The slice with `dz` mm added to the z of its ImagePositionPatient (same value length).
Bytes movedAlongZ(Bytes b, double dz) {
  for (auto const& e : elements(b)) {
    if (e.group != 0x0020 || e.element != 0x0032 || e.valueAt + e.length > b.size()) continue;
    std::string v(reinterpret_cast<const char*>(&b[e.valueAt]), e.length);
    const auto cut = v.rfind('\\');
    if (cut == std::string::npos) break;
    char z[64];
    std::snprintf(z, sizeof z, "%.4f", std::atof(v.c_str() + cut + 1) + dz);
    std::string nv = v.substr(0, cut + 1) + z;
    if (nv.size() > e.length) break;
    nv.resize(e.length, ' ');
    std::memcpy(&b[e.valueAt], nv.data(), e.length);
  }
  return b;
}

struct Workdir {
  fs::path dir;
  Workdir() {
    dir = fs::temp_directory_path() / ("kortex-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Workdir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(fuzz_nifti) {
  if (!test::requireData("mri/ixi_2mm")) return;
  signal(SIGALRM, onAlarm);
  Workdir w;
  const auto seeds = niftiSeeds();
  BOOST_TEST_REQUIRE(!seeds.empty());
  // The seeds themselves are read (a corrupted copy is judged against a file that reads).
  Tally clean;
  for (auto const& s : seeds) {
    const fs::path p = w.dir / (s.img.empty() ? "seed.nii" : "seed.hdr");
    spit(p, s.bytes);
    if (!s.img.empty()) spit(w.dir / "seed.img", s.img);
    if (s.name == "ixi" || s.name == "dlmuse" || s.name == "anatomical.nii" || s.name == "analyze") {
      BOOST_TEST_CONTEXT(s.name) { BOOST_CHECK_NO_THROW(io::readImage(p)); }
    }
    readCase(p, s.name, clean);
  }
  Tally t;
  std::mt19937_64 rng(20261126);
  const int cases = 2400 * scale();
  for (int c = 0; c < cases; ++c) {
    gCase = c;
    NiftiSeed const& s = seeds[std::size_t(c) % seeds.size()];
    const Bytes b = corruptNifti(s.bytes, s.nifti2, rng);
    const std::string label = "nifti case " + std::to_string(c) + " (" + s.name + ")";
    fs::path p;
    if (!s.img.empty()) {  // a pair: header corrupted, the data file corrupted now and then
      p = w.dir / ("c" + std::to_string(c) + ".hdr");
      spit(p, b);
      Bytes img = s.img;
      if (rng() % 4 == 0) img.resize(rng() % (img.size() + 1));
      spit(w.dir / ("c" + std::to_string(c) + ".img"), img);
    } else {
      const bool gz = rng() % 3 == 0;
      p = w.dir / ("c" + std::to_string(c) + (gz ? ".nii.gz" : ".nii"));
      spit(p, b, gz);
    }
    readCase(p, label, t);
    std::error_code ec;
    fs::remove(p, ec);
    fs::remove(w.dir / ("c" + std::to_string(c) + ".img"), ec);
  }
  report("NIfTI", t);
  BOOST_TEST(t.cases == cases);
}

BOOST_AUTO_TEST_CASE(fuzz_dicom) {
  if (!test::requireData("ct/pydicom_CT_small.dcm")) return;
  signal(SIGALRM, onAlarm);
  Workdir w;
  const auto seeds = dicomSeeds();
  Tally t;
  std::mt19937_64 rng(726);
  const int cases = 1500 * scale();
  for (int c = 0; c < cases; ++c) {
    auto const& [name, bytes] = seeds[std::size_t(c) % seeds.size()];
    const fs::path p = w.dir / ("c" + std::to_string(c) + ".dcm");
    spit(p, corruptDicom(bytes, rng));
    readCase(p, "dicom case " + std::to_string(c) + " (" + name + ")", t);
    std::error_code ec;
    fs::remove(p, ec);
  }
  report("DICOM slices", t);
  BOOST_TEST(t.cases == cases);
}

// Folders of slices: three copies of the CT slice, one of them corrupted (positions, orientation,
// sizes, series UIDs...).
BOOST_AUTO_TEST_CASE(fuzz_dicom_series) {
  if (!test::requireData("ct/pydicom_CT_small.dcm")) return;
  signal(SIGALRM, onAlarm);
  Workdir w;
  const Bytes base = slurp(data("ct/pydicom_CT_small.dcm"));
  Tally t;
  std::mt19937_64 rng(1126);
  const int cases = 300 * scale();
  for (int c = 0; c < cases; ++c) {
    const fs::path folder = w.dir / ("s" + std::to_string(c));
    fs::create_directories(folder);
    for (int k = 0; k < 3; ++k) {
      const Bytes slice = movedAlongZ(base, 2.5 * k);
      spit(folder / ("f" + std::to_string(k) + ".dcm"), k == int(c % 3) ? corruptDicom(slice, rng) : slice);
    }
    readCase(folder, "series case " + std::to_string(c), t);
    std::error_code ec;
    fs::remove_all(folder, ec);
  }
  report("DICOM series", t);
  BOOST_TEST(t.cases == cases);
}

KORTEX_REALDATA_TEST_MAIN()
