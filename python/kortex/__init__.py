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

backend: "auto" (Kokkos when it has a GPU back end or a parallel host back end with at least the
reference's threads, else the CPU reference), "cpu" or "kokkos";
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

__all__ = ["read", "read_series", "read_field", "write", "geometry_of", "denoise_bilateral", "denoise_nlm", "denoise_multires",
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


def read_field(path):
    """Read a displacement field (ITK/ANTs NIfTI vector image; register's --out-field): dict(array
    of shape (3, z, y, x) in world mm, LPS, spacing, origin, direction)."""
    return _kortex.read_field(_os.fsdecode(_os.fspath(path)))


def geometry_of(path_or_image):
    """The spacing, origin and direction of a file (or of a dict returned by `read`)."""
    d = read(path_or_image) if not isinstance(path_or_image, dict) else path_or_image
    return {k: d[k] for k in ("spacing", "origin", "direction")}


def write(path, array, spacing=None, origin=None, direction=None, metadata=None):
    """Write an array as an image, atomically; the format follows the extension. A 4D array of
    shape (3, z, y, x) is a displacement field (world mm, LPS, as register's "displacement"),
    written as the NIfTI vector image ITK and ANTs read (.nii or .nii.gz)."""
    _kortex.write(_os.fsdecode(_os.fspath(path)), _image(array), spacing=spacing, origin=origin,
                  direction=direction, metadata=metadata)


# The defaults of register_greedy and atlas_build: the C++ ones (greedyRegistrationDefaults(), and
# GreedyParams / AtlasJob for the atlas), through the native module, never typed here.
_DEFAULTS = _kortex.defaults()
_G = _DEFAULTS["greedy"]
_GR = _DEFAULTS["register"]["greedy"]
_ATLAS = _DEFAULTS["atlas"]
_BACKEND = _DEFAULTS["backend"]


def _plain(v):
    """numpy scalars and arrays as Python numbers and lists (the parameters travel as JSON)."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _greedy(alpha, beta, gamma, max_step, scales, iterations, solver, metric, lncc_radius, mi_bins):
    """The greedy parameters as the native module reads them (keys: pipeline/ParamsJson.hpp)."""
    return {"alpha": _plain(alpha), "beta": _plain(beta), "gamma": _plain(gamma), "max_step": _plain(max_step),
            "scales": _plain(scales), "iterations": _plain(iterations), "solver": solver, "metric": metric,
            "lncc_radius": _plain(lncc_radius), "mi_bins": _plain(mi_bins)}


_GREEDY_DOC = """
    alpha           fluid operator: weight of -laplacian, > 0 (default {alpha})
    beta            fluid operator: weight of -grad div, >= 0; fft and cg solvers (default {beta})
    gamma           fluid operator: identity weight, > 0 (default {gamma})
    max_step        largest displacement per iteration, voxels of the scale (default {max_step})
    scales          down-sampling factors, coarse to fine, ending with 1 (default {scales})
    iterations      iterations per scale, one per scale (default {iterations})
    solver          fluid solve: fft|sor|cg|hybrid-sor|hybrid-cg (default {solver!r})
    metric          image mismatch: ssd|lncc (local normalised cross-correlation)|mi (Mattes mutual
                    information: images of different contrasts) (default {metric!r})
    lncc_radius     LNCC window radius R: (2R+1)^3 voxels at every scale (default {lncc_radius})
    mi_bins         mutual information's histogram bins per image, as --mi-bins (default {mi_bins})"""


_BIL = _DEFAULTS["bilateral"]
_NLM = _DEFAULTS["nlm"]
_MRES = _DEFAULTS["multires"]


def _denoise(method, params, image, out, backend, variant, spacing, **extra):
    """The denoise job (pipeline/Denoise.hpp) of these arguments; keys: pipeline/ParamsJson.hpp."""
    job = {"method": method, "backend": backend, "variant_given": variant is not None,
           method: {k: _plain(v) for k, v in params.items()}}
    if variant is not None:
        job[method]["bilateral" if method == "multires" else "variant"] = variant
    if out is not None:
        job["output"] = _os.fsdecode(_os.fspath(out))
    job.update(extra)
    return _kortex.denoise(job, _image(image),
                           spacing=None if spacing is None else [float(v) for v in spacing])


def _range(v):
    """sigma_range as JSON holds it: a number, or "inf"."""
    v = _plain(v)
    return "inf" if isinstance(v, float) and v == float("inf") else v


def denoise_bilateral(image, *, radius=_BIL["radius"], sigma_spatial=_BIL["sigma_spatial"],
                      sigma_range=_BIL["sigma_range"], backend=_BACKEND, variant=None, spacing=None, out=None):
    return _denoise("bilateral", {"radius": radius, "sigma_spatial": sigma_spatial, "sigma_range": _range(sigma_range)},
                    image, out, backend, variant, spacing)


denoise_bilateral.__doc__ = """Bilateral filter (kortex denoise bilateral): exp(-|d|^2/2 ss^2) exp(-dI^2/2 sr^2) over a
    (2r+1)^d window.

    image           a path (a file, or a folder of DICOM slices) or an array (y, x) / (z, y, x)
    radius          window radius r (default {radius})
    sigma_spatial   spatial sigma, voxels (default {sigma_spatial})
    sigma_range     range sigma, intensity units; float("inf") allowed (default {sigma_range})
    backend         auto|cpu|kokkos (default {backend!r})
    variant         Kokkos variant: naive|scratch (default None: {variant!r})
    spacing         voxel sizes of an array input (default None: 1)
    out             also write the result here, atomically (default None)

    Returns the filtered image as a float32 array.""".format(backend=_BACKEND, **_BIL)


def denoise_nlm(image, *, patch_radius=_NLM["patch_radius"], search_radius=_NLM["search_radius"], h=_NLM["h"],
                backend=_BACKEND, variant=None, spacing=None, out=None):
    return _denoise("nlm", {"patch_radius": patch_radius, "search_radius": search_radius, "h": h},
                    image, out, backend, variant, spacing)


denoise_nlm.__doc__ = """Non-local means (kortex denoise nlm): exp(-||P(x)-P(y)||^2/(|P| h^2)) over the search window.

    image           a path (a file, or a folder of DICOM slices) or an array (y, x) / (z, y, x)
    patch_radius    patch radius r, patch (2r+1)^d (default {patch_radius})
    search_radius   search radius R, window (2R+1)^d (default {search_radius})
    h               filtering parameter, intensity units (default {h})
    backend         auto|cpu|kokkos (default {backend!r})
    variant         Kokkos variant: naive|scratch|boxsum (default None: {variant!r})
    spacing         voxel sizes of an array input (default None: 1)
    out             also write the result here, atomically (default None)

    Returns the filtered image as a float32 array.""".format(backend=_BACKEND, **_NLM)


def denoise_multires(image, *, levels=_MRES["levels"], radius=_MRES["radius"], sigma_spatial=_MRES["sigma_spatial"],
                     sigma_range="auto", bits=_MRES["bits"], integer="auto", backend=_BACKEND, variant=None,
                     pyramid=None, out=None):
    params = {"levels": levels, "radius": radius, "sigma_spatial": sigma_spatial, "bits": bits}
    auto = isinstance(sigma_range, str) and sigma_range == "auto"
    if isinstance(sigma_range, str) and not auto:
        raise ValueError("sigma_range must be a number or 'auto'; got '{}'".format(sigma_range))
    if not auto:
        params["sigma_range"] = _range(float(sigma_range))
    if pyramid is not None:
        params["pyramid"] = pyramid
    return _denoise("multires", params, image, out, backend, variant, None, integer=integer, auto_sigma_range=auto,
                    bilateral_given=variant is not None, variant_given=variant is not None or pyramid is not None)


denoise_multires.__doc__ = """Multiresolution filter, 2D (kortex denoise multires): Laplacian pyramid, bilateral on
    every layer, reconstruction.

    image           a path or a 2D array (y, x)
    levels          pyramid levels L (default {levels})
    radius          bilateral window radius on every layer (default {radius})
    sigma_spatial   closeness sigma, pixels (default {sigma_spatial})
    sigma_range     similarity sigma, intensity units, float("inf"), or "auto": 2 x the noise sigma
                    estimated from the image (default "auto")
    bits            integer pipeline: data bit depth 1-15, 0 = smallest that holds the maximum (default {bits})
    integer         auto|yes|no: the exact 16-bit integer pipeline (default "auto")
    backend         auto|cpu|kokkos (default {backend!r})
    variant         Kokkos layer bilateral: naive|closeness-lut|fastmath|reuse (float) or lut (integer) (default None)
    pyramid         Kokkos pyramid kernels: unfused|fused|fused-expand|packed16|fused-reduce (default None: {pyramid!r})
    out             also write the result here, atomically (default None)

    Returns the filtered image as a float32 array.""".format(backend=_BACKEND, **_MRES)


_UNB = _DEFAULTS["register"]["unbiased"]
_AFFINE_METRIC = _DEFAULTS["register"]["affine_metric"]
_MI_BINS = _DEFAULTS["register"]["mi_bins"]
_BIAS = _DEFAULTS["register"]["bias_correct_mm"]
_AFFINE_METRIC_DOC = """
    affine_metric   the affine stage's metric, as --affine-metric: 'ncc' (one contrast) or 'mi' (Mattes
                    mutual information, mi_bins bins: any two contrasts, e.g. T2, FLAIR, PD or EPI to T1)
                    (default {m!r})
    bias_correct    remove a smooth intensity bias from both images first, as --bias-correct: each head
                    voxel divided by the head's local mean, a Gaussian of this many mm (30 suits MR at
                    1-2 mm; for MI across contrasts); 0 = off (default {b})""".format(m=_AFFINE_METRIC, b=_BIAS)
_AFFINE_BINS_DOC = """
    mi_bins         mutual information's histogram bins per image, as --mi-bins (default {b})""".format(b=_MI_BINS)

_REGISTER_OUTPUTS_DOC = """
    out_warped      write the warped image here, as --out-warped (default None)
    out_field       write the deformable part here (NIfTI), as --out-field; the whole map is the field
                    then the affine: apply(moving, fixed, [out_field, out_affine]) (default None)
    out_jacobian    write det(I - grad u) here, as --out-jacobian (default None)
    out_affine      write the affine part here (ITK text, fixed world -> moving world), as --out-affine
                    (default None)
    out_inverse_field  write the whole map's inverse (moving grid, NIfTI) here, as --out-inverse-field;
                    implies inverse=True (default None)
    out_composite   write the whole map (affine and deformable part) as one displacement field (fixed
                    grid, NIfTI) here, as --out-composite: apply(moving, fixed, [out_composite]) alone
                    (default None)
    out_report      write the job's JSON report here, as --json (default None)
    qc              a folder for the QC report (index.html and its pictures; docs/qc.md), as --qc
                    (default None)
    qc_labels, qc_fixed_labels   label map files of the moving and the fixed image, as
                    --qc-labels / --qc-fixed-labels: outlined in the report, and its mean label Dice (default None)
    (the files are written all or none: a failure leaves the files that were there before)

    Returns dict(warped, displacement (3, z, y, x): the deformable part in world mm, LPS, the
    ITK/ANTs convention, as out_field; composite_displacement: the whole map, as out_composite;
    jacobian; affine: the 4x4 world matrix, fixed -> moving, as
    out_affine; backend, execution_space, seconds, report: the job's JSON report, written: the
    files written); with inverse=True also inverse_displacement (3, z, y, x) on the moving grid
    (the whole map's inverse: moving point y -> fixed point y + e(y)) and inverse_consistency
    (mean, p99, max of |p - inv(phi(p))| inside the head in voxels, voxels, unconverged,
    max_residual). Prints nothing (the command's --quiet)."""


def _outputs(out_warped, out_field, out_jacobian, out_affine, out_inverse_field, out_report, out_composite=None,
             qc=None):
    """The job's outputs (keys: pipeline/RegisterJob.cpp), the paths as strings."""
    named = {"warped": out_warped, "field": out_field, "jacobian": out_jacobian, "affine": out_affine,
             "inverse_field": out_inverse_field, "composite": out_composite, "report": out_report, "qc": qc}
    return {k: _os.fsdecode(_os.fspath(v)) for k, v in named.items() if v is not None}


def _qc_labels(job, qc_labels, qc_fixed_labels):
    """The QC report's label maps (file paths) into the job."""
    for key, name, value in (("qc_moving_labels", "qc_labels", qc_labels),
                             ("qc_fixed_labels", "qc_fixed_labels", qc_fixed_labels)):
        if value is not None:
            if not isinstance(value, (str, bytes, _os.PathLike)):
                raise ValueError(name + " is a label map's file path")
            job[key] = _os.fsdecode(_os.fspath(value))


def _register(job, fixed, moving, fixed_spacing, moving_spacing, fixed_mask=None, moving_mask=None):
    return _kortex.register(job, _image(fixed), _image(moving),
                            fixed_spacing=None if fixed_spacing is None else [float(v) for v in fixed_spacing],
                            moving_spacing=None if moving_spacing is None else [float(v) for v in moving_spacing],
                            fixed_mask=None if fixed_mask is None else _image(fixed_mask),
                            moving_mask=None if moving_mask is None else _image(moving_mask))


def _cohort(job, fixed, moving, image_list, fixed_spacing, moving_spacing, outputs, out_dir, out_report, keep_going,
            max_memory, fixed_mask):
    """register_greedy with a list of moving images: the register cohort job."""
    asked = {}
    for key, value in outputs.items():
        if value is None or value is False:
            continue
        if value is not True:
            raise ValueError("a cohort's outputs are named after each moving image in out_dir: give out_%s=True, "
                             "not a file name" % key)
        asked[key] = True
    cohort = {"job": "register_cohort", "greedy": job["greedy"], "affine": job["affine"], "transform": job["transform"],
              "symmetric": job["symmetric"], "affine_metric": job["affine_metric"], "mi_bins": job["mi_bins"],
              "bias_correct_mm": job["bias_correct_mm"],
              "backend": job["backend"], "inverse": job["inverse"], "outputs": asked,
              "out_dir": "" if out_dir is None else _os.fsdecode(_os.fspath(out_dir)),
              "report": "" if out_report is None else _os.fsdecode(_os.fspath(out_report)),
              "moving_list": "" if image_list is None else _os.fsdecode(_os.fspath(image_list)),
              "keep_going": bool(keep_going), "max_memory": float(max_memory)}
    r = _kortex.register_cohort(cohort, _image(fixed), [_image(m) for m in moving],
                                fixed_mask=None if fixed_mask is None else _image(fixed_mask),
                                fixed_spacing=None if fixed_spacing is None else [float(v) for v in fixed_spacing],
                                moving_spacing=None if moving_spacing is None else [float(v) for v in moving_spacing])
    return r["subjects"]


def register_greedy(fixed, moving, *, alpha=_GR["alpha"], beta=_GR["beta"], gamma=_GR["gamma"],
                    max_step=_GR["max_step"], scales=tuple(_GR["scales"]), iterations=tuple(_GR["iterations"]),
                    solver=_GR["solver"], metric=_GR["metric"], lncc_radius=_GR["lncc_radius"],
                    affine=_DEFAULTS["register"]["affine"], transform="deformable", symmetric=False,
                    affine_metric=_AFFINE_METRIC, bias_correct=_BIAS,
                    mi_bins=_GR["mi_bins"], fixed_mask=None,
                    moving_mask=None, backend=_BACKEND, fixed_spacing=None, moving_spacing=None, inverse=False,
                    out_warped=None, out_field=None,
                    out_jacobian=None, out_affine=None, out_inverse_field=None, out_composite=None, out_report=None,
                    qc=None, qc_labels=None, qc_fixed_labels=None, image_list=None, out_dir=None, keep_going=False,
                    max_memory=0.0):
    job = {"method": "greedy", "affine": affine, "transform": transform, "symmetric": symmetric, "backend": backend,
           "inverse": inverse, "affine_metric": affine_metric, "mi_bins": _plain(mi_bins),
           "bias_correct_mm": _plain(bias_correct),
           "greedy": _greedy(alpha, beta, gamma, max_step, scales, iterations, solver, metric, lncc_radius, mi_bins)}
    if isinstance(moving, (list, tuple)) or image_list is not None or out_dir is not None:
        if moving_mask is not None:
            raise ValueError("moving_mask is taken by a single pair, not by a cohort; fixed_mask is")
        if qc_labels is not None or qc_fixed_labels is not None:
            raise ValueError("qc_labels and qc_fixed_labels are taken by a single pair, not by a cohort")
        outputs = {"warped": out_warped, "field": out_field, "jacobian": out_jacobian, "affine": out_affine,
                   "inverse_field": out_inverse_field, "composite": out_composite, "qc": qc}
        moving = list(moving) if isinstance(moving, (list, tuple)) else [moving]
        return _cohort(job, fixed, moving, image_list, fixed_spacing, moving_spacing, outputs, out_dir, out_report,
                       keep_going, max_memory, fixed_mask)
    if keep_going or max_memory:
        raise ValueError("keep_going and max_memory go with a cohort: give moving as a list")
    job["outputs"] = _outputs(out_warped, out_field, out_jacobian, out_affine, out_inverse_field, out_report,
                              out_composite, qc)
    _qc_labels(job, qc_labels, qc_fixed_labels)
    return _register(job, fixed, moving, fixed_spacing, moving_spacing, fixed_mask, moving_mask)


register_greedy.__doc__ = """Greedy diffeomorphic registration (kortex register greedy) of two 3D images.

    fixed, moving   paths or arrays (z, y, x)
""" + _GREEDY_DOC.format(**_GR) + """
    affine          the affine stage first; False: header alignment only, as --no-affine (default {affine})
    transform       what is fitted, as --transform: rigid | similarity | affine (the affine stage alone,
                    6, 7 or 12 parameters) | deformable (then the greedy stage; default 'deformable')
    symmetric       inverse-consistent registration, as --symmetric: the affine stage fitted both ways
                    and averaged, then both images move towards a midpoint, each by half the step; no
                    masks (default False)""".format(
    affine=_DEFAULTS["register"]["affine"]) + _AFFINE_METRIC_DOC + """
    fixed_mask, moving_mask   cost-function masks (paths or arrays on their image's grid), as
                    --fixed-mask / --moving-mask: the affine stage counts a voxel only where they are
                    nonzero, the greedy stage's force is zero where either is 0 (default None)
    backend         auto|cpu|kokkos (default {backend!r})
    fixed_spacing, moving_spacing   voxel sizes (x, y, z) of array inputs (default None: 1 mm)
    inverse         also invert the map (as --out-inverse-field does; default False)""".format(
    backend=_BACKEND) + _REGISTER_OUTPUTS_DOC + """

    Cohort: `moving` a list (or tuple) of paths or arrays, registered to `fixed` (as several --moving
    images; also with image_list or out_dir): returns a list with one dict per subject, each what a
    single pair returns (a subject skipped with keep_going: dict(moving, error)).
    image_list      a text file of more moving images, one path per line, as --list (default None)
    out_dir         the subjects' outputs, named after each moving image (STEM_warped.nii.gz, ...;
                    "subject_<i>" for an array): give out_warped=True etc.; qc=True: every subject's
                    QC report in STEM_qc/ and the cohort's page out_dir/qc.html, worst first (default None)
    out_report      the cohort's JSON report (every subject's report)
    keep_going      a subject that fails is reported and skipped (default False: the first failure raises)
    max_memory      device memory for the pairs run at once, MiB (default 0: 90 % of what is free)"""


def register_unbiased(fixed, moving, *, lambda_=_UNB["lambda"], sigma=_UNB["sigma"], iterations=_UNB["iterations"],
                      affine=_DEFAULTS["register"]["affine"], affine_metric=_AFFINE_METRIC, mi_bins=_MI_BINS,
                      bias_correct=_BIAS, backend=_BACKEND, variant=None, fixed_spacing=None,
                      moving_spacing=None, inverse=False, out_warped=None, out_field=None, out_jacobian=None,
                      out_affine=None, out_inverse_field=None, out_composite=None, out_report=None, qc=None,
                      qc_labels=None, qc_fixed_labels=None):
    fluid = {"lambda": _plain(lambda_), "sigma": _plain(sigma), "iterations": _plain(iterations)}
    if variant is not None:
        fluid["variant"] = variant
    job = {"method": "unbiased", "affine": affine, "backend": backend, "inverse": inverse, "fluid": fluid,
           "affine_metric": affine_metric, "mi_bins": _plain(mi_bins), "bias_correct_mm": _plain(bias_correct),
           "variant_given": variant is not None,
           "outputs": _outputs(out_warped, out_field, out_jacobian, out_affine, out_inverse_field, out_report,
                               out_composite, qc)}
    _qc_labels(job, qc_labels, qc_fixed_labels)
    return _register(job, fixed, moving, fixed_spacing, moving_spacing)


register_unbiased.__doc__ = """Unbiased (symmetric-KL) fluid registration (kortex register unbiased) of two 3D images.

    fixed, moving   paths or arrays (z, y, x)
    lambda_         weight of the symmetric-KL regulariser, > 0 (default {lam})
    sigma           Gaussian smoothing of the force, voxels (default {sigma})
    iterations      cap on fluid iterations (default {iterations})
    affine          the affine stage first; False: header alignment only, as --no-affine (default {affine})""".format(
    lam=_UNB["lambda"], sigma=_UNB["sigma"], iterations=_UNB["iterations"],
    affine=_DEFAULTS["register"]["affine"]) + _AFFINE_METRIC_DOC + _AFFINE_BINS_DOC + """
    backend         auto|cpu|kokkos (default {backend!r})
    variant         Kokkos force kernel: naive|recompute|reuse|two-pass (default None: the struct's {dv!r})
    fixed_spacing, moving_spacing   voxel sizes (x, y, z) of array inputs (default None: 1 mm)
    inverse         also invert the map (as --out-inverse-field does; default False)""".format(
    backend=_BACKEND, dv=_UNB["variant"]) + _REGISTER_OUTPUTS_DOC


def atlas_build(images, out_template=None, *, scales=tuple(_G["scales"]), iterations=tuple(_G["iterations"]),
                solver=_G["solver"], alpha=_G["alpha"], beta=_G["beta"], gamma=_G["gamma"], max_step=_G["max_step"],
                metric=_G["metric"], lncc_radius=_G["lncc_radius"], mi_bins=_G["mi_bins"], image_list=None, reference=None, labels=(), out_fields=None, out_warped=None,
                out_subject_labels=None, out_report=None, affine=_ATLAS["affine"], clip=_ATLAS["clip"], checkpoint=None,
                checkpoint_every=_ATLAS["checkpoint_every"], resume=_ATLAS["resume"], max_memory=_ATLAS["max_memory"],
                backend=_BACKEND, qc=None):
    def name(p):
        return "" if p is None else _os.fsdecode(_os.fspath(p))
    cohort = [name(im) if isinstance(im, (str, bytes, _os.PathLike)) else im for im in images]
    job = {"greedy": _greedy(alpha, beta, gamma, max_step, scales, iterations, solver, metric, lncc_radius, mi_bins),
           "out_template": name(out_template), "image_list": name(image_list), "reference": name(reference),
           "labels": [name(l) for l in labels], "out_fields": name(out_fields), "out_warped": name(out_warped),
           "out_subject_labels": name(out_subject_labels), "out_report": name(out_report), "out_qc": name(qc),
           "affine": affine,
           "clip": clip, "checkpoint": name(checkpoint), "checkpoint_every": _plain(checkpoint_every),
           "resume": resume, "max_memory": _plain(max_memory), "backend": backend}
    return _kortex.atlas_build(job, cohort)


atlas_build.__doc__ = """Unbiased atlas (kortex atlas build) of a cohort of 3D images.

    images          paths, arrays, or dicts as `read` returns them (array + geometry; a bare array gets
                    unit spacing). All paths: the job reads the files. Otherwise the cohort is taken in
                    memory (float32 C-contiguous arrays used in place, paths read first; no temporary
                    files); outputs are then named subject-000, subject-001, ...
    out_template    the template file (default None: none written; the template is returned anyway)
""" + _GREEDY_DOC.format(**_G) + """
    image_list      a text file with more images, one path per line, as --list (default None)
    reference       image whose grid and orientation the template takes (default None: the first)
    labels          one label map per image, same order, warped into out_warped (default ())
    out_fields      folder for each subject's displacement fields (ITK/ANTs: world mm, LPS): <name>_field
                    (template grid -> subject) and <name>_inverse_field (subject grid -> template) (default None)
    out_warped      folder for each subject warped into template space (and its labels) (default None)
    out_subject_labels  folder for each subject's atlas labels: the template-space majority of `labels`
                    carried back onto the subject's grid through its inverse field (default None)
    out_report      the job's JSON report (grids, memory, history, times), as --json (default None)
    qc              a folder for the QC report (the template, mean |u| and det J, convergence, the subjects
                    worst first; docs/qc.md), as --qc (default None)
    affine          the affine alignment first; False: header alignment only, as --no-affine (default {affine})
    clip            run on the subjects' common bounding box; False: the whole grid, as --no-clip (default {clip})
    checkpoint      folder for checkpoints, written atomically (default None: none)
    checkpoint_every  iterations between checkpoints (default {checkpoint_every})
    resume          resume from the newest checkpoint in `checkpoint` (default {resume})
    max_memory      device memory the subjects may use, MiB; 0: the device's free memory, or the host's; on a
                    GPU the subjects beyond it are streamed from pinned host memory (default {max_memory})
    backend         auto|cpu|kokkos (default {backend!r})

    Returns dict(template=read(template), report=the job's JSON report). Prints nothing (--quiet).""".format(
    backend=_BACKEND, **_ATLAS)
_SURF = _DEFAULTS["surface"]


def surface_phi_from_mask(mask, *, label=None, threshold=None, spacing=None):
    """Signed distance (voxels; negative inside) of a mask, the input of surface_denoise (as `kortex
    surface denoise --input mask`).

    mask            a path or a 3D array (z, y, x): a binary mask, a label map (with label) or a probability
                    map (with threshold)
    label           the label whose region is the inside (default None: every non-zero voxel)
    threshold       the inside is mask > threshold (default None)
    spacing         voxel sizes of an array input (default None: 1)"""
    return _kortex.surface_phi_from_mask(_image(mask), label=label, threshold=threshold, spacing=spacing)


def surface_denoise(phi, *, band=_SURF["band"], patch=_SURF["patch"], neighbors=_SURF["neighbors"], c1=_SURF["c1"],
                    c2=_SURF["c2"], iterations=_SURF["iterations"], variant=None, backend=_BACKEND, spacing=None):
    params = {"band": _plain(band), "patch": _plain(patch), "neighbors": _plain(neighbors), "c1": _plain(c1),
              "c2": _plain(c2), "iterations": _plain(iterations)}
    if variant is not None:
        params["variant"] = variant
    job = {"input_kind": "phi", "params": params, "backend": backend, "variant_given": variant is not None}
    return _kortex.surface(job, _image(phi), spacing=None if spacing is None else [float(v) for v in spacing])


surface_denoise.__doc__ = """Level-set NLM surface denoising (kortex surface denoise) of a signed distance volume.

    phi             a path or a 3D array (z, y, x): a signed distance (surface_phi_from_mask makes one)
    band            narrow band half-width, voxels (default {band})
    patch           patch size n (n^3, odd) (default {patch})
    neighbors       neighbours m per band point (default {neighbors})
    c1, c2          spatial and patch scales, voxels^2 (default {c1}, {c2})
    iterations      K (default {iterations})
    variant         Kokkos storage variant: pruned|prunedblocks|scratch|global|randomaccess (default None: {variant!r})
    backend         auto|cpu|kokkos (default {backend!r})
    spacing         voxel sizes of an array input (default None: 1)

    Returns the denoised signed distance as a float32 array.""".format(backend=_BACKEND, **_SURF)


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


def _transform(t):
    """A transform argument as the native module reads it: a path, "[path,0]" / "[path,1]" (ANTs'
    inverse flag), or a (path, inverse) pair whose flag is a bool or the integer 0 or 1."""
    if isinstance(t, (tuple, list)):
        if len(t) != 2:
            raise ValueError("a transform given as a pair is (path, inverse); got {} items: {!r}".format(len(t), t))
        path, flag = t
        # bool is an int: True/False, 0/1 (numpy's too) pass; "0", "yes", paths do not.
        import numbers
        if not (isinstance(flag, numbers.Integral) and int(flag) in (0, 1)):
            raise ValueError("a transform given as a pair is (path, inverse) with inverse a bool (or 0/1); got {!r} "
                             "as the flag of {!r} (several transforms go in a list of paths)".format(flag, path))
        return "[{},{}]".format(_os.fsdecode(_os.fspath(path)), int(flag))
    return _os.fsdecode(_os.fspath(t))


def _image_args(x, prefix):
    """(image, {prefix_spacing, prefix_origin, prefix_direction}) of a path, an array or a dict as `read` returns."""
    if isinstance(x, dict):
        if "array" not in x:
            raise ValueError(prefix + ": a dict needs an 'array' (as kortex.read returns)")
        geo = {prefix + "_" + k: (None if x.get(k) is None else [float(v) for v in x[k]])
               for k in ("spacing", "origin", "direction")}
        return _image(x["array"]), geo
    return _image(x), {}


def apply(input, reference, transforms, out=None, *, interpolation="linear", backend=_BACKEND, qc=None):
    in_image, in_geo = _image_args(input, "input")
    ref_image, ref_geo = _image_args(reference, "reference")
    import numbers
    one_pair = isinstance(transforms, tuple) and len(transforms) == 2 and isinstance(transforms[1], numbers.Integral)
    if isinstance(transforms, (str, bytes, _os.PathLike)) or one_pair:
        transforms = [transforms]  # one transform: a path, or one (path, inverse) pair
    return _kortex.apply(in_image, ref_image, [_transform(t) for t in transforms],
                         out=None if out is None else _os.fsdecode(_os.fspath(out)), interpolation=interpolation,
                         backend=backend, qc=None if qc is None else _os.fsdecode(_os.fspath(qc)), **in_geo,
                         **ref_geo)


apply.__doc__ = """Resample an image onto a reference grid through transforms (kortex apply; antsApplyTransforms'
    conventions, docs/apply.md).

    input           the image to resample: a path, a 3D array (z, y, x) or a dict as `read` returns (array +
                    geometry; a bare array has unit spacing, origin 0, identity direction)
    reference       the grid and geometry of the result: a path, an array or a dict, as `input`
    transforms      a list (or one) of transform files in antsApplyTransforms' order: the FIRST listed takes
                    the point first (ANTs' -t Warp.nii.gz -t Affine.mat, i.e. Affine(x + d(x))):
                    ITK affine text (.txt, .tfm), ITK/ANTs affine .mat, displacement fields (.nii, .nii.gz;
                    world mm, LPS, zero outside the field's grid); "[FILE,1]" or (FILE, True): the inverse of
                    an affine file (the flag a bool or 0/1)
    out             the output image, written atomically (default None: none written)
    interpolation   linear (as register's warped image) | nearest | label (summed trilinear weights per label,
                    ties to the smaller label; integer images only) (default {interpolation!r})
    backend         auto|cpu|kokkos (default {backend!r})
    qc              a folder for the QC report (index.html and its pictures: the reference with the
                    input's edges before and after, a checkerboard; docs/qc.md), as --qc (default None)

    Returns dict(array, spacing, origin, direction, metadata, backend, execution_space, seconds): the
    result on the reference grid, with the input's metadata. Points outside the input get 0.""".format(
    interpolation="linear", backend=_BACKEND)

__all__.append("apply")
