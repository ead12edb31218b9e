"""The kortex Python package against the `kortex` command on the same inputs (same numbers), plus
its own contract: arrays in place, geometry, errors with the command's messages, nibabel round trips.

Run by ctest (pytestKortex) with PYTHONPATH=<build>/python and KORTEX_EXE=<build>/apps/kortex.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kortex

KORTEX = os.environ.get("KORTEX_EXE")
DATA = os.environ.get("KORTEX_DATA_DIR", "")


def cli(*args):
    """Runs the command; returns its stderr; fails the test on a non-zero exit."""
    assert KORTEX, "KORTEX_EXE names the kortex executable (ctest sets it)"
    p = subprocess.run([KORTEX, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stderr


def cli_error(*args):
    p = subprocess.run([KORTEX, *map(str, args)], capture_output=True, text=True)
    assert p.returncode != 0
    return p.stderr.strip()


def volume(shape=(12, 14, 16), seed=1):
    """A smooth blob plus noise: structure for every filter, values in about [0, 1]."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    blob = np.exp(-(x**2 / 0.3 + y**2 / 0.2 + z**2 / 0.25))
    return (blob + 0.05 * rng.standard_normal(shape)).astype(np.float32)


def test_module_reports_its_execution_space():
    assert isinstance(kortex.execution_space, str) and kortex.execution_space
    assert isinstance(kortex.has_gpu_backend, bool)


def test_read_write_round_trip_keeps_data_and_geometry(tmp_path):
    a = volume()
    geo = {"spacing": [1.5, 2.0, 2.5], "origin": [-10.0, 5.0, 3.0], "direction": [0, 1, 0, -1, 0, 0, 0, 0, 1]}
    kortex.write(tmp_path / "v.nii.gz", a, **geo)
    d = kortex.read(tmp_path / "v.nii.gz")
    np.testing.assert_array_equal(d["array"], a)
    np.testing.assert_allclose(d["spacing"], geo["spacing"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(d["origin"], geo["origin"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(d["direction"], geo["direction"], rtol=0, atol=1e-6)
    assert kortex.geometry_of(tmp_path / "v.nii.gz")["spacing"] == d["spacing"]


@pytest.mark.parametrize("origin, direction, message", [
    ([np.nan, 0.0, 0.0], None, "origin must be finite"),
    ([0.0, 0.0, -np.inf], None, "origin must be finite"),
    (None, [1, 0, 0, 0, np.nan, 0, 0, 0, 1], "direction must be finite"),
])
def test_write_refuses_a_non_finite_origin_or_direction(tmp_path, origin, direction, message):
    # Geometry::validate is the one rule: a file with no position is never written.
    out = tmp_path / "v.nii.gz"
    with pytest.raises(ValueError, match=message):
        kortex.write(out, volume(), origin=origin, direction=direction)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["cpu", "kokkos"])
def test_bilateral_equals_the_command(tmp_path, backend):
    a = volume()
    kortex.write(tmp_path / "in.nii", a)
    cli("denoise", "bilateral", tmp_path / "in.nii", tmp_path / "out.nii", "--radius", 2, "--sigma-spatial", 1.5,
        "--sigma-range", 0.2, "--backend", backend)
    ours = kortex.denoise_bilateral(a, radius=2, sigma_spatial=1.5, sigma_range=0.2, backend=backend)
    np.testing.assert_array_equal(ours, kortex.read(tmp_path / "out.nii")["array"])
    # The same from the file path, and from a float64, non-contiguous view of the same values.
    np.testing.assert_array_equal(kortex.denoise_bilateral(tmp_path / "in.nii", radius=2, sigma_spatial=1.5,
                                                           sigma_range=0.2, backend=backend), ours)
    twice = np.repeat(a.astype(np.float64), 2, axis=2)[:, :, ::2]
    assert not twice.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(kortex.denoise_bilateral(twice, radius=2, sigma_spatial=1.5, sigma_range=0.2,
                                                           backend=backend), ours)


def test_input_array_is_used_in_place_and_not_modified():
    a = volume()
    before = a.copy()
    out = kortex.denoise_nlm(a, patch_radius=1, search_radius=2, h=0.1, backend="cpu")
    np.testing.assert_array_equal(a, before)
    assert out.dtype == np.float32 and out.shape == a.shape and not np.shares_memory(out, a)


@pytest.mark.parametrize("backend,variant", [("cpu", None), ("kokkos", "boxsum"), ("kokkos", "naive")])
def test_nlm_equals_the_command(tmp_path, backend, variant):
    a = volume(seed=2)
    kortex.write(tmp_path / "in.nii", a)
    extra = ["--variant", variant] if variant else []
    cli("denoise", "nlm", tmp_path / "in.nii", tmp_path / "out.nii", "--patch-radius", 1, "--search-radius", 3,
        "--h", 0.08, "--backend", backend, *extra)
    ours = kortex.denoise_nlm(a, patch_radius=1, search_radius=3, h=0.08, backend=backend, variant=variant)
    np.testing.assert_array_equal(ours, kortex.read(tmp_path / "out.nii")["array"])


def test_multires_equals_the_command(tmp_path):
    rng = np.random.default_rng(3)
    img = np.clip(np.round(100 + 40 * np.sin(np.arange(64)[:, None] / 5.0) + 10 * rng.standard_normal((64, 64))), 0, 255)
    img = img.astype(np.float32)
    kortex.write(tmp_path / "in.nii", img)
    cli("denoise", "multires", tmp_path / "in.nii", tmp_path / "out.nii", "--levels", 3, "--sigma-range", "auto",
        "--backend", "kokkos")
    ours = kortex.denoise_multires(img, levels=3, sigma_range="auto", backend="kokkos")
    np.testing.assert_array_equal(ours, kortex.read(tmp_path / "out.nii")["array"])
    assert ours.shape == (64, 64)


def test_greedy_registration_equals_the_command(tmp_path):
    fixed = volume((16, 16, 16), seed=4)
    moving = np.roll(fixed, 1, axis=2).copy()
    kortex.write(tmp_path / "f.nii", fixed)
    kortex.write(tmp_path / "m.nii", moving)
    cli("register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii", "--out-warped",
        tmp_path / "w.nii", "--out-field", tmp_path / "d.nii.gz", "--scales", "2,1", "--iterations", "3,4",
        "--backend", "kokkos", "--no-affine", "--quiet")
    r = kortex.register_greedy(tmp_path / "f.nii", tmp_path / "m.nii", scales=[2, 1], iterations=[3, 4], affine=False,
                               backend="kokkos")
    np.testing.assert_array_equal(r["warped"], kortex.read(tmp_path / "w.nii")["array"])
    assert r["displacement"].shape == (3, 16, 16, 16)
    assert r["jacobian"].min() > 0.0
    assert r["backend"] == "kokkos"
    # Python writes what the command writes: the same job, the same files.
    r2 = kortex.register_greedy(tmp_path / "f.nii", tmp_path / "m.nii", scales=[2, 1], iterations=[3, 4], affine=False,
                                backend="kokkos", out_warped=tmp_path / "pw.nii", out_field=tmp_path / "pd.nii.gz",
                                out_report=tmp_path / "pr.json")
    assert (tmp_path / "pw.nii").read_bytes() == (tmp_path / "w.nii").read_bytes()
    field = kortex.read_field(tmp_path / "pd.nii.gz")
    np.testing.assert_array_equal(field["array"], kortex.read_field(tmp_path / "d.nii.gz")["array"])
    np.testing.assert_array_equal(field["array"], r2["displacement"])
    # kortex.write saves the returned field as the command does, bit for bit
    kortex.write(tmp_path / "again.nii.gz", r2["displacement"], **{k: field[k] for k in ("spacing", "origin", "direction")})
    np.testing.assert_array_equal(kortex.read_field(tmp_path / "again.nii.gz")["array"], field["array"])
    report = json.loads((tmp_path / "pr.json").read_text())
    assert report["job"]["method"] == "greedy" and report["job"]["outputs"]["warped"] == str(tmp_path / "pw.nii")
    assert sorted(r2["written"]) == sorted(str(tmp_path / n) for n in ("pw.nii", "pd.nii.gz", "pr.json"))


def _shifted_pair(tmp_path):
    """f.nii and m.nii: a volume and its roll, anisotropic spacing, the moving origin 3 mm off."""
    fixed = volume((16, 16, 16), seed=6)
    moving = np.roll(fixed, 2, axis=2).copy()
    kortex.write(tmp_path / "f.nii", fixed, spacing=[1.1, 1.0, 0.9])
    kortex.write(tmp_path / "m.nii", moving, spacing=[1.1, 1.0, 0.9], origin=[3.0, -2.0, 1.0])


def test_register_field_then_affine_is_the_whole_map(tmp_path):
    # ANTs' convention: the field is the deformable part; `-t field -t affine` reproduces the warped
    # image (to the float32 storage of the field: 1e-4 of a range of ~1). The field alone does not.
    _shifted_pair(tmp_path)
    r = kortex.register_greedy(tmp_path / "f.nii", tmp_path / "m.nii", scales=[2, 1], iterations=[3, 4],
                               backend="cpu", out_field=tmp_path / "d.nii.gz", out_affine=tmp_path / "a.txt")
    assert r["affine"].shape == (4, 4) and abs(r["affine"][0, 3]) > 1.0  # world mm: the 3 mm origin shift
    whole = kortex.apply(tmp_path / "m.nii", tmp_path / "f.nii", [tmp_path / "d.nii.gz", tmp_path / "a.txt"],
                         backend="cpu")["array"]
    assert np.max(np.abs(whole - r["warped"])) < 1e-4
    alone = kortex.apply(tmp_path / "m.nii", tmp_path / "f.nii", [tmp_path / "d.nii.gz"], backend="cpu")["array"]
    assert np.max(np.abs(alone - r["warped"])) > 0.05


def test_register_composite_field_is_the_whole_map(tmp_path):
    # out_composite: the whole map as one field; applied alone it gives the warped image (to the
    # float32 storage of the fields), as the field then the affine do.
    _shifted_pair(tmp_path)
    r = kortex.register_greedy(tmp_path / "f.nii", tmp_path / "m.nii", scales=[2, 1], iterations=[3, 4],
                               backend="cpu", out_composite=tmp_path / "c.nii.gz")
    np.testing.assert_array_equal(kortex.read_field(tmp_path / "c.nii.gz")["array"], r["composite_displacement"])
    whole = kortex.apply(tmp_path / "m.nii", tmp_path / "f.nii", [tmp_path / "c.nii.gz"], backend="cpu")["array"]
    assert np.max(np.abs(whole - r["warped"])) < 1e-4


def test_register_symmetric_equals_the_command_and_is_inverse_consistent(tmp_path):
    # symmetric=True (--symmetric): both images move to a midpoint; the command gives the same field,
    # another than the default mode's, both back ends agree, the report says so, and masks are
    # refused with it.
    fixed = volume((16, 16, 16), seed=10)
    moving = np.roll(fixed, 2, axis=2).copy()
    kortex.write(tmp_path / "f.nii", fixed)
    kortex.write(tmp_path / "m.nii", moving)
    kw = dict(scales=[2, 1], iterations=[4, 6], affine=False)
    sym = kortex.register_greedy(fixed, moving, symmetric=True, backend="cpu", **kw)
    plain = kortex.register_greedy(fixed, moving, backend="cpu", **kw)
    gpu = kortex.register_greedy(fixed, moving, symmetric=True, backend="kokkos", **kw)
    cli("register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii", "--symmetric",
        "--no-affine", "--scales", "2,1", "--iterations", "4,6", "--out-field", tmp_path / "s.nii.gz",
        "--backend", "cpu", "--quiet")
    np.testing.assert_array_equal(kortex.read_field(tmp_path / "s.nii.gz")["array"], sym["displacement"])
    assert not np.array_equal(sym["displacement"], plain["displacement"])
    assert np.max(np.abs(gpu["displacement"] - sym["displacement"])) < 1e-3  # mm: the two back ends
    assert sym["report"]["job"]["symmetric"] is True
    assert sym["report"]["registration"]["greedy"]["midpoint_inverse"]["unconverged"] == 0
    with pytest.raises(ValueError, match="symmetric mode takes no cost-function masks"):
        kortex.register_greedy(fixed, moving, symmetric=True, fixed_mask=np.ones_like(fixed), backend="cpu", **kw)


def test_register_keeps_the_users_files_when_it_fails(tmp_path):
    fixed = volume((16, 16, 16), seed=7)
    kortex.write(tmp_path / "f.nii", fixed)
    (tmp_path / "w.nii").write_bytes(b"the user's earlier result")
    with pytest.raises(ValueError):
        kortex.register_greedy(tmp_path / "f.nii", np.zeros_like(fixed), scales=[2, 1], iterations=[2, 2],
                               out_warped=tmp_path / "w.nii")  # a constant moving image is refused
    assert (tmp_path / "w.nii").read_bytes() == b"the user's earlier result"
    assert not [p for p in os.listdir(tmp_path) if "kortex-tmp" in p]


def test_register_cohort_equals_the_command_and_single_pairs(tmp_path):
    # A list of moving images is a cohort: each subject what the single pair gives, and the files the
    # command's cohort writes (named after the moving images in --out-dir).
    fixed = volume((16, 16, 16), seed=8)
    movings = [np.roll(fixed, s, axis=a).copy() for s, a in ((1, 2), (-1, 1), (2, 0))]
    kortex.write(tmp_path / "f.nii", fixed)
    for i, m in enumerate(movings):
        kortex.write(tmp_path / ("m%d.nii" % i), m)
    names = [tmp_path / ("m%d.nii" % i) for i in range(3)]
    kw = dict(scales=[2, 1], iterations=[3, 2], backend="cpu")
    subjects = kortex.register_greedy(tmp_path / "f.nii", names, out_dir=tmp_path / "py", out_warped=True, **kw)
    assert len(subjects) == 3
    (tmp_path / "list.txt").write_text("m1.nii\nm2.nii\n")
    cli("register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", names[0], "--list", tmp_path / "list.txt",
        "--out-dir", tmp_path / "cli", "--out-warped", "--scales", "2,1", "--iterations", "3,2", "--backend", "cpu",
        "--quiet")
    for i, s in enumerate(subjects):
        single = kortex.register_greedy(tmp_path / "f.nii", names[i], **kw)
        np.testing.assert_array_equal(s["warped"], single["warped"])
        np.testing.assert_array_equal(s["displacement"], single["displacement"])
        for folder in ("py", "cli"):
            np.testing.assert_array_equal(kortex.read(tmp_path / folder / ("m%d_warped.nii.gz" % i))["array"],
                                          single["warped"])
    arrays = kortex.register_greedy(fixed, movings, **kw)  # arrays: results in memory, no file
    np.testing.assert_array_equal(arrays[1]["warped"], subjects[1]["warped"])
    with pytest.raises(ValueError, match="out_warped=True"):
        kortex.register_greedy(fixed, movings, out_dir=tmp_path / "x", out_warped=tmp_path / "w.nii", **kw)
    skipped = kortex.register_greedy(tmp_path / "f.nii", [names[0], tmp_path / "none.nii"], keep_going=True, **kw)
    assert "does not exist" in skipped[1]["error"] and "warped" in skipped[0]
    assert "no moving image" in cli_error("register", "greedy", "--fixed", tmp_path / "f.nii", "--out-warped",
                                          tmp_path / "w.nii")


def test_unbiased_registration_equals_the_command(tmp_path):
    fixed = volume((16, 16, 16), seed=5)
    moving = np.roll(fixed, 1, axis=1).copy()
    kortex.write(tmp_path / "f.nii", fixed)
    kortex.write(tmp_path / "m.nii", moving)
    cli("register", "unbiased", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii", "--out-warped",
        tmp_path / "w.nii", "--iterations", 8, "--backend", "cpu", "--no-affine", "--quiet")
    r = kortex.register_unbiased(fixed, moving, iterations=8, affine=False, backend="cpu")
    np.testing.assert_array_equal(r["warped"], kortex.read(tmp_path / "w.nii")["array"])


def test_surface_denoise_equals_the_command(tmp_path):
    n = 24
    z, y, x = np.meshgrid(*[np.arange(n)] * 3, indexing="ij")
    mask = ((x - 11.5) ** 2 + (y - 12.2) ** 2 + (z - 11.8) ** 2 <= 7.3**2).astype(np.float32)
    kortex.write(tmp_path / "mask.nii", mask)
    cli("surface", "denoise", tmp_path / "mask.nii", tmp_path / "phi.nii", "--patch", 3, "--neighbors", 8,
        "--iterations", 2, "--backend", "cpu", "--quiet")
    phi = kortex.surface_phi_from_mask(mask)
    ours = kortex.surface_denoise(phi, patch=3, neighbors=8, iterations=2, backend="cpu")
    np.testing.assert_array_equal(ours, kortex.read(tmp_path / "phi.nii")["array"])
    assert (phi < 0).sum() > 0 and (phi > 0).sum() > 0


def test_atlas_equals_the_command(tmp_path):
    paths = []
    for k in range(3):
        v = np.roll(volume((16, 16, 16), seed=10), k - 1, axis=2)
        paths.append(tmp_path / f"s{k}.nii")
        kortex.write(paths[-1], v)
    cli("atlas", "build", *paths, "--out-template", tmp_path / "t_cli.nii", "--iterations", "2,3", "--no-affine",
        "--backend", "kokkos", "--quiet")
    r = kortex.atlas_build(paths, tmp_path / "t_py.nii", iterations=[2, 3], affine=False, backend="kokkos")
    np.testing.assert_array_equal(r["template"]["array"], kortex.read(tmp_path / "t_cli.nii")["array"])
    assert r["report"]["subjects"] == 3
    # The same subjects as arrays (and one as read's dict), no template file asked for.
    subjects = [kortex.read(paths[0]), kortex.read(paths[1])["array"], paths[2]]
    r2 = kortex.atlas_build(subjects, iterations=[2, 3], affine=False, backend="kokkos")
    np.testing.assert_array_equal(r2["template"]["array"], r["template"]["array"])


def test_errors_carry_the_command_messages(tmp_path):
    a = volume()
    kortex.write(tmp_path / "in.nii", a)
    message = cli_error("denoise", "bilateral", tmp_path / "in.nii", tmp_path / "o.nii", "--sigma-spatial", -1)
    with pytest.raises(ValueError) as e:
        kortex.denoise_bilateral(a, sigma_spatial=-1)
    assert str(e.value) in message
    with pytest.raises(OSError) as e:
        kortex.denoise_nlm(tmp_path / "missing.nii")
    assert "missing.nii" in str(e.value)
    with pytest.raises(ValueError, match="NaN"):
        kortex.denoise_bilateral(np.full((4, 4, 4), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="2D .* or 3D"):
        kortex.denoise_bilateral(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="no meaning with the CPU backend"):
        kortex.denoise_nlm(a, backend="cpu", variant="naive")
    with pytest.raises(ValueError, match="auto\\|cpu\\|kokkos"):
        kortex.denoise_nlm(a, backend="gpu")
    with pytest.raises(ValueError, match="sigma_range"):
        kortex.denoise_multires(a[0], sigma_range="often")
    assert not (tmp_path / "o.nii").exists()


def test_nibabel_round_trip(tmp_path):
    nib = pytest.importorskip("nibabel")
    a = volume()
    geo = {"spacing": [1.2, 1.0, 2.0], "origin": [4.0, -3.0, 7.0], "direction": [1, 0, 0, 0, 1, 0, 0, 0, 1]}
    kortex.write(tmp_path / "k.nii.gz", a, **geo)
    img = nib.load(tmp_path / "k.nii.gz")
    arr, g = kortex.from_nibabel(img)
    np.testing.assert_array_equal(arr, a)
    np.testing.assert_allclose(g["spacing"], geo["spacing"], atol=1e-6)
    np.testing.assert_allclose(g["origin"], geo["origin"], atol=1e-5)
    np.testing.assert_allclose(g["direction"], geo["direction"], atol=1e-6)
    # Kortex's output back to nibabel, saved by nibabel, read by kortex: same voxels and geometry.
    out = kortex.denoise_bilateral(arr, radius=1, backend="cpu")
    nib.save(kortex.to_nibabel(out, g), tmp_path / "n.nii.gz")
    d = kortex.read(tmp_path / "n.nii.gz")
    np.testing.assert_array_equal(d["array"], out)
    np.testing.assert_allclose(d["spacing"], geo["spacing"], atol=1e-6)
    np.testing.assert_allclose(d["origin"], geo["origin"], atol=1e-5)


@pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "mri", "ixi_2mm")), reason="real data absent (../shared/data)")
def test_real_ixi_volume_nlm_equals_the_command(tmp_path):
    path = sorted(p for p in os.listdir(os.path.join(DATA, "mri", "ixi_2mm")) if p.endswith(".nii.gz"))[0]
    f = os.path.join(DATA, "mri", "ixi_2mm", path)
    cli("denoise", "nlm", f, tmp_path / "o.nii.gz", "--patch-radius", 1, "--search-radius", 2, "--h", 40, "--backend", "kokkos")
    ours = kortex.denoise_nlm(f, patch_radius=1, search_radius=2, h=40, backend="kokkos")
    np.testing.assert_array_equal(ours, kortex.read(tmp_path / "o.nii.gz")["array"])


def test_a_refused_write_names_the_file(tmp_path):
    with pytest.raises(ValueError, match="cannot write '.*bad.nii'.*origin must be finite"):
        kortex.write(tmp_path / "bad.nii", np.zeros((4, 4, 4), np.float32), origin=[float("nan"), 0, 0])
    assert not list(tmp_path.iterdir())


def _itk_affine_text(matrix, translation):
    values = list(np.asarray(matrix, dtype=float).ravel()) + list(np.asarray(translation, dtype=float))
    return ("#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_double_3_3\nParameters: "
            + " ".join("%.17g" % v for v in values) + "\nFixedParameters: 0 0 0\n")


def _rotation(z_deg, x_deg):
    a, b = np.radians(z_deg), np.radians(x_deg)
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    return rx @ rz


@pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "mri", "ixi_2mm")), reason="real data absent (../shared/data)")
def test_rigid_transform_recovers_known_motion(tmp_path):
    # An IXI T1 moved by known rigid motions (up to 20 degrees and 20 mm, `kortex apply` with an ITK
    # affine) comes back within 0.1 mm RMS inside the head with --transform rigid, from Python and
    # from the command, on both back ends; the fit is a rotation.
    fixed = os.path.join(DATA, "mri", "ixi_2mm", "IXI012-HH-1211-T1_ds.nii.gz")
    img = kortex.read(fixed)
    head = np.argwhere(img["array"] > np.percentile(img["array"], 70))[:, ::-1].astype(float)  # (x, y, z)
    world = np.asarray(img["origin"]) + (np.asarray(img["direction"]).reshape(3, 3) @ (head * img["spacing"]).T).T
    # Motions that keep the head inside the 180-mm field of view along z: where `kortex apply` cuts
    # the head at the top or bottom slice, the cut (zeros against brain) biases the fit by up to
    # 0.18 mm on this volume (15 degrees about x, 12 mm along z), which masks are for.
    for k, (z_deg, x_deg, t) in enumerate([(20.0, 12.0, (12.0, -12.0, 10.0)), (-20.0, 0.0, (14.0, -14.0, 0.0)),
                                           (18.0, 3.0, (-10.0, 12.0, 2.0))]):
        r, t = _rotation(z_deg, x_deg), np.asarray(t)
        (tmp_path / "a.txt").write_text(_itk_affine_text(r, t))
        moved = tmp_path / ("moved%d.nii.gz" % k)
        kortex.apply(fixed, fixed, [tmp_path / "a.txt"], out=moved, backend="cpu")
        truth = (r.T @ (world - t).T).T  # apply's map x -> R x + t, so the fixed -> moving map is its inverse
        fits = {}
        for backend in ("cpu", "kokkos"):
            fits["python " + backend] = kortex.register_greedy(fixed, moved, transform="rigid", backend=backend)["affine"]
        cli("register", "greedy", "--fixed", fixed, "--moving", moved, "--transform", "rigid", "--out-affine",
            tmp_path / "cli.txt", "--backend", "cpu", "--quiet")
        p = [float(v) for v in (tmp_path / "cli.txt").read_text().split("Parameters: ")[1].split("\n")[0].split()]
        fits["command cpu"] = np.vstack([np.hstack([np.reshape(p[:9], (3, 3)), np.reshape(p[9:], (3, 1))]), [0, 0, 0, 1]])
        for name, m in fits.items():
            got = (m[:3, :3] @ world.T).T + m[:3, 3]
            rms = np.sqrt(((got - truth) ** 2).sum(1).mean())
            assert rms < 0.1, (k, name, rms)
            assert np.abs(m[:3, :3] @ m[:3, :3].T - np.eye(3)).max() < 1e-9, (k, name)


def test_mi_rigid_recovers_known_motion_across_contrasts(tmp_path):
    # --affine-metric mi: the IXI T1 moved by a known rigid motion (20 and 12 degrees, 20 mm) and turned
    # into another contrast (tissue inverted and folded by a sine: not a monotone map, as T2 or PD to
    # T1) comes back within 0.1 mm RMS inside the head from Python (both back ends) and the command;
    # NCC cannot align it.
    fixed = os.path.join(DATA, "mri", "ixi_2mm", "IXI012-HH-1211-T1_ds.nii.gz")
    img = kortex.read(fixed)
    head = np.argwhere(img["array"] > np.percentile(img["array"], 70))[:, ::-1].astype(float)  # (x, y, z)
    world = np.asarray(img["origin"]) + (np.asarray(img["direction"]).reshape(3, 3) @ (head * img["spacing"]).T).T
    r, t = _rotation(20.0, 12.0), np.asarray((12.0, -12.0, 10.0))
    (tmp_path / "a.txt").write_text(_itk_affine_text(r, t))
    kortex.apply(fixed, fixed, [tmp_path / "a.txt"], out=tmp_path / "moved.nii.gz", backend="cpu")
    moved = kortex.read(tmp_path / "moved.nii.gz")
    u = np.clip(moved["array"] / np.percentile(moved["array"], 99.5), 0.0, 1.0)
    other = np.where(u > 0.05, 1.2 - u + 0.3 * np.sin(6.0 * u), 0.0).astype(np.float32)
    kortex.write(tmp_path / "other.nii.gz", other, spacing=moved["spacing"], origin=moved["origin"],
                 direction=moved["direction"])
    truth = (r.T @ (world - t).T).T

    def rms(m):
        got = (m[:3, :3] @ world.T).T + m[:3, 3]
        return np.sqrt(((got - truth) ** 2).sum(1).mean())

    for backend in ("cpu", "kokkos"):
        fit = kortex.register_greedy(fixed, tmp_path / "other.nii.gz", transform="rigid", affine_metric="mi",
                                     backend=backend)
        assert rms(fit["affine"]) < 0.1, backend
        assert fit["report"]["registration"]["affine"]["metric"] == "mi"
    cli("register", "greedy", "--fixed", fixed, "--moving", tmp_path / "other.nii.gz", "--transform", "rigid",
        "--affine-metric", "mi", "--mi-bins", "32", "--out-affine", tmp_path / "cli.txt", "--backend", "cpu", "--quiet")
    p = [float(v) for v in (tmp_path / "cli.txt").read_text().split("Parameters: ")[1].split("\n")[0].split()]
    assert rms(np.vstack([np.hstack([np.reshape(p[:9], (3, 3)), np.reshape(p[9:], (3, 1))]), [0, 0, 0, 1]])) < 0.1
    ncc = kortex.register_greedy(fixed, tmp_path / "other.nii.gz", transform="rigid", backend="cpu")
    assert rms(ncc["affine"]) > 5.0
    with pytest.raises(ValueError, match="affine metric must be ncc or mi"):
        kortex.register_greedy(fixed, tmp_path / "other.nii.gz", transform="rigid", affine_metric="nmi")
    with pytest.raises(ValueError, match="bins must be in"):
        kortex.register_greedy(fixed, tmp_path / "other.nii.gz", transform="rigid", affine_metric="mi", mi_bins=4)


@pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "mri", "ixi_2mm")), reason="real data absent (../shared/data)")
def test_bias_correct_equals_the_command(tmp_path):
    # --bias-correct / bias_correct= (core/Intensity.hpp): Python gives the command's rigid MI fit with
    # both images bias-corrected, another fit than without; a negative sigma is refused.
    fixed = os.path.join(DATA, "mri", "ixi_2mm", "IXI012-HH-1211-T1_ds.nii.gz")
    moving = os.path.join(DATA, "mri", "ixi_2mm", "IXI013-HH-1212-T1_ds.nii.gz")
    args = dict(transform="rigid", affine_metric="mi", backend="cpu")
    fit = kortex.register_greedy(fixed, moving, bias_correct=30.0, **args)
    plain = kortex.register_greedy(fixed, moving, **args)
    cli("register", "greedy", "--fixed", fixed, "--moving", moving, "--transform", "rigid", "--affine-metric", "mi",
        "--bias-correct", "30", "--out-affine", tmp_path / "cli.txt", "--backend", "cpu", "--quiet")
    p = [float(v) for v in (tmp_path / "cli.txt").read_text().split("Parameters: ")[1].split("\n")[0].split()]
    itk = np.vstack([np.hstack([np.reshape(p[:9], (3, 3)), np.reshape(p[9:], (3, 1))]), [0, 0, 0, 1]])
    assert np.abs(itk - fit["affine"]).max() < 1e-6
    assert np.abs(plain["affine"] - fit["affine"]).max() > 1e-4
    with pytest.raises(ValueError, match="bias correction's sigma"):
        kortex.register_greedy(fixed, moving, bias_correct=-1.0, **args)


def test_register_masks_equal_the_command(tmp_path):
    # --fixed-mask / --moving-mask (the affine stage's cost-function masks): an array mask in Python
    # gives the command's transform with the mask file; a mask off its image's grid is refused, and
    # masks with the deformable default too (the greedy stage does not take them yet).
    fixed = volume((16, 18, 20), seed=9)
    moving = np.roll(fixed, 1, axis=2).copy()
    mask = np.ones_like(fixed)
    mask[4:9, 5:10, 6:12] = 0.0
    kortex.write(tmp_path / "f.nii", fixed)
    kortex.write(tmp_path / "m.nii", moving)
    kortex.write(tmp_path / "mask.nii", mask)
    r = kortex.register_greedy(fixed, moving, transform="affine", fixed_mask=mask, backend="cpu")
    cli("register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii", "--fixed-mask",
        tmp_path / "mask.nii", "--transform", "affine", "--out-affine", tmp_path / "a.txt", "--backend", "cpu", "--quiet")
    p = [float(v) for v in (tmp_path / "a.txt").read_text().split("Parameters: ")[1].split("\n")[0].split()]
    np.testing.assert_array_equal(r["affine"][:3, :3].ravel(), p[:9])
    cohort = kortex.register_greedy(fixed, [moving, moving], transform="affine", fixed_mask=mask, backend="cpu")
    np.testing.assert_array_equal(cohort[1]["affine"], r["affine"])  # a cohort's fixed mask: every subject's
    unmasked = kortex.register_greedy(fixed, moving, transform="affine", backend="cpu")
    assert not np.array_equal(unmasked["affine"], r["affine"])  # the mask changed what the metric sees
    with pytest.raises(ValueError, match="grid"):
        kortex.register_greedy(fixed, moving, transform="affine", fixed_mask=mask[:, :, :-1], backend="cpu")
    # The deformable default takes masks too: the greedy force is zero where a mask is 0.
    d = kortex.register_greedy(fixed, moving, fixed_mask=mask, scales=[2, 1], iterations=[3, 3], backend="cpu")
    cli("register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii", "--fixed-mask",
        tmp_path / "mask.nii", "--scales", "2,1", "--iterations", "3,3", "--out-field", tmp_path / "d.nii.gz",
        "--backend", "cpu", "--quiet")
    np.testing.assert_array_equal(kortex.read_field(tmp_path / "d.nii.gz")["array"], d["displacement"])
