"""kortex.register_greedy and kortex.atlas_build take every option of `kortex register greedy` and
`kortex atlas build` (read from the commands' --help), with the command's defaults, in signatures
that help() shows; their parameters are read by the C++ params' fromJson (one message naming the
key for a wrong type); the atlas options the command has (clip, checkpoints, memory, report, list)
give the command's results.

Run by ctest (pytestKortex) with KORTEX_EXE=<build>/apps/kortex."""
import inspect
import json
import os
import re
import subprocess

import numpy as np
import pytest

import kortex

KORTEX = os.environ.get("KORTEX_EXE")

# The command's options with another name or form in Python, and why.
NEGATED = {"no_affine": "affine", "no_clip": "clip"}          # a flag that turns off: a True default
RENAMED = {"json": "out_report", "list": "image_list",        # `json`, `list` would shadow Python names
           "lambda": "lambda_"}                               # `lambda` is a Python keyword
PRINTS_NOTHING = {"quiet"}                                    # Python prints no progress to silence
OPTIONAL_IN_PYTHON = {"out_template"}                         # atlas: a temporary file when not given
REQUIRED_IN_PYTHON = {"moving"}                               # register greedy: --moving or --list (image_list)


def cli_options(*command):
    """{python-style name: (type, default text or None, required)} of the command's --help."""
    assert KORTEX, "KORTEX_EXE names the kortex executable (ctest sets it)"
    text = subprocess.run([KORTEX, *command, "--help"], capture_output=True, text=True, check=True).stdout
    out, section = {}, None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line[:-1]
            continue
        m = re.match(r"^  (-h,)?(--)?([a-z][a-z-]*)(?: ([A-Z]+))?(?: \.\.\.)?(?:=(\S+))?( REQUIRED)?(?:\s|$)", line)
        if not m or section not in ("Options", "Positionals") or m.group(3) == "help":
            continue
        if section == "Options" and not m.group(2):
            continue
        out[m.group(3).replace("-", "_")] = (m.group(4), m.group(5), bool(m.group(6)) or section == "Positionals")
    assert len(out) > 10, text
    return out


def same_default(kind, text, value):
    if kind == "FLOAT":
        return isinstance(value, float) and float(text) == value
    if kind == "INT":
        return isinstance(value, int) and int(text) == value
    if "," in text or re.fullmatch(r"\d+", text):  # an integer list
        return tuple(value) == tuple(int(x) for x in text.split(","))
    return value == text


@pytest.mark.parametrize("command,function", [(("register", "greedy"), "register_greedy"),
                                              (("register", "unbiased"), "register_unbiased"),
                                              (("atlas", "build"), "atlas_build")])
def test_python_takes_every_option_of_the_command_with_its_default(command, function):
    f = getattr(kortex, function)
    params = inspect.signature(f).parameters
    doc = inspect.getdoc(f)
    assert doc, function + " has no docstring"
    checked = 0
    for name, (kind, default, required) in cli_options(*command).items():
        if name in PRINTS_NOTHING:
            assert "Prints nothing" in doc
            continue
        py = NEGATED.get(name, RENAMED.get(name, name))
        assert py in params, f"{function} lacks {py} (the command's --{name.replace('_', '-')})"
        assert py in doc, f"{function}'s docstring does not describe {py}"
        p = params[py]
        if name in NEGATED:
            assert p.default is True, f"{py}: a flag that turns it off, so the default is True"
        elif name in REQUIRED_IN_PYTHON:
            assert p.default is inspect.Parameter.empty, f"{py} is required in Python"
        elif required and name not in OPTIONAL_IN_PYTHON:
            assert p.default is inspect.Parameter.empty, f"{py} is required by the command"
        elif default is not None:
            assert same_default(kind, default, p.default), f"{py}: Python {p.default!r}, the command {default}"
        elif kind is None:
            assert p.default is False, f"{py}: a flag, off by default"
        else:
            assert p.default in (None, (), 0.0), f"{py}: the command has no default, Python {p.default!r}"
        checked += 1
    assert checked >= {"register_greedy": 19, "register_unbiased": 13, "atlas_build": 20}[function]


def test_defaults_are_the_params_structs():
    d = kortex._kortex.defaults()
    for f, g in ((kortex.register_greedy, d["register"]["greedy"]), (kortex.atlas_build, d["greedy"])):
        sig = inspect.signature(f).parameters
        for key in ("alpha", "beta", "gamma", "max_step", "solver", "metric", "lncc_radius"):
            assert sig[key].default == g[key], (f.__name__, key)
        assert list(sig["scales"].default) == g["scales"]
        assert list(sig["iterations"].default) == g["iterations"]


def test_metric_and_lncc_radius_with_their_defaults():
    # Pairwise registration defaults to LNCC (the greedy study, docs/greedy.md); the atlas keeps the
    # paper's SSD. The LNCC window radius is 2 in both.
    for f, metric in ((kortex.register_greedy, "lncc"), (kortex.atlas_build, "ssd")):
        sig = inspect.signature(f).parameters
        assert sig["metric"].default == metric
        assert sig["lncc_radius"].default == 2
        assert "lncc" in inspect.getdoc(f)


def test_lncc_registration_runs_and_moves_towards_the_fixed_image():
    fixed, moving = volume((16, 16, 16), 0.0), 2.0 * volume((16, 16, 16), 1.5) + 0.5
    r = kortex.register_greedy(fixed, moving, metric="lncc", lncc_radius=1, scales=(2, 1), iterations=(4, 6), affine=False,
                               backend="kokkos")
    assert np.isfinite(r["displacement"]).all() and np.abs(r["displacement"]).max() > 0.1
    assert r["jacobian"].min() > 0


@pytest.mark.parametrize("kw,message", [(dict(alpha="0.1"), "'alpha' must be a number"),
                                        (dict(iterations=[2.5, 3]), "'iterations' must be a list of integers"),
                                        (dict(scales=2), "'scales' must be a list of integers"),
                                        (dict(solver="multigrid"), "'solver'.*multigrid"),
                                        (dict(max_step=True), "'max_step' must be a number"),
                                        (dict(metric="ncc"), "'metric'.*ssd\\|lncc"),
                                        (dict(lncc_radius=1.5), "'lncc_radius' must be an integer")])
def test_wrong_parameter_types_are_refused_by_name(kw, message):
    a = np.ones((8, 8, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        kortex.register_greedy(a, a, **kw)
    with pytest.raises(ValueError, match=message):
        kortex.atlas_build([a, a], **kw)


def test_numpy_values_are_taken():
    fixed = np.ones((8, 8, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="constant"):  # the parameters were read: the job refused the image
        kortex.register_greedy(fixed, fixed, alpha=np.float32(0.25), scales=np.array([2, 1]),
                               iterations=np.array([1, 2]), affine=False)


def volume(shape, shift):
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    return np.exp(-((x - 0.1 * shift) ** 2 / 0.3 + y**2 / 0.2 + z**2 / 0.25)).astype(np.float32)


def test_atlas_options_give_the_commands_results(tmp_path):
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"s{k}.nii")
        kortex.write(paths[-1], volume((16, 16, 16), k))
    (tmp_path / "more.txt").write_text("# the third\ns2.nii\n")
    common = ["--iterations", "2,3", "--no-affine", "--no-clip", "--checkpoint-every", "2", "--max-memory", "64",
              "--backend", "kokkos", "--quiet"]
    subprocess.run([KORTEX, "atlas", "build", paths[0], paths[1], "--list", tmp_path / "more.txt", "--out-template",
                    tmp_path / "t_cli.nii", "--checkpoint", tmp_path / "ck_cli", "--json", tmp_path / "r_cli.json",
                    *common], check=True, capture_output=True)
    (tmp_path / "ck_py").mkdir()
    r = kortex.atlas_build(paths[:2], tmp_path / "t_py.nii", image_list=tmp_path / "more.txt", iterations=(2, 3),
                           affine=False, clip=False, checkpoint=tmp_path / "ck_py", checkpoint_every=2, max_memory=64,
                           out_report=tmp_path / "r_py.json", backend="kokkos")
    np.testing.assert_array_equal(r["template"]["array"], kortex.read(tmp_path / "t_cli.nii")["array"])
    report = json.loads((tmp_path / "r_py.json").read_text())
    assert report["subjects"] == 3 and report["clipped_fraction"] == 1.0
    assert {k: v for k, v in report.items() if k != "seconds"} == {k: v for k, v in r["report"].items() if k != "seconds"}
    assert (tmp_path / "ck_py" / "current" / "state.json").exists()
    # Resumed from the checkpoint: the same template.
    again = kortex.atlas_build(paths[:2], tmp_path / "t_py2.nii", image_list=tmp_path / "more.txt", iterations=(2, 3),
                               affine=False, clip=False, checkpoint=tmp_path / "ck_py", checkpoint_every=2,
                               resume=True, backend="kokkos")
    assert again["report"]["resumed_at"] > 0
    np.testing.assert_array_equal(again["template"]["array"], r["template"]["array"])
    # The job's own messages, the same as the command's (one rule, in pipeline/Atlas.cpp).
    with pytest.raises(ValueError, match="resuming needs the checkpoint folder"):
        kortex.atlas_build(paths, resume=True)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="memory cap must be a finite number of MiB"):
            kortex.atlas_build(paths, max_memory=bad)


def test_every_job_function_has_an_explicit_signature():
    # No **kw: every parameter is named, with its default, in help() (issue 39).
    for name in kortex.__all__:
        f = getattr(kortex, name)
        if not callable(f) or not inspect.isfunction(f):
            continue
        kinds = [p.kind for p in inspect.signature(f).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds, name + " takes **kw"
        assert inspect.getdoc(f), name + " has no docstring"
