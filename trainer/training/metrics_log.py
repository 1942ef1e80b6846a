"""The metrics log of a training run: JSON lines, a live progress display, loss-curve plots."""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

PLOTTED = (("loss", "data_loss", "equation_loss"), ("lr",), ("samples_per_s",))


class MetricsLog:
    """Appends every metrics dict to ``run_dir/metrics.jsonl``; plots ``loss_curves.png``."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.png = Path(run_dir) / "loss_curves.png"

    def write(self, metrics: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")

    @contextmanager
    def stage(self, name: str, total: int, show: bool) -> Iterator[Callable[[dict], None]]:
        """A sink for one stage's metrics: logs them and advances a progress bar to ``step``."""
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4g}"),
            TimeRemainingColumn(),
            disable=not show,
        ) as bar:
            task = bar.add_task(f"stage {name}", total=total, loss=float("nan"))

            def sink(metrics: dict[str, Any]) -> None:
                self.write(metrics)
                bar.update(task, completed=metrics["step"], loss=metrics["loss"])

            yield sink

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def plot(self) -> Path | None:
        """Loss terms, learning rate and throughput against the global step, stages in order."""
        return plot_curves(self.records(), self.png)


def plot_curves(records: list[dict[str, Any]], out: Path) -> Path | None:
    """Plot metrics records (as in ``metrics.jsonl``) to ``out``; ``None`` when there are none."""
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    offset, last_stage, last_step, xs = 0, None, 0, []
    for r in records:  # global step: stages laid end to end (a resumed stage repeats steps)
        if r["stage"] != last_stage and last_stage is not None:
            offset += last_step
        last_stage, last_step = r["stage"], r["step"]
        xs.append(offset + r["step"])
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(5 * len(PLOTTED), 3.5))
    for ax, keys in zip(axes, PLOTTED, strict=True):
        for k in keys:
            pts = [(x, r[k]) for x, r in zip(xs, records, strict=True) if r.get(k)]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=k)
        ax.set_xlabel("step")
        ax.set_yscale("log" if keys[0] != "samples_per_s" else "linear")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
