"""The recorded scores of the ROSE authors' seed-1 Fashion-MNIST VAE (the demo model's: test_scores.py)."""

from __future__ import annotations

import pytest

from tests.conftest import needs_shared_data
from tests.regression.scores import AUTHORS, moved_keys

pytestmark = pytest.mark.float_sensitive


@pytest.mark.slow
@needs_shared_data
@pytest.mark.skipif(not AUTHORS.is_dir(), reason="../shared/models is not present")
@pytest.mark.filterwarnings("ignore::roseood.errors.DegenerateFitWarning")
def test_scores_equal_the_recorded_ones():
    assert not (moved := moved_keys("seed1")), moved
