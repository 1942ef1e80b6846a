"""Training on Ray Train with two workers on gloo, end to end: FSDP2 sharding, sharded
checkpoints, recovery from a worker killed mid-run, self-improvement, a warm start with more
modes, and `pdeladder evaluate` on the result.

One curriculum run covers all of it: every Ray Train run starts a worker group (new processes
that import torch), the dominant cost on a small machine, so the kill happens inside the run
whose other properties are checked too.
"""

import contextvars
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.trainer.models import load_model
from pdeladder.trainer.training import loop
from pdeladder.trainer.training.run import train_curriculum
from pdeladder.trainer.training.timing import PHASES, read_timing

#: Set by the test; ``on_metrics`` must see it (callbacks run in the caller's context, as a
#: Prefect flow run's logger and artifacts need).
CALLER = contextvars.ContextVar("caller")

pytestmark = [
    pytest.mark.usefixtures("ray_local"),
    # Ray Train copies Ray Data's context, whose attribute access warns about its own deprecated
    # options (use_push_based_shuffle, use_polars); nothing of ours sets them.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


def registered_step(run: Path, stage: str) -> int | None:
    """The step of the latest checkpoint Ray Train's controller has registered for ``stage``
    (from its snapshot in the run folder), or None before the first."""
    for path in run.glob(f"ray/*-{stage}-*/checkpoint_manager_snapshot.json"):
        try:  # written in place: a read may see it half written
            latest = json.loads(path.read_text())["latest_checkpoint_result"]
        except (OSError, ValueError):
            continue
        if latest is not None:
            return latest["metrics"]["step"]
    return None


def rank_one_dies_at_step_9(run: Path):
    """The training loop with an injected fault: in the first run of stage s1, rank 1 SIGKILLs
    itself as it reports the checkpoint of step 9, once the controller has registered that of
    step 6. Rank 0 waits for it in the same report, so no later checkpoint is ever registered by
    that run. A report without a checkpoint fails the run."""

    from ray import cloudpickle

    # pickled by value: Ray Train's workers cannot import this test module
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def train_loop(cfg: dict) -> None:
        import ray.train

        report = ray.train.report

        def report_or_die(metrics: dict, **kwargs) -> None:
            # every report waits on the controller's poll: it is made with checkpoints only
            assert kwargs.get("checkpoint") is not None, f"step {metrics['step']}: no checkpoint"
            first_run_step = (metrics["stage"], metrics["step"], metrics["resumed_from"])
            if first_run_step == ("s1", 9, 0) and ray.train.get_context().get_world_rank() == 1:
                deadline = time.monotonic() + 300
                while registered_step(run, "s1") != 6:
                    assert time.monotonic() < deadline, "step 6's checkpoint was not registered"
                    time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGKILL)
            report(metrics, **kwargs)

        ray.train.report = report_or_die  # this worker process's, for this run only
        loop.train_loop_per_worker(cfg)

    return train_loop


def test_curriculum_trains_sharded_survives_a_killed_worker_and_evaluates(
    tiny, tmp_path, monkeypatch
):
    spec, url, _ = tiny
    monkeypatch.chdir(os.path.dirname(url))  # a relative store path; the workers run elsewhere
    run = tmp_path / "run"
    monkeypatch.setattr(loop, "train_loop_per_worker", rank_one_dies_at_step_9(run))
    seen = []
    CALLER.set("this test")
    result = train_curriculum(
        spec,
        store_url=os.path.basename(url),
        workers=2,
        parallel="fsdp",  # replicated parameters (auto's choice here): test_model.py
        run_dir=run,
        log_every=1,
        checkpoint_every=3,
        max_failures=1,
        progress=False,
        on_metrics=lambda metrics: seen.append(metrics | {"caller": CALLER.get(None)}),
    )

    # s1: 8 supervised + 4 self-improvement steps; rank 1 died at step 9, and a new worker
    # group resumed from the checkpoint of step 6 and ran steps 7 to 12
    s1 = [m for m in seen if m["stage"] == "s1"]
    first = [m for m in s1 if m["resumed_from"] == 0]
    resumed = [m for m in s1 if m["resumed_from"] != 0]
    assert {m["caller"] for m in seen} == {"this test"}
    assert [m["step"] for m in first] == list(range(1, 10))  # rank 0 logged 9, then waited
    assert [m["phase"] for m in first] == ["supervised"] * 8 + ["self_improvement"]
    assert [(m["step"], m["resumed_from"]) for m in resumed] == [(s, 6) for s in range(7, 13)]
    assert [m["phase"] for m in resumed] == ["supervised"] * 2 + ["self_improvement"] * 4
    killed = first[0]["worker_pids"][1]
    assert killed not in s1[-1]["worker_pids"]
    assert all(abs(m["sharded_fraction"] - 0.5) < 0.1 for m in seen)  # FSDP2 over 2 ranks
    assert all(len(set(m["worker_pids"])) == 2 for m in seen)

    # stage models: modes grown by the warm start, self-improvement scored before and after
    s1_doc, s2_doc = (
        json.loads((result.stages[s] / "model.json").read_text()) for s in ("s1", "s2")
    )
    assert s1_doc["args"]["modes"] == [3, 3, 1, 1] and s2_doc["args"]["modes"] == [4, 4, 1, 1]
    scores = s1_doc["metadata"]["scores"]
    assert set(scores) == {"before", "after"}
    assert all(0 < v["held_out_nrmse"] < 2 and v["held_out_residual"] > 0 for v in scores.values())
    assert result.checkpoint == result.stages["s2"]
    assert result.metrics["step"] == 4 and result.metrics["resumed_from"] == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len(seen) and (run / "loss_curves.png").stat().st_size > 0
    # where each stage's wall time went: the phases add up to the loop's time, and the loop's
    # plus the workers' start-up and shutdown to the stage's wall time
    timing = read_timing(run)
    assert set(timing) == {"s1", "s2"}
    for t in timing.values():
        phases = sum(t[f"{p}_s"] for p in PHASES)
        assert all(t[f"{p}_s"] >= 0 for p in (*PHASES, "workers")) and t["compute_s"] > 0
        assert phases + t["workers_s"] == pytest.approx(t["wall_s"], rel=0.05)
        assert t["steps_share"] == pytest.approx((t["compute_s"] + t["optimizer_s"]) / t["wall_s"])
    assert result.metrics["time/loop_s"] >= sum(result.metrics[f"time/{p}_s"] for p in PHASES)
    model, meta = load_model(result.checkpoint)
    assert meta["stage"] == "s2" and meta["step"] == 4
    assert all(torch.isfinite(p).all() for p in model.parameters())

    # `pdeladder evaluate` on the first stage's model: its held-out samples, and the finer
    # grid of s2 as zero-shot super-resolution
    out = tmp_path / "eval"
    cli = CliRunner().invoke(
        app, ["evaluate", str(result.stages["s1"]), "--store", url, "--json", "--out", str(out)]
    )
    assert cli.exit_code == 0, cli.output
    report = json.loads(cli.stdout)
    kinds = {path: r["kind"] for path, r in report["groups"].items()}
    assert kinds == {"s1/heat/1d_n17_t6": "held_out", "s2/heat/1d_n33_t6": "other_resolution"}
    for r in report["groups"].values():
        assert 0 < r["nrmse"] < 2 and r["residual_of_data"] < r["residual"]
        assert set(r["rmse_bands"]["u"]) == {"low", "mid", "high"}
    assert report["families"]["heat"]["samples"] == 2 + 6  # held out of s1, all of s2
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "report.md").read_text().startswith("# Evaluation")
    for path in kinds:
        assert (out / (path.replace("/", "__") + ".png")).stat().st_size > 0
