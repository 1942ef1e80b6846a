"""Training on Ray Train with two workers on gloo: FSDP2 sharding, checkpoints, warm starts,
self-improvement, and recovery from a worker killed mid-run."""

import json
import os
import signal

import pytest
import torch

from pdeladder.trainer import evaluate_checkpoint
from pdeladder.trainer.models import load_model
from pdeladder.trainer.training.run import train_curriculum

pytestmark = [
    pytest.mark.usefixtures("ray_local"),
    # Ray Train copies Ray Data's context, whose attribute access warns about its own deprecated
    # options (use_push_based_shuffle, use_polars); nothing of ours sets them.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


def test_two_stages_sharded_and_warm_started(tiny, tmp_path):
    spec, url, _ = tiny
    seen = []
    result = train_curriculum(
        spec,
        store_url=url,
        workers=2,
        run_dir=tmp_path,
        log_every=2,
        checkpoint_every=6,
        progress=False,
        on_metrics=seen.append,
    )
    assert [m["step"] for m in seen if m["stage"] == "s1"][-1] == 12  # 8 supervised + 4 SI
    assert all(abs(m["sharded_fraction"] - 0.5) < 0.1 for m in seen)  # FSDP2 over 2 ranks
    assert all(len(set(m["worker_pids"])) == 2 for m in seen)
    s1, s2 = (json.loads((result.stages[s] / "model.json").read_text()) for s in ("s1", "s2"))
    assert s1["args"]["modes"] == [3, 3, 1, 1] and s2["args"]["modes"] == [4, 4, 1, 1]
    scores = s1["metadata"]["scores"]
    assert set(scores) == {"before", "after"}  # held-out scores around self-improvement
    assert all(0 < v["held_out_nrmse"] < 2 and v["held_out_residual"] > 0 for v in scores.values())
    assert result.checkpoint == result.stages["s2"]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len(seen) and (tmp_path / "loss_curves.png").stat().st_size > 0
    model, meta = load_model(result.checkpoint)
    assert meta["stage"] == "s2" and meta["step"] == 4
    assert all(torch.isfinite(p).all() for p in model.parameters())

    report = evaluate_checkpoint(result.stages["s1"], url, tmp_path / "eval")
    kinds = {path: r["kind"] for path, r in report["groups"].items()}
    assert kinds == {"s1/heat/1d_n17_t6": "held_out", "s2/heat/1d_n33_t6": "other_resolution"}
    for r in report["groups"].values():
        assert 0 < r["nrmse"] < 2 and r["residual_of_data"] < r["residual"]
        assert set(r["rmse_bands"]["u"]) == {"low", "mid", "high"}
    assert (tmp_path / "eval" / "report.md").read_text().startswith("# Evaluation")
    assert (tmp_path / "eval" / "s1__heat__1d_n17_t6.png").stat().st_size > 0


def test_a_killed_worker_resumes_from_its_last_checkpoint(tiny, tmp_path):
    spec, url, _ = tiny
    killed = []

    def kill_rank_one(metrics: dict) -> None:
        if metrics["step"] >= 8 and not killed:
            pid = metrics["worker_pids"][1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    result = train_curriculum(
        spec,
        stages=["s1"],
        store_url=url,
        workers=2,
        run_dir=tmp_path,
        log_every=1,
        checkpoint_every=3,
        max_failures=1,
        progress=False,
        on_metrics=kill_rank_one,
    )
    assert killed
    assert result.metrics["step"] == 12
    assert result.metrics["resumed_from"] in (3, 6)
    assert killed[0] not in result.metrics["worker_pids"]
