"""``pdeladder curriculum ...`` and ``pdeladder demo``: curricula from the shell."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from pdeladder.curriculum.generation import MaterializeSummary, ProgressEvent

app = typer.Typer(
    help="Curricula: their schema; validate, plan and materialize stages of samples.",
    no_args_is_help=True,
)
console = Console()

CurriculumFile = Annotated[Path, typer.Argument(help="Curriculum YAML file.")]
WeightsOption = Annotated[
    Path | None,
    typer.Option("--weights", help="YAML/JSON stage weights that reallocate the sample budget."),
]


def _si(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


@app.command("schema")
def schema() -> None:
    """Print the JSON schema of curriculum files."""
    from pdeladder.curriculum.spec import Curriculum

    typer.echo(json.dumps(Curriculum.model_json_schema(), indent=2))


@app.command("validate")
def validate(file: CurriculumFile) -> None:
    """Check a curriculum file; errors name the field and the line."""
    from pdeladder.curriculum.loader import load_curriculum

    spec = load_curriculum(file)
    groups = [g for s in spec.stages for g in s.groups()]
    samples = sum(entry.samples for entry, _ in groups)
    console.print(
        f"{file}: curriculum {spec.name!r}, {len(spec.stages)} stages, {len(groups)} groups, "
        f"{samples} samples"
    )


@app.command("plan")
def plan(
    file: CurriculumFile,
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Stage to plan (repeatable; default all).")
    ] = None,
    weights: WeightsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Ray cluster the stages will run on: ranks per sample may exceed this "
            "machine's cores.",
        ),
    ] = None,
) -> None:
    """Per stage and group: samples, DOF-steps, bytes, core time, memory, ranks per sample."""
    from pdeladder.curriculum.cost import CostModel, human_time
    from pdeladder.curriculum.loader import load_curriculum
    from pdeladder.curriculum.plan import plan_stage

    spec = load_curriculum(file)
    cost = CostModel(on_measure=step_line)
    budget = spec.generation.memory_budget_gb
    names = stage or [s.name for s in spec.stages]
    stages = [
        {
            "stage": name,
            "groups": cost.estimate(
                plan_stage(spec, name, weights), budget, cluster=address is not None
            ),
        }
        for name in names
    ]
    for s in stages:
        totals = ("samples", "dof_steps", "bytes", "stored_bytes", "seconds")
        s.update({k: sum(g[k] for g in s["groups"]) for k in totals})
        s["core_hours"] = s["seconds"] / 3600
    if as_json:
        typer.echo(json.dumps({"curriculum": spec.name, "stages": stages}, indent=2))
        return
    for s in stages:
        table = Table(
            title=f"{spec.name} / {s['stage']}: {_si(s['bytes'], 'B')} of fields, stored "
            f"with {spec.compression}"
        )
        cols = ("group", "samples", "DOF-steps", "stored", "time (1 core)", "memory/sample")
        for col in (*cols, "ranks", "memory/rank"):
            table.add_column(col, justify="left" if col == "group" else "right")
        for g in s["groups"]:
            big = " [red](> 1 node)" if g["larger_than_node"] else ""
            table.add_row(
                g["group"],
                str(g["samples"]),
                _si(g["dof_steps"]),
                _si(g["stored_bytes"], "B"),
                human_time(g["seconds"]),
                _si(g["memory_per_sample_bytes"], "B") + big,
                str(g["ranks_per_sample"]),
                _si(g["memory_per_rank_bytes"], "B"),
            )
        table.add_row(
            "[bold]total",
            str(s["samples"]),
            _si(s["dof_steps"]),
            _si(s["stored_bytes"], "B"),
            human_time(s["seconds"]),
        )
        console.print(table)
        if any(g["larger_than_node"] for g in s["groups"]):
            console.print(
                "[red]> 1 node[/red]: a sample needs more memory or ranks than this machine has"
            )


def step_line(line: str) -> None:
    """A step before a command's first result (calibrating, starting Ray), on stderr: stdout
    holds only the result (``--json`` parses)."""
    typer.echo(line, err=True)


class RichProgress:
    """An ``on_progress`` callback drawing one bar per stage: done, failed, DOF-steps/s, ETA."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, event: "ProgressEvent") -> None:
        fields = {
            "failed": event.failed,
            "rate": _si(event.dof_steps_per_s, "DOF-steps/s"),
            "skipped": event.skipped,
        }
        if event.kind == "stage":
            self.tasks[event.stage] = self.progress.add_task(
                event.stage, total=event.total, **fields
            )
        self.progress.update(self.tasks[event.stage], completed=event.done, **fields)


def print_summary(summary: "MaterializeSummary") -> None:
    table = Table(title=f"{summary.curriculum} -> {summary.store} ({summary.elapsed_s:.1f} s)")
    for col in ("group", "samples", "ok", "failed", "skipped", "DOF-steps/s", "bytes"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for g in summary.groups:
        table.add_row(
            g.group,
            str(g.samples),
            str(g.ok),
            f"[red]{g.failed}" if g.failed else "0",
            str(g.skipped),
            _si(g.dof_steps_per_s),
            _si(g.bytes, "B"),
        )
    console.print(table)
    for g in summary.groups:
        for f in g.failures:
            console.print(f"[red]failed[/red] {g.group} sample {f['index']}: {f['reason']}")
    console.print(
        f"{summary.ok} solved, {summary.failed} failed, {summary.skipped} already recorded; "
        f"{_si(summary.dof_steps_per_s, 'DOF-steps/s')} with {summary.workers} workers"
    )


def run_materialize(
    file: Path,
    stages: list[str] | None,
    store: str | None,
    workers: int,
    address: str | None,
    weights: Path | None,
    retry_failed: bool,
    as_json: bool,
) -> "MaterializeSummary":
    from pdeladder.curriculum.generation import materialize

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"),
        TextColumn("skipped {task.fields[skipped]}"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, disable=as_json) as progress:
        summary = materialize(
            file,
            stages=stages,
            store_url=store,
            workers=workers,
            address=address,
            on_progress=RichProgress(progress),
            weights=weights,
            retry_failed=retry_failed,
            on_step=step_line,
        )
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        print_summary(summary)
    return summary


@app.command("materialize")
def materialize_cmd(
    file: CurriculumFile,
    stage: Annotated[
        list[str] | None,
        typer.Option("--stage", help="Stage to materialize (repeatable; default all)."),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: the curriculum's store).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Solver actors (one CPU each).")] = 2,
    address: Annotated[
        str | None,
        typer.Option("--address", help="Ray cluster to join (default: start a local one)."),
    ] = None,
    weights: WeightsOption = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Solve recorded failures again.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Solve the samples of the chosen stages on Ray actors into the store; a rerun resumes."""
    summary = run_materialize(file, stage, store, workers, address, weights, retry_failed, as_json)
    if summary.failed:
        raise typer.Exit(1)
