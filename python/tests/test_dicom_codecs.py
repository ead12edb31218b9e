"""DICOM files nobody on the project wrote (pydicom's test files, as Debian's python3-pydicom ships
them): the same pixel values (after the modality LUT) and the same geometry as pydicom, and every
transfer syntax of one image decoding to the pixels of its uncompressed file (GDCM builds); a build
without GDCM refuses the ones its own reader does not decode, with one message.
"""
import os

import numpy as np
import pytest

import kortex

pydicom = pytest.importorskip("pydicom")
from pydicom.data import get_testdata_file  # noqa: E402
from pydicom.pixel_data_handlers.util import apply_modality_lut  # noqa: E402

# MR_small.dcm (explicit VR little endian) in other transfer syntaxes.
VARIANTS = ["MR_small_implicit.dcm", "MR_small_bigendian.dcm", "MR_small_expb.dcm", "MR_small_RLE.dcm",
            "MR_small_jpeg_ls_lossless.dcm", "MR_small_jp2klossless.dcm"]
KORTEX_OWN = {"MR_small_implicit.dcm"}  # what Kortex's own reader decodes (uncompressed little endian)


def data_file(name):
    try:
        return get_testdata_file(name)
    except Exception:  # noqa: BLE001 - a pydicom without its test files
        return None


@pytest.mark.parametrize("name", ["MR_small.dcm", "CT_small.dcm"])
def test_same_values_and_geometry_as_pydicom(name):
    path = data_file(name)
    if path is None:
        pytest.skip(f"pydicom's {name} is not installed")
    ds = pydicom.dcmread(path)
    expected = apply_modality_lut(ds.pixel_array, ds).astype(np.float32)
    d = kortex.read(path)
    np.testing.assert_array_equal(d["array"], expected)
    np.testing.assert_allclose(d["spacing"], [float(ds.PixelSpacing[1]), float(ds.PixelSpacing[0])], rtol=1e-6)
    np.testing.assert_allclose(d["origin"], [float(v) for v in ds.ImagePositionPatient], atol=1e-6)
    iop = np.array([float(v) for v in ds.ImageOrientationPatient])
    direction = np.asarray(d["direction"]).reshape(3, 3)
    np.testing.assert_allclose(direction[:, 0], iop[:3] / np.linalg.norm(iop[:3]), atol=1e-6)
    np.testing.assert_allclose(direction[:, 1], iop[3:] / np.linalg.norm(iop[3:]), atol=1e-6)


@pytest.mark.parametrize("name", VARIANTS)
def test_transfer_syntaxes_decode_to_the_uncompressed_pixels(name):
    base, path = data_file("MR_small.dcm"), data_file(name)
    if base is None or path is None:
        pytest.skip(f"pydicom's {name} is not installed")
    if kortex.dicom_decoder == "gdcm" or name in KORTEX_OWN:
        a, b = kortex.read(base), kortex.read(path)
        np.testing.assert_array_equal(b["array"], a["array"])
        assert b["spacing"] == a["spacing"] and b["direction"] == a["direction"]
        np.testing.assert_allclose(b["origin"], a["origin"], atol=1e-9)
    else:
        with pytest.raises(OSError, match="big-endian|compressed|deflated"):
            kortex.read(path)
