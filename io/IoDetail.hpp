// Internal helpers of kortex_io shared by its translation units. Not part of the public API;
// no VTK here either (VTK stays inside io/*.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "io/Mesh.hpp"

namespace kortex::io::detail {

namespace fs = std::filesystem;

// One message naming the file: "cannot read '<file>': <what>".
[[noreturn]] void readError(fs::path const& file, std::string const& what);
[[noreturn]] void writeError(fs::path const& file, std::string const& what);
// Every reader refuses a finite stored value that float32 cannot hold (it would become +-inf).
[[noreturn]] void beyondFloat32(fs::path const& file, std::uint64_t voxel, bool scaled = false);

// Lower-case extension, with ".nii.gz" kept whole: ".nii.gz", ".png", "" ...
std::string extensionOf(fs::path const& path);

// Throws IoError unless `file` exists and is a regular file (or a link to one).
void requireReadableFile(fs::path const& file);
std::uintmax_t fileSize(fs::path const& file);

// Numbers <-> metadata strings. Floats are printed with 9 significant digits so that a float32
// header field read back from the string is bit-identical; doubles with 17.
std::string formatFloats(std::vector<double> const& values, bool asFloat32);
// A number as a person reads it in a message: `digits` significant digits, no trailing zeros
// ("1.2", "0.00125", "1e+300").
std::string formatReadable(double value, int digits = 4);
// Parses whitespace-separated numbers; returns false if the text is not exactly `count` numbers.
bool parseNumbers(std::string const& text, std::size_t count, std::vector<double>& out);

// Allocates a HostImage for `g` (validated; an invalid geometry becomes IoError on `file`).
HostImage allocateImage(Geometry const& g, fs::path const& file, char const* label);

// Checks that an image about to be written is well formed (extents match the geometry).
void checkWritable(HostImage const& image, fs::path const& file);

// Atomic output: a private temporary directory next to the target. Files are written into it
// under their final names, then commit() renames them into place in the given order.
// The destructor removes whatever is left (on failure: everything).
class AtomicOutput {
 public:
  // Checks the target before anything is written: the parent directory exists, is a directory
  // and is writable, and the target itself is not a directory. Creates the temporary directory.
  explicit AtomicOutput(fs::path const& target);
  ~AtomicOutput();
  AtomicOutput(AtomicOutput const&) = delete;
  AtomicOutput& operator=(AtomicOutput const&) = delete;

  fs::path const& target() const { return target_; }
  fs::path const& directory() const { return dir_; }
  // Temporary path for a file that will end up as directory-of-target / name.
  fs::path temporary(std::string const& name) const { return tmp_ / name; }
  // fsyncs each file, then renames tmp/name -> dir/name in order, then removes the temp dir.
  void commit(std::vector<std::string> const& names);

 private:
  fs::path target_;
  fs::path dir_;
  fs::path tmp_;
  bool committed_ = false;
};

// Points the C library's `stderr` stream (the FILE* that C libraries such as nifti_clib, libjpeg
// and OpenJPEG print their messages to) at a temporary file for its lifetime; said() returns what
// was written there, lines joined with "; " and "** ERROR"-style prefixes dropped. File descriptor
// 2 is left alone, so std::cerr, Kokkos, MPI and other threads' writes to it are never swallowed
// (glibc lets a program assign stderr). Used under ioMutex(): one capture at a time.
class CapturedStderr {
 public:
  explicit CapturedStderr(std::string library);
  ~CapturedStderr();
  CapturedStderr(CapturedStderr const&) = delete;
  CapturedStderr& operator=(CapturedStderr const&) = delete;
  std::string said();    // ends the capture
  std::string quoted();  // " (<library>: ...)" or ""

 private:
  void restore();
  std::string library_;
  std::FILE* tmp_ = nullptr;
  std::FILE* saved_ = nullptr;
};

// The lock every public kortex::io call holds (VTK's error capture is process-wide, and
// AtomicOutput's random names come from one generator). A NIfTI read holds it around the
// library's calls only: its voxels are read and decompressed (zlib) without it.
std::recursive_mutex& ioMutex();

// --- format codecs (one translation unit each) ---
// Nifti.cpp (nifti_clib and zlib; always built). `file` may name either file of a pair.
HostImage readNifti(fs::path const& file);
// Write into out's temporary directory; return the file names to commit, in order (a pair: the
// data file, then the header).
std::vector<std::string> writeNifti(HostImage const& image, AtomicOutput const& out);
// Displacement fields: 3 components, world mm, LPS (conventions in io/ImageIO.hpp).
VectorField<Kokkos::HostSpace> readNiftiField(fs::path const& file);
std::vector<std::string> writeNiftiField(VectorField<Kokkos::HostSpace> const& field,
                                         AtomicOutput const& out);
// True for the NIfTI extensions: .nii, .nii.gz, and a pair's .hdr/.img (each optionally .gz).
bool isNiftiExtension(std::string const& ext);
// Dicom.cpp (no dependency; always built).
HostImage readDicom(fs::path const& file);        // GDCM where the build has it, else the next
HostImage readDicomKortex(fs::path const& file);  // Kortex's own: uncompressed little endian only
HostImage readDicomGdcm(fs::path const& file);    // DicomGdcm.cpp (KORTEX_HAVE_GDCM builds)
// Walks a Part 10 file's meta header and top-level data set (sequences, items, encapsulated
// fragments) and refuses, with one message, any element whose length runs past the file or whose
// structure is broken, and colour images: GDCM is handed well-formed files only (it asserts on
// some broken ones). Returns the transfer syntax UID.
std::string checkDicomStructure(fs::path const& file);

// What both DICOM readers share (Dicom.cpp). The stored pixels of one slice (little-endian
// containers of bitsAllocated / 8 bytes) -> value = (stored bits, sign-extended) * slope +
// intercept, as float.
struct DicomPixelFormat {
  int bitsAllocated = 16, bitsStored = 16, highBit = 15;
  bool isSigned = false;
  double slope = 1.0, intercept = 0.0;
};
// Returns the index of the first value that is not finite (count if none): requireDecoded
// refuses the slice then.
std::size_t decodeDicomPixels(unsigned char const* src, std::size_t count, DicomPixelFormat const& f, float* out);
void requireDecoded(fs::path const& file, DicomPixelFormat const& f, std::size_t beyond, std::size_t count);
// The metadata both readers set: `str(group, element)` is the trimmed value or "" when absent;
// `padding` the raw PixelPaddingValue when present.
void setDicomMetadata(std::map<std::string, std::string>& md, std::string const& transferSyntax,
                      std::function<std::string(std::uint16_t, std::uint16_t)> const& str, DicomPixelFormat const& f,
                      std::optional<std::uint16_t> padding);
// The slices of one series stacked into a 3D volume (readImageSeries in io/ImageIO.hpp); `what`
// names the series in messages (its folder, or the first file).
// Slices of several series (SeriesInstanceUID, then size and orientation) are never stacked
// together: the series whose UID is in `chosenSeries` is read, or the folder is refused with the
// list of its series.
HostImage readDicomSeries(std::vector<fs::path> const& files, fs::path const& what,
                          std::vector<std::string> const& chosenSeries);

// VTK / metaio based (VtkFormats.cpp): compiled, and called, only when KORTEX_HAVE_VTK.
HostImage readMetaImage(fs::path const& file);
// Writes into out's temporary directory; returns the file names to commit, in order.
std::vector<std::string> writeMetaImage(HostImage const& image, AtomicOutput const& out);
HostImage readVti(fs::path const& file);
void writeVti(HostImage const& image, fs::path const& tmpFile, fs::path const& target);
HostImage readPngOrJpeg(fs::path const& file, bool png);
// 8-bit grey, rows[j * width + i], j = 0 the top row.
void writeGrey8(std::vector<std::uint8_t> const& pixels, int width, int height,
                fs::path const& tmpFile, fs::path const& target, bool png);

// Meshes (io/Mesh.hpp), VTK part (VtkFormats.cpp; compiled and called only when KORTEX_HAVE_VTK).
// ext is ".vtp", ".stl" or ".obj". readMeshVtk returns the triangulated polygons as stored.
TriangleMesh readMeshVtk(fs::path const& file, std::string const& ext);
void writeMeshVtk(TriangleMesh const& mesh, fs::path const& tmpFile, fs::path const& target,
                  std::string const& ext);
// Contour of phi at value 0 in INDEX coordinates (vtkFlyingEdges3D on a unit-spacing grid),
// coincident points merged, degenerate triangles dropped; orientation as VTK produces it.
TriangleMesh contourZeroIndexSpace(HostImage const& phi);

}  // namespace kortex::io::detail
