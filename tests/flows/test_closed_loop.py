"""The closed-loop flow: steering weights from scores, and the whole loop on a real server."""

from pathlib import Path

import pytest
from rich.console import Console

from pdeladder.curriculum.plan import plan_stage
from pdeladder.curriculum.weights import load_weights
from pdeladder.flows.cli import scores_table
from pdeladder.flows.closed_loop import Loop, SteerBy, closed_loop, steering_weights


def test_worse_families_get_more_of_the_next_budget():
    scores = {
        "heat": {"nrmse": 0.3, "residual": 1.0},
        "darcy": {"nrmse": 0.1, "residual": 1.0},
        "burgers": {"nrmse": 0.01, "residual": 3.0},
    }
    w = steering_weights("next", scores, ["heat", "darcy", "wave"], "nrmse", 1.0)
    assert w.stage == "next"
    assert w.families == pytest.approx({"heat": 1.5, "darcy": 0.5})  # mean of the stage's scored
    assert w.family_weight("wave") == 1.0  # not scored: the configured budget
    sharp = steering_weights("next", scores, ["heat", "burgers"], "nrmse", 4.0)
    assert sharp.families == pytest.approx({"heat": 4.0, "burgers": 0.25})  # clipped
    flat = steering_weights("next", scores, ["heat", "darcy"], "nrmse", 0.0)
    assert flat.families == {"heat": 1.0, "darcy": 1.0}
    by_residual = steering_weights("next", scores, ["darcy", "burgers"], "residual", 1.0)
    assert by_residual.families == pytest.approx({"darcy": 0.5, "burgers": 1.5})


@pytest.mark.usefixtures("prefect_server", "ray_local")
# Ray Data's context warns about its own deprecated option inside Ray Train (as in tests/trainer).
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_the_loop_solves_trains_evaluates_and_steers(tiny_spec: Path, tmp_path: Path, artifacts):
    loop = Loop(
        curriculum=str(tiny_spec),
        store_url=str(tmp_path / "store.zarr"),
        workers=1,
        run_dir=str(tmp_path / "run"),
        steer_by=SteerBy.nrmse,
        refine=3,
    )
    state = closed_loop(loop, return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result["stages"] == ["first", "second"]
    assert {(r["stage"], r["family"]) for r in result["scores"]} >= {
        ("first", "heat"),
        ("second", "heat"),
        ("second", "darcy"),
    }
    for stage in ("first", "second"):
        assert (tmp_path / "run" / "stages" / stage / "model" / "model.json").is_file()
        assert (tmp_path / "run" / "evaluation" / stage / "report.md").is_file()

    weights = load_weights(tmp_path / "run" / "weights" / "second.yaml")
    assert weights.stage == "second" and set(weights.families) == {"heat"}
    spec = loop.load()
    assert plan_stage(spec, "second", weights).n == plan_stage(spec, "second").n  # same budget

    for r in result["scores"]:
        assert r["baseline"] > 0 and r["ratio"] == pytest.approx(
            r["nrmse"] / r["baseline"], rel=1e-3
        )
        assert isinstance(r["beats_baseline"], bool)
        assert (r["refined"] is None) == (r["stage"] == "first")  # the last stage's, refined
    arts = artifacts(state.state_details.flow_run_id)
    assert '"stage": "second"' in arts["closed-loop-scores"].data


def test_the_score_table_shows_the_baseline_and_flags_a_model_that_does_not_beat_it():
    row = {"stage": "first", "residual": 0.1, "next_weight": None, "refined": None}
    rows = [
        {
            **row,
            "family": "heat",
            "nrmse": 0.1,
            "baseline": 0.5,
            "ratio": 0.2,
            "beats_baseline": True,
            "refined": 0.0123,
        },
        {
            **row,
            "family": "burgers",
            "nrmse": 1.4,
            "baseline": 1.2,
            "ratio": 1.17,
            "beats_baseline": False,
        },
    ]
    console = Console(record=True, width=200)
    console.print(scores_table("quickstart.yaml", rows))
    text = console.export_text().splitlines()
    lines = {f: next(line for line in text if f in line) for f in ("heat", "burgers")}
    assert "0.5" in lines["heat"] and "0.2" in lines["heat"] and "not better" not in lines["heat"]
    assert "0.0123" in lines["heat"]
    assert "1.2" in lines["burgers"] and "1.17 not better than baseline" in lines["burgers"]
