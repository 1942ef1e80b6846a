"""The data-campaign flow against a real Prefect server, a real local Ray runtime and a real store."""

from pathlib import Path

import numpy as np
import pytest

from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store
from pdeladder.errors import UnknownNameError
from pdeladder.flows.data_campaign import Campaign, data_campaign

pytestmark = pytest.mark.usefixtures("prefect_server", "ray_local")


def test_campaign_fills_the_store_publishes_artifacts_and_resumes(
    tiny_spec: Path, tmp_path: Path, artifacts
):
    store_url = str(tmp_path / "store.zarr")
    campaign = Campaign(curriculum=str(tiny_spec), stages=["first"], store_url=store_url)
    state = data_campaign(campaign, return_state=True)
    assert state.is_completed(), state.message
    [row] = state.result()["groups"]
    assert (row["ok"], row["failed"], row["skipped"]) == (3, 0, 0)
    assert row["dof_steps_per_s"] > 0 and row["bytes"] > 0
    group = open_store(store_url).group(row["group"])
    assert (group.status() == OK).all()
    assert np.isfinite(group.read(2)).all()

    arts = artifacts(state.state_details.flow_run_id)
    assert float(arts["data-campaign-progress"].data) == pytest.approx(100.0)
    table = arts["data-campaign-summary"].data
    assert row["group"] in table and '"ok": 3' in table
    assert "data:image/png;base64," in arts["data-campaign-samples"].data

    again = data_campaign(campaign, return_state=True)  # a rerun solves nothing
    [row] = again.result()["groups"]
    assert (row["ok"], row["skipped"]) == (0, 3)


def test_unknown_stage_fails_the_run_naming_the_stages(tiny_spec: Path, tmp_path: Path):
    campaign = Campaign(curriculum=str(tiny_spec), stages=["third"], store_url=str(tmp_path / "s"))
    state = data_campaign(campaign, return_state=True)
    assert state.is_failed()
    with pytest.raises(UnknownNameError, match="first, second"):
        state.result()
