"""Gray–Scott: the family contract, concentrations within [0, 1], and spots that spread."""

import numpy as np
import pytest

from pdeladder.solvers import get_family
from pdeladder.solvers.testing import FamilyContract


class TestGrayScott(FamilyContract):
    family = "gray_scott"
    studies = {  # noqa: RUF012
        (1, "space"): (None, None),
        (1, "time"): (None, None),
        (2, "space"): (None, None),
        (2, "time"): (None, None),
    }


@pytest.mark.parametrize(
    ("dim", "feed", "kill"),
    [(1, 0.025, 0.05), (2, 0.025, 0.062), (2, 0.05, 0.062), (2, 0.05, 0.05)],
)
def test_concentrations_stay_in_unit_interval_and_spots_spread(dim, feed, kill):
    fam = get_family("gray_scott")
    params = fam.Params(feed=feed, kill=kill, perturbation_count=3.0)
    sample = fam.run(params, fam.grid(dim, 33, 11), seed=2)
    assert sample.ok, sample.stats.reason
    u, v = sample.fields[:, 0], sample.fields[:, 1]
    for c in (u, v):
        assert c.min() >= -1e-6 and c.max() <= 1 + 1e-6
    # The reaction does something: v leaves its initial spots, away from the trivial state.
    assert not np.allclose(v[-1], v[0], atol=0.05)
    assert v[1:].max() > 0.1
