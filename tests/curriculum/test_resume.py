"""A driver killed half-way (SIGKILL, real processes): the stage stays locked against a second
run while it lives, and a rerun completes it into fields bit-identical to an uninterrupted run.
The killed driver joins the session's Ray cluster (``--address``); its actors die with it.

Half-way is exact: the driver is `pdeladder curriculum materialize` with one injected fault, a
solver whose samples from index ``HALF`` on never return, so samples ``0 .. HALF - 1`` (each
ahead of those in its actor's queue) are stored and no other.
"""

from pathlib import Path

import numpy as np
import pytest

from pdeladder.curriculum import materialize, parse_curriculum
from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import StoreError

from .killed import half_way

SPEC = """\
name: resumable
seed: 5
stages:
  - name: big
    families:
      - family: heat
        dims: [2]
        resolutions: [65]
        samples: 40
        params:
          diffusivity: {low: 0.002, high: 0.05, scale: log}
"""


GROUP = "big/heat/2d_n65_t11"
HALF = 20


def test_sigkilled_driver_resumes_bit_identical(ray_local: None, tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(SPEC)
    killed, reference = str(tmp_path / "killed.zarr"), str(tmp_path / "reference.zarr")
    with half_way(file, killed, GROUP, HALF) as driver:
        with pytest.raises(StoreError, match=rf"being materialized by pid {driver.pid} "):
            materialize(parse_curriculum(SPEC), store_url=killed, workers=1)
    status = open_store(killed).group(GROUP).status()
    assert np.flatnonzero(status == OK).tolist() == list(range(HALF))

    resumed = materialize(parse_curriculum(SPEC), store_url=killed, workers=2)
    assert (resumed.ok, resumed.skipped, resumed.failed) == (40 - HALF, HALF, 0)
    full = materialize(parse_curriculum(SPEC), store_url=reference, workers=2)
    assert full.ok == 40
    a, b = open_store(killed).group(GROUP), open_store(reference).group(GROUP)
    for name in ("status", "seed", "params", "checksum"):
        np.testing.assert_array_equal(a.column(name), b.column(name), err_msg=name)
    np.testing.assert_array_equal(a.array("fields")[...], b.array("fields")[...])
