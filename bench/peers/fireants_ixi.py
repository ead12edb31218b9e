#!/usr/bin/env python3
"""FireANTs peer of Kortex's greedy registration study (issue 28), run on the GPU machine.

    python3 bench/peers/fireants_ixi.py DATA_DIR OUT_DIR [--pairs 20] [--device cuda]
            [--fireants SRC] [--fused-ops DIR | --no-fused] [--preset quickstart|lpba40]
            [--moments 1|2] [--no-field]
    python3 bench/peers/fireants_ixi.py --dry-run DATA_DIR OUT_DIR   # pairs and settings, no torch
    python3 bench/peers/fireants_ixi.py --self-check [DATA_DIR]      # the torch-free parts
(--self-check needs numpy only; on the CPU machines use /usr/bin/python3. With DATA_DIR, or
../shared/data, it also reads the IXI files, cross-checks the nibabel and own NIfTI backends, and,
where build/ci-serial/apps/kortex (or $KORTEX_EXE) exists, applies a written field with
`kortex apply --interpolation nearest` and compares it with the nearest warp at the coordinates.)

Pairs: exactly those of validation/Greedy.cpp (runGreedyStudy): the subject ids are the names in
DATA_DIR/mri/ixi_2mm_more/t1 ending in "-T1_ds.nii.gz", minus that suffix, sorted (std::sort, byte
order); fixed = ids[0], moving = ids[k] for k = 1 .. min(PAIRS, len(ids) - 1). Labels:
DATA_DIR/mri/ixi_2mm_more/labels/<id>-T1_ds_DLMUSE.nii.gz.

Per pair, as bench/peers/elastix_ixi.sh names them (validation/Greedy.cpp reads them the same way):
  OUT/<moving>_to_<fixed>_labels.nii.gz  the moving DLMUSE map warped onto the fixed grid with
      nearest-neighbour interpolation (int16, the fixed T1's grid and qform/sform);
  OUT/<moving>_to_<fixed>_field.nii.gz   FireANTs' total map (moments + affine + greedy) as ONE
      displacement field in the ITK/ANTs convention of io/ImageIO.hpp: on the fixed grid, world mm,
      LPS, fixed point x maps to moving point x + d(x); NIfTI-1 vector image, intent 1007,
      dim {5, nx, ny, nz, 1, 3}, float32 (the formula is the one FireANTs' own
      DeformableMixin.save_as_ants_transforms uses; it is computed here on the host in float64);
  OUT/<moving>_to_<fixed>.json  {"seconds": in-process time (both T1 volumes and the moving label
      map already on the GPU -> moments + affine + greedy -> the map's coordinates and the warped
      labels back on the host, CUDA synchronised), "seconds_total": wall time of the pair incl.
      reading and writing files, "seconds_stages", "device", "fireants_commit", "fused_ops",
      "image_io", "simpleitk", "settings", ...}.
One untimed warm-up registration (2 iterations per scale, first pair) runs before the first pair so
that CUDA context creation and kernel loading are not charged to pair 1.

FireANTs settings (never changed here; preset "quickstart", the default):
  moments  MomentsRegistration(scale=4, moments=1, transl_mode="com"): centre-of-mass translation
           (fireants/scripts/template/configs/oasis_deformable.yaml, the only brain config that sets
           moments: scale 4, moments 1; the CLI's --initial-moving-transform [f,m,1] = moments 1, as
           ANTs' brain scripts initialise). --moments 2 gives second-order moments (orientation
           "rot", loss cc), docs/docs/howto/moments-scaling.md.
  affine   AffineRegistration([4, 2, 1], [200, 100, 50], Adam, lr 3e-3, cc_kernel_size 5,
           init_rigid = moments.get_affine_init()) (docs/docs/quickstart.md "register brain MRI
           scans", and docs/docs/advanced/moments.md for the moments -> affine hand-over).
  greedy   GreedyRegistration(scales [4, 2, 1], iterations [200, 100, 25], cc_kernel_size 5,
           deformation_type "compositive", smooth_grad_sigma 1, smooth_warp_sigma 0.5 (its
           default), optimizer "adam", lr 0.5, init_affine = affine.get_affine_matrix())
           (docs/docs/quickstart.md; the same as the paper's brain scripts
           fireants/scripts/pairwise/test_cumc12.py and test_ibsr.py).
  preset "lpba40": fireants/scripts/pairwise/test_lpba40.py: affine [8, 4, 2, 1] x [100, 50, 25, 20],
           lr 3e-4, cc 5; greedy [4, 2, 1] x [200, 100, 50], cc 7, smooth_grad_sigma 2,
           smooth_warp_sigma 0.5, adam lr 0.5 (moments as above).
  Loss: "fusedcc" when FireANTs' fused CUDA ops are importable, else "cc" (the rule of its paper
  scripts: loss_type = "fusedcc" if device == "cuda" else "cc"); both are its local normalised
  cross-correlation with a rectangular window of cc_kernel_size. Tolerance and blur: FireANTs'
  defaults. progress_bar=False (no tqdm output; the convergence check syncs every iteration anyway).

FireANTs' source (never copied into Kortex; the script imports it from a carried copy). This
mirror's snapshot misses a docs GIF blob, so archive only the folders needed:
    mkdir -p .carry/fireants
    git -C /work/.mirror/rohitrango+FireANTs/repo archive HEAD fireants fused_ops cli LICENSE \\
        README.md pyproject.toml | tar -x -C .carry/fireants
    git -C /work/.mirror/rohitrango+FireANTs/repo rev-parse HEAD > .carry/fireants/COMMIT
    mkdir -p .carry/data/mri && cp -r ../shared/data/mri/ixi_2mm_more .carry/data/mri/
The GPU machine's image has torch, numpy, scipy and tqdm (FireANTs' import-time needs), but no
SimpleITK and no nibabel. FireANTs imports SimpleITK at module level and builds every Image from a
SimpleITK image; where SimpleITK is missing this script installs a tiny shim module "SimpleITK"
(make_sitk_shim below) providing only what fireants.io.image.Image reads: GetArrayFromImage,
GetImageFromArray, the image's GetSize/GetSpacing/GetOrigin/GetDirection/GetDimension/
GetNumberOfComponentsPerPixel (+ setters), ReadImage through this script's NIfTI reader. Images
are read by this script (nibabel when importable, else its own NIfTI-1 reader: gzip, vox_offset,
scl_slope/scl_inter, qform/sform by ITK's rule as io/ImageIO.hpp states it, RAS -> LPS) and handed
to FireANTs' Image(itk_image) exactly as SimpleITK would (array [z, y, x], LPS geometry); with a
real SimpleITK the same arrays go through sitk.GetImageFromArray. FireANTs' algorithm is untouched.
The JSON records "image_io" (nibabel | own) and "simpleitk" (shim | SimpleITK x.y).

FireANTs' optional fused CUDA ops (fused_ops/setup.py: torch.utils.cpp_extension.CUDAExtension
"fireants_fused_ops" from fused_ops/src/*.cu; its README: `cd fused_ops && python setup.py
build_ext && python setup.py install`). On the GPU machine (nvcc 13 and torch cu130 there), built
in place in a scratch copy, nothing installed:
    rm -rf /tmp/ffo && cp -r .carry/fireants/fused_ops /tmp/ffo
    cd /tmp/ffo && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 setup.py build_ext --inplace
then pass --fused-ops /tmp/ffo/src (the folder holding fireants_fused_ops*.so: build_ext --inplace
puts it beside the sources; 150 s on 6 cores, 35 MB for sm_90). FireANTs picks them up
by import (fireants.interpolator: FFO_AVAILABLE, USE_FFO env); the JSON's "fused_ops" says whether
they were used (the dispatcher's use_ffo and the loss class). --no-fused sets USE_FFO=False and
uses loss "cc". bench/peers/run_fireants_device.sh does all of this on the GPU machine.

Checked without a GPU (Debian's python3-torch 1.13, CPU, --device cpu --no-fused, the shim, both
NIfTI backends): the whole pipeline runs on IXI pairs, and `kortex apply --interpolation nearest`
with the written field reproduces the written label map on every voxel. Not checked here: torch
2.x on CUDA and the fused ops (their build and the fusedcc / fused sampler paths).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import struct
import sys
import tempfile
import time
import types

sys.dont_write_bytecode = True

T1_SUFFIX = "-T1_ds.nii.gz"
LABEL_SUFFIX = "-T1_ds_DLMUSE.nii.gz"
STUDY = os.path.join("mri", "ixi_2mm_more")

PRESETS = {
    "quickstart": {
        "source": "docs/docs/quickstart.md (brain MRI); greedy = fireants/scripts/pairwise/test_cumc12.py, test_ibsr.py",
        "affine": {"scales": [4, 2, 1], "iterations": [200, 100, 50], "optimizer": "Adam",
                   "optimizer_lr": 3e-3, "cc_kernel_size": 5},
        "greedy": {"scales": [4, 2, 1], "iterations": [200, 100, 25], "cc_kernel_size": 5,
                   "deformation_type": "compositive", "smooth_grad_sigma": 1.0, "smooth_warp_sigma": 0.5,
                   "optimizer": "adam", "optimizer_lr": 0.5},
    },
    "lpba40": {
        "source": "fireants/scripts/pairwise/test_lpba40.py",
        "affine": {"scales": [8, 4, 2, 1], "iterations": [100, 50, 25, 20], "optimizer": "Adam",
                   "optimizer_lr": 3e-4, "cc_kernel_size": 5},
        "greedy": {"scales": [4, 2, 1], "iterations": [200, 100, 50], "cc_kernel_size": 7,
                   "deformation_type": "compositive", "smooth_grad_sigma": 2.0, "smooth_warp_sigma": 0.5,
                   "optimizer": "adam", "optimizer_lr": 0.5},
    },
}
MOMENTS_SOURCE = "fireants/scripts/template/configs/oasis_deformable.yaml (moments: scale 4, moments 1); docs/docs/advanced/moments.md"


def fail(msg: str, code: int = 2):
    print(f"fireants_ixi.py: {msg}", file=sys.stderr)
    sys.exit(code)


# ---- pairs ---------------------------------------------------------------------------------------

def study_ids(t1_dir: str) -> list:
    """validation/Registration.cpp studySubjectIds: names ending in -T1_ds.nii.gz, suffix removed,
    sorted bytewise (std::sort on std::string)."""
    if not os.path.isdir(t1_dir):
        return []
    ids = [n[: -len(T1_SUFFIX)] for n in os.listdir(t1_dir) if len(n) > len(T1_SUFFIX) and n.endswith(T1_SUFFIX)]
    return sorted(ids, key=lambda s: s.encode())


def study_pairs(ids: list, n_pairs: int) -> list:
    """validation/Greedy.cpp runGreedyStudy: (moving ids[k], fixed ids[0]), k = 1..min(n, len-1)."""
    n = min(n_pairs, len(ids) - 1)
    return [(ids[k], ids[0]) for k in range(1, n + 1)]


def pair_paths(data_dir: str, sid: str):
    root = os.path.join(data_dir, STUDY)
    return os.path.join(root, "t1", sid + T1_SUFFIX), os.path.join(root, "labels", sid + LABEL_SUFFIX)


# ---- NIfTI-1: fields, ITK geometry, own reader/writer, nibabel backend ----------------------------

_DTYPES = {2: "u1", 4: "i2", 8: "i4", 16: "f4", 64: "f8", 256: "i1", 512: "u2", 768: "u4", 1024: "i8", 1280: "u8"}
_GEOM_KEYS = ("qform_code", "sform_code", "quatern", "qoffset", "srow", "pixdim", "xyzt_units")


class Volume:
    """A 3D scalar image as SimpleITK hands it to FireANTs: array [z, y, x] (float64 or the labels'
    integers), LPS geometry (spacing, origin, direction as ITK reports them), and the raw NIfTI
    geometry fields (to write other images on the same grid with the same qform/sform)."""

    def __init__(self, array, spacing, origin, direction, fields):
        self.array = array
        self.spacing = tuple(float(s) for s in spacing)
        self.origin = tuple(float(o) for o in origin)
        self.direction = direction  # 3x3 numpy, columns = axis directions (LPS)
        self.fields = fields

    @property
    def size(self):  # (nx, ny, nz), ITK's GetSize order
        return tuple(int(s) for s in self.array.shape[::-1])

    def index_to_physical(self):
        import numpy as np
        m = np.eye(4)
        m[:3, :3] = self.direction * np.asarray(self.spacing)[None, :]
        m[:3, 3] = self.origin
        return m


def _quatern_matrix(np, b, c, d, qoff, pixdim):
    # nifti1.h / nifti_quatern_to_mat44: rotation from (b, c, d), columns scaled by dx, dy, qfac*dz.
    a = 1.0 - (b * b + c * c + d * d)
    if a < 1e-7:
        s = 1.0 / math.sqrt(b * b + c * c + d * d)
        a, b, c, d = 0.0, b * s, c * s, d * s
    else:
        a = math.sqrt(a)
    r = np.array([[a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
                  [2 * (b * c + a * d), a * a + c * c - b * b - d * d, 2 * (c * d - a * b)],
                  [2 * (b * d - a * c), 2 * (c * d + a * b), a * a + d * d - c * c - b * b]])
    qfac = -1.0 if pixdim[0] < 0 else 1.0
    dx, dy, dz = [p if p > 0 else 1.0 for p in (abs(pixdim[1]), abs(pixdim[2]), abs(pixdim[3]))]
    m = np.eye(4)
    m[:3, :3] = r * np.array([dx, dy, qfac * dz])[None, :]
    m[:3, 3] = qoff
    return m


def itk_geometry(np, fields, size):
    """spacing, origin, direction (LPS) by ITK >= 5.4's NIfTI rule as io/ImageIO.hpp states it
    (sform when orthonormal up to column scaling and (qform_code == 0 or sform_code == 1 or the two
    agree), else the qform; both codes 0: origin 0, identity), simplified to 3D files."""
    pix = fields["pixdim"]
    spacing = [abs(p) if (p != 0 and math.isfinite(p)) else 1.0 for p in pix[1:4]]
    qc, sc = fields["qform_code"], fields["sform_code"]
    if qc <= 0 and sc <= 0:
        return spacing, [0.0, 0.0, 0.0], np.eye(3)
    qto = (_quatern_matrix(np, *fields["quatern"], fields["qoffset"], pix) if qc > 0
           else np.diag([spacing[0], spacing[1], spacing[2], 1.0]))
    use_s = False
    if sc > 0:
        sto = np.vstack([np.asarray(fields["srow"], dtype=float).reshape(3, 4), [0, 0, 0, 1]])
        cols = np.linalg.norm(sto[:3, :3], axis=0)
        ortho = bool(np.all(cols > 0)) and np.allclose((sto[:3, :3] / cols).T @ (sto[:3, :3] / cols), np.eye(3), atol=1e-4)
        agree = qc > 0 and np.allclose(sto, qto, atol=1e-4)
        if qc <= 0 and not ortho:
            raise ValueError("skewed sform and no qform (ITK refuses such a file too)")
        use_s = ortho and (qc <= 0 or sc == 1 or agree)
    m = sto if use_s else qto
    unit = {1: 1000.0, 3: 0.001}.get(int(fields["xyzt_units"]) & 7, 1.0)
    lps = np.diag([-1.0, -1.0, 1.0])
    lin = lps @ m[:3, :3]
    direction = lin / np.linalg.norm(lin, axis=0)[None, :]
    origin = (lps @ m[:3, 3]) * unit
    return [s * unit for s in spacing], list(origin), direction


def _parse_header(raw: bytes):
    if len(raw) < 348:
        raise ValueError("truncated NIfTI header")
    e = "<" if struct.unpack("<i", raw[:4])[0] == 348 else ">"
    if struct.unpack(e + "i", raw[:4])[0] != 348:
        raise ValueError("not a NIfTI-1 file (sizeof_hdr != 348; NIfTI-2 is not read here)")
    u = lambda fmt, off: struct.unpack_from(e + fmt, raw, off)  # noqa: E731
    f = {
        "endian": e, "dim": list(u("8h", 40)), "intent_code": u("h", 68)[0], "datatype": u("h", 70)[0],
        "pixdim": list(u("8f", 76)), "vox_offset": u("f", 108)[0], "scl_slope": u("f", 112)[0],
        "scl_inter": u("f", 116)[0], "xyzt_units": raw[123], "qform_code": u("h", 252)[0],
        "sform_code": u("h", 254)[0], "quatern": list(u("3f", 256)), "qoffset": list(u("3f", 268)),
        "srow": list(u("12f", 280)), "magic": raw[344:348],
    }
    if f["magic"] not in (b"n+1\x00", b"ni1\x00"):
        raise ValueError("not a NIfTI-1 file (magic %r)" % f["magic"])
    return f


def _open_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def read_nifti_own(path: str) -> Volume:
    import numpy as np
    raw = _open_bytes(path)
    f = _parse_header(raw)
    if f["magic"] != b"n+1\x00":
        raise ValueError(f"{path}: header/image pairs are not read here")
    nd = f["dim"][0]
    size = f["dim"][1:4]
    if nd < 3 or any(d > 1 for d in f["dim"][4:nd + 1]) or min(size) < 1:
        raise ValueError(f"{path}: not a 3D scalar image (dim {f['dim']})")
    if f["datatype"] not in _DTYPES:
        raise ValueError(f"{path}: datatype {f['datatype']} not read here")
    dt = np.dtype(f["endian"] + _DTYPES[f["datatype"]])
    n = size[0] * size[1] * size[2]
    off = int(f["vox_offset"])
    if off < 352 or off + n * dt.itemsize > len(raw):
        raise ValueError(f"{path}: vox_offset {off} or data size inconsistent with the file")
    arr = np.frombuffer(raw, dtype=dt, count=n, offset=off).reshape(size[2], size[1], size[0])
    slope, inter = f["scl_slope"], f["scl_inter"]
    inter = inter if math.isfinite(inter) else 0.0
    if math.isfinite(slope) and slope != 0 and not (slope == 1 and inter == 0):
        arr = arr.astype(np.float64) * slope + inter
    else:  # no scaling (slope 0/NaN, or the identity): integers stay integers, as nibabel keeps them
        arr = arr.astype(np.float64) if dt.kind == "f" else arr.astype(dt.newbyteorder("="))
    spacing, origin, direction = itk_geometry(np, f, size)
    return Volume(np.ascontiguousarray(arr), spacing, origin, direction, {k: f[k] for k in _GEOM_KEYS})


def read_nifti_nibabel(path: str) -> Volume:
    import nibabel as nib
    import numpy as np
    img = nib.load(path)
    h = img.header
    if len(img.shape) != 3:
        raise ValueError(f"{path}: not a 3D scalar image (shape {img.shape})")
    f = {"qform_code": int(h["qform_code"]), "sform_code": int(h["sform_code"]),
         "quatern": [float(h["quatern_b"]), float(h["quatern_c"]), float(h["quatern_d"])],
         "qoffset": [float(h["qoffset_x"]), float(h["qoffset_y"]), float(h["qoffset_z"])],
         "srow": [float(v) for v in list(h["srow_x"]) + list(h["srow_y"]) + list(h["srow_z"])],
         "pixdim": [float(v) for v in h["pixdim"]], "xyzt_units": int(h["xyzt_units"])}
    arr = np.asanyarray(img.dataobj)  # scl_slope/scl_inter applied by nibabel (float64) when set
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float64)
    arr = np.ascontiguousarray(arr.transpose(2, 1, 0))
    spacing, origin, direction = itk_geometry(np, f, list(img.shape))
    return Volume(arr, spacing, origin, direction, f)


_UMASK = os.umask(0)
os.umask(_UMASK)


def _atomic_write(path: str, write, suffix: str = ""):
    """write(tmp_path) into a temporary file beside `path`, then rename it over `path` (no partial
    output on failure); the file gets the umask's permissions, as an ordinary write would."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fireants-tmp-", suffix=suffix, dir=d)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_bytes(tmp: str, payload: bytes):
    with open(tmp, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


def _header_bytes(fields, size, ncomp: int, datatype: int, bitpix: int, intent: int) -> bytes:
    h = bytearray(352)
    struct.pack_into("<i", h, 0, 348)
    dim = [5, size[0], size[1], size[2], 1, ncomp, 1, 1] if ncomp > 1 else [3, size[0], size[1], size[2], 1, 1, 1, 1]
    struct.pack_into("<8h", h, 40, *dim)
    struct.pack_into("<h", h, 68, intent)
    struct.pack_into("<hh", h, 70, datatype, bitpix)
    pix = list(fields["pixdim"][:4]) + [0.0, 0.0, 0.0, 0.0]
    pix[0] = -1.0 if pix[0] < 0 else 1.0
    struct.pack_into("<8f", h, 76, *pix)
    struct.pack_into("<fff", h, 108, 352.0, 1.0, 0.0)  # vox_offset, scl_slope, scl_inter
    h[123] = 10 if ncomp > 1 else int(fields["xyzt_units"])  # mm + s for the field, as ITK >= 5.4
    struct.pack_into("<hh", h, 252, max(int(fields["qform_code"]), 0), max(int(fields["sform_code"]), 0))
    struct.pack_into("<3f", h, 256, *fields["quatern"])
    struct.pack_into("<3f", h, 268, *fields["qoffset"])
    struct.pack_into("<12f", h, 280, *fields["srow"])
    h[344:348] = b"n+1\x00"
    return bytes(h)  # bytes 348..351: the extension flag, zero


def write_nifti_own(path: str, data_czyx, grid: Volume, intent: int = 0):
    """data [z, y, x] (scalar) or [c, z, y, x] (vector, NIfTI's dim[5] slowest), int16 or float32."""
    import numpy as np
    ncomp = data_czyx.shape[0] if data_czyx.ndim == 4 else 1
    dt = {np.dtype(np.int16): (4, 16), np.dtype(np.float32): (16, 32)}[data_czyx.dtype]
    hdr = _header_bytes(grid.fields, grid.size, ncomp, dt[0], dt[1], intent)
    body = np.ascontiguousarray(data_czyx).astype(data_czyx.dtype.newbyteorder("<"), copy=False).tobytes()
    payload = gzip.compress(hdr + body, compresslevel=4) if path.endswith(".gz") else hdr + body
    _atomic_write(path, lambda tmp: _write_bytes(tmp, payload))


def write_nifti_nibabel(path: str, data_czyx, grid: Volume, intent: int = 0):
    import nibabel as nib
    import numpy as np
    f = grid.fields
    h = nib.Nifti1Header()
    if data_czyx.ndim == 4:
        arr = data_czyx.transpose(3, 2, 1, 0)[:, :, :, None, :]  # (x, y, z, 1, c)
        h["xyzt_units"] = 10
    else:
        arr = data_czyx.transpose(2, 1, 0)
        h["xyzt_units"] = int(f["xyzt_units"])
    h.set_data_dtype(data_czyx.dtype)
    h.set_data_shape(arr.shape)
    pix = list(f["pixdim"][:4]) + [0.0] * (len(arr.shape) - 3)
    pix[0] = -1.0 if pix[0] < 0 else 1.0
    h["pixdim"][: len(pix)] = pix
    h["qform_code"], h["sform_code"] = max(int(f["qform_code"]), 0), max(int(f["sform_code"]), 0)
    h["quatern_b"], h["quatern_c"], h["quatern_d"] = f["quatern"]
    h["qoffset_x"], h["qoffset_y"], h["qoffset_z"] = f["qoffset"]
    h["srow_x"], h["srow_y"], h["srow_z"] = f["srow"][0:4], f["srow"][4:8], f["srow"][8:12]
    h["intent_code"] = intent
    h.set_slope_inter(1.0, 0.0)
    img = nib.Nifti1Image(np.asanyarray(arr), None, header=h)
    _atomic_write(path, lambda tmp: nib.save(img, tmp), ".nii.gz" if path.endswith(".gz") else ".nii")


def have_nibabel() -> bool:
    try:
        import nibabel
        return bool(nibabel.__version__)
    except ImportError:
        return False


class NiftiIO:
    def __init__(self, prefer: str = "auto"):
        have_nib = prefer in ("auto", "nibabel") and have_nibabel()
        if prefer == "nibabel" and not have_nib:
            fail("nibabel is not importable")
        self.name = "nibabel" if have_nib else "own"
        self.read = read_nifti_nibabel if have_nib else read_nifti_own
        self.write = write_nifti_nibabel if have_nib else write_nifti_own


# ---- FireANTs' coordinate conventions (fireants/io/image.py), in numpy -----------------------------

def torch2phy(vol: Volume):
    """FireANTs Image.torch2phy: px2phy @ torch2px, torch2px = diag((size-1)/2) + (size-1)/2 (x, y, z)."""
    import numpy as np
    half = (np.asarray(vol.size, dtype=float) - 1) * 0.5
    t2px = np.eye(4)
    t2px[:3, :3] = np.diag(half)
    t2px[:3, 3] = half
    return vol.index_to_physical() @ t2px


def fixed_grid_physical(vol: Volume):
    import numpy as np
    nx, ny, nz = vol.size
    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    idx = np.stack([i, j, k], axis=-1).astype(np.float64)  # [z, y, x, 3]
    m = vol.index_to_physical()
    return idx @ m[:3, :3].T + m[:3, 3]


def field_from_coords(coords, fixed: Volume, moving: Volume):
    """coords [z, y, x, 3]: FireANTs' warped coordinates (moving image's normalised torch space, x
    first) at each fixed voxel. Returns d [3, z, y, x] float32, world mm LPS, d = phi(x) - x with
    phi(x) = moving_t2p(coords(x)) (DeformableMixin.save_as_ants_transforms' formula)."""
    import numpy as np
    mt = torch2phy(moving)
    moving_phys = np.asarray(coords, dtype=np.float64) @ mt[:3, :3].T + mt[:3, 3]
    d = moving_phys - fixed_grid_physical(fixed)
    return np.ascontiguousarray(np.moveaxis(d, -1, 0)).astype(np.float32)


def label_coords_matrix(moving: Volume, labels: Volume):
    """4x4 from the moving T1's normalised torch coordinates to the label map's (identity when the
    label map lies on the T1's grid, as in IXI)."""
    import numpy as np
    return np.linalg.inv(torch2phy(labels)) @ torch2phy(moving)


def sample_nearest_numpy(labels_zyx, coords):
    """torch F.grid_sample(mode='nearest', padding_mode='zeros', align_corners=True) in numpy."""
    import numpy as np
    nz, ny, nx = labels_zyx.shape
    size = np.array([nx, ny, nz], dtype=float)
    p = np.rint((np.asarray(coords, dtype=np.float64) + 1.0) * 0.5 * (size - 1)).astype(np.int64)
    inside = np.all((p >= 0) & (p <= (size - 1).astype(np.int64)), axis=-1)
    pc = np.where(inside[..., None], p, 0)
    out = labels_zyx[pc[..., 2], pc[..., 1], pc[..., 0]]
    return np.where(inside, out, 0)


def mean_dice(fixed_labels, warped):
    """Mean Dice over the labels of the fixed map (0 excluded): a log line only; Kortex computes the
    study's Dice from the files."""
    import numpy as np
    a = fixed_labels.astype(np.int64).ravel()
    b = warped.astype(np.int64).ravel()
    labs = np.unique(a)
    labs = labs[labs != 0]
    n = int(max(a.max(), b.max())) + 1
    ca, cb = np.bincount(a, minlength=n), np.bincount(b, minlength=n)
    inter = np.bincount(a[a == b], minlength=n)
    return float(np.mean([2.0 * inter[l] / (ca[l] + cb[l]) for l in labs])) if len(labs) else float("nan")


# ---- SimpleITK shim ---------------------------------------------------------------------------------

def make_sitk_shim(io: NiftiIO):
    """The few SimpleITK calls fireants.io.image.Image makes, on numpy arrays. Anything else raises."""
    import numpy as np
    mod = types.ModuleType("SimpleITK")
    mod.__doc__ = "bench/peers/fireants_ixi.py shim: not SimpleITK"

    class Image:
        def __init__(self, array, is_vector=False):
            self._a = np.asarray(array)
            self._vec = is_vector
            nd = self._a.ndim - (1 if is_vector else 0)
            self._spacing, self._origin = (1.0,) * nd, (0.0,) * nd
            self._direction = tuple(np.eye(nd).ravel())

        def GetDimension(self):
            return self._a.ndim - (1 if self._vec else 0)

        def GetSize(self):
            return tuple(int(s) for s in self._a.shape[: self.GetDimension()][::-1])

        def GetNumberOfComponentsPerPixel(self):
            return int(self._a.shape[-1]) if self._vec else 1

        def GetSpacing(self):
            return self._spacing

        def GetOrigin(self):
            return self._origin

        def GetDirection(self):
            return self._direction

        def SetSpacing(self, s):
            self._spacing = tuple(float(v) for v in s)

        def SetOrigin(self, o):
            self._origin = tuple(float(v) for v in o)

        def SetDirection(self, d):
            self._direction = tuple(float(v) for v in d)

        def CopyInformation(self, other):
            self._spacing, self._origin, self._direction = other._spacing, other._origin, other._direction

    def GetArrayFromImage(img):
        return img._a

    def GetImageFromArray(array, isVector=False):
        return Image(array, isVector)

    def ReadImage(path, *args, **kwargs):
        v = io.read(path)
        img = Image(v.array)
        img.SetSpacing(v.spacing)
        img.SetOrigin(v.origin)
        img.SetDirection(v.direction.ravel())
        return img

    def _missing(name):
        def f(*args, **kwargs):
            raise NotImplementedError(f"SimpleITK.{name} is not provided by fireants_ixi.py's shim")
        return f

    mod.Image = Image
    mod.SimpleITK = mod  # fireants.io.image annotates with sitk.SimpleITK.Image
    mod.GetArrayFromImage, mod.GetImageFromArray, mod.ReadImage = GetArrayFromImage, GetImageFromArray, ReadImage
    mod.ProcessObject_SetGlobalWarningDisplay = lambda flag: None
    for name in ("WriteImage", "DICOMOrient", "AffineTransform", "WriteTransform", "ReadTransform"):
        setattr(mod, name, _missing(name))
    mod.__file__ = "<fireants_ixi.py SimpleITK shim>"  # inspect (torch's op registration) reads every module's

    def _attr(name):
        if name.startswith("__"):  # module protocol names (__file__, __path__, __spec__ ...): absent, as usual
            raise AttributeError(name)
        return _missing(name)

    mod.__getattr__ = _attr
    return mod


# ---- FireANTs on the GPU ----------------------------------------------------------------------------

class FireAnts:
    """Imports FireANTs from SRC (and its fused ops from FUSED when given), SimpleITK or the shim."""

    def __init__(self, src: str, fused_dir: str | None, use_fused: bool, io: NiftiIO):
        if not os.path.isdir(os.path.join(src, "fireants")):
            fail(f"no FireANTs source under {src} (see this script's header for the carry commands)")
        if not use_fused:
            os.environ["USE_FFO"] = "False"
        elif fused_dir:
            sys.path.insert(0, os.path.abspath(fused_dir))
        sys.path.insert(0, os.path.abspath(src))
        try:
            import SimpleITK as real_sitk
            self.sitk, self.sitk_name = real_sitk, "SimpleITK " + str(getattr(real_sitk, "__version__", "?"))
        except ImportError:
            self.sitk = sys.modules["SimpleITK"] = make_sitk_shim(io)
            self.sitk_name = "shim (bench/peers/fireants_ixi.py make_sitk_shim)"
        import torch
        import torch.nn.functional as F
        from fireants.io.image import Image, BatchedImages
        from fireants.registration.moments import MomentsRegistration
        from fireants.registration.affine import AffineRegistration
        from fireants.registration.greedy import GreedyRegistration
        from fireants import interpolator as fi_mod
        import logging
        for h in logging.getLogger().handlers:  # fireants.registration.moments calls basicConfig(INFO)
            h.setLevel(logging.WARNING)
        self.torch, self.F = torch, F
        self.Image, self.BatchedImages = Image, BatchedImages
        self.Moments, self.Affine, self.Greedy = MomentsRegistration, AffineRegistration, GreedyRegistration
        self.ffo_available = bool(fi_mod.FFO_AVAILABLE)
        self.use_ffo = bool(fi_mod.fireants_interpolator.use_ffo)
        self.loss_type = "fusedcc" if (use_fused and self.ffo_available) else "cc"
        commit_file = os.path.join(src, "COMMIT")
        self.commit = open(commit_file).read().strip() if os.path.exists(commit_file) else os.environ.get("FIREANTS_COMMIT", "unknown")

    def image(self, vol: Volume, device: str):
        itk = self.sitk.GetImageFromArray(vol.array.astype("float64"))
        itk.SetSpacing(vol.spacing)
        itk.SetOrigin(vol.origin)
        itk.SetDirection(tuple(float(v) for v in vol.direction.ravel()))
        return self.BatchedImages([self.Image(itk, device=device, dtype=self.torch.float32)])

    def register(self, fixed, moving, preset: dict, moments: int, sync, iterations_override=None):
        """moments -> affine -> greedy with the preset's settings; returns (greedy, stage seconds)."""
        a_cfg, g_cfg = dict(preset["affine"]), dict(preset["greedy"])
        if iterations_override is not None:
            a_cfg["iterations"] = [iterations_override] * len(a_cfg["scales"])
            g_cfg["iterations"] = [iterations_override] * len(g_cfg["scales"])
        stages = {}
        t = time.perf_counter()
        mom = self.Moments(scale=4, fixed_images=fixed, moving_images=moving, moments=moments,
                           orientation="rot", transl_mode="com", loss_type="cc", progress_bar=False)
        mom.optimize()
        sync()
        stages["moments"], t = time.perf_counter() - t, time.perf_counter()
        aff = self.Affine(a_cfg["scales"], a_cfg["iterations"], fixed, moving, loss_type=self.loss_type,
                          optimizer=a_cfg["optimizer"], optimizer_lr=a_cfg["optimizer_lr"],
                          cc_kernel_size=a_cfg["cc_kernel_size"], init_rigid=mom.get_affine_init(),
                          progress_bar=False)
        aff.optimize()
        sync()
        stages["affine"], t = time.perf_counter() - t, time.perf_counter()
        reg = self.Greedy(scales=g_cfg["scales"], iterations=g_cfg["iterations"], fixed_images=fixed,
                          moving_images=moving, loss_type=self.loss_type, cc_kernel_size=g_cfg["cc_kernel_size"],
                          deformation_type=g_cfg["deformation_type"], smooth_grad_sigma=g_cfg["smooth_grad_sigma"],
                          smooth_warp_sigma=g_cfg["smooth_warp_sigma"], optimizer=g_cfg["optimizer"],
                          optimizer_lr=g_cfg["optimizer_lr"], init_affine=aff.get_affine_matrix().detach(),
                          progress_bar=False)
        reg.optimize()
        sync()
        stages["greedy"] = time.perf_counter() - t
        return reg, stages

    def results(self, reg, fixed, moving, labels_t, lab_m):
        """The map's coordinates [z, y, x, 3] and the nearest-neighbour warped labels, on the host."""
        torch, F = self.torch, self.F
        with torch.no_grad():
            coords = reg.get_warped_coordinates(fixed, moving)  # [1, z, y, x, 3], moving torch space
            c = coords
            if lab_m is not None:
                m = torch.as_tensor(lab_m, dtype=coords.dtype, device=coords.device)
                c = coords @ m[:3, :3].T + m[:3, 3]
            warped = F.grid_sample(labels_t, c.to(labels_t.dtype), mode="nearest", padding_mode="zeros",
                                   align_corners=True)
            coords_h = coords[0].cpu().numpy()
            labels_h = warped[0, 0].round().to(torch.int16).cpu().numpy()
        return coords_h, labels_h


def settings_record(preset_name: str, moments: int, fa: FireAnts | None) -> dict:
    p = PRESETS[preset_name]
    return {"preset": preset_name, "preset_source": p["source"],
            "moments": {"scale": 4, "moments": moments, "orientation": "rot", "transl_mode": "com",
                        "loss_type": "cc", "source": MOMENTS_SOURCE},
            "affine": dict(p["affine"], loss_type=fa.loss_type if fa else "fusedcc|cc", around_center=True,
                           init="moments.get_affine_init()"),
            "greedy": dict(p["greedy"], loss_type=fa.loss_type if fa else "fusedcc|cc", blur=True,
                           init="affine.get_affine_matrix()"),
            "tolerance": "FireANTs defaults (1e-6 over 10 iterations)",
            "labels": "nearest neighbour: torch grid_sample(mode='nearest', align_corners=True) at FireANTs' warped coordinates"}


def run_study(args):
    import numpy as np
    io = NiftiIO(args.io)
    ids = study_ids(os.path.join(args.data_dir, STUDY, "t1"))
    if len(ids) < 2:
        fail(f"fewer than two subjects under {os.path.join(args.data_dir, STUDY, 't1')}")
    pairs = study_pairs(ids, args.pairs)
    for sid in [ids[0]] + [m for m, _ in pairs]:
        for p in pair_paths(args.data_dir, sid):
            if not os.path.isfile(p):
                fail(f"missing {p}")
    if args.dry_run:
        print(json.dumps({"pairs": pairs, "settings": settings_record(args.preset, args.moments, None),
                          "image_io": io.name}, indent=1))
        return 0
    try:
        fa = FireAnts(args.fireants, args.fused_ops, not args.no_fused, io)
    except ImportError as e:
        fail(f"cannot import FireANTs or its dependencies ({e}); run this on the GPU machine")
    os.makedirs(args.out_dir, exist_ok=True)
    torch = fa.torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        fail("--device cuda but torch sees no CUDA device")
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    device_name = torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"
    preset = PRESETS[args.preset]
    settings = settings_record(args.preset, args.moments, fa)
    if args.smoke_iterations is not None:
        settings["smoke_iterations"] = f"{args.smoke_iterations} per scale (a smoke test, not the preset)"
    print(f"FireANTs {fa.commit[:12]} on {device_name}; loss {fa.loss_type}; fused ops available "
          f"{fa.ffo_available}, used {fa.use_ffo}; SimpleITK: {fa.sitk_name}; NIfTI: {io.name}", flush=True)
    warm = True
    for moving_id, fixed_id in pairs:
        t_total = time.perf_counter()
        f_t1, f_lab = pair_paths(args.data_dir, fixed_id)
        m_t1, m_lab = pair_paths(args.data_dir, moving_id)
        fixed_v, moving_v, mlab_v, flab_v = io.read(f_t1), io.read(m_t1), io.read(m_lab), io.read(f_lab)
        lab_m = label_coords_matrix(moving_v, mlab_v)
        lab_m = None if (mlab_v.size == moving_v.size and np.abs(lab_m - np.eye(4)).max() < 1e-6) else lab_m
        fixed_b, moving_b = fa.image(fixed_v, args.device), fa.image(moving_v, args.device)
        labels_t = torch.as_tensor(mlab_v.array.astype("float32"), device=args.device)[None, None]
        if warm:  # untimed: CUDA context, cuDNN/cuFFT handles, kernel loading
            fa.register(fixed_b, moving_b, preset, args.moments, sync, iterations_override=2)
            sync()
            warm = False
        sync()
        t0 = time.perf_counter()
        reg, stages = fa.register(fixed_b, moving_b, preset, args.moments, sync, args.smoke_iterations)
        t1 = time.perf_counter()
        coords, warped = fa.results(reg, fixed_b, moving_b, labels_t, lab_m)
        sync()
        seconds = time.perf_counter() - t0
        stages["results_to_host"] = time.perf_counter() - t1
        stem = os.path.join(args.out_dir, f"{moving_id}_to_{fixed_id}")
        if not args.no_field:
            io.write(stem + "_field.nii.gz", field_from_coords(coords, fixed_v, moving_v), fixed_v, intent=1007)
        io.write(stem + "_labels.nii.gz", warped.astype("int16"), fixed_v)
        dice = mean_dice(flab_v.array, warped)
        rec = {"fixed": fixed_id, "moving": moving_id, "seconds": round(seconds, 4),
               "seconds_total": round(time.perf_counter() - t_total, 4),
               "seconds_stages": {k: round(v, 4) for k, v in stages.items()},
               "seconds_includes": "moments + affine + greedy + warped coordinates and nearest labels to the host, "
                                   "images already on the device, CUDA synchronised; one untimed warm-up before pair 1",
               "device": device_name, "fireants_commit": fa.commit,
               "fused_ops": {"available": fa.ffo_available, "used": fa.use_ffo,
                             "loss_class": type(reg.loss_fn).__name__},
               "image_io": io.name, "simpleitk": fa.sitk_name,
               "torch": torch.__version__, "cuda": torch.version.cuda,
               "dice_mean_script": round(dice, 4), "field_written": not args.no_field,
               "settings": settings, "tool": "FireANTs " + fa.commit[:12]}
        text = (json.dumps(rec, indent=1) + "\n").encode()
        _atomic_write(stem + ".json", lambda tmp: _write_bytes(tmp, text))
        print(f"fireants {moving_id} -> {fixed_id}: {seconds:.2f} s in-process, {rec['seconds_total']:.2f} s total, "
              f"mean Dice {dice:.4f}", flush=True)
        del reg, fixed_b, moving_b, labels_t
    return 0


# ---- self-check (no torch) --------------------------------------------------------------------------

class Check:
    def __init__(self):
        self.failed = 0

    def __call__(self, cond: bool, what: str):
        print(("  ok    " if cond else "  FAIL  ") + what)
        self.failed += 0 if cond else 1


def _rotation(ax, ay, az):
    import numpy as np
    cx, sx, cy, sy, cz, sz = math.cos(ax), math.sin(ax), math.cos(ay), math.sin(ay), math.cos(az), math.sin(az)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _coords_for_map(fixed: Volume, moving: Volume, a, b):
    """FireANTs-style warped coordinates (moving torch space) of the map x -> a x + b (physical)."""
    import numpy as np
    x = fixed_grid_physical(fixed)
    y = x @ np.asarray(a).T + b
    inv = np.linalg.inv(torch2phy(moving))
    return y @ inv[:3, :3].T + inv[:3, 3]


def self_check(data_dir: str | None) -> int:
    try:
        import numpy as np
    except ImportError:
        fail("the self-check needs numpy (here: /usr/bin/python3)")
    ok = Check()
    tmp = tempfile.mkdtemp(prefix="fireants-selfcheck-")
    print("pairs (validation/Greedy.cpp rule):")
    t1 = os.path.join(tmp, "t1")
    os.makedirs(t1)
    for n in ["IXI2-b" + T1_SUFFIX, "IXI10-a" + T1_SUFFIX, "IXI1-c" + T1_SUFFIX, "Z" + T1_SUFFIX,
              "IXI3-T1.nii.gz", T1_SUFFIX, "a" + LABEL_SUFFIX]:
        open(os.path.join(t1, n), "w").close()
    ids = study_ids(t1)
    ok(ids == ["IXI1-c", "IXI10-a", "IXI2-b", "Z"], f"ids sorted bytewise, suffix filter: {ids}")
    ok(study_pairs(ids, 2) == [("IXI10-a", "IXI1-c"), ("IXI2-b", "IXI1-c")], "pairs (ids[k], ids[0]), k = 1..n")
    ok(len(study_pairs(ids, 20)) == 3 and study_pairs(ids[:1], 5) == [], "pairs capped at len(ids) - 1")

    print("NIfTI geometry (synthetic header, ITK rule):")
    f = {"qform_code": 1, "sform_code": 1, "quatern": [0.5, -0.5, -0.5], "qoffset": [-84.9, 118.1, -127.0],
         "srow": [0, 0, 2, -84.9, -2, 0, 0, 118.1, 0, 2, 0, -127.0], "pixdim": [-1, 2, 2, 2, 0, 0, 0, 0], "xyzt_units": 2}
    sp, org, dr = itk_geometry(np, f, [120, 120, 90])
    q = _quatern_matrix(np, 0.5, -0.5, -0.5, [0, 0, 0], [-1, 2, 2, 2])
    ok(np.allclose(q[:3, :3], np.array(f["srow"]).reshape(3, 4)[:, :3], atol=1e-6), "quaternion (0.5,-0.5,-0.5), qfac -1 = the IXI srow")
    ok(np.allclose(org, [84.9, -118.1, -127.0]) and np.allclose(sp, [2, 2, 2]), f"LPS origin {np.round(org, 3)}, spacing {sp}")
    ok(np.allclose(dr, np.diag([-1, -1, 1]) @ np.array(f["srow"]).reshape(3, 4)[:, :3] / 2), "direction = RAS->LPS flip of the normalised sform")
    f2 = dict(f, qform_code=0, sform_code=2, srow=[2, 0, 0, 1, 0, 2, 0, 2, 0, 0, 2, 3])
    sp2, org2, dr2 = itk_geometry(np, f2, [4, 4, 4])
    ok(np.allclose(org2, [-1, -2, 3]) and np.allclose(dr2, np.diag([-1, -1, 1])), "qform_code 0: the sform is used")
    f3 = dict(f, xyzt_units=1, qform_code=1, sform_code=0)
    ok(np.allclose(itk_geometry(np, f3, [4, 4, 4])[1], np.array(org) * 1000), "metres: origin scaled by 1000")

    print("own writer/reader round trip (synthetic):")
    grid = Volume(np.zeros((3, 4, 5)), sp, org, dr, f)
    lab = (np.arange(60).reshape(3, 4, 5) % 7).astype(np.int16)
    p = os.path.join(tmp, "lab.nii.gz")
    write_nifti_own(p, lab, grid)
    back = read_nifti_own(p)
    raw = _open_bytes(p)
    hdr = _parse_header(raw)
    ok(np.array_equal(back.array, lab) and back.array.shape == (3, 4, 5), "int16 labels [z, y, x] round trip")
    ok(np.allclose(back.origin, org, atol=1e-4) and np.allclose(back.direction, dr, atol=1e-6), "geometry round trip")
    ok(hdr["vox_offset"] == 352 and hdr["scl_slope"] == 1 and hdr["datatype"] == 4, "vox_offset 352, scl_slope 1, int16")
    vec = np.random.default_rng(1).normal(size=(3, 3, 4, 5)).astype(np.float32)
    pf = os.path.join(tmp, "field.nii.gz")
    write_nifti_own(pf, vec, grid, intent=1007)
    raw = _open_bytes(pf)
    hdr = _parse_header(raw)
    got = np.frombuffer(raw, dtype="<f4", offset=352).reshape(3, 3, 4, 5)
    ok(hdr["dim"][:6] == [5, 5, 4, 3, 1, 3] and hdr["intent_code"] == 1007 and hdr["datatype"] == 16,
       f"field header dim {hdr['dim'][:6]}, intent {hdr['intent_code']}, float32")
    ok(np.array_equal(got, vec) and got[1, 2, 3, 4] == vec[1, 2, 3, 4], "field component-major, x fastest")
    ok(raw[123] == 10, "field xyzt_units 10 (mm, s)")

    print("field convention (synthetic grids with different headers):")
    fixed = Volume(np.zeros((6, 7, 8)), [2, 2, 2], [10, -20, 5], _rotation(0.1, 0, 0.2), f)
    moving = Volume(np.zeros((5, 9, 8)), [1.5, 2, 2.5], [-3, 4, 30], _rotation(0, -0.15, 0.05), f)
    a, b = _rotation(0.05, -0.03, 0.08) * 1.05, np.array([3.0, -7.0, 2.5])
    coords = _coords_for_map(fixed, moving, a, b)
    d = field_from_coords(coords, fixed, moving)
    x = fixed_grid_physical(fixed)
    ok(np.abs(np.moveaxis(d, 0, -1) - (x @ a.T + b - x)).max() < 1e-4, "d(x) = phi(x) - x, world mm (float32)")
    ok(d.shape == (3, 6, 7, 8), "d [3, z, y, x] on the fixed grid")
    ok(np.allclose(label_coords_matrix(moving, moving), np.eye(4)), "labels on the T1 grid: identity coordinate map")

    root = data_dir if data_dir else os.environ.get("KORTEX_DATA_DIR", "")
    if not root:
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data"))
    t1dir = os.path.join(root, STUDY, "t1")
    if not os.path.isdir(t1dir):
        print(f"real-data checks skipped: {t1dir} not found")
    else:
        _self_check_real(ok, np, root, tmp)
    if ok.failed == 0:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        print("self-check passed")
        return 0
    print(f"self-check: {ok.failed} FAILED (files kept in {tmp})")
    return 1


def _self_check_real(ok, np, root, tmp):
    print(f"real data ({root}):")
    ids = study_ids(os.path.join(root, STUDY, "t1"))
    pairs = study_pairs(ids, 20)
    ok(len(ids) == 33 and len(pairs) == 20, f"{len(ids)} subjects, {len(pairs)} pairs; fixed {ids[0]}, first moving {pairs[0][0]}")
    f_t1, f_lab = pair_paths(root, ids[0])
    m_t1, m_lab = pair_paths(root, ids[1])
    fixed, moving, mlab = read_nifti_own(f_t1), read_nifti_own(m_t1), read_nifti_own(m_lab)
    raw = _open_bytes(f_t1)
    hdr = _parse_header(raw)
    u8 = np.frombuffer(raw, dtype=np.uint8, count=120 * 120 * 90, offset=int(hdr["vox_offset"])).reshape(90, 120, 120)
    ok(hdr["vox_offset"] == 2912 and np.allclose(fixed.array, u8 * np.float64(np.float32(hdr["scl_slope"]))),
       f"T1: vox_offset {hdr['vox_offset']:.0f}, scl_slope {hdr['scl_slope']:.4f} applied, array {fixed.array.shape} [z, y, x]")
    ok(mlab.array.dtype.kind in "iu" and np.allclose(label_coords_matrix(moving, mlab), np.eye(4), atol=1e-6),
       f"labels integer ({mlab.array.dtype}), on the T1 grid (qform_code {mlab.fields['qform_code']}, sform_code {mlab.fields['sform_code']})")
    ok(not np.allclose(fixed.origin, moving.origin), f"headers differ: origin {np.round(fixed.origin, 2)} vs {np.round(moving.origin, 2)}")
    have_nib = have_nibabel()
    if not have_nib:
        print("  (nibabel not importable: nibabel backend not cross-checked)")
    if have_nib:
        for path in (f_t1, m_lab):
            a, b = read_nifti_own(path), read_nifti_nibabel(path)
            ok(np.array_equal(a.array, b.array) and a.array.dtype == b.array.dtype and np.allclose(a.origin, b.origin)
               and np.allclose(a.direction, b.direction) and np.allclose(a.spacing, b.spacing),
               f"own reader == nibabel reader: {os.path.basename(path)}")
    # A known map between two real headers: rotation + scaling + translation about the fixed centre.
    c = fixed_grid_physical(fixed).reshape(-1, 3).mean(axis=0)
    a = _rotation(0.06, -0.04, 0.09) * 1.03
    b = c - a @ c + np.array([4.0, -6.0, 3.0]) + (np.array(moving.origin) - np.array(fixed.origin)) * 0.5
    coords = _coords_for_map(fixed, moving, a, b)
    d = field_from_coords(coords, fixed, moving)
    warped = sample_nearest_numpy(mlab.array, coords).astype(np.int16)
    ok(np.count_nonzero(warped) > 0.5 * np.count_nonzero(mlab.array), f"warped labels non-empty ({np.count_nonzero(warped)} voxels)")
    writers = [("own", write_nifti_own, read_nifti_own)]
    if have_nib:
        writers.append(("nibabel", write_nifti_nibabel, read_nifti_nibabel))
    for name, w, r in writers:
        pl, pf = os.path.join(tmp, f"{name}_labels.nii.gz"), os.path.join(tmp, f"{name}_field.nii.gz")
        w(pl, warped, fixed)
        w(pf, d, fixed, intent=1007)
        back = r(pl)
        hf = _parse_header(_open_bytes(pf))
        ok(np.array_equal(back.array, warped) and np.allclose(back.origin, fixed.origin, atol=1e-3)
           and np.allclose(back.direction, fixed.direction, atol=1e-5),
           f"{name} writer: labels read back on the fixed grid and header")
        ok(hf["intent_code"] == 1007 and hf["dim"][:6] == [5, 120, 120, 90, 1, 3] and hf["qform_code"] == fixed.fields["qform_code"],
           f"{name} writer: field intent {hf['intent_code']}, dim {hf['dim'][:6]}, qform_code {hf['qform_code']}")
    exe = os.environ.get("KORTEX_EXE") or os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                          "..", "..", "build", "ci-serial", "apps", "kortex"))
    if not os.path.isfile(exe):
        print(f"  (kortex CLI not found at {exe}: field not checked against kortex apply)")
        return
    import subprocess
    for name, _, _ in writers:
        out = os.path.join(tmp, f"{name}_kortex_apply.nii.gz")
        cmd = [exe, "apply", "--input", m_lab, "--reference", f_t1, "--transform", os.path.join(tmp, f"{name}_field.nii.gz"),
               "--interpolation", "nearest", "--backend", "cpu", "--out", out, "--quiet"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            ok(False, f"kortex apply failed: {res.stderr.strip()[:300]}")
            continue
        k = read_nifti_own(out).array
        agree = float(np.mean(np.rint(k).astype(np.int64) == warped))
        ok(agree > 0.999, f"kortex apply --interpolation nearest with the {name} field == the nearest warp at FireANTs' "
                          f"coordinates on {100 * agree:.3f}% of voxels (ties at half voxels aside)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", nargs="?")
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--fireants", default=os.environ.get("FIREANTS_SRC", os.path.join(here, "..", "..", ".carry", "fireants")),
                    help="FireANTs source folder (holding fireants/); default .carry/fireants")
    ap.add_argument("--fused-ops", default=None, help="folder holding the built fireants_fused_ops*.so")
    ap.add_argument("--no-fused", action="store_true", help="PyTorch ops only (USE_FFO=False, loss cc)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quickstart")
    ap.add_argument("--moments", type=int, choices=(1, 2), default=1)
    ap.add_argument("--no-field", action="store_true", help="do not write the displacement fields")
    ap.add_argument("--io", choices=("auto", "nibabel", "own"), default="auto")
    ap.add_argument("--smoke-iterations", type=int, default=None,
                    help="test only: N iterations at every scale instead of the preset's (recorded in the JSON)")
    ap.add_argument("--dry-run", action="store_true", help="print the pairs and settings; no torch")
    ap.add_argument("--self-check", action="store_true", help="check the torch-free parts; DATA_DIR optional")
    args = ap.parse_args(argv)
    if args.self_check:
        return self_check(args.data_dir)
    if not args.data_dir or not args.out_dir:
        ap.error("DATA_DIR and OUT_DIR are required")
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    return run_study(args)


if __name__ == "__main__":
    sys.exit(main())
