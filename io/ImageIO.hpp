// Image file I/O: NIfTI-1/-2, MetaImage, VTK XML image data, PNG/JPEG and DICOM slices and series, and
// displacement fields as NIfTI vector images (ITK/ANTs convention, see the end of this header).
//
// Everything here reads into / writes from a float32 HostImage (core/Image.hpp) whose geometry is
// what ITK (and therefore ANTs) reports for the same file: LPS world coordinates,
//   world = origin + direction * diag(spacing) * (i, j, k),
// voxel (i, j, k) of the array being voxel (i, j, k) of the file (no reordering, no flips).
// VTK is an implementation detail of kortex_io and never appears in this header.
//
// Availability: kortex_io is built in every configuration. NIfTI (through nifti_clib and zlib) and
// DICOM (through GDCM where found, else Kortex's own reader) are always available. MetaImage, .vti, PNG and JPEG
// go through VTK and exist only in builds with VTK (<kortex/Config.hpp> KORTEX_HAVE_VTK == 1);
// elsewhere isSupportedExtension() is false for them and reading or writing them throws
// kortex::Unsupported ("... needs a Kortex build with VTK; NIfTI ... is always available").
//
// Formats (chosen from the file name's extension, case-insensitive):
//   .nii .nii.gz  NIfTI through nifti_clib (headers) and zlib (voxels). Read: NIfTI-1 and NIfTI-2,
//   .hdr .img     single files and header/data pairs (.hdr + .img, either also .gz; either name
//   (+ .gz)       reads the pair), Analyze 7.5 pairs (no orientation, values as stored), any
//                 real scalar type, vox_offset and scl_slope/scl_inter honoured. Write: float32,
//                 a single file or a pair by the extension; NIfTI-2 when the image was read from
//                 NIfTI-2 (metadata nifti.version "2", which also asks for it) or an axis has
//                 more than 32767 voxels, else NIfTI-1. NIfTI-2 keeps the geometry in float64.
//                 Orientation: ITK >= 5.4's rule (see "NIfTI orientation" below).
//   .mha .mhd     MetaImage (read: any scalar type, compressed or not, .mhd + .raw/.zraw;
//                 write: float32, uncompressed; .mhd writes "<stem>.raw" next to the header).
//   .vti          VTK XML image data (origin, spacing and direction stored verbatim, in LPS).
//   .png .jpg .jpeg  2D, spacing 1, origin 0, identity direction, first file row is j = 0
//                 (as ITK). RGB is converted to luminance with ITK's weights
//                 (0.2125 R + 0.7154 G + 0.0721 B); a palette image is expanded to RGB first;
//                 grey+alpha and RGBA are accepted only when fully opaque (alpha is dropped),
//                 otherwise rejected. The readers set metadata display.min = 0 and display.max =
//                 255 (65535 for 16-bit PNG) so a PNG read and written back keeps its values.
//                 Writing: 8-bit grey. Intensities are mapped linearly from [lo, hi] to [0, 255],
//                 clamped and rounded, where [lo, hi] is metadata "display.min"/"display.max" when
//                 both parse as finite numbers with max > min, else the image's finite min/max
//                 (a constant image is written as its value clamped to [0, 255]). NaN -> 0.
//                 JPEG output is lossy (quality 95).
//   .dcm          read only: ONE DICOM slice, treated as a 2D image (a file of another or no
//                 extension is read so too when it has the 'DICM' marker at byte 128). Kortex's
//                 own reader takes uncompressed explicit or implicit VR little endian; builds with
//                 GDCM decode every other transfer syntax GDCM does (big endian, RLE, JPEG,
//                 JPEG-LS, JPEG 2000, deflate) after Kortex has walked the file's structure with
//                 bounds checks (GDCM asserts on some broken files) (dicomDecoder() says which). Values = stored value * RescaleSlope + RescaleIntercept
//                 (Hounsfield units for CT). Spacing from PixelSpacing (x = column spacing),
//                 origin from ImagePositionPatient, direction columns from ImageOrientationPatient
//                 (row cosine, column cosine, their cross product), spacing[2] = 1 as ITK/GDCM
//                 reports for a single slice. Pixel padding (0028,0120) is NOT replaced (ITK does
//                 not either); its value after rescale is in metadata "dicom.pixel_padding_value".
//                 Rejected with a clear message: multi-frame, colour (SamplesPerPixel != 1),
//                 missing or truncated pixel data, and (without GDCM) compressed or big-endian
//                 transfer syntaxes.
//   folder        the DICOM slices in it as one 3D series (readImageSeries below); a folder
//                 named like an image file (x.nii/) is refused as a directory.
//
// NIfTI orientation (ITK >= 5.4's itk::NiftiImageIO, default build where the sform is not
// "permissive"; checked against ITK 5.2 on every case where 5.2 and 5.4 agree):
//   qto = quaternion matrix if qform_code > 0, else diag(pixdim);  sto = srow if sform_code > 0.
//   * both codes 0: origin 0, identity direction.
//   * the sform is used when it is orthonormal up to column scaling AND (qform_code == 0, or
//     sform_code == 1 (scanner), or sform and qform agree (same axes, spacing and offset within
//     1e-4), or sform and qform agree element-wise (1e-5, offsets 1e-7)); otherwise the qform.
//   * qform_code == 0 with a skewed / non-orthonormal sform: rejected (ITK throws too).
//   spacing = |pixdim[1..3]|, origin = (-M[0][3], -M[1][3], M[2][3]), both times 1000 for
//   metres or 0.001 for microns (xyzt_units; ITK < 5.4 forgot to scale the origin),
//   direction column j = normalised (-M0j, -M1j, M2j)
//   (RAS -> LPS flips the first two rows). Files with dim[0] == 2 use the 2x2 block, as ITK does,
//   and keep the z offset as origin[2] (ITK drops it); a 2D slice oblique out of its plane (no
//   orthonormal 2x2 block) keeps the whole 3x3 matrix.
//   A pixdim[1..3] of an axis with more than one voxel that is 0, NaN or infinite makes the qform
//   (and the pixdim-only geometry) unusable: the sform, if orthonormal up to column scaling, gives
//   that spacing and the orientation; else the file is refused. No spacing is invented.
//   Refused before anything is allocated (docs/io.md): dimensions whose product passes 2^48,
//   a single file whose vox_offset lies inside its header (< 352, NIfTI-2 < 544), voxel data
//   the file cannot hold (a gzip stream is bounded by deflate's 1032:1), values beyond float32.
//   scl_slope == 0 (or not finite) means "no scaling" (the NIfTI-1 standard), and then scl_inter
//   is ignored too. (ITK differs in one corner: it would still add scl_inter there.)
//
// NIfTI metadata written by readImage and used by writeImage:
//   nifti.version ("1", "2" or "analyze"), nifti.qform_code, nifti.sform_code, nifti.qform (qto_xyz, 16 numbers row-major, RAS, mm of
//   the file), nifti.sform (srow_x, srow_y, srow_z, 0 0 0 1), nifti.quatern ("b c d"),
//   nifti.qoffset ("x y z"), nifti.qfac, nifti.pixdim ("dx dy dz"), nifti.dim0, nifti.xyzt_units,
//   nifti.descrip, nifti.intent_code, nifti.intent_name, nifti.datatype (on disk, e.g. "uint8"),
//   nifti.scl_slope, nifti.scl_inter (as stored; already applied to the values),
//   nifti.orientation_source ("sform", "qform" or "none": what the ITK rule picked). Numbers of
//   NIfTI-1 headers are printed with 9 significant digits (float32 exact), NIfTI-2's with 17.
//   writeImage: when these fields still describe the image's geometry (same grid within 1e-6 of
//   the spacing), the header's qform/sform fields, codes, pixdim, units and descrip are written
//   back verbatim, so a read -> write -> read round trip is exact (nifti_clib writes the quaternion
//   only with qform_code > 0 and the srow only with sform_code > 0). Otherwise (a new image, or the
//   geometry changed) both qform and sform are built from the geometry as ITK's writer does
//   (codes: the stored ones when > 0, else 1 = scanner), and a non-orthonormal direction is
//   orthogonalised (ITK coerces it too). Output is float32, scl_slope 1, scl_inter 0; except a
//   label image (metadata "kortex.label_datatype": uint8, int8, int16, uint16, int32 or uint32,
//   set by the apply job's label and nearest interpolations), written in that integer type when
//   every voxel is an integer it holds (else float32).
//
// Errors: every failure throws kortex::IoError (Unsupported for a VTK-only format in a build
// without VTK) with one message that names the file: missing
// file, a directory, unknown extension, truncated or corrupt data, 4D or higher images ("has N
// dimensions; Kortex filters take 2D or 3D scalar images"), multi-component data, zero-size images.
// nifti_clib's and VTK's own error/warning output is captured (never printed) and quoted in the
// message (nifti_clib: the C `stderr` stream is pointed at a temporary file during each call;
// file descriptor 2 is untouched, so other output is never lost). VTK: on first use kortex_io installs a capturing vtkOutputWindow and turns vtkLogger's stderr output off for
// the process, and std::cerr/std::cout are redirected while metaio (which prints) is running.
//
// Writes are atomic: the file is written into a fresh hidden directory ".kortex-tmp-<pid>-<random>"
// next to the target, keeping its real name (VTK/metaio choose encodings by extension), flushed to
// disk, then renamed onto the target; on any failure the temporary directory is removed and IoError
// is thrown, so a failed write never leaves a partial or temporary file. An unwritable target
// (missing directory, no permission, the path is a directory) is rejected before anything is
// written. MetaImage .mhd writes two files: the data file "<stem>.raw" is renamed first, then the
// header, so the header never names a data file that is not there yet.
//
// All calls take an internal lock (VTK's error capture is process-wide), so they are thread-safe
// but not concurrent. Kokkos must be initialised (the result's View is allocated in HostSpace).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "core/Image.hpp"

namespace kortex::io {

enum class Access { Read, Write };

// True when the file name's extension is one this build can read (Access::Read) or write.
bool isSupportedExtension(std::filesystem::path const& path, Access access = Access::Read);
// ".nii, .nii.gz, .mha, .mhd, .vti, .png, .jpg, .jpeg, .dcm" (no ".dcm" for Access::Write);
// without VTK ".nii, .nii.gz, .dcm". Lists what this build reads / writes.
std::string supportedExtensions(Access access = Access::Read);
// Throws what readImage / writeImage would throw for this file name's extension, before any
// work: IoError for a missing or unknown extension (".dcm" for Write included), Unsupported for
// a format this build lacks (VTK-only formats without VTK). Returns quietly otherwise.
void requireSupportedExtension(std::filesystem::path const& path, Access access);

// How to read what a path holds. `series`: SeriesInstanceUIDs to choose from where a folder (or
// a list of slices) holds several DICOM series; empty: the process default (setDicomSeries).
struct ReadOptions {
  std::vector<std::string> series;
};

// The process-wide choice of DICOM series used when ReadOptions names none (the command line's
// choice, for every job that reads images). UIDs are unique, so one list serves every folder.
void setDicomSeries(std::vector<std::string> const& series);

// The file name without its image extension, by the table of formats above (".nii.gz" and a
// pair's ".hdr.gz" whole, any case): "a/IXI012.nii.gz" -> "IXI012"; a name with another
// extension loses its last one ("x.tif" -> "x"). Jobs name their outputs after it.
std::string imageStem(std::filesystem::path const& path);

// Reads a 2D or 3D scalar image; values become float32. Throws IoError. A folder is read as one
// DICOM series (below) of the DICOM files in it (.dcm, or the 'DICM' marker at byte 128); a file
// with another or no extension that carries the 'DICM' marker is read as one DICOM slice.
HostImage readImage(std::filesystem::path const& path, ReadOptions const& options = {});

// DICOM slice files (any order) as one 3D volume: sorted by ImagePositionPatient along the slice
// normal (row x column cosine), spacing[2] = the mean distance between positions, origin = the
// first position, direction = (row, column, normal); each slice's rescale applied. Refused with
// one message: slices of other sizes, pixel spacings, orientations or modalities, two slices at
// one position, uneven spacing, a gantry tilt (tag (0018,1120) or positions
// drifting off the normal by > 0.05 degrees), a slice without position or orientation. One file:
// its 2D image. Slices of several series (SeriesInstanceUID, then size and orientation) are
// never stacked together: options.series picks one, else the refusal lists them (UID, number,
// description, slice count). Uneven spacing is judged against the precision the positions are
// written with (docs/io.md).
HostImage readImageSeries(std::vector<std::filesystem::path> const& files, ReadOptions const& options = {});

// "gdcm" when DICOM goes through GDCM (every transfer syntax it decodes), "kortex" when through
// Kortex's own reader (uncompressed little endian only).
const char* dicomDecoder();

// Writes `image` atomically in the format given by the extension. Throws IoError
// (and InvalidArgument for an image whose data does not match its geometry).
void writeImage(HostImage const& image, std::filesystem::path const& path);

// 8-bit grey PNG (.png; needs a build with VTK) or binary PGM (.pgm, netpbm P5; every build) with
// the 2D panels side by side, separated by 2-pixel white (255) columns.
// Each pixel maps [lo, hi] -> [0, 255] linearly, clamped and rounded (NaN -> 0). Panels must be
// 2D, of equal size, and at least one; lo < hi, both finite. Atomic like writeImage.
void writePngMontage(std::vector<HostImage> const& panels, std::filesystem::path const& path,
                     float lo, float hi);

// ---- Displacement fields ------------------------------------------------------------------------
// Convention (ITK and ANTs): a displacement field d lives on a grid `geometry` (the FIXED image's
// grid for a registration) and stores, at each grid point, a vector in WORLD units (mm) along the
// LPS world axes: component 0 = x (towards Left), 1 = y (Posterior), 2 = z (Superior), exactly as
// ITK holds an itk::Image<itk::Vector<float, 3>, 3> in memory. It defines the point transform
//     T(x) = x + d(x),    x a physical (LPS, mm) point,
// which is itk::DisplacementFieldTransform::TransformPoint (ITK v5.4.0
// Modules/Filtering/DisplacementField/include/itkDisplacementFieldTransform.hxx, lines 68-102:
// outputPoint = inputPoint + interpolated displacement; identity outside the field). Resampling
// (itk::ResampleImageFilter, antsApplyTransforms) gives out(x) = moving(T(x)) for each fixed-grid
// point x: the field maps FIXED-space points to MOVING-space points. antsRegistration writes its
// *Warp.nii.gz this way and antsApplyTransforms -i moving -r fixed -t field.nii.gz applies it
// (ANTs Utilities/itkantsReadWriteTransform.h reads and writes fields with a plain
// itk::ImageFileReader/Writer of the vector image, no metadata, so ITK's defaults below apply).
//
// File (NIfTI-1; .nii, .nii.gz or a .hdr/.img pair), written as ITK's NiftiImageIO writes such an image:
//   dim = {5, nx, ny, nz, 1, 3, 1, 1} (dim[0] = 5 and dim[4] = 1 (no time) are required for vector
//   intents), intent_code = 1007 (NIFTI_INTENT_VECTOR), float32, voxels component-major as NIfTI
//   orders dim[5] slowest (all x components, then all y, then all z; x index fastest within each),
//   the components stored AS ITK HOLDS THEM (LPS, NO sign change), qform = sform (codes 1) built
//   from the geometry as writeImage does, pixdim = {qfac, sx, sy, sz, 0, 0, 0, 0},
//   xyzt_units = 10 (mm and s; ITK >= 5.4 writes 10, 5.2/5.3 wrote 2), vox_offset 352,
//   scl_slope 1, scl_inter 0. Checked against a file written by ITK 5.2.1 (tstImageIO): same
//   bytes except descrip, xyzt_units and srow entries within 2 float32 ulps (ITK orthogonalises
//   the direction in float, Kortex in double); ITK 5.2.1 reads Kortex's file back to the same
//   vectors and geometry.
// ITK sources (tag v5.4.0, Modules/IO/NIFTI/src/itkNiftiImageIO.cxx): WriteImageInformation,
//   lines 1565-1608 (dim[0] = 5, intent 1007 unless metadata "intent_code" is "1006", dim[5] =
//   components, dim[4] = 1) and 1512-1513 (mm, s); Write, lines 2395-2468 (component-major
//   copy; the RAS <-> LPS flip only when m_ConvertRAS); ReadImageInformation, lines 1221-1234:
//   intent 1007 -> m_ConvertRAS = ConvertRASVectors, intent 1006 -> ConvertRASDisplacementVectors;
//   include/itkNiftiImageIO.h lines 277-279: ConvertRASVectors defaults to FALSE and
//   ConvertRASDisplacementVectors to TRUE. The flip (ConvertRASToFromLPS_*, lines 501-529)
//   negates components 0 and 1. It came with ITK commit d007ee8e78 (2023-01-21, "BUG: Fix
//   read/write of displacement field in NIFTI file format", first released in 5.4.0); ITK <= 5.3
//   wrote and read 1007 files verbatim too, and could not read 1006 files as vectors at all.
//   (ITK master, 2026, applies the 1006 flip only to 3-component fields.) So intent 1007 with LPS
//   components is what every ITK/ANTs version writes and reads back unchanged.
// Reading accepts float32/float64/integer voxels (scl_slope applied as for images) with
//   intent 1007 (components verbatim, LPS) or 1006 (NIFTI_INTENT_DISPVECT: RAS components per the
//   NIfTI standard; x and y are negated to LPS, as ITK >= 5.4 does by default), dim[0] = 5,
//   dim[4] = 1 and dim[5] = 3 on a 3D grid (nz > 1). Geometry: the same ITK rule as readImage.
//   Anything else (a scalar image, another intent, 2 or 4+ components, a time series of fields,
//   a 2D grid) is rejected with an IoError that says what the file holds and what is expected.
// Writes are atomic like writeImage. Kortex's registration keeps its field u in voxel index units
// with h(x) = x - u(x) (core/Registration.hpp); indexDisplacementToWorld converts it.

// Writes the 3-component, 3D world-space (LPS, mm) field `field` on field.geometry to a .nii or
// .nii.gz file as described above. Throws IoError (unwritable target, wrong extension, not a 3D
// field of 3 components) or InvalidArgument (data extents do not match the geometry).
void writeDisplacementField(VectorField<Kokkos::HostSpace> const& field,
                            std::filesystem::path const& path);

// Reads a displacement field written by ITK, ANTs or writeDisplacementField: 3 components, world
// mm, LPS (as ITK holds it in memory); the result's geometry is the field's grid. Throws IoError.
VectorField<Kokkos::HostSpace> readDisplacementField(std::filesystem::path const& path);

// Voxel-index displacement u (Kortex registration: h(p) = p - u(p), p and u in index units of the
// grid `geometry`) -> ITK/ANTs world displacement d on the same grid:
//     d(x) = -D diag(s) u(x)        (D = geometry.direction, s = geometry.spacing),
// because world(p) = origin + D diag(s) p, so world(p - u) - world(p) = -D diag(s) u: the point
// x + d(x) is where the registration samples the moving image. (Exact for a pure index-space
// field on the fixed grid; an affine pre-alignment must be composed by the caller.) u must have 3
// components and the size of `geometry`; the result has geometry `geometry` (else
// InvalidArgument).
VectorField<Kokkos::HostSpace> indexDisplacementToWorld(VectorField<Kokkos::HostSpace> const& u,
                                                        Geometry const& geometry);
// The inverse: u(x) = -diag(1/s) D^-1 d(x) (D^-1 computed, not assumed orthonormal).
VectorField<Kokkos::HostSpace> worldDisplacementToIndex(VectorField<Kokkos::HostSpace> const& d,
                                                        Geometry const& geometry);

}  // namespace kortex::io
