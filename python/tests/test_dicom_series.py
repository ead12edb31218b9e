"""DICOM series read as one volume (io::readImageSeries, readImage of a folder): slices written by
pydicom from its own CT test file, moved along the slice normal, in shuffled order and file names.
The volume must equal the slices stacked by position with their rescale applied; uneven spacing,
a tilt, two slices at one position and mixed sizes are refused with one message.
"""
import os
import random
import subprocess

import numpy as np
import pytest

import kortex

pydicom = pytest.importorskip("pydicom")
KORTEX = os.environ.get("KORTEX_EXE")


def source_slice():
    data = os.environ.get("KORTEX_DATA_DIR", "")
    p = os.path.join(data, "ct", "pydicom_CT_small.dcm")
    if not os.path.exists(p):
        from pydicom.data import get_testdata_file
        p = get_testdata_file("CT_small.dcm")
    return pydicom.dcmread(p)


def write_series(folder, offsets, shift=None, names=None):
    """Slices of the CT test file at `offsets` mm along its normal (shift: in-plane drift per
    slice, mm), each with its own pixel values; returns (paths in writing order, expected volume
    in position order, normal, first position)."""
    base = source_slice()
    iop = np.array([float(v) for v in base.ImageOrientationPatient])
    n = np.cross(iop[:3], iop[3:])
    ipp0 = np.array([float(v) for v in base.ImagePositionPatient])
    slope, inter = float(getattr(base, "RescaleSlope", 1)), float(getattr(base, "RescaleIntercept", 0))
    pix = base.pixel_array
    order = list(range(len(offsets)))
    random.Random(7).shuffle(order)
    paths, planes = [], {}
    for rank, k in enumerate(order):
        ds = source_slice()
        p = ipp0 + offsets[k] * n + (0 if shift is None else k * np.asarray(shift))
        ds.ImagePositionPatient = [f"{v:.4f}" for v in p]
        ds.InstanceNumber = k + 1
        values = (pix.astype(np.int32) + 7 * k).clip(np.iinfo(pix.dtype).min, np.iinfo(pix.dtype).max).astype(pix.dtype)
        ds.PixelData = values.tobytes()
        name = (names[rank] if names else f"x{rank:02d}") + ".dcm"
        ds.save_as(os.path.join(folder, name))
        paths.append(os.path.join(folder, name))
        planes[offsets[k]] = values.astype(np.float64) * slope + inter
    expected = np.stack([planes[o] for o in sorted(offsets)]).astype(np.float32)
    return paths, expected, n, ipp0 + min(offsets) * n


def test_folder_and_shuffled_list_give_the_sorted_volume(tmp_path):
    offsets = [2.5 * k for k in range(6)]
    paths, expected, n, first = write_series(str(tmp_path), offsets)
    vol = kortex.read(tmp_path)
    np.testing.assert_array_equal(vol["array"], expected)
    assert vol["array"].shape == (6, 128, 128)
    np.testing.assert_allclose(vol["spacing"][2], 2.5, rtol=1e-6)
    np.testing.assert_allclose(vol["origin"], first, atol=1e-3)
    np.testing.assert_allclose(np.asarray(vol["direction"]).reshape(3, 3)[:, 2], n, atol=1e-6)
    assert vol["metadata"]["dicom.series_slices"] == "6"
    shuffled = list(paths)
    random.Random(3).shuffle(shuffled)
    np.testing.assert_array_equal(kortex.read_series(shuffled)["array"], expected)
    # The command on the folder: a denoised 3D volume of the same grid.
    if KORTEX:
        out = tmp_path.parent / (tmp_path.name + "_out.nii.gz")
        p = subprocess.run([KORTEX, "denoise", "nlm", str(tmp_path), str(out), "--patch-radius", "1", "--search-radius", "2",
                            "--h", "40"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        np.testing.assert_array_equal(kortex.read(out)["array"],
                                      kortex.denoise_nlm(tmp_path, patch_radius=1, search_radius=2, h=40))


def test_descending_positions_are_sorted(tmp_path):
    paths, expected, _, _ = write_series(str(tmp_path), [-3.0 * k for k in range(4)])
    np.testing.assert_array_equal(kortex.read(tmp_path)["array"], expected)


@pytest.mark.parametrize("offsets,shift,message", [
    ([0.0, 2.5, 5.0, 8.0], None, "uneven slice spacing"),
    ([0.0, 2.5, 5.0, 7.5], (0.4, 0.0, 0.0), "gantry tilt"),
    ([0.0, 2.5, 2.5, 5.0], None, "same position"),
])
def test_bad_series_are_refused(tmp_path, offsets, shift, message):
    write_series(str(tmp_path), offsets, shift=shift)
    with pytest.raises(OSError, match=message):
        kortex.read(tmp_path)


def test_slices_of_other_series_are_refused(tmp_path):
    write_series(str(tmp_path), [0.0, 2.5, 5.0])
    other = source_slice()
    half = other.pixel_array[:64].copy()
    other.Rows, other.Columns = 64, 128
    other.PixelData = half.tobytes()
    other.save_as(str(tmp_path / "odd.dcm"))
    with pytest.raises(OSError, match="not one series"):
        kortex.read(tmp_path)


def test_empty_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("no slices here")
    with pytest.raises(OSError, match="holds no DICOM file"):
        kortex.read(tmp_path)
