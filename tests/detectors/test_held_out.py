"""Held-out images through the detector contract, split by one policy."""

from __future__ import annotations

import numpy as np
import pytest

from roseood.detectors import ROSE, make_detector
from roseood.detectors.base import held_out_count
from roseood.evaluation import EvalSpec
from roseood.evaluation.splits import fisher_count


@pytest.mark.parametrize(
    ("n", "held_out", "expected"), [(100, 0.2, 20), (100, 30, 30), (100, 80, 50), (7, 0.2, 1)]
)
def test_one_split_policy(n, held_out, expected):
    assert held_out_count(n, held_out) == expected
    assert fisher_count(EvalSpec("x", [], [], stats_samples=30), 100) == 70


def test_rose_uses_held_out_for_statistics_only(tiny_vae, images):
    a = ROSE(tiny_vae, fisher="diag").fit(images[:16], held_out=images[16:])
    b = ROSE(tiny_vae, fisher="diag").fit(images[:16], stats_images=images[16:])  # the former name
    c = ROSE(tiny_vae, fisher="diag").fit(images[:16], held_out=images[8:16])
    np.testing.assert_allclose(a.score(images), b.score(images))
    assert a.mean_ is not None and c.mean_ is not None and not np.allclose(a.mean_, c.mean_)


def test_other_detectors_learn_from_both_parts(images):
    fit_a = make_detector("rnd-gb", None, epochs=1, width=2, out_dim=4).fit(images[:16], held_out=images[16:])
    fit_b = make_detector("rnd-gb", None, epochs=1, width=2, out_dim=4).fit(images)
    np.testing.assert_allclose(fit_a.score(images[:4]), fit_b.score(images[:4]))
