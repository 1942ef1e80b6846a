"""Where a stage's wall time goes: the training loop's phases, timed on each worker, and the
stage's split of its wall time (``run_dir/timing.json``, the demo's time table).

Phases of a worker's loop (seconds, accumulated over the stage):

- ``startup``: from the loop's entry to its first step (model built and sharded, the store's
  catalog read, a checkpoint loaded on resume);
- ``data``: waiting for the next batch and moving it to the device;
- ``compute``: forward, losses and backward, FSDP's and the domain group's collectives included
  (they run inside them);
- ``optimizer``: gradient clipping and the optimizer step;
- ``evaluation``: the held-out scores;
- ``checkpoint``: writing a training checkpoint and handing it to the session (Ray Train's, or
  the in-process one of a one-worker stage);
- ``reporting``: gathering and sending the metrics.

The stage's wall time less the loop's is ``workers``: Ray Train starting and stopping the
worker group (for a one-worker stage in process, the one-rank process group), and the stage's
model export. Training steps are ``compute + optimizer``.
"""

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from rich.table import Table

PHASES = ("startup", "data", "compute", "optimizer", "evaluation", "checkpoint", "reporting")
TIMING_FILE = "timing.json"


class PhaseClock:
    """Wall seconds per phase of one worker's loop: ``with clock("data"): ...``. On a GPU each
    phase ends with a device synchronisation, so that its kernels count to it."""

    def __init__(self, device: torch.device):
        self.device = device
        self.start = time.perf_counter()
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.seconds[phase] += time.perf_counter() - t0

    def started(self) -> None:
        """The loop's first step begins: the time since the clock was made is ``startup``."""
        self.seconds["startup"] = time.perf_counter() - self.start

    def metrics(self) -> dict[str, float]:
        """``time/<phase>_s`` for every phase and ``time/loop_s``, the loop's wall time so far."""
        out = {f"time/{p}_s": s for p, s in self.seconds.items()}
        return out | {"time/loop_s": time.perf_counter() - self.start}


def stage_timing(wall_s: float, metrics: dict[str, Any]) -> dict[str, float]:
    """A stage's split of its wall time ``wall_s`` (s) from its last metrics (rank 0's clock):
    every phase, ``workers`` (the rest) and ``steps_share``, the fraction in training steps."""
    phases = {p: float(metrics.get(f"time/{p}_s", 0.0)) for p in PHASES}
    phases["workers"] = max(wall_s - float(metrics.get("time/loop_s", 0.0)), 0.0)
    steps = phases["compute"] + phases["optimizer"]
    return {
        "wall_s": wall_s,
        **{f"{k}_s": v for k, v in phases.items()},
        "steps_share": steps / wall_s,
    }


def record_timing(run_dir: Path, stage: str, timing: dict[str, float]) -> None:
    """Set ``stage``'s entry of ``run_dir/timing.json`` (written whole, then renamed over it)."""
    path = Path(run_dir, TIMING_FILE)
    entries = json.loads(path.read_text()) if path.exists() else {}
    entries[stage] = timing
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(entries, indent=2))
    partial.replace(path)


def read_timing(run_dir: Path) -> dict[str, dict[str, float]]:
    """Every stage's split recorded under ``run_dir`` (empty when none was)."""
    path = Path(run_dir, TIMING_FILE)
    return json.loads(path.read_text()) if path.exists() else {}


def timing_table(timing: dict[str, dict[str, float]]) -> Table:
    """Each stage's wall time and its split (share of the wall time per part) as a table."""
    parts = ("workers", *PHASES)
    table = Table("stage", "wall", *parts, "in steps", title="Where the training time went")
    for stage, t in timing.items():
        shares = [f"{t[f'{p}_s'] / t['wall_s']:.0%}" for p in parts]
        table.add_row(stage, f"{t['wall_s']:.1f} s", *shares, f"{t['steps_share']:.0%}")
    return table
