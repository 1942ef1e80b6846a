"""``pdeladder flows serve`` and ``pdeladder demo``: the flows on the configured Prefect server,
or on a local one started for the command when none is set."""

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

#: Gauss–Newton iterations refining the demo's last predictions: a linear family's converge in
#: one, Burgers' near its floor in three (benchmarks/RESULTS.md, "Refinement at inference").
DEMO_REFINE = 3

app = typer.Typer(
    help="Prefect flows: serve the data-campaign, train and closed-loop deployments.",
    no_args_is_help=True,
)

Host = Annotated[
    str, typer.Option(help="Address of the local Prefect server started when none is set.")
]
Port = Annotated[int, typer.Option(help="Port of that local server.")]
StartupTimeout = Annotated[
    float, typer.Option(min=1, help="Seconds to wait for the local server to answer.")
]


@app.command("serve")
def serve(
    host: Host = "127.0.0.1",
    port: Port = 4200,
    limit: Annotated[
        int, typer.Option(min=1, help="Flow runs executed at the same time by this process.")
    ] = 1,
    startup_timeout: StartupTimeout = 300,
) -> None:
    """Serve the deployments until interrupted.

    With PREFECT_API_URL set, they are registered on that server; otherwise a local server
    (API and UI) is started on HOST:PORT and stopped on exit.
    """
    from prefect import serve as prefect_serve
    from prefect.settings import get_current_settings

    from pdeladder.flows.deployments import deployments
    from pdeladder.flows.server import prefect_api

    with prefect_api(host, port, startup_timeout):
        typer.echo(f"Prefect UI: {get_current_settings().ui_url}")
        prefect_serve(*deployments(), limit=limit, pause_on_shutdown=False)


def quickstart_file() -> Path:
    """``quickstart.yaml`` as installed with pdeladder (package data), found from any folder."""
    from pdeladder.examples import path

    return path("quickstart.yaml")


def demo(
    store: Annotated[str, typer.Option(help="Store URL of the generated data.")] = (
        "./stores/quickstart.zarr"
    ),
    run_dir: Annotated[
        Path, typer.Option(help="Folder of models, evaluations and weights files.")
    ] = Path("runs/quickstart"),
    workers: Annotated[int, typer.Option(min=1, help="Solver actors and Ray Train workers.")] = 2,
    refine: Annotated[
        int,
        typer.Option(
            min=0,
            help="Iterations against the PDE residual refining the last stage's predictions "
            "(Gauss-Newton; L-BFGS beyond a direct solve's size), scored beside the unrefined "
            "(0: none).",
        ),
    ] = DEMO_REFINE,
    host: Host = "127.0.0.1",
    port: Port = 4200,
    startup_timeout: StartupTimeout = 300,
) -> None:
    """Climb the quick-start curriculum end to end with the closed-loop flow.

    Each stage is solved on local Ray actors, trained on, evaluated, and steers the next stage's
    sample budget (on the configured Prefect server or a local one). A rerun resumes: finished
    samples are kept."""
    from prefect.settings import get_current_settings
    from rich.console import Console

    from pdeladder.flows.closed_loop import Loop, closed_loop
    from pdeladder.flows.server import prefect_api
    from pdeladder.trainer.training.timing import read_timing, timing_table

    file = quickstart_file()
    with prefect_api(host, port, startup_timeout):
        typer.echo(f"Prefect UI (while the demo runs): {get_current_settings().ui_url}")
        loop = Loop(
            curriculum=str(file),
            store_url=store,
            run_dir=str(run_dir),
            workers=workers,
            refine=refine,
        )
        result = closed_loop(loop)
    console = Console()
    console.print(scores_table(f"{file.name}: held-out scores after each stage", result["scores"]))
    console.print(timing_table(read_timing(run_dir)))
    console.print(f"store: {result['store']}\nmodel: {result['checkpoint']}", soft_wrap=True)
    console.print(f"reports and PNGs: {run_dir / 'evaluation'}")


def scores_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """The closed loop's score rows as a table: nRMSE, its trivial baseline and the ratio, a
    family that does not beat its baseline flagged in red."""
    table = Table(
        title=f"{title}, against the trivial baseline (persistence; steady: training mean field)"
    )
    columns = (
        "stage",
        "family",
        "nrmse",
        "baseline",
        "ratio",
        "refined",
        "residual",
        "next_weight",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("stage", "family") else "right")
    for row in rows:
        cells = {c: _cell(row[c]) for c in columns}
        if not row["beats_baseline"]:
            cells["ratio"] = f"[red]{cells['ratio'] or '-'} not better than baseline"
        table.add_row(*cells.values())
    return table


def _cell(value: object) -> str:
    if value is None:
        return ""
    return f"{value:.3g}" if isinstance(value, float) else str(value)
