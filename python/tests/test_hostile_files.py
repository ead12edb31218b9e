"""Files another tool wrote, and malformed ones (issue 26): each is read as nibabel / pydicom read
it, or refused with one message (OSError in Python; exit 1, one line, no output from the command),
never a crash, a silent misreading or an invented value. The files are made here with nibabel and
pydicom, then the bytes a test is about are set by hand.
"""
import gzip
import os
import resource
import struct
import subprocess
import sys

import numpy as np
import pytest

import kortex

nib = pytest.importorskip("nibabel")
pydicom = pytest.importorskip("pydicom")
KORTEX = os.environ.get("KORTEX_EXE")

# Affines rebuilt from (spacing, direction, origin) in double vs nibabel's float32 header fields.
AFFINE_TOL = 1e-4
# A refused header must not make the reader allocate what it declares: far below the GBs of
# the cases below, far above the command's own footprint (about 60 MB).
MAX_REFUSAL_RSS_MB = 400


def ras_affine(d):
    spacing = list(d["spacing"]) + [1.0] * (3 - len(d["spacing"]))
    D = np.asarray(d["direction"], dtype=float).reshape(3, 3) * np.asarray(spacing, dtype=float)
    A = np.eye(4)
    A[:3, :3] = np.diag([-1.0, -1.0, 1.0]) @ D
    A[:3, 3] = np.diag([-1.0, -1.0, 1.0]) @ np.asarray(d["origin"], dtype=float)
    return A


def run_kortex(*args):
    """The command as a user runs it; returns (returncode, stderr) and the peak RSS in MB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run([KORTEX, *map(str, args)], capture_output=True, text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return p, max(peak, before) / 1024.0


def refused_by_command(path, tmp_path, message):
    """kortex denoise on `path`: exit 1, one error line naming the problem, no output file."""
    if not KORTEX:
        pytest.skip("KORTEX_EXE is not set (run through ctest)")
    out = tmp_path / "out.nii.gz"
    p, _ = run_kortex("denoise", "bilateral", path, out, "--radius", "1")
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("kortex: error:"), p.stderr
    assert message in lines[0], lines[0]
    assert not out.exists()
    assert not any(n.name.startswith(".kortex-tmp") for n in tmp_path.iterdir())


def nifti1(tmp_path, name="img.nii", data=None, affine=None, qform=1, sform=1):
    data = np.arange(4 * 5 * 6, dtype=np.int16).reshape(4, 5, 6) * 100 if data is None else data
    affine = np.diag([2.0, 2.0, 2.0, 1.0]) if affine is None else affine
    img = nib.Nifti1Image(data, affine)
    img.header.set_qform(affine if qform else None, int(qform))
    img.header.set_sform(affine if sform else None, int(sform))
    path = tmp_path / name
    nib.save(img, str(path))
    return path


def patch(path, offset, fmt, *values, out=None):
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, *values)
    out = out or path
    out.write_bytes(bytes(raw))
    return out


# NIfTI-1 field offsets (nifti1.h)
DIM, PIXDIM, VOX_OFFSET = 40, 76, 108
# NIfTI-2
DIM2, VOX_OFFSET2 = 16, 168


# ---- 1. sizes that overflow 64 bits, and sizes the file cannot hold --------------------------------

@pytest.mark.parametrize("dims", [(3, 2**62, 2**62, 16), (3, 2**31, 2**31, 2), (3, 2**40, 2**20, 1)])
def test_nifti2_dimensions_past_64_bits_are_refused(tmp_path, dims):
    img = nib.Nifti2Image(np.zeros((4, 5, 6), np.int16), np.eye(4))
    path = tmp_path / "huge.nii"
    nib.save(img, str(path))
    patch(path, DIM2, "<8q", *dims, 1, 1, 1, 1)
    with pytest.raises(OSError, match="declare more than 2\\^48 voxels"):
        kortex.read(path)
    refused_by_command(path, tmp_path, "declare more than 2^48 voxels")


@pytest.mark.parametrize("name", ["claim.nii", "claim.nii.gz"])
def test_declared_size_is_checked_against_the_file_before_allocating(tmp_path, name):
    path = nifti1(tmp_path, name="small.nii")
    patch(path, DIM, "<4h", 3, 1000, 1000, 1000)  # 2 GB of int16 in a 592-byte file
    target = tmp_path / name
    target.write_bytes(gzip.compress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes())
    with pytest.raises(OSError, match="truncated: the header promises 2000000000 bytes"):
        kortex.read(target)
    if KORTEX:
        p, peak_mb = run_kortex("denoise", "bilateral", target, tmp_path / "o.nii", "--radius", "1")
        assert p.returncode == 1 and "truncated" in p.stderr
        assert peak_mb < MAX_REFUSAL_RSS_MB, peak_mb


# ---- 3. vox_offset inside the header ----------------------------------------------------------------

@pytest.mark.parametrize("offset", [0.0, 348.0])
def test_single_file_voxels_inside_the_header_are_refused(tmp_path, offset):
    # (nibabel refuses 348; it reads 0 as the header's bytes)
    path = patch(nifti1(tmp_path), VOX_OFFSET, "<f", offset)
    with pytest.raises(OSError, match="puts the voxels inside the 348-byte header"):
        kortex.read(path)
    refused_by_command(path, tmp_path, "vox_offset")


def test_nifti2_single_file_offset_below_544_is_refused(tmp_path):
    img = nib.Nifti2Image(np.arange(24, dtype=np.int16).reshape(2, 3, 4), np.eye(4))
    path = tmp_path / "n2.nii"
    nib.save(img, str(path))
    patch(path, VOX_OFFSET2, "<q", 540)
    with pytest.raises(OSError, match="at least 544"):
        kortex.read(path)


def test_pair_offset_zero_still_reads(tmp_path):
    data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    nib.save(nib.Nifti1Pair(data, np.eye(4)), str(tmp_path / "p.img"))
    patch(tmp_path / "p.hdr", VOX_OFFSET, "<f", 0.0)
    np.testing.assert_array_equal(kortex.read(tmp_path / "p.hdr")["array"], data.T.astype(np.float32))


# ---- 4. pixdim that is not a spacing ----------------------------------------------------------------

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_bad_pixdim_takes_the_valid_sform(tmp_path, bad):
    affine = np.array([[2.0, 0, 0, -10], [0, 2.0, 0, 4], [0, 0, 2.0, 6], [0, 0, 0, 1]])
    path = patch(nifti1(tmp_path, affine=affine), PIXDIM + 4, "<f", bad)  # pixdim[1]
    d = kortex.read(path)
    np.testing.assert_allclose(d["spacing"], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(ras_affine(d), affine, atol=AFFINE_TOL)
    assert d["metadata"]["nifti.orientation_source"] == "sform"
    # and written back, the header says 2 mm (no NaN pixdim, no 1 mm qform)
    kortex.write(tmp_path / "back.nii", d["array"], spacing=d["spacing"], origin=d["origin"],
                 direction=d["direction"], metadata=d["metadata"])
    back = nib.load(str(tmp_path / "back.nii"))
    np.testing.assert_allclose(back.header.get_zooms()[:3], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(back.header.get_qform(), affine, atol=AFFINE_TOL)


@pytest.mark.parametrize("bad", [float("nan"), 0.0])
def test_bad_pixdim_without_sform_is_refused(tmp_path, bad):
    path = patch(nifti1(tmp_path, sform=0), PIXDIM + 8, "<f", bad)  # pixdim[2]
    with pytest.raises(OSError, match="voxel spacing along axis 2 is unknown"):
        kortex.read(path)
    refused_by_command(path, tmp_path, "pixdim[2]")


def test_pixdim_of_a_single_slice_axis_places_no_voxel(tmp_path):
    path = nifti1(tmp_path, data=np.arange(20, dtype=np.int16).reshape(4, 5, 1), sform=0)
    patch(path, PIXDIM + 12, "<f", 0.0)  # pixdim[3] of a one-slice volume
    d = kortex.read(path)
    assert d["array"].shape == (5, 4)
    np.testing.assert_allclose(d["spacing"][:2], [2.0, 2.0])


# ---- values and names ----------------------------------------------------------------------------

def test_values_beyond_float32_are_refused(tmp_path):
    path = nifti1(tmp_path, data=np.full((3, 3, 3), 1e300))
    with pytest.raises(OSError, match="beyond the float32 range"):
        kortex.read(path)
    fine = nifti1(tmp_path, name="fine.nii", data=np.full((3, 3, 3), -3e38))
    np.testing.assert_array_equal(kortex.read(fine)["array"], np.float32(-3e38))
    scaled = nifti1(tmp_path, name="scaled.nii", data=np.full((3, 3, 3), 30000, np.int16))
    patch(scaled, 112, "<f", 1e36)  # scl_slope: 3e40 after scaling
    with pytest.raises(OSError, match="after its rescaling"):
        kortex.read(scaled)


def test_gzipped_file_named_nii_says_what_it_is(tmp_path):
    path = nifti1(tmp_path)
    path.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(OSError, match="is gzip-compressed but its name does not end in '.gz'"):
        kortex.read(path)


def test_oblique_2d_slice_keeps_its_orientation(tmp_path):
    # a sagittal slice: i -> y, j -> z, in the plane x = 12.5 (nibabel's RAS affine)
    affine = np.array([[0, 0, 1.5, 12.5], [1.2, 0, 0, -3], [0, 0.9, 0, 7], [0, 0, 0, 1]], float)
    path = nifti1(tmp_path, data=np.arange(20, dtype=np.float32).reshape(4, 5), affine=affine)
    assert nib.load(str(path)).header["dim"][0] == 2
    d = kortex.read(path)
    assert d["array"].shape == (5, 4)
    A = ras_affine(d)
    np.testing.assert_allclose(A[:3, :2], affine[:3, :2], atol=AFFINE_TOL)
    np.testing.assert_allclose(A[:3, 3], affine[:3, 3], atol=AFFINE_TOL)


def test_2d_read_keeps_the_slice_position(tmp_path):
    affine = np.array([[1.5, 0, 0, 10], [0, 1.2, 0, -3], [0, 0, 1, 42], [0, 0, 0, 1]], float)
    path = nifti1(tmp_path, data=np.arange(20, dtype=np.float32).reshape(4, 5), affine=affine)
    d = kortex.read(path)
    assert len(d["origin"]) == 3
    np.testing.assert_allclose(d["origin"], [-10.0, 3.0, 42.0], atol=1e-6)


def test_complex_arrays_are_refused():
    with pytest.raises(ValueError, match="complex"):
        kortex.denoise_bilateral(np.ones((8, 8), np.complex64), radius=1)


# ---- DICOM --------------------------------------------------------------------------------------

def ct_slice():
    data = os.environ.get("KORTEX_DATA_DIR", "")
    p = os.path.join(data, "ct", "pydicom_CT_small.dcm")
    if not os.path.exists(p):
        from pydicom.data import get_testdata_file
        p = get_testdata_file("CT_small.dcm")
    return pydicom.dcmread(p)


def write_stack(folder, positions, iop=None, uid=None, description="", number=1, prefix="s", decimals=4, add=0):
    """Slices of the CT test file at the given positions (mm, LPS), one series; returns the
    stack in position order (rescale applied) and the slice normal."""
    base = ct_slice()
    iop = [float(v) for v in base.ImageOrientationPatient] if iop is None else list(iop)
    uid = uid or pydicom.uid.generate_uid()
    planes = []
    for k, p in enumerate(positions):
        ds = ct_slice()
        ds.ImageOrientationPatient = [f"{v:.6f}" for v in iop]
        ds.ImagePositionPatient = [f"{v:.{decimals}f}" for v in p]
        ds.SeriesInstanceUID = uid
        ds.SeriesDescription = description
        ds.SeriesNumber = number
        ds.InstanceNumber = k + 1
        ds.SOPInstanceUID = pydicom.uid.generate_uid()
        values = (ds.pixel_array.astype(np.int32) + 5 * k + add).astype(ds.pixel_array.dtype)
        ds.PixelData = values.tobytes()
        ds.save_as(os.path.join(folder, f"{prefix}{k:03d}.dcm"))
        planes.append(values * float(ds.RescaleSlope) + float(ds.RescaleIntercept))
    n = np.cross(iop[:3], iop[3:])
    return np.stack(planes).astype(np.float32), uid, n


def test_two_series_in_one_folder_are_refused_and_either_can_be_chosen(tmp_path):
    base = ct_slice()
    p0 = np.array([float(v) for v in base.ImagePositionPatient])
    iop = [float(v) for v in base.ImageOrientationPatient]
    n = np.cross(iop[:3], iop[3:])
    a, uid_a, _ = write_stack(str(tmp_path), [p0 + 2.0 * k * n for k in range(5)], description="first", prefix="a")
    b, uid_b, _ = write_stack(str(tmp_path), [p0 + (2.0 * k + 1.0) * n for k in range(4)],
                              description="second", number=2, prefix="b", add=100)
    with pytest.raises(OSError) as e:
        kortex.read(tmp_path)
    msg = str(e.value)
    assert "holds 2 DICOM series" in msg and uid_a in msg and uid_b in msg
    assert "'first': 5 slices" in msg and "'second': 4 slices" in msg
    va = kortex.read(tmp_path, series=uid_a)
    np.testing.assert_array_equal(va["array"], a)
    np.testing.assert_allclose(va["spacing"][2], 2.0, rtol=1e-5)
    vb = kortex.read(tmp_path, series=[uid_b])
    np.testing.assert_array_equal(vb["array"], b)
    with pytest.raises(OSError, match="none is the one asked for"):
        kortex.read(tmp_path, series="1.2.3.4")
    refused_by_command(tmp_path, tmp_path.parent, "holds 2 DICOM series")
    if KORTEX:
        out = tmp_path.parent / "chosen.nii"
        p, _ = run_kortex("denoise", "bilateral", tmp_path, out, "--radius", "1", "--series", uid_b)
        assert p.returncode == 0, p.stderr
        assert kortex.read(out)["array"].shape == b.shape


def unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


def test_double_oblique_series_with_two_decimal_positions_is_read(tmp_path):
    row = unit([0.96, 0.2, 0.18])
    col = unit(np.cross([0.1, -0.15, 0.98], row))
    iop = list(row) + list(col)
    n = np.cross(row, col)
    p0 = np.array([-61.0, -79.37, 20.11])
    # 1.2 mm slices whose positions are written with 2 decimals: rounding spreads the gaps by just
    # over 1 % (the bare 1 % rule refused such a series)
    positions = [p0 + 1.2 * k * n for k in range(12)]
    gaps = np.diff([float(n @ np.round(p, 2)) for p in positions])
    assert gaps.max() - gaps.min() > 0.01 * 1.2
    stack, _, _ = write_stack(str(tmp_path), positions, iop=iop, decimals=2)
    d = kortex.read(tmp_path)
    np.testing.assert_array_equal(d["array"], stack)
    np.testing.assert_allclose(d["spacing"][2], 1.2, atol=0.01)


def test_uneven_series_reports_the_spread_readably(tmp_path):
    base = ct_slice()
    p0 = np.array([float(v) for v in base.ImagePositionPatient])
    n = np.cross([float(v) for v in base.ImageOrientationPatient][:3], [float(v) for v in base.ImageOrientationPatient][3:])
    write_stack(str(tmp_path), [p0 + o * n for o in (0.0, 1.2, 2.4, 3.75)], decimals=2)
    with pytest.raises(OSError) as e:
        kortex.read(tmp_path)
    msg = str(e.value)
    assert "uneven slice spacing: gaps from 1.2 to 1.35 mm" in msg and "spread 0.15 mm" in msg, msg
    assert "0.01 mm" in msg


def test_single_dicom_file_without_extension_is_read(tmp_path):
    ds = ct_slice()
    ds.save_as(str(tmp_path / "IM0001"))
    d = kortex.read(tmp_path / "IM0001")
    np.testing.assert_array_equal(d["array"], (ds.pixel_array * float(ds.RescaleSlope) + float(ds.RescaleIntercept)).astype(np.float32))
    assert d["metadata"]["io.format"] == "dicom"


def test_codec_chatter_never_reaches_stderr(tmp_path):
    """A 12-bit JPEG labelled baseline: libjpeg (inside GDCM) prints 'Unsupported JPEG data precision 12'
    before GDCM decodes it with its 12-bit codec. Kortex reads it with nothing on stderr and keeps the
    codec's words in the metadata."""
    if kortex.dicom_decoder != "gdcm":
        pytest.skip("this build decodes DICOM without GDCM")
    from pydicom.data import get_testdata_file
    try:
        src = get_testdata_file("JPGExtended.dcm")
    except Exception:
        src = None
    if not src:
        pytest.skip("pydicom's JPGExtended.dcm is not installed")
    ds = pydicom.dcmread(src)
    ds.file_meta.TransferSyntaxUID = "1.2.840.10008.1.2.4.50"
    path = tmp_path / "relabelled.dcm"
    ds.save_as(str(path))
    d = kortex.read(path)
    assert "precision" in d["metadata"].get("dicom.decoder_messages", "")
    if KORTEX:
        p, _ = run_kortex("denoise", "bilateral", path, tmp_path / "out.nii", "--radius", "1")
        assert p.returncode == 0 and p.stderr == "", p.stderr
