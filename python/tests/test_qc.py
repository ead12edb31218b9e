"""The QC report (`qc=`, `--qc`; pipeline/Qc.hpp) opened in a real browser: Debian's headless chromium,
driven over the DevTools protocol on a pipe (--remote-debugging-pipe: no network, no extra package).
Every picture must load at the size the page states, the page must log no error, and a screenshot of
the whole page is saved. The same check on a copy with one picture removed must fail (the check can
fail). The pixels themselves are checked by tests/tstQc.cpp.

Chromium is installed by .ci/run; without it this test fails (it is not a real-data test).
"""
import base64
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import kortex

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless chromium; commands and events as JSON messages ending in NUL on fds 3 (in) / 4 (out)."""

    def __init__(self):
        assert CHROMIUM, "chromium is needed (Debian package chromium; .ci/run installs it)"
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        os.set_inheritable(to_child_r, True)
        os.set_inheritable(from_child_w, True)
        # The child's fd 3 reads commands, fd 4 writes answers.
        def remap():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--user-data-dir=" + os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                                  "kortex-chromium-%d" % os.getpid()), "about:blank"],
            preexec_fn=remap, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events = []

    def _read(self):
        while b"\0" not in self._buf:
            chunk = os.read(self._r, 1 << 16)
            assert chunk, "chromium closed its pipe"
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self._id:
                assert "error" not in m, m
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method):
        for m in self.events:
            if m.get("method") == method:
                return m
        while True:
            m = self._read()
            self.events.append(m)
            if m.get("method") == method:
                return m

    def close(self):
        try:
            self.call("Browser.close")
        except AssertionError:
            pass
        self.proc.wait(timeout=30)


def open_report(page, screenshot, scale=1.0):
    """Loads `page`; returns (the pictures [src, complete, naturalWidth, naturalHeight, width, height],
    the page's errors); saves a screenshot of the whole page (at `scale`: docs/qc.md's pictures are
    `python3 python/tests/test_qc.py PAGE OUT.png 0.5`)."""
    b = Browser()
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            b.call(domain + ".enable", session=s)
        b.call("Page.navigate", {"url": "file://" + os.path.abspath(page)}, session=s)
        b.wait_for("Page.loadEventFired")
        js = ("JSON.stringify(Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
              "i.naturalWidth, i.naturalHeight, +i.getAttribute('width'), +i.getAttribute('height')]))")
        images = json.loads(b.call("Runtime.evaluate", {"expression": js, "returnByValue": True},
                                   session=s)["result"]["value"])
        height = b.call("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                             "returnByValue": True}, session=s)["result"]["value"]
        b.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": int(height), "deviceScaleFactor": scale,
                                                      "mobile": False}, session=s)
        shot = b.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=s)
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        errors = []
        for m in b.events:
            p = m.get("params", {})
            if m.get("method") == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(p["entry"]["text"] + " " + p["entry"].get("url", ""))
            elif m.get("method") == "Runtime.exceptionThrown":
                errors.append(p["exceptionDetails"].get("text", "exception"))
            elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
                errors.append(str(p.get("args")))
        return images, errors
    finally:
        b.close()


def assert_report_loads(page, screenshot, count):
    """The page's `count` pictures all load at the size it states, and it logs no error."""
    images, errors = open_report(page, screenshot)
    assert len(images) == count, images
    for src, complete, nw, nh, w, h in images:
        assert complete and nw == w and nh == h and w > 0, (src, nw, nh, w, h)
    assert errors == []


def phantom(shift=0.0):
    z, y, x = np.meshgrid(*[np.arange(32.0)] * 3, indexing="ij")
    r = np.sqrt((x - 15.5 - shift) ** 2 + (y - 15.5) ** 2 + (z - 15.5) ** 2)
    head = np.where(r < 13, 30.0, 0.0)
    brain = 70.0 * np.exp(-((x - 14 - shift) ** 2 + (y - 17) ** 2 + (z - 15) ** 2) / 40.0)
    return (head + brain * (r < 13)).astype(np.float32)


def test_report_opens_in_chromium(tmp_path):
    qc = tmp_path / "qc"
    r = kortex.register_greedy(phantom(), phantom(1.5), scales=(2, 1), iterations=(4, 3), backend="kokkos",
                               fixed_spacing=(2, 2, 2), moving_spacing=(2, 2, 2), qc=qc)
    assert (qc / "index.html").is_file()
    assert r["report"]["qc"]["seconds"] > 0
    assert_report_loads(qc / "index.html", tmp_path / "screenshot.png", 12)
    with open(tmp_path / "screenshot.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    out = os.environ.get("KORTEX_QC_SCREENSHOT")
    if out:
        shutil.copy(tmp_path / "screenshot.png", out)
    # The check fails on a report with a picture missing: the picture does not load and the page logs it.
    broken = tmp_path / "broken"
    shutil.copytree(qc, broken)
    (broken / "after_axial.png").unlink()
    images, errors = open_report(broken / "index.html", tmp_path / "broken.png")
    bad = [i for i in images if not (i[1] and i[2] == i[4] and i[3] == i[5])]
    assert [i[0] for i in bad] == ["after_axial.png"]
    assert any("after_axial.png" in e for e in errors), errors


def test_qc_equals_the_command(tmp_path):
    """Python's qc= writes what --qc writes: the same files (the page differs in its timings)."""
    import nibabel as nib
    aff = np.diag([-2.0, -2.0, 2.0, 1.0])
    for name, img in (("f.nii", phantom()), ("m.nii", phantom(1.5)), ("l.nii", (phantom() > 50).astype(np.float32))):
        nib.save(nib.Nifti1Image(img.transpose(2, 1, 0), aff), str(tmp_path / name))
    r = kortex.register_greedy(str(tmp_path / "f.nii"), str(tmp_path / "m.nii"), scales=(2, 1), iterations=(4, 3),
                               backend="cpu", qc=tmp_path / "py", qc_labels=tmp_path / "l.nii",
                               qc_fixed_labels=tmp_path / "l.nii")
    assert 0 < r["report"]["qc"]["dice"] <= 1
    exe = os.environ.get("KORTEX_EXE")
    assert exe, "KORTEX_EXE names the kortex executable (ctest sets it)"
    p = subprocess.run([exe, "register", "greedy", "--fixed", tmp_path / "f.nii", "--moving", tmp_path / "m.nii",
                        "--scales", "2,1", "--iterations", "4,3", "--backend", "cpu", "--qc", tmp_path / "cli",
                        "--qc-labels", tmp_path / "l.nii", "--qc-fixed-labels", tmp_path / "l.nii", "--quiet"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    names = sorted(os.listdir(tmp_path / "py"))
    assert names == sorted(os.listdir(tmp_path / "cli"))
    assert "labels_axial.png" in names
    for n in names:
        if n.endswith(".png"):
            assert (tmp_path / "py" / n).read_bytes() == (tmp_path / "cli" / n).read_bytes(), n


if __name__ == "__main__":
    import sys
    images, errors = open_report(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1.0)
    print(len(images), "pictures,", len(errors), "errors", errors)


def test_cohort_page_opens_in_chromium(tmp_path):
    """A cohort with qc=True: every subject's report, and out_dir/qc.html whose thumbnails all load."""
    subjects = kortex.register_greedy(phantom(), [phantom(1.0), phantom(2.0)], scales=(2, 1), iterations=(3, 2),
                                      backend="kokkos", fixed_spacing=(2, 2, 2), moving_spacing=(2, 2, 2),
                                      out_dir=tmp_path / "out", qc=True)
    assert len(subjects) == 2
    for stem in ("subject_1", "subject_2"):
        assert (tmp_path / "out" / (stem + "_qc") / "index.html").is_file()
    assert_report_loads(tmp_path / "out" / "qc.html", tmp_path / "cohort.png", 2)


def test_apply_report_opens_in_chromium(tmp_path):
    """kortex.apply(..., qc=) writes a report whose nine pictures all load in chromium, with no error."""
    shift = tmp_path / "shift.txt"
    shift.write_text("#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_double_3_3\n"
                     "Parameters: 1 0 0 0 1 0 0 0 1 4 0 0\nFixedParameters: 0 0 0\n")
    geo = dict(spacing=(2.0, 2.0, 2.0), origin=(0.0, 0.0, 0.0), direction=tuple(np.eye(3).ravel()))
    img = dict(array=phantom(), **geo)
    kortex.apply(img, img, [str(shift)], qc=tmp_path / "qc", backend="kokkos")
    assert_report_loads(tmp_path / "qc" / "index.html", tmp_path / "apply.png", 9)


def test_atlas_report_opens_in_chromium(tmp_path):
    """kortex.atlas_build(..., qc=) writes a report whose pictures (template, maps, thumbnails) load in chromium."""
    import nibabel as nib
    paths = []
    for k, shift in enumerate((0.0, 1.0, 2.0)):
        p = tmp_path / ("s%d.nii" % k)
        nib.save(nib.Nifti1Image(phantom(shift).transpose(2, 1, 0), np.diag([-2.0, -2.0, 2.0, 1.0])), str(p))
        paths.append(str(p))
    kortex.atlas_build(paths, tmp_path / "t.nii", scales=(2, 1), iterations=(2, 2), affine=False, backend="kokkos",
                       qc=tmp_path / "qc")
    # 9 of the template and maps, 2 of the template per scale, 3 thumbnails
    assert_report_loads(tmp_path / "qc" / "index.html", tmp_path / "atlas.png", 14)
