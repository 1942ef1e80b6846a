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

import pytest
import torch
from typer.testing import CliRunner

from pdeladder.cli import app
from pdeladder.trainer.models import load_model
from pdeladder.trainer.training.run import train_curriculum

#: Set by the test; ``on_metrics`` must see it (callbacks run in the caller's context, as a
#: Prefect flow run's logger and artifacts need).
CALLER = contextvars.ContextVar("caller")

pytestmark = [
    pytest.mark.usefixtures("ray_local"),
    # Ray Train copies Ray Data's context, whose attribute access warns about its own deprecated
    # options (use_push_based_shuffle, use_polars); nothing of ours sets them.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


def test_curriculum_trains_sharded_survives_a_killed_worker_and_evaluates(
    tiny, tmp_path, monkeypatch
):
    spec, url, _ = tiny
    monkeypatch.chdir(os.path.dirname(url))  # a relative store path; the workers run elsewhere
    seen, killed = [], []

    def kill_rank_one_once(metrics: dict) -> None:
        seen.append(metrics | {"caller": CALLER.get(None)})
        if metrics["stage"] == "s1" and metrics["step"] >= 8 and not killed:
            pid = metrics["worker_pids"][1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    run = tmp_path / "run"
    CALLER.set("this test")
    result = train_curriculum(
        spec,
        store_url=os.path.basename(url),
        workers=2,
        run_dir=run,
        log_every=1,
        checkpoint_every=3,
        max_failures=1,
        progress=False,
        on_metrics=kill_rank_one_once,
    )

    # s1: 8 supervised + 4 self-improvement steps, finished by a new worker group that resumed
    # from a checkpoint written before the kill (steps 3 or 6; 8 was never checkpointed)
    s1 = [m for m in seen if m["stage"] == "s1"]
    assert {m["caller"] for m in seen} == {"this test"}
    assert killed and s1[-1]["step"] == 12
    assert s1[-1]["resumed_from"] in (3, 6)
    assert killed[0] not in s1[-1]["worker_pids"]
    assert [m["phase"] for m in s1 if m["resumed_from"] == 0][:8] == ["supervised"] * 8
    assert s1[-1]["phase"] == "self_improvement"
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
