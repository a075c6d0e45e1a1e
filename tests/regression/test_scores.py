"""Every detector's scores on two real models equal those recorded before the package's redesign."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_shared_data
from tests.regression.scores import AUTHORS, EXPECTED, compute

pytestmark = [pytest.mark.slow, needs_shared_data]


@pytest.mark.skipif(not AUTHORS.is_dir(), reason="../shared/models is not present")
@pytest.mark.filterwarnings("ignore::roseood.errors.DegenerateFitWarning")
def test_scores_equal_the_recorded_ones():
    expected = dict(np.load(EXPECTED))
    got = compute()
    assert sorted(got) == sorted(expected)
    for key, scores in got.items():
        np.testing.assert_allclose(scores, expected[key], rtol=1e-6, atol=1e-6, err_msg=key)
