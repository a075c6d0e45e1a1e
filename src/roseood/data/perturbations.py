"""Image perturbations of the outlier-exposing baselines (paper Section 3.2 and Appendix B.3).

Likelihood Ratio trains its background model on perturbed in-distribution images and RND trains its
predictor to tell images from their perturbation. Every function takes float images (N, C, H, W) in
[0, 1] and returns the same shape, dtype, device and range:

- ``svd(x, k)``: per image and channel, zero the bottom ``k`` *nonzero* singular values (NVB's
  ``reduce_eigenvalue``: keep the top ``rank − k``; a matrix of rank ≤ k becomes zero). Note that a
  28×28 image upsampled to 32×32 has rank ≤ 28, so ``svd:28`` blanks resized (Fashion-)MNIST entirely.
- ``dct(k)``: keep only the ``k`` largest-magnitude coefficients of the orthonormal 2-D DCT-II.
- ``gaussian_blur``: 3×3 Gaussian kernel, σ = 0.8, reflected borders (OpenCV's default border).
- ``random(mu)``: each pixel (all its channels together) is replaced with probability ``mu`` by uniform
  random values in {0, …, 255}/255, one per channel (Ren et al. 2019).

``make_perturbation(spec)`` turns a spec string ("svd:28", "dct:28", "gb", "random:0.3") into a callable
``f(images, generator)``; the generator only matters for the random perturbation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.fft
import torch
import torch.nn.functional as F
from torch import Tensor

from roseood.errors import RoseError

Perturbation = Callable[[Tensor, torch.Generator | None], Tensor]

DEFAULT_SVD_K = 28
DEFAULT_DCT_K = 28
DEFAULT_RANDOM_MU = 0.2
PERTURBATIONS = ("svd", "dct", "gb", "random")


def _check_images(x: Tensor) -> None:
    if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise RoseError(f"perturbations take float images of shape (N, C, H, W), got {shape}")


def _check_count(k: int, what: str) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise RoseError(f"{what} must be a non-negative integer, got {k!r}")


def svd(x: Tensor, k: int = DEFAULT_SVD_K) -> Tensor:
    """Discard the bottom ``k`` nonzero singular values of every image channel (NVB's SVD blurring).

    The rank uses NumPy's ``matrix_rank`` tolerance (σ_max · max(H, W) · eps of the input dtype), as NVB.
    """
    _check_images(x)
    _check_count(k, "the number of discarded singular values")
    u, s, vh = torch.linalg.svd(x.detach().to("cpu", torch.float64))
    tol = s[..., :1] * max(x.shape[-2:]) * torch.finfo(x.dtype).eps
    keep = ((s > tol).sum(-1, keepdim=True) - k).clamp_min(0)
    s = torch.where(torch.arange(s.shape[-1]) < keep, s, torch.zeros_like(s))
    out = (u * s[..., None, :]) @ vh
    return out.clamp(0.0, 1.0).to(x.device, x.dtype)


def dct(x: Tensor, k: int = DEFAULT_DCT_K) -> Tensor:
    """Keep the ``k`` largest-magnitude orthonormal 2-D DCT coefficients of every image channel."""
    _check_images(x)
    _check_count(k, "the number of kept DCT coefficients")
    arr = x.detach().to("cpu", torch.float64).numpy()
    coef = scipy.fft.dctn(arr, axes=(-2, -1), norm="ortho")
    flat = coef.reshape(*coef.shape[:2], -1)
    top = np.argsort(-np.abs(flat), axis=-1, kind="stable")[..., :k]
    kept = np.zeros_like(flat)
    np.put_along_axis(kept, top, np.take_along_axis(flat, top, -1), -1)
    out = scipy.fft.idctn(kept.reshape(coef.shape), axes=(-2, -1), norm="ortho")
    return torch.from_numpy(out).clamp(0.0, 1.0).to(x.device, x.dtype)


def gaussian_blur(x: Tensor, kernel_size: int = 3, sigma: float = 0.8) -> Tensor:
    """Separable Gaussian blur of every channel with reflected borders (paper: kernel 3, σ 0.8)."""
    _check_images(x)
    if kernel_size < 1 or kernel_size % 2 == 0 or sigma <= 0:
        raise RoseError(f"Gaussian blur needs an odd kernel size and σ > 0, got {kernel_size}, {sigma}")
    offsets = torch.arange(kernel_size, dtype=x.dtype, device=x.device) - kernel_size // 2
    g = torch.exp(-(offsets**2) / (2 * sigma**2))
    g = g / g.sum()
    c, r = x.shape[1], kernel_size // 2
    h = F.pad(x, (r, r, r, r), mode="reflect")
    h = F.conv2d(h, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(h, g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def random(x: Tensor, mu: float = DEFAULT_RANDOM_MU, generator: torch.Generator | None = None) -> Tensor:
    """Replace each pixel with probability ``mu`` by uniform random values in {0, …, 255}/255."""
    _check_images(x)
    if not 0.0 <= mu <= 1.0:
        raise RoseError(f"the replacement probability must lie in [0, 1], got {mu}")
    n, c, h, w = x.shape
    device = generator.device if generator is not None else torch.device("cpu")
    mask = torch.rand(n, 1, h, w, generator=generator, device=device) < mu
    values = torch.randint(0, 256, (n, c, h, w), generator=generator, device=device).to(x.dtype) / 255.0
    return torch.where(mask.to(x.device), values.to(x.device), x)


def _parse_number(spec: str, arg: str, cast: Callable[[str], float]) -> float:
    try:
        value = cast(arg)
    except ValueError:
        raise RoseError(f"bad perturbation {spec!r}: {arg!r} is not a valid number") from None
    if not math.isfinite(value):
        raise RoseError(f"bad perturbation {spec!r}: the value must be finite")
    return value


def make_perturbation(spec: str) -> Perturbation:
    """Parse "svd[:K]", "dct[:K]", "gb" or "random[:MU]" into ``f(images, generator) -> images``."""
    if not isinstance(spec, str):
        raise RoseError(f"a perturbation spec must be a string like 'svd:28', got {spec!r}")
    name, has_arg, arg = (part.strip() for part in spec.strip().lower().partition(":"))
    if name not in PERTURBATIONS:
        raise RoseError(f"unknown perturbation {spec!r}; choose from svd:K, dct:K, gb, random:MU")
    if has_arg and not arg:
        raise RoseError(f"bad perturbation {spec!r}: nothing after ':'")
    if name == "gb" and has_arg:
        raise RoseError(f"bad perturbation {spec!r}: gb takes no argument (kernel 3, σ 0.8)")
    defaults = {"svd": DEFAULT_SVD_K, "dct": DEFAULT_DCT_K, "random": DEFAULT_RANDOM_MU, "gb": 0.0}
    value = _parse_number(spec, arg, int if name in ("svd", "dct") else float) if has_arg else defaults[name]
    if name == "random" and not 0.0 <= value <= 1.0:
        raise RoseError(f"bad perturbation {spec!r}: the probability must lie in [0, 1]")
    if value < 0:
        raise RoseError(f"bad perturbation {spec!r}: the count must be ≥ 0")
    k = int(value)

    def perturb(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if name == "svd":
            return svd(x, k)
        if name == "dct":
            return dct(x, k)
        if name == "gb":
            return gaussian_blur(x)
        return random(x, value, generator)

    return perturb
