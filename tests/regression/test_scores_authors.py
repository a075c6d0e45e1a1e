"""The recorded scores of the ROSE authors' seed-1 Fashion-MNIST VAE (the demo model's: test_scores.py)."""

from __future__ import annotations

import pytest

from tests.regression.scores import moved_keys, recorded

pytestmark = pytest.mark.float_sensitive


@recorded
def test_scores_equal_the_recorded_ones():
    assert not (moved := moved_keys("seed1")), moved
