"""kortex.atlas_build never writes over its inputs (issue 26): the job refuses, the inputs keep their
bytes, and no output is left. The same check as the command's (pipeline/JobFiles.hpp)."""
import os

import numpy as np
import pytest

import kortex


def cohort(tmp_path, n=3):
    paths = []
    rng = np.random.default_rng(26)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, 16)] * 3, indexing="ij")
    for k in range(n):
        blob = np.exp(-((x - 0.1 * k) ** 2 / 0.3 + y**2 / 0.2 + z**2 / 0.25))
        paths.append(tmp_path / f"s{k}.nii")
        kortex.write(paths[-1], (blob + 0.05 * rng.standard_normal(blob.shape)).astype(np.float32))
    return paths


@pytest.mark.parametrize("target", ["subject", "reference", "label map", "hard link"])
def test_atlas_build_refuses_to_overwrite_an_input(tmp_path, target):
    paths = cohort(tmp_path)
    labels = [tmp_path / f"l{k}.nii" for k in range(3)]
    for p, l in zip(paths, labels):
        kortex.write(l, (kortex.read(p)["array"] > 0.5).astype(np.float32))
    kw = dict(iterations=[2, 2], affine=False, backend="kokkos")
    if target == "subject":
        out, victim = paths[1], paths[1]
    elif target == "reference":
        ref = tmp_path / "ref.nii"
        kortex.write(ref, kortex.read(paths[0])["array"])
        out, victim, kw["reference"] = ref, ref, str(ref)
    elif target == "label map":
        out, victim = labels[2], labels[2]
        kw["labels"], kw["out_warped"] = [str(l) for l in labels], str(tmp_path / "w")
    else:
        out, victim = tmp_path / "linked.nii", paths[0]
        os.link(paths[0], out)
    before = victim.read_bytes()
    with pytest.raises(ValueError, match="would overwrite the input"):
        kortex.atlas_build([str(p) for p in paths], str(out), **kw)
    assert victim.read_bytes() == before
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_atlas_build_refuses_two_outputs_on_one_file(tmp_path):
    paths = cohort(tmp_path)
    fields = tmp_path / "f"
    with pytest.raises(ValueError, match="two outputs are the same file"):
        kortex.atlas_build([str(p) for p in paths], str(fields / "s1_field.nii.gz"), iterations=[2, 2], affine=False,
                           backend="kokkos", out_fields=str(fields))
    assert not fields.exists() or not any(fields.iterdir())


def test_atlas_build_takes_arrays_in_memory_without_temporary_files(tmp_path, monkeypatch):
    """Arrays (and read's dicts) go to the job in memory: the same template as the files, and no
    temporary file is made on the way (tempfile is not touched)."""
    import tempfile
    paths = []
    rng = np.random.default_rng(3)
    for k in range(3):
        a = np.zeros((16, 16, 16), np.float32)
        a[3 + k:12, 4:12 + k % 2, 3:13] = 100.0
        a += rng.random(a.shape, dtype=np.float32)
        paths.append(tmp_path / f"s{k}.nii")
        kortex.write(paths[-1], a, spacing=[2.0, 2.0, 2.0])
    kw = dict(scales=(2, 1), iterations=(1, 2), affine=False, backend="kokkos")
    from_files = kortex.atlas_build(paths, **kw)["template"]
    def no_temp(*a, **k):
        raise AssertionError("atlas_build made a temporary file")
    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_temp)
    monkeypatch.setattr(tempfile, "mkdtemp", no_temp)
    cohort = [kortex.read(paths[0]), kortex.read(paths[1])["array"], str(paths[2])]
    cohort[1] = {"array": cohort[1], "spacing": [2.0, 2.0, 2.0]}
    in_memory = kortex.atlas_build(cohort, **kw)["template"]
    np.testing.assert_array_equal(in_memory["array"], from_files["array"])
    assert in_memory["spacing"] == from_files["spacing"]
