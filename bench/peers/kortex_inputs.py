"""The CT benchmark's inputs and parameters, reproduced in NumPy so that peers run on the same
images as `kortex bench ct` (bench/Bench.cpp):

* the modified Shepp-Logan phantom of core/Phantom.cpp (2D: Toft's ellipses; 3D: Kak-Slaney
  ellipsoids with the modified intensities), voxel (i, j, k) at x = (2i+1)/n - 1,
  y = 1 - (2j+1)/n, z = (2k+1)/n - 1, array index [k, j, i];
* additive Gaussian noise at SNR 25 (sigma = mean / 25) drawn from the same SplitMix64 +
  Box-Muller stream as core/Phantom.cpp, so the noisy images are the C++ ones up to libm
  rounding (log / cos / sqrt may differ in the last bit);
* the parameter rules of validation/Quality.hpp: bilateral sigma_s = max(0.5, r/2),
  sigma_r = 2 sigma_n; NLM h = sigma_n.
"""

from __future__ import annotations

import math

import numpy as np

SNR = 25.0

# (value, a, b, x0, y0, phi_deg) - modified Shepp-Logan (Toft), as core/Phantom.cpp.
_SL2D = [
    (1.0, 0.69, 0.92, 0.0, 0.0, 0.0),
    (-0.8, 0.6624, 0.8740, 0.0, -0.0184, 0.0),
    (-0.2, 0.11, 0.31, 0.22, 0.0, -18.0),
    (-0.2, 0.16, 0.41, -0.22, 0.0, 18.0),
    (0.1, 0.21, 0.25, 0.0, 0.35, 0.0),
    (0.1, 0.046, 0.046, 0.0, 0.1, 0.0),
    (0.1, 0.046, 0.046, 0.0, -0.1, 0.0),
    (0.1, 0.046, 0.023, -0.08, -0.605, 0.0),
    (0.1, 0.023, 0.023, 0.0, -0.606, 0.0),
    (0.1, 0.023, 0.046, 0.06, -0.605, 0.0),
]

# (value, a, b, c, x0, y0, z0, phi_deg) - Kak-Slaney 3D geometry, modified intensities.
_SL3D = [
    (1.0, 0.69, 0.92, 0.90, 0.0, 0.0, 0.0, 0.0),
    (-0.8, 0.6624, 0.874, 0.88, 0.0, 0.0, 0.0, 0.0),
    (-0.2, 0.41, 0.16, 0.21, -0.22, 0.0, -0.25, 108.0),
    (-0.2, 0.31, 0.11, 0.22, 0.22, 0.0, -0.25, 72.0),
    (0.1, 0.21, 0.25, 0.5, 0.0, 0.35, -0.25, 0.0),
    (0.1, 0.046, 0.046, 0.046, 0.0, 0.1, -0.25, 0.0),
    (0.1, 0.046, 0.023, 0.02, -0.08, -0.65, -0.25, 0.0),
    (0.1, 0.046, 0.023, 0.02, 0.06, -0.65, -0.25, 90.0),
    (0.1, 0.056, 0.04, 0.1, 0.06, -0.105, 0.625, 90.0),
    (-0.1, 0.056, 0.056, 0.1, 0.0, 0.1, 0.625, 0.0),
]


def shepp_logan_2d(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.float64)
    x = (2.0 * i + 1.0) / n - 1.0
    y = 1.0 - (2.0 * i + 1.0) / n
    X = x[None, :]
    Y = y[:, None]
    v = np.zeros((n, n), dtype=np.float64)
    for value, a, b, x0, y0, phi in _SL2D:
        p = phi * math.pi / 180.0
        c, s = math.cos(p), math.sin(p)
        xr = (X - x0) * c + (Y - y0) * s
        yr = -(X - x0) * s + (Y - y0) * c
        v += np.where((xr * xr) / (a * a) + (yr * yr) / (b * b) <= 1.0, value, 0.0)
    return v.astype(np.float32)


def shepp_logan_3d(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.float64)
    x = ((2.0 * i + 1.0) / n - 1.0)[None, None, :]
    y = (1.0 - (2.0 * i + 1.0) / n)[None, :, None]
    z = ((2.0 * i + 1.0) / n - 1.0)[:, None, None]
    v = np.zeros((n, n, n), dtype=np.float64)
    for value, a, b, cc, x0, y0, z0, phi in _SL3D:
        p = phi * math.pi / 180.0
        c, s = math.cos(p), math.sin(p)
        xr = (x - x0) * c + (y - y0) * s  # (1, n, n)
        yr = -(x - x0) * s + (y - y0) * c
        q2 = xr * xr / (a * a) + yr * yr / (b * b)  # (1, n, n)
        zr = z - z0  # (n, 1, 1)
        v += np.where(q2 + zr * zr / (cc * cc) <= 1.0, value, 0.0)
    return v.astype(np.float32)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix_uniform(seed: int, first_call: int, count: int, step: int = 1) -> np.ndarray:
    """uniform() of calls first_call, first_call+step, ... of SplitMix64(seed), as doubles."""
    k = np.arange(count, dtype=np.uint64) * np.uint64(step) + np.uint64(first_call)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + k * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def add_gaussian_noise(img: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    """core/Phantom.cpp addGaussianNoise: voxel v (flat index, x fastest) uses calls 2v+1, 2v+2."""
    flat = img.reshape(-1).astype(np.float64)
    out = np.empty(flat.shape, dtype=np.float32)
    chunk = 1 << 22
    for start in range(0, flat.size, chunk):
        cnt = min(chunk, flat.size - start)
        u1 = 1.0 - _splitmix_uniform(seed, 2 * start + 1, cnt, 2)
        u2 = _splitmix_uniform(seed, 2 * start + 2, cnt, 2)
        nrm = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
        out[start:start + cnt] = (flat[start:start + cnt] + sigma * nrm).astype(np.float32)
    return out.reshape(img.shape)


def noisy_phantom(dim: int, n: int):
    """(noisy image float32, sigma_n) exactly as bench/ct/Inputs.cpp InputSet::make()."""
    clean = shepp_logan_2d(n) if dim == 2 else shepp_logan_3d(n)
    mean = float(np.mean(clean, dtype=np.float64))
    sigma = mean / SNR
    seed = 0xC7B3 + n * 10 + dim
    return add_gaussian_noise(clean, sigma, seed), sigma


def bilateral_params(window: int, sigma_n: float) -> dict:
    r = (window - 1) // 2
    return {"radius": r, "sigma_spatial": max(0.5, 0.5 * r), "sigma_range": 2.0 * sigma_n}


def nlm_params(window: int, sigma_n: float, patch_radius: int) -> dict:
    return {"search_radius": (window - 1) // 2, "patch_radius": patch_radius, "h": 1.0 * sigma_n}


# ----------------------------------------------------------------------------- multires benchmark

MULTIRES_BITS = 10
MULTIRES_MAX = (1 << MULTIRES_BITS) - 1


def noisy_phantom_10bit(n: int):
    """(noisy, clean, sigma_n) exactly as bench/multires/Context.cpp makeInput(): the 2D phantom
    scaled to 10 bits (float32(1023 * value)), Gaussian noise at SNR 25 (sigma = mean / 25, seed
    0x3D17 + n), rounded to the nearest integer (ties to even, as std::nearbyint) and clamped to
    0..1023. Both images are float32; the noisy one holds integers."""
    clean = (shepp_logan_2d(n).astype(np.float64) * float(MULTIRES_MAX)).astype(np.float32)
    sigma = float(np.mean(clean, dtype=np.float64)) / SNR
    raw = add_gaussian_noise(clean, sigma, 0x3D17 + n)
    noisy = np.clip(np.rint(raw), 0.0, float(MULTIRES_MAX)).astype(np.float32)
    return noisy, clean, sigma


def multires_params(sigma_n: float) -> dict:
    """The benchmark's multiresolution filter: 5 levels, 5x5 window, sigma_d = 2, sigma_r = 2 sigma_n."""
    return {"levels": 5, "radius": 2, "window": 5, "sigma_spatial": 2.0, "sigma_range": 2.0 * sigma_n}
