"""kortex.apply: the `kortex apply` job from Python (arrays, dicts or paths in; the result and its
geometry out; `out` written atomically), the same result as the command, and its refusals."""
import os
import subprocess

import numpy as np
import pytest

import kortex

KORTEX = os.environ.get("KORTEX_EXE")


def itk_affine(path, matrix, translation, centre=(0.0, 0.0, 0.0), kind="AffineTransform_double_3_3"):
    params = " ".join(repr(float(v)) for v in list(np.ravel(matrix)) + list(translation))
    path.write_text("#Insight Transform File V1.0\n#Transform 0\nTransform: {}\nParameters: {}\nFixedParameters: {}\n"
                    .format(kind, params, " ".join(repr(float(c)) for c in centre)))
    return path


def ramp(shape=(10, 12, 14)):
    z, y, x = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    return (2.0 * x - 0.5 * y + 0.25 * z + 5.0).astype(np.float32)


def test_translation_of_a_ramp_matches_the_closed_form(tmp_path):
    img = ramp()
    # y = x + (1.5, -1, 0.5) mm: out(p) = img(p + t) for unit spacing; the ramp is linear, so the
    # trilinear result is exact up to float32 rounding (values < 40: 4 ulps ~ 2e-5 bound it).
    t = (1.5, -1.0, 0.5)
    f = itk_affine(tmp_path / "t.txt", np.eye(3), t)
    r = kortex.apply(img, img, [f], backend="cpu")
    assert r["array"].shape == img.shape and r["array"].dtype == np.float32
    assert r["spacing"] == [1.0, 1.0, 1.0] and r["backend"] == "cpu"
    z, y, x = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in img.shape], indexing="ij")
    qx, qy, qz = x + t[0], y + t[1], z + t[2]
    inside = (qx >= 0) & (qx <= img.shape[2] - 1) & (qy >= 0) & (qy <= img.shape[1] - 1) & (qz >= 0) & (qz <= img.shape[0] - 1)
    want = np.where(inside, 2.0 * qx - 0.5 * qy + 0.25 * qz + 5.0, 0.0)
    assert inside.sum() > img.size // 2
    assert np.max(np.abs(r["array"] - want)) < 2e-5


def test_backends_agree_and_out_is_written(tmp_path):
    img = ramp()
    f = itk_affine(tmp_path / "r.tfm", [[0.99, -0.1, 0.0], [0.1, 0.99, 0.0], [0.0, 0.0, 1.0]], (0.3, 0.2, -0.4),
                   centre=(6.0, 5.0, 4.0))
    a = kortex.apply(img, img, [f], backend="cpu")["array"]
    out = tmp_path / "o.nii.gz"
    b = kortex.apply(img, img, str(f), out=out, backend="kokkos")
    assert np.max(np.abs(a - b["array"])) < 1e-5
    back = kortex.read(out)
    assert np.array_equal(back["array"], b["array"])


def test_dicts_paths_and_the_command_agree(tmp_path):
    img = ramp()
    spacing, origin = [1.2, 0.9, 1.1], [-3.0, 4.0, 2.0]
    kortex.write(tmp_path / "in.nii", img, spacing=spacing, origin=origin)
    f = itk_affine(tmp_path / "a.txt", np.eye(3) * 1.02, (0.4, -0.3, 0.2))
    from_dict = kortex.apply(kortex.read(tmp_path / "in.nii"), tmp_path / "in.nii", [(f, False), (f, True)],
                             interpolation="nearest")
    # an affine then its inverse: the identity, and nearest at grid points gives the input back
    assert np.array_equal(from_dict["array"], img)
    assert np.allclose(from_dict["spacing"], spacing) and np.allclose(from_dict["origin"], origin)
    r = kortex.apply(tmp_path / "in.nii", tmp_path / "in.nii", [f], out=tmp_path / "py.nii", backend="cpu")
    if KORTEX:
        subprocess.run([KORTEX, "apply", "--input", str(tmp_path / "in.nii"), "--reference", str(tmp_path / "in.nii"),
                        "--transform", str(f), "--out", str(tmp_path / "cli.nii"), "--backend", "cpu", "--quiet"],
                       check=True)
        assert np.array_equal(kortex.read(tmp_path / "cli.nii")["array"], r["array"])


def test_label_interpolation_keeps_labels(tmp_path):
    labels = np.zeros((10, 10, 10), dtype=np.uint8)
    labels[2:6, 3:8, 1:5] = 3
    labels[5:9, 1:4, 4:9] = 7
    f = itk_affine(tmp_path / "rot.txt", [[0.98, -0.2, 0.0], [0.2, 0.98, 0.0], [0.0, 0.0, 1.0]], (0.3, 0.1, 0.0),
                   centre=(4.5, 4.5, 4.5))
    r = kortex.apply(labels, labels, [f], interpolation="label")
    assert set(np.unique(r["array"])) <= {0.0, 3.0, 7.0}
    assert {3.0, 7.0} <= set(np.unique(r["array"]))


def test_refusals_leave_no_output(tmp_path):
    img = ramp()
    f = itk_affine(tmp_path / "t.txt", np.eye(3), (0.5, 0.0, 0.0))
    out = tmp_path / "o.nii"
    with pytest.raises(ValueError, match="integer values"):
        kortex.apply(img + 0.5, img, [f], out=out, interpolation="label")
    with pytest.raises(OSError, match="does not exist"):
        kortex.apply(img, img, [tmp_path / "missing.txt"], out=out)
    euler = itk_affine(tmp_path / "e.txt", np.eye(3), (0, 0, 0), kind="Euler3DTransform_double_3_3")
    with pytest.raises(OSError, match="Euler3DTransform_double_3_3"):
        kortex.apply(img, img, [euler], out=out)
    with pytest.raises(ValueError, match="no transform"):
        kortex.apply(img, img, [], out=out)
    with pytest.raises(ValueError, match="unknown interpolation"):
        kortex.apply(img, img, [f], interpolation="cubic")
    kortex.write(tmp_path / "in.nii", img)
    with pytest.raises(ValueError, match="overwrite"):
        kortex.apply(tmp_path / "in.nii", img, [f], out=tmp_path / "in.nii")
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if "kortex-tmp" in p]


def test_signature_and_doc():
    import inspect
    sig = inspect.signature(kortex.apply)
    assert list(sig.parameters)[:4] == ["input", "reference", "transforms", "out"]
    assert sig.parameters["interpolation"].default == "linear"
    assert "FIRST listed takes" in kortex.apply.__doc__ and "apply" in kortex.__all__


def test_pair_flags_are_bool_or_0_1(tmp_path):
    img = ramp()
    f = itk_affine(tmp_path / "t.txt", np.eye(3) * 1.05, (0.5, 0.0, 0.0))
    g = itk_affine(tmp_path / "g.txt", np.eye(3), (0.0, 1.0, 0.0))
    forward = kortex.apply(img, img, [f], backend="cpu")["array"]
    for flag in (False, 0, np.int64(0)):
        assert np.array_equal(kortex.apply(img, img, [(f, flag)], backend="cpu")["array"], forward)
    assert np.array_equal(kortex.apply(img, img, (f, False), backend="cpu")["array"], forward)  # one pair alone
    inverse = kortex.apply(img, img, [(f, True)], backend="cpu")["array"]
    assert not np.array_equal(inverse, forward)
    assert np.array_equal(kortex.apply(img, img, [(f, 1)], backend="cpu")["array"], inverse)
    # "0" is a string, not a flag (it applied the inverse); (f, g) is two transforms, not a pair (g was dropped)
    for bad in ([(f, "0")], [(f, g)], [(f, 2)], [(f,)]):
        with pytest.raises(ValueError, match="pair"):
            kortex.apply(img, img, bad, backend="cpu")
    # a tuple of paths as the whole list still means two transforms
    two = kortex.apply(img, img, (f, g), backend="cpu")["array"]
    assert np.array_equal(two, kortex.apply(img, img, [f, g], backend="cpu")["array"])


def test_ants_order_the_first_listed_takes_the_point_first(tmp_path):
    # antsApplyTransforms -t A -t B samples the input at B(A(x)) (ITK's CompositeTransform with the
    # command line pushed to its front). A: scale 1.1 about the world origin, B: shift 2 mm in x.
    img = ramp((12, 12, 16))
    a = itk_affine(tmp_path / "a.txt", np.eye(3) * 1.1, (0.0, 0.0, 0.0))
    b = itk_affine(tmp_path / "b.txt", np.eye(3), (2.0, 0.0, 0.0))
    r = kortex.apply(img, img, [a, b], backend="cpu")["array"]
    z, y, x = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in img.shape], indexing="ij")
    qx, qy, qz = 1.1 * x + 2.0, 1.1 * y, 1.1 * z  # B(A(x))
    inside = (qx <= img.shape[2] - 1) & (qy <= img.shape[1] - 1) & (qz <= img.shape[0] - 1)
    want = np.where(inside, 2.0 * qx - 0.5 * qy + 0.25 * qz + 5.0, 0.0)
    assert inside.sum() > img.size // 3
    assert np.max(np.abs(r - want)) < 2e-5


def test_label_maps_come_out_as_integers(tmp_path):
    nib = pytest.importorskip("nibabel")
    labels = np.zeros((10, 10, 10), dtype=np.int16)
    labels[2:6, 3:8, 1:5] = 3
    labels[5:9, 1:4, 4:9] = 1200
    nib.save(nib.Nifti1Image(labels.T, np.eye(4)), str(tmp_path / "labels.nii.gz"))
    f = itk_affine(tmp_path / "t.txt", np.eye(3), (0.4, 0.0, 0.0))
    for interpolation in ("label", "nearest"):
        out = tmp_path / (interpolation + ".nii.gz")
        kortex.apply(tmp_path / "labels.nii.gz", tmp_path / "labels.nii.gz", [f], out=out, interpolation=interpolation)
        img = nib.load(str(out))
        assert img.get_data_dtype() == np.int16, interpolation  # the input's own integer type
        assert set(np.unique(np.asarray(img.dataobj))) <= {0, 3, 1200}
    # linear interpolation stays float32
    kortex.apply(tmp_path / "labels.nii.gz", tmp_path / "labels.nii.gz", [f], out=tmp_path / "lin.nii.gz")
    assert nib.load(str(tmp_path / "lin.nii.gz")).get_data_dtype() == np.float32
