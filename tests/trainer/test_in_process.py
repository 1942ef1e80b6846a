"""A one-worker stage trained in the calling process, without a Ray Train worker group: the same
numbers as on Ray Train with one worker, checkpoints written atomically, and a rerun after a
crash resuming from the last checkpoint to the same result."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.errors import PdeladderError
from pdeladder.trainer.training import run as run_module
from pdeladder.trainer.training import session as session_module
from pdeladder.trainer.training.run import train_curriculum
from pdeladder.trainer.training.timing import read_timing

from .conftest import CURRICULUM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

#: the metrics that depend on the process and the clock, not on the numbers trained
VARYING = ("time/", "samples_per_s", "peak_rss_mb", "worker_pids", "sharded_fraction")


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(VARYING)}


THREADS = torch.get_num_threads()
#: s1 with two threads per rank, on any machine: in process and on a Ray Train worker that
#: reserves two CPUs (the tests' local Ray runtime has two)
TWO_THREADS = parse_curriculum(
    CURRICULUM.replace("      batch_size: 2\n", "      batch_size: 2\n      threads: 2\n", 1)
)


def train_s1(tiny, run: Path, seen: list | None = None):
    _, url, _ = tiny
    return train_curriculum(
        TWO_THREADS,
        stages=["s1"],
        store_url=url,
        workers=1,
        run_dir=run,
        log_every=1,
        checkpoint_every=3,
        progress=False,
        on_metrics=None if seen is None else seen.append,
    )


def lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(result) -> dict:
    return load_file(result.stages["s1"] / "model.safetensors")


@pytest.fixture(scope="module")
def in_process(tiny, tmp_path_factory, ray_local):
    """Stage s1 (8 supervised + 4 self-improvement steps) trained in process, uninterrupted
    (Ray started, as for a campaign)."""
    run = tmp_path_factory.mktemp("in_process")
    seen = []
    return train_s1(tiny, run, seen), run, seen


def test_in_process_matches_ray_train_with_one_worker(in_process, tiny, tmp_path, monkeypatch):
    result, run, seen = in_process
    assert [m["step"] for m in seen] == list(range(1, 13))
    # 10 of s1's 12 samples train (10 % held out, rounded up), in batches of 2: 5 steps an epoch
    assert [m["epochs"] for m in seen] == [s / 5 for s in range(1, 13)]
    assert all(m["worker_pids"] == [os.getpid()] for m in seen)  # no worker process
    assert all(m["threads"] == 2 for m in seen)
    assert torch.get_num_threads() == THREADS  # the caller's own, restored
    assert lines(run) == seen
    t = read_timing(run)["s1"]
    assert 0 < t["steps_share"] < 1 and t["workers_s"] < t["wall_s"]

    def on_ray(cfg, run_dir, feed, use_gpu):  # the same stage on a Ray Train group of one
        return run_module._fit_on_ray(
            cfg, 1, run_dir, feed, name="s1", use_gpu=use_gpu, max_failures=0
        )

    monkeypatch.setattr(run_module, "_fit_in_process", on_ray)
    ray_seen = []
    ray_result = train_s1(tiny, tmp_path / "ray", ray_seen)
    assert ray_seen[0]["worker_pids"] != [os.getpid()]
    assert all(m["threads"] == 2 for m in ray_seen)
    assert [numbers(m) for m in ray_seen] == [numbers(m) for m in seen]  # every step's losses
    ours, theirs = weights(result), weights(ray_result)
    assert ours.keys() == theirs.keys()
    assert all(ours[k].equal(theirs[k]) for k in ours)


def test_a_crash_mid_stage_resumes_from_the_last_checkpoint(
    in_process, tiny, tmp_path, monkeypatch
):
    copy = shutil.copytree

    def copy_then_crash(src, dst):  # the fault: the process dies writing step 9's checkpoint
        copy(src, dst)
        if Path(dst).name == ".step_9":
            raise RuntimeError("injected crash")

    monkeypatch.setattr(session_module.shutil, "copytree", copy_then_crash)
    run = tmp_path / "run"
    with pytest.raises(PdeladderError, match="injected crash"):
        train_s1(tiny, run)
    (folder,) = (run / "stages" / "s1" / "checkpoints").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [".step_9", "step_3", "step_6"]
    assert not (run / "stages" / "s1" / "model").exists()

    monkeypatch.setattr(session_module.shutil, "copytree", copy)
    seen = []
    result = train_s1(tiny, run, seen)
    assert [(m["step"], m["resumed_from"]) for m in seen] == [(s, 6) for s in range(7, 13)]
    assert sorted(p.name for p in folder.iterdir()) == ["step_12", "step_9"]  # the last two
    uninterrupted, _, first = in_process
    same = {k: v for k, v in numbers(first[-1]).items() if k != "resumed_from"}
    assert {k: numbers(seen[-1])[k] for k in same} == same
    ours, theirs = weights(result), weights(uninterrupted)
    assert all(ours[k].equal(theirs[k]) for k in ours)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("workers: 0", "training.workers: Input should be greater than or equal to 1"),
        ("workers: two", "training.workers: Input should be a valid integer"),
        ("workers: 1, domain_ranks: 2", "domain-ranks 2 does not divide the 1 workers"),
    ],
)
def test_bad_stage_workers_are_refused_in_one_line(tiny, tmp_path, setting, message):
    _, url, path = tiny
    bad = tmp_path / "bad.yaml"
    if "," in setting:
        line = "".join(f"      {kv.strip()}\n" for kv in setting.split(","))
    else:
        line = f"      {setting}\n"
    bad.write_text(path.read_text().replace("steps: 8\n", "steps: 8\n" + line, 1))
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).with_name("pdeladder")
    command = [exe, "train", bad, "--store", url, "--run-dir", run_dir, "--stage", "s1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not run_dir.exists()
