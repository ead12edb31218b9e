"""Peer implementations timed by run_peers.py, each on Kortex's inputs and parameters.

Definitions compared with Kortex's (core/Bilateral.hpp, core/Nlm.hpp; clamp boundary):

* OpenCV cv2.bilateralFilter (float32, d = 2r+1, sigmaColor = sigma_r, sigmaSpace = sigma_s,
  BORDER_REPLICATE = Kortex's clamp): same Gaussian spatial and range factors, but OpenCV keeps
  only the taps inside the CIRCLE of radius r (about pi r^2 of the (2r+1)^2 square: ~0.64x the
  taps at r = 8) and evaluates the range factor from a lookup table with linear interpolation
  over the image's value range (not exactly). It is 2D only.
* OpenCV cv2.fastNlMeansDenoising: 8-bit input only (the image is mapped linearly from its
  [min, max] to 0..255 and h is scaled by the same factor), templateWindowSize = 2r+1 (patch),
  searchWindowSize = 2R+1; weight exp(-mean squared patch difference / h^2) as Kortex, but in
  fixed point through a weight table (weights below 0.001 dropped), border BORDER_DEFAULT
  (reflect-101), and running column sums over the patch (like Kortex's BoxSum). 2D only.
* scikit-image restoration.denoise_nl_means(fast_mode=True, patch_size = 2r+1,
  patch_distance = R, h = h, sigma = 0): mean squared patch difference with a uniform patch
  kernel and weight exp(-d / h^2) (with sigma = 0 no 2 sigma^2 is subtracted), box sums over the
  patch (fast mode), reflect padding. Single-threaded. 2D and 3D (3D is very slow: only the
  sizes that fit the budget run; the rest are reported as skipped).
* PyTorch (GPU, CUDA-event timing, data resident on the GPU):
  - torch.bilateral_unfold (2D): F.unfold of the replicate-padded image gives all (2r+1)^2 taps
    per pixel; exact Kortex definition (square window, clamp boundary, exact exp).
  - torch.bilateral_shift (2D/3D): one shifted slice of the replicate-padded image per offset,
    weights accumulated; exact Kortex definition.
  - torch.nlm_boxsum (2D/3D): per search offset, squared differences on the replicate-padded
    image, box-averaged over the patch with separable avg_pool (one pass per axis), weight
    exp(-mean / h^2), centre weight 1: the exact Kortex definition (each sample clamped
    independently == replicate padding).
"""

from __future__ import annotations

import itertools

import numpy as np


# ----------------------------------------------------------------------------- OpenCV

def opencv_bilateral(cv2, img: np.ndarray, p: dict):
    d = 2 * p["radius"] + 1
    return lambda: cv2.bilateralFilter(img, d, p["sigma_range"], p["sigma_spatial"],
                                       borderType=cv2.BORDER_REPLICATE)


def to_uint8(img: np.ndarray):
    lo, hi = float(img.min()), float(img.max())
    scale = 255.0 / (hi - lo) if hi > lo else 1.0
    u8 = np.clip(np.rint((img - lo) * scale), 0, 255).astype(np.uint8)
    return u8, scale


def opencv_nlm(cv2, u8: np.ndarray, scale: float, p: dict):
    h = float(p["h"]) * scale
    tws = 2 * p["patch_radius"] + 1
    sws = 2 * p["search_radius"] + 1
    return lambda: cv2.fastNlMeansDenoising(u8, None, h, tws, sws)


# ----------------------------------------------------------------------------- scikit-image

def skimage_nlm(img: np.ndarray, p: dict):
    from skimage.restoration import denoise_nl_means

    kw = dict(patch_size=2 * p["patch_radius"] + 1, patch_distance=p["search_radius"], h=p["h"],
              fast_mode=True, sigma=0.0, preserve_range=True)
    try:
        denoise_nl_means(np.zeros((8,) * img.ndim, np.float32), channel_axis=None,
                         **{**kw, "patch_size": 3, "patch_distance": 1})
        kw["channel_axis"] = None
    except TypeError:  # scikit-image < 0.19
        kw["multichannel"] = False
    return lambda: denoise_nl_means(img, **kw)


# ----------------------------------------------------------------------------- PyTorch

def _replicate_pad(torch, x, pad: int):
    """x: (n,n) or (n,n,n) tensor -> replicate-padded by `pad` on every side (same rank)."""
    import torch.nn.functional as F

    if pad == 0:
        return x
    nd = x.dim()
    y = F.pad(x[None, None], (pad,) * (2 * nd), mode="replicate")
    return y[0, 0]


def _shift(xp, pad: int, off, shape, extra: int = 0):
    """Slice of the padded array xp at offset `off`, covering the image grown by `extra`."""
    sl = tuple(slice(pad - extra + o, pad - extra + o + s + 2 * extra) for o, s in zip(off, shape))
    return xp[sl]


def torch_bilateral_unfold(torch, x, p: dict):
    import torch.nn.functional as F

    r = p["radius"]
    k = 2 * r + 1
    H, W = x.shape
    cs = -0.5 / (p["sigma_spatial"] ** 2)
    cr = -0.5 / (p["sigma_range"] ** 2)
    d = torch.arange(-r, r + 1, device=x.device, dtype=torch.float32)
    spatial = torch.exp((d[:, None] ** 2 + d[None, :] ** 2) * cs).reshape(1, k * k, 1)

    def run():
        xp = F.pad(x[None, None], (r, r, r, r), mode="replicate")
        taps = F.unfold(xp, kernel_size=k)  # (1, k*k, H*W)
        centre = x.reshape(1, 1, H * W)
        w = spatial * torch.exp((taps - centre) ** 2 * cr)
        return ((w * taps).sum(1) / w.sum(1)).reshape(H, W)

    return run


def torch_bilateral_shift(torch, x, p: dict):
    r = p["radius"]
    cs = -0.5 / (p["sigma_spatial"] ** 2)
    cr = -0.5 / (p["sigma_range"] ** 2)
    offsets = list(itertools.product(range(-r, r + 1), repeat=x.dim()))

    def run():
        xp = _replicate_pad(torch, x, r)
        num = torch.zeros_like(x)
        den = torch.zeros_like(x)
        for off in offsets:
            nb = _shift(xp, r, off, x.shape)
            w = torch.exp((nb - x) ** 2 * cr + float(sum(o * o for o in off)) * cs)
            num.add_(w * nb)
            den.add_(w)
        return num / den

    return run


def torch_nlm_boxsum(torch, x, p: dict):
    import torch.nn.functional as F

    R, pr, h = p["search_radius"], p["patch_radius"], p["h"]
    nd = x.dim()
    k = 2 * pr + 1
    inv_h2 = -1.0 / (h * h)
    offsets = [o for o in itertools.product(range(-R, R + 1), repeat=nd) if any(o)]
    pool = F.avg_pool2d if nd == 2 else F.avg_pool3d

    def box_mean(d2):  # separable mean over the (2pr+1)^nd patch, no padding (valid)
        y = d2[None, None]
        for axis in range(nd):
            ks = [1] * nd
            ks[axis] = k
            y = pool(y, kernel_size=tuple(ks), stride=1)
        return y[0, 0]

    def run():
        pad = R + pr
        xp = _replicate_pad(torch, x, pad)
        centre = _shift(xp, pad, (0,) * nd, x.shape, pr)  # I(x+p), grown by pr
        num = x.clone()  # centre weight 1
        den = torch.ones_like(x)
        for off in offsets:
            nb = _shift(xp, pad, off, x.shape, pr)  # I(x+o+p)
            D = box_mean((centre - nb) ** 2)
            w = torch.exp(D * inv_h2)
            num.add_(w * _shift(xp, pad, off, x.shape))
            den.add_(w)
        return num / den

    return run


# ----------------------------------------------------------------------------- NumPy checks

def numpy_bilateral(img: np.ndarray, p: dict) -> np.ndarray:
    """Straight Kortex definition in float64 (for the self-check on tiny images)."""
    r = p["radius"]
    xp = np.pad(img.astype(np.float64), r, mode="edge")
    num = np.zeros(img.shape)
    den = np.zeros(img.shape)
    for off in itertools.product(range(-r, r + 1), repeat=img.ndim):
        sl = tuple(slice(r + o, r + o + s) for o, s in zip(off, img.shape))
        nb = xp[sl]
        w = np.exp(-sum(o * o for o in off) / (2 * p["sigma_spatial"] ** 2)
                   - (nb - img) ** 2 / (2 * p["sigma_range"] ** 2))
        num += w * nb
        den += w
    return num / den


def numpy_nlm(img: np.ndarray, p: dict) -> np.ndarray:
    R, pr, h = p["search_radius"], p["patch_radius"], p["h"]
    nd = img.ndim
    pad = R + pr
    xp = np.pad(img.astype(np.float64), pad, mode="edge")
    size = (2 * pr + 1) ** nd
    out = np.zeros(img.shape)
    for idx in np.ndindex(*img.shape):
        num = float(img[idx])
        den = 1.0
        for off in itertools.product(range(-R, R + 1), repeat=nd):
            if not any(off):
                continue
            D = 0.0
            for q in itertools.product(range(-pr, pr + 1), repeat=nd):
                a = xp[tuple(pad + i + t for i, t in zip(idx, q))]
                b = xp[tuple(pad + i + o + t for i, o, t in zip(idx, off, q))]
                D += (a - b) ** 2
            w = np.exp(-D / (size * h * h))
            num += w * xp[tuple(pad + i + o for i, o in zip(idx, off))]
            den += w
        out[idx] = num / den
    return out
