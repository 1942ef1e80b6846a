"""The train flow as a Ray job on a real Ray head (job server), reporting into a real Prefect
server: metrics from the job's log become Prefect logs and artifacts."""

from pathlib import Path

import pytest

from pdeladder.errors import ServiceError
from pdeladder.flows.train import TrainMode, TrainRun, train

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_training_as_a_ray_job_reports_metrics_and_a_model(
    ray_head, tiny_store: str, tiny_yaml: str, tmp_path: Path, artifacts
):
    run = TrainRun(
        inline_spec=tiny_yaml,
        stages=["first"],
        store_url=tiny_store,
        workers=1,
        mode=TrainMode.ray_job,
        ray_address=ray_head.jobs,
        run_dir=str(tmp_path / "run"),
    )
    state = train(run, return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    model = Path(result["checkpoint"])
    assert model.is_relative_to(tmp_path / "run") and (model / "model.json").is_file()

    arts = artifacts(state.state_details.flow_run_id)
    assert float(arts["train-progress"].data) == pytest.approx(100.0)
    assert '"stage": "first"' in arts["train-metrics"].data
    assert '"step": 4' in arts["train-metrics"].data
    assert "data:image/png;base64," in arts["train-loss-curves"].data


def test_a_failing_ray_job_fails_the_run(ray_head, tiny_yaml: str, tmp_path: Path):
    run = TrainRun(
        inline_spec=tiny_yaml,
        store_url=str(tmp_path / "no-such-store.zarr"),
        workers=1,
        mode=TrainMode.ray_job,
        ray_address=ray_head.jobs,
        run_dir=str(tmp_path / "run"),
        retries=0,
    )
    state = train(run, return_state=True)
    assert state.is_failed()
    with pytest.raises(ServiceError, match=r"ended FAILED.*no-such-store"):
        state.result()
