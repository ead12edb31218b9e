"""NIfTI files nobody on the project wrote: nibabel's own test files (Debian's python3-nibabel).

Kortex (through nifti_clib) must give nibabel's arrays and affines, and a Kortex write of what it
read must give nibabel the same header transforms (qform, sform, codes, pixdim) bit for bit, in
NIfTI-1 and NIfTI-2, single files and .hdr/.img pairs, plain and gzipped.
"""
import os
import shutil

import numpy as np
import pytest

import kortex

nib = pytest.importorskip("nibabel")
DATA = os.path.join(os.path.dirname(nib.__file__), "tests", "data")
if not os.path.isdir(DATA):
    pytest.skip("nibabel's test files are not installed", allow_module_level=True)

# Kortex's affine is rebuilt from (spacing, unit direction, origin) in double precision, nibabel's
# read from the float32 header: agreement to a few float32 ulps of the entries (|entries| <= ~130).
AFFINE_TOL = 1e-4
# The 3D files of nibabel's test data, as nibabel ships them.
FILES_3D = ["anatomical.nii", "reoriented_anat_moved.nii", "resampled_anat_moved.nii", "standard.nii.gz"]
TRANSFORM_FIELDS = ["qform_code", "sform_code", "quatern_b", "quatern_c", "quatern_d",
                    "qoffset_x", "qoffset_y", "qoffset_z", "srow_x", "srow_y", "srow_z"]


def ras_affine(d):
    """The RAS affine of a Kortex image (its geometry is LPS, as ITK's)."""
    D = np.asarray(d["direction"], dtype=float).reshape(3, 3) * np.asarray(d["spacing"], dtype=float)
    A = np.eye(4)
    A[:3, :3] = np.diag([-1.0, -1.0, 1.0]) @ D
    A[:3, 3] = np.diag([-1.0, -1.0, 1.0]) @ np.asarray(d["origin"], dtype=float)
    return A


def nib_array(img):
    """nibabel's values (scaling applied, in float64) as float32, indexed (z, y, x) like Kortex's."""
    return np.ascontiguousarray(np.asarray(img.get_fdata(), dtype=np.float32).T)


def check_same_as_nibabel(path, img=None):
    img = img if img is not None else nib.load(path)
    d = kortex.read(path)
    assert d["array"].shape == img.shape[::-1]
    np.testing.assert_array_equal(d["array"], nib_array(img))
    np.testing.assert_allclose(ras_affine(d), img.affine, rtol=0, atol=AFFINE_TOL)
    return d


def header_transforms(path):
    h = nib.load(path).header
    def native(v):  # compared bit for bit in host byte order (big-endian files too)
        v = np.asarray(v)
        return v.astype(v.dtype.newbyteorder("="))
    out = {k: native(h[k]) for k in TRANSFORM_FIELDS}
    out["pixdim"] = native(h["pixdim"][:4])
    if int(out["qform_code"]) == 0:  # the quaternion means nothing then; writers zero it
        for k in ("quatern_b", "quatern_c", "quatern_d", "qoffset_x", "qoffset_y", "qoffset_z"):
            del out[k]
        out["pixdim"] = out["pixdim"][1:]  # pixdim[0] is qfac, part of the qform
    if int(out["sform_code"]) == 0:
        for k in ("srow_x", "srow_y", "srow_z"):
            del out[k]
    return out


def assert_same_transforms(a, b, what):
    assert a.keys() == b.keys(), what
    for k in a:
        # Bit for bit: the same float32 (NIfTI-1) or float64 (NIfTI-2) values.
        assert a[k].tobytes() == b[k].tobytes(), f"{what}: {k} {a[k]} != {b[k]}"


@pytest.mark.parametrize("name", FILES_3D)
def test_nibabel_3d_files_read_as_nibabel_reads_them(name):
    check_same_as_nibabel(os.path.join(DATA, name))


@pytest.mark.parametrize("name", FILES_3D)
@pytest.mark.parametrize("ext", [".nii", ".nii.gz", ".hdr", ".img.gz"])
def test_round_trip_keeps_data_and_transforms(tmp_path, name, ext):
    src = os.path.join(DATA, name)
    d = kortex.read(src)
    out = tmp_path / ("out" + ext)
    kortex.write(out, d["array"], d["spacing"], d["origin"], d["direction"], d["metadata"])
    if ext.endswith(".img.gz"):
        assert (tmp_path / "out.hdr.gz").is_file() and out.is_file()
    back = nib.load(str(out))
    np.testing.assert_array_equal(nib_array(back), d["array"])
    assert_same_transforms(header_transforms(src), header_transforms(str(out)), f"{name} -> {ext}")
    assert back.header["sizeof_hdr"] == 348
    np.testing.assert_array_equal(back.affine, nib.load(src).affine)


def nifti2_3d(tmp_path, ext):
    """nibabel's NIfTI-2 example (4D) as a 3D NIfTI-2 written by nibabel: its first volume, same
    header (transforms, codes, int16 with its scaling)."""
    img = nib.load(os.path.join(DATA, "example_nifti2.nii.gz"))
    assert isinstance(img, nib.Nifti2Image)
    cls = nib.Nifti2Image if ext.startswith(".nii") else nib.Nifti2Pair
    vol = cls(np.asarray(img.dataobj[..., 0]), img.affine, img.header)
    vol.header.set_qform(*img.header.get_qform(coded=True))
    vol.header.set_sform(*img.header.get_sform(coded=True))
    path = str(tmp_path / ("n2" + ext))
    nib.save(vol, path)
    return path


@pytest.mark.parametrize("ext", [".nii", ".nii.gz", ".hdr"])
def test_nifti2_read_and_written_back_in_double_precision(tmp_path, ext):
    path = nifti2_3d(tmp_path, ext)
    d = check_same_as_nibabel(path)
    assert d["metadata"]["nifti.version"] == "2"
    out = tmp_path / ("back" + ext)
    kortex.write(out, d["array"], d["spacing"], d["origin"], d["direction"], d["metadata"])
    back = nib.load(str(out))
    assert back.header["sizeof_hdr"] == 540
    assert isinstance(back, (nib.Nifti2Image, nib.Nifti2Pair))
    np.testing.assert_array_equal(nib_array(back), d["array"])
    assert_same_transforms(header_transforms(path), header_transforms(str(out)), f"NIfTI-2 {ext}")


def pair_with_data(tmp_path, header_name, offset=None):
    """nibabel ships pair headers without their .img: add one (random voxels of the header's
    type, in the header's byte order, from byte `offset` of the .img) so both libraries read the
    same pair. Returns the header's path and the voxels, (z, y, x)."""
    img = nib.load(os.path.join(DATA, header_name))
    shutil.copy(os.path.join(DATA, header_name), tmp_path / header_name)
    dtype = img.header.get_data_dtype()
    rng = np.random.default_rng(7)
    shape = img.shape[:3]
    vals = rng.integers(-3000, 3000, size=shape[::-1]).astype(dtype)  # file byte order
    with open(tmp_path / (header_name[:-4] + ".img"), "wb") as f:
        f.write(b"\0" * (offset or 0))
        f.write(vals.tobytes())  # (z, y, x) C order: x fastest, as NIfTI stores it
    return str(tmp_path / header_name), vals.astype(np.float32)


# nibabel's nifti2.hdr says vox_offset 544, which the NIfTI standard applies to the .img of a pair
# (and nifti_clib and Kortex do); nibabel reads pairs from byte 0 of the .img whatever it says.
NIFTI2_PAIR_OFFSET = 544


@pytest.mark.parametrize("header_name", ["nifti1.hdr", "nifti2.hdr"])
def test_nibabel_pairs_read_as_nibabel_reads_them(tmp_path, header_name):
    path, _ = pair_with_data(tmp_path, header_name)
    if header_name == "nifti2.hdr":  # vox_offset (int64 at byte 168) -> 0, where nibabel reads
        b = bytearray(open(path, "rb").read())
        b[168:176] = (0).to_bytes(8, "little")
        open(path, "wb").write(bytes(b))
    d = check_same_as_nibabel(path)
    assert d["metadata"]["nifti.version"] == header_name[5]
    # Either file of the pair names the image.
    np.testing.assert_array_equal(kortex.read(path[:-4] + ".img")["array"], d["array"])


def test_pair_vox_offset_applies_to_the_data_file(tmp_path):
    path, vals = pair_with_data(tmp_path, "nifti2.hdr", offset=NIFTI2_PAIR_OFFSET)
    assert nib.load(path).header.get_data_offset() == 0  # nibabel's reading, see above
    np.testing.assert_array_equal(kortex.read(path)["array"], vals)


def test_analyze_pair_data_and_spacing(tmp_path):
    # Analyze 7.5 has no orientation and no scaling: Kortex (as nifti_clib, and as ITK for a NIfTI
    # file with both codes 0) gives identity direction, origin 0 and the stored values; nibabel
    # reads this header as SPM2's flavour (flipped x, the 'originator' field, the scale factor in
    # funused1). The stored voxels and the spacing agree.
    path, vals = pair_with_data(tmp_path, "analyze.hdr")
    img = nib.load(path)
    d = kortex.read(path)
    stored = np.asarray(img.dataobj.get_unscaled(), dtype=np.float32)[..., 0]
    np.testing.assert_array_equal(d["array"], np.ascontiguousarray(stored.T))
    np.testing.assert_array_equal(d["array"], vals)
    np.testing.assert_array_equal(d["spacing"], np.asarray(img.header.get_zooms()[:3], dtype=float))
    assert d["metadata"]["nifti.version"] == "analyze"
    assert d["metadata"]["nifti.orientation_source"] == "none"


@pytest.mark.parametrize("name", ["example4d.nii.gz", "example_nifti2.nii.gz", "functional.nii"])
def test_4d_files_refused_with_their_shape(name):
    shape = "x".join(str(n) for n in nib.load(os.path.join(DATA, name)).shape)
    with pytest.raises(OSError, match=f"has 4 dimensions \\({shape}\\)"):
        kortex.read(os.path.join(DATA, name))


def test_pair_faults_one_message(tmp_path):
    path, _ = pair_with_data(tmp_path, "nifti1.hdr")
    os.remove(path[:-4] + ".img")
    with pytest.raises(OSError, match="data file 'nifti1.img' of this header/data pair is missing"):
        kortex.read(path)
    shutil.copy(path, tmp_path / "lone.img")  # a data file whose header is not there
    with pytest.raises(OSError, match="no NIfTI header found"):
        kortex.read(str(tmp_path / "lone.img"))
