// Transform files: what `kortex register --out-affine / --out-field`, ITK and ANTs write, read for
// `kortex apply` (pipeline/Apply.hpp). No VTK here.
//
// Every transform maps a point of the FIXED (reference) space to the MOVING space it takes its
// value from, in world coordinates (LPS, mm), as ITK's registration transforms do.
//
// Formats (by the file name's extension, case-insensitive):
//   .txt .tfm   ITK text ("#Insight Transform File V1.0"), ONE transform of type
//               AffineTransform_{double,float}_3_3 or MatrixOffsetTransformBase_{double,float}_3_3:
//                 Parameters: 12 numbers, the 3x3 matrix A row-major then the translation t,
//                 FixedParameters: 3 numbers, the centre c;
//               the point map is y = A (x - c) + t + c. core/Affine.hpp itkTransformText writes it.
//   .mat        ITK's MatlabTransformIO (what antsRegistration writes as *GenericAffine.mat): a
//               MATLAB level-4 file of two column vectors. Each variable is a header of five int32
//               (type, rows, cols, imag, namlen), then namlen bytes of name (NUL included), then
//               rows * cols values (float64 when type's tens digit is 0, float32 when it is 1).
//               type = 1000 * byte order (0 little endian, 1 big endian) + 100 * storage (0 or 1,
//               vnl's row-wise flag; irrelevant for one column) + 10 * precision + matrix kind (0,
//               full numeric). The first variable is named like the transform type above and holds
//               the 12 parameters; the second, named "fixed", the 3 fixed parameters.
//   .nii .nii.gz .hdr/.img (+ .gz)   a displacement field (io/ImageIO.hpp readDisplacementField:
//               3D grid, 3 components, world mm, LPS): y = x + d(x).
// Refused with one IoError naming the file: other transform types (Euler, Similarity, Versor,
// Translation, BSpline, displacement fields in ITK text, 2D types ...) naming the type found;
// composite files and files holding several transforms (list each with its own --transform);
// wrong counts of (fixed) parameters; numbers that do not parse or are not finite; MATLAB 5 files;
// truncated files; an unknown extension. The matrix is not checked for singularity here: the job
// validates the whole chain once (core/Apply.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "core/Affine.hpp"
#include "core/Image.hpp"

namespace kortex::io {

enum class TransformFileKind { Affine, Field };

struct TransformFile {
  TransformFileKind kind = TransformFileKind::Affine;
  Matrix4 matrix{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // Affine: y = A x + a, row-major
  VectorField<Kokkos::HostSpace> field;                            // Field: d on its grid
  std::string type;  // "AffineTransform_double_3_3", ..., "displacement field"
};

// True for the extensions above (.txt, .tfm, .mat, NIfTI).
bool isTransformExtension(std::filesystem::path const& path);

// Reads one transform file (format by extension). Throws IoError.
TransformFile readTransform(std::filesystem::path const& path);

// The ITK affine parameters as a world matrix: A, and offset t + c - A c.
Matrix4 itkAffineMatrix(double const* parameters12, double const* centre3);

}  // namespace kortex::io
