"""The metrics log of a training run: JSON lines, a live progress display, loss-curve plots."""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

PLOTTED = (("loss", "data_loss", "equation_loss"), ("lr",), ("samples_per_s",))
#: Each :data:`PLOTTED` panel's title.
TITLES = ("loss terms and held-out nRMSE", "learning rate", "throughput (samples/s)")


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
        """Loss terms, learning rate and throughput against the global step, stages in order,
        with the stages' boundaries and held-out scores (:func:`curves_figure`)."""
        return plot_curves(self.records(), self.png)


def plot_curves(records: list[dict[str, Any]], out: Path) -> Path | None:
    """Plot metrics records (as in ``metrics.jsonl``) to ``out``; ``None`` when there are none."""
    if not records:
        return None
    curves_figure(records).savefig(out, dpi=100)
    return out


def curves_figure(records: list[dict[str, Any]]) -> Figure:
    """One panel per :data:`PLOTTED` against the global step (stages laid end to end; a resumed
    stage repeats steps), a dashed line and the stage's name where each stage starts, a dotted
    one where its self-improvement phase starts; on the loss panel, the held-out nRMSE as points
    where it was measured: before the self-improvement phase (hollow), at the stage's end
    (filled)."""
    offset, last_stage, last_step, xs, starts = 0, None, 0, [], {}
    for r in records:
        if r["stage"] != last_stage and last_stage is not None:
            offset += last_step
        starts.setdefault(r["stage"], offset)
        last_stage, last_step = r["stage"], r["step"]
        xs.append(offset + r["step"])
    phases = {  # where each stage's self-improvement phase starts
        r["stage"]: starts[r["stage"]] + r["supervised_steps"]
        for r in records
        if r.get("supervised_steps", r["total_steps"]) < r["total_steps"]
    }
    held: dict[str, dict[int, float]] = {"before": {}, "after": {}}
    for x, r in zip(xs, records, strict=True):
        if "held_out_nrmse_after" in r:
            held["after"][x] = r["held_out_nrmse_after"]
        if "held_out_nrmse_before" in r and r["stage"] in phases:
            held["before"][phases[r["stage"]]] = r["held_out_nrmse_before"]
    fig = Figure(figsize=(5 * len(PLOTTED), 4.4), layout="constrained")
    axes = fig.subplots(1, len(PLOTTED))
    for ax, keys, title in zip(axes, PLOTTED, TITLES, strict=True):
        ax.set_title(title, fontsize=10)
        for k in keys:
            pts = [(x, r[k]) for x, r in zip(xs, records, strict=True) if r.get(k)]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=k)
        for name, x in starts.items():
            ax.axvline(x, color="0.5", ls="--", lw=0.8)
            ax.annotate(
                name, (x, 1), xycoords=("data", "axes fraction"), xytext=(3, -3),
                textcoords="offset points", va="top", fontsize=8, color="0.3",
            )  # fmt: skip
        for x in phases.values():
            ax.axvline(x, color="0.5", ls=":", lw=0.8)
            ax.annotate(
                "self-improvement", (x, 0), xycoords=("data", "axes fraction"), xytext=(3, 3),
                textcoords="offset points", fontsize=7, color="0.3",
            )  # fmt: skip
        ax.set_xlabel("step (stages end to end)")
        ax.set_yscale("log" if keys[0] != "samples_per_s" else "linear")
    for when, fill, at in (
        ("before", "none", "before self-improvement"),
        ("after", "k", "stage's end"),
    ):
        if held[when]:
            axes[0].plot(
                list(held[when]), list(held[when].values()), "o", color="k", mfc=fill,
                label=f"held-out nRMSE, {at}",
            )  # fmt: skip
    for ax in axes:  # below the panel: it hides no curve and no stage's name
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig
