"""Perturbations of the outlier-exposing baselines: hand-checkable cases, ranges and spec parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft
import torch

from roseood.data.perturbations import dct, gaussian_blur, make_perturbation, random, svd
from roseood.errors import RoseError


def _rank2_image() -> torch.Tensor:
    """A (1, 1, 32, 32) non-negative rank-2 image with values in [0, 0.5]."""
    gen = torch.Generator().manual_seed(0)
    a, b, c, d = (torch.rand(32, 1, generator=gen, dtype=torch.float64) * 0.5 for _ in range(4))
    return (a @ b.T + c @ d.T).float()[None, None]


def _truncated(x: torch.Tensor, keep: int) -> torch.Tensor:
    u, s, vh = np.linalg.svd(x[0, 0].double().numpy())
    s[keep:] = 0.0
    return torch.from_numpy((u * s) @ vh).clamp(0, 1).float()[None, None]


def test_svd_discards_the_bottom_nonzero_singular_values() -> None:
    x = _rank2_image()
    assert torch.allclose(svd(x, 0), x, atol=1e-6)
    assert torch.allclose(svd(x, 1), _truncated(x, 1), atol=1e-6)  # rank 2: keep the top one
    assert torch.count_nonzero(svd(x, 2)) == 0  # rank ≤ k: nothing is left
    full = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out = svd(full, 28)
    for i in range(2):
        for c in range(3):
            assert torch.allclose(
                out[i : i + 1, c : c + 1], _truncated(full[i : i + 1, c : c + 1], 4), atol=1e-5
            )


def _from_coefficients(coef: dict[tuple[int, int], float]) -> torch.Tensor:
    grid = np.zeros((32, 32))
    for (i, j), v in coef.items():
        grid[i, j] = v
    return torch.from_numpy(scipy.fft.idctn(grid, norm="ortho")).float()[None, None]


def test_dct_keeps_the_largest_coefficients() -> None:
    coef = {(0, 0): 16.0, (1, 2): 1.5, (5, 3): -0.7}  # DC 16 → mean 0.5; the others stay within [0, 1]
    x = _from_coefficients(coef)
    assert x.min() >= 0 and x.max() <= 1
    assert torch.allclose(dct(x, 3), x, atol=1e-6)
    assert torch.allclose(dct(x, 2), _from_coefficients({(0, 0): 16.0, (1, 2): 1.5}), atol=1e-6)
    assert torch.allclose(dct(x, 1), torch.full_like(x, 0.5), atol=1e-6)


def test_gaussian_blur_kernel_and_constants() -> None:
    g = torch.tensor([math.exp(-1 / (2 * 0.8**2)), 1.0, math.exp(-1 / (2 * 0.8**2))])
    g = g / g.sum()
    impulse = torch.zeros(1, 2, 9, 9)
    impulse[0, 1, 4, 4] = 1.0
    out = gaussian_blur(impulse)
    assert torch.allclose(out[0, 1, 3:6, 3:6], torch.outer(g, g), atol=1e-6)
    assert torch.count_nonzero(out[0, 0]) == 0 and torch.isclose(out.sum(), torch.tensor(1.0))
    const = torch.full((2, 3, 32, 32), 0.3)
    assert torch.allclose(gaussian_blur(const), const, atol=1e-6)  # reflected borders keep constants


def test_random_replaces_whole_pixels_with_256_levels() -> None:
    x = torch.full((4, 3, 32, 32), 0.5)  # 0.5 is no multiple of 1/255, so replaced pixels are visible
    gen = torch.Generator().manual_seed(0)
    y = random(x, 0.3, gen)
    replaced = y != x
    assert torch.equal(replaced.all(1), replaced.any(1))  # all channels of a pixel together
    assert abs(replaced[:, 0].float().mean().item() - 0.3) < 0.03
    levels = y[replaced] * 255
    assert torch.allclose(levels, levels.round(), atol=1e-4) and levels.min() >= 0 and levels.max() <= 255
    assert torch.equal(random(x, 0.0, gen), x)
    assert (random(x, 1.0, gen) != x).all()
    assert torch.equal(random(x, 0.3, torch.Generator().manual_seed(0)), y)  # reproducible


@pytest.mark.parametrize("spec", ["svd:28", "svd:22", "svd", "dct:28", "gb", "random:0.3", " Random "])
def test_specs_preserve_shape_dtype_and_range(spec: str) -> None:
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    y = make_perturbation(spec)(x, torch.Generator().manual_seed(0))
    assert y.shape == x.shape and y.dtype == x.dtype
    assert y.min() >= 0 and y.max() <= 1


def test_specs_match_the_functions() -> None:
    x = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(3))
    assert torch.equal(make_perturbation("svd:22")(x, None), svd(x, 22))
    assert torch.equal(make_perturbation("svd")(x, None), svd(x, 28))
    assert torch.equal(make_perturbation("dct:10")(x, None), dct(x, 10))
    assert torch.equal(make_perturbation("gb")(x, None), gaussian_blur(x))
    got = make_perturbation("random:0.2")(x, torch.Generator().manual_seed(5))
    assert torch.equal(got, random(x, 0.2, torch.Generator().manual_seed(5)))


@pytest.mark.parametrize(
    "spec", ["blur", "svd:x", "svd:2.5", "svd:-1", "dct:", "random:1.5", "random:nan", "gb:3", "", 5]
)
def test_bad_specs_raise(spec: object) -> None:
    with pytest.raises(RoseError):
        make_perturbation(spec)


def test_bad_images_raise() -> None:
    with pytest.raises(RoseError):
        svd(torch.rand(32, 32), 2)
    with pytest.raises(RoseError):
        dct(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), 2)
    with pytest.raises(RoseError):
        random(torch.rand(1, 1, 4, 4), 2.0)
