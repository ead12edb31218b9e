"""Kortex from Python: the product jobs of the `kortex` command on numpy arrays and file paths.

    import numpy as np, kortex
    out = kortex.denoise_nlm(volume, patch_radius=2, search_radius=5, h=0.05)        # array in, array out
    out = kortex.denoise_bilateral("head.nii.gz", radius=3, backend="kokkos")       # or a path
    r = kortex.register_greedy("fixed.nii.gz", "moving.nii.gz")                      # dict of arrays
    kortex.write("warped.nii.gz", r["warped"], **kortex.geometry_of("fixed.nii.gz"))

Arrays are indexed (z, y, x) for 3D and (y, x) for 2D: voxel (i, j, k) of a file is array[k, j, i],
the layout of Kortex's images (nibabel's `get_fdata()` is (i, j, k): transpose it with
`np.ascontiguousarray(a.T)`; `from_nibabel` / `to_nibabel` do it, with the orientation). Any real
dtype is accepted and read as float32; a float32 C-contiguous array is used in place (no copy).
Results are new float32 arrays. Spacing and origin are (x, y, z) in mm, direction a row-major 3x3
whose columns are the axes, in LPS (ITK's convention), as `read` returns them.

backend: "auto" (Kokkos when it has a GPU back end, else the CPU reference), "cpu" or "kokkos";
variant: the Kokkos variant by strategy name, as the command's --variant. Errors raise ValueError
(bad parameters or input), OSError (files), NotImplementedError (a format this build lacks) or
RuntimeError, with the command's messages. `execution_space` names Kokkos' default space.
"""
import os as _os
import sys as _sys


def _share_libstdcxx():
    """Load libstdc++ into the global symbol scope before the native module.

    nvcc-compiled code (the CUDA build) instantiates libstdc++'s locale templates itself, so the
    module defines its own copies of facet ids such as num_put<char>::id as unique symbols. When
    another extension (numpy, torch) has already loaded libstdc++ privately (RTLD_LOCAL), the
    module's copies and libstdc++'s end up mixed, and the first formatted number (Kokkos' start)
    crashes. With libstdc++ global, every reference binds to libstdc++'s own copy.
    """
    if not _sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass  # a statically linked runtime: nothing to share


_share_libstdcxx()

from . import _kortex  # noqa: E402
from ._kortex import dicom_decoder, execution_space, has_gpu_backend  # noqa: F401,E402

__all__ = ["read", "read_series", "write", "geometry_of", "denoise_bilateral", "denoise_nlm", "denoise_multires",
           "register_unbiased", "register_greedy", "surface_phi_from_mask", "surface_denoise", "atlas_build",
           "from_nibabel", "to_nibabel", "execution_space", "has_gpu_backend", "dicom_decoder"]


def _image(x):
    """A path (str or os.PathLike) stays a path; anything else becomes an array."""
    if isinstance(x, (str, bytes, _os.PathLike)):
        return _os.fsdecode(_os.fspath(x))
    import numpy as np
    return np.asarray(x)


def read(path, series=None):
    """Read an image: dict(array, spacing, origin, direction, metadata).

    A DICOM folder is read as one series; where it holds several (different SeriesInstanceUID,
    or sizes / orientations under one UID), the read is refused with the list of them unless
    `series` names one (a SeriesInstanceUID, or a list of UIDs to choose from). `origin` has
    three values for 2D images too (the slice's position)."""
    return _kortex.read(_os.fsdecode(_os.fspath(path)), series=series)


def read_series(files, series=None):
    """DICOM slice files (any order) as one volume, sorted along the slice normal: as `read`.
    `read(folder)` does the same for the DICOM files of a folder; `series` as for `read`."""
    return _kortex.read_series([_os.fsdecode(_os.fspath(f)) for f in files], series=series)


def geometry_of(path_or_image):
    """The spacing, origin and direction of a file (or of a dict returned by `read`)."""
    d = read(path_or_image) if not isinstance(path_or_image, dict) else path_or_image
    return {k: d[k] for k in ("spacing", "origin", "direction")}


def write(path, array, spacing=None, origin=None, direction=None, metadata=None):
    """Write an array as an image, atomically; the format follows the extension."""
    _kortex.write(_os.fsdecode(_os.fspath(path)), _image(array), spacing=spacing, origin=origin,
                  direction=direction, metadata=metadata)


def denoise_bilateral(image, **kw):
    """Bilateral filter (kortex denoise bilateral): radius, sigma_spatial, sigma_range, backend, variant."""
    return _kortex.denoise_bilateral(_image(image), **kw)


def denoise_nlm(image, **kw):
    """Non-local means (kortex denoise nlm): patch_radius, search_radius, h, backend, variant."""
    return _kortex.denoise_nlm(_image(image), **kw)


def denoise_multires(image, **kw):
    """Multiresolution filter, 2D (kortex denoise multires): levels, radius, sigma_spatial,
    sigma_range (a number or "auto"), bits, integer ("auto"|"yes"|"no"), backend, variant, pyramid."""
    return _kortex.denoise_multires(_image(image), **kw)


def register_unbiased(fixed, moving, **kw):
    """Unbiased (symmetric-KL) fluid registration (kortex register unbiased): lambda_, sigma,
    iterations, affine, backend, variant. Returns dict(warped, displacement (3, z, y, x) in world mm,
    LPS, the ITK/ANTs convention, jacobian, affine, backend, execution_space, seconds)."""
    return _kortex.register_unbiased(_image(fixed), _image(moving), **kw)


def register_greedy(fixed, moving, **kw):
    """Greedy diffeomorphic registration (kortex register greedy): alpha, beta, gamma, max_step,
    scales, iterations, solver, affine, backend. Returns as register_unbiased."""
    return _kortex.register_greedy(_image(fixed), _image(moving), **kw)


def surface_phi_from_mask(mask, **kw):
    """Signed distance of a binary mask (label= or threshold=), the input of surface_denoise."""
    return _kortex.surface_phi_from_mask(_image(mask), **kw)


def surface_denoise(phi, **kw):
    """Level-set NLM surface denoising (kortex surface denoise) of a signed distance volume:
    band, patch, neighbors, c1, c2, iterations, variant, backend."""
    return _kortex.surface_denoise(_image(phi), **kw)


def atlas_build(images, out_template=None, **kw):
    """Unbiased atlas (kortex atlas build) of images given as paths, arrays, or dicts as `read`
    returns them (array + geometry; a bare array gets unit spacing): scales, iterations, solver,
    alpha, beta, gamma, max_step, affine, reference, labels, out_fields, out_warped, backend.
    Writes out_template when given and returns dict(template=read(template), report=the job's JSON
    report). Arrays go to the job through temporary NIfTI files (the job reads files: each rank
    reads its own subjects)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="kortex-atlas-") as tmp:
        paths = []
        for k, im in enumerate(images):
            if isinstance(im, (str, bytes, _os.PathLike)):
                paths.append(_os.fsdecode(_os.fspath(im)))
                continue
            path = _os.path.join(tmp, "subject-%04d.nii" % k)
            if isinstance(im, dict):
                write(path, im["array"], spacing=im.get("spacing"), origin=im.get("origin"), direction=im.get("direction"))
            else:
                write(path, im)
            paths.append(path)
        out = _os.path.join(tmp, "template.nii") if out_template is None else _os.fsdecode(_os.fspath(out_template))
        return _kortex.atlas_build(paths, out, **kw)


# nibabel: RAS world, (i, j, k) arrays. Kortex: LPS world, (k, j, i) arrays.
def from_nibabel(img):
    """(array, geometry) of a nibabel image, for the functions above (orientation from its affine)."""
    import numpy as np
    a = np.ascontiguousarray(np.asarray(img.dataobj, dtype=np.float32).T)
    A = np.asarray(img.affine, dtype=float)
    lps = np.diag([-1.0, -1.0, 1.0]) @ A[:3, :3]
    spacing = np.linalg.norm(lps, axis=0)
    direction = (lps / spacing).reshape(-1)
    origin = np.diag([-1.0, -1.0, 1.0]) @ A[:3, 3]
    return a, {"spacing": list(spacing), "origin": list(origin), "direction": list(direction)}


def to_nibabel(array, geometry):
    """A nibabel Nifti1Image of a Kortex array and its geometry (spacing, origin, direction)."""
    import numpy as np
    import nibabel as nib
    spacing = list(geometry["spacing"]) + [1.0] * (3 - len(geometry["spacing"]))  # 2D: (x, y)
    D = np.asarray(geometry["direction"], dtype=float).reshape(3, 3) * np.asarray(spacing, dtype=float)
    A = np.eye(4)
    A[:3, :3] = np.diag([-1.0, -1.0, 1.0]) @ D
    A[:3, 3] = np.diag([-1.0, -1.0, 1.0]) @ np.asarray(geometry["origin"], dtype=float)
    return nib.Nifti1Image(np.asarray(array, dtype=np.float32).T, A)
