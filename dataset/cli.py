"""``pdeladder store ...``: inspect, verify, plot and export stores from the shell."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

app = typer.Typer(
    help="Zarr stores of samples: inspect, verify, plot, export.", no_args_is_help=True
)
console = Console()

Url = Annotated[str, typer.Argument(help="Store URL: a path, file://, memory:// or s3://.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@app.command()
def inspect(url: Url, as_json: AsJson = False) -> None:
    """Groups with their ok/failed/missing counts, bytes stored and compression ratio."""
    from pdeladder.dataset.store import open_store
    from pdeladder.dataset.verify import summary

    store = open_store(url)
    rows = [summary(store.group(path)) for path in store.groups()]
    if as_json:
        typer.echo(json.dumps({"url": url, "groups": rows}))
        return
    table = Table(title=f"pdeladder store {url}")
    for col in ("group", "shape (T,C,X,Y,Z)", "ok", "failed", "missing", "bytes", "ratio"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for r in rows:
        table.add_row(
            r["group"],
            "x".join(map(str, r["shape"])),
            str(r["ok"]),
            f"[red]{r['failed']}" if r["failed"] else "0",
            f"[yellow]{r['missing']}" if r["missing"] else "0",
            f"{r['bytes']:,}",
            "-"
            if r["compression_ratio"] is None
            else f"{r['compression_ratio']:.2f} ({r['compression']})",
        )
    console.print(table)


@app.command()
def verify(
    url: Url,
    as_json: AsJson = False,
    structure_only: Annotated[
        bool,
        typer.Option("--structure-only", help="Check metadata and array shapes, read no fields."),
    ] = False,
) -> None:
    """Check a store against the format: structure, completeness, checksums, NaN/Inf.

    Exits 1 naming every bad sample; 2 if the store cannot be opened or has an unknown version.
    """
    from pdeladder.dataset.store import open_store
    from pdeladder.dataset.verify import store_problems

    store = open_store(url)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeRemainingColumn(), console=console, disable=as_json) as bar:

        def progress(path: str, samples: int) -> Callable[[], None]:
            task = bar.add_task(f"verifying {path}", total=samples)
            return lambda: bar.advance(task)

        found = store_problems(store, values=not structure_only, progress=progress)
    problems = [p for ps in found.values() for p in ps]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "url": url,
                    "ok": not problems,
                    "groups": sorted(found),
                    "problems": [p.__dict__ for p in problems],
                }
            )
        )
    elif problems:
        table = Table(title=f"{len(problems)} problem(s) in {url}")
        for col in ("where", "check", "problem"):
            table.add_column(col)
        for p in problems:
            table.add_row(p.path, p.kind, p.message)
        console.print(table)
    else:
        console.print(
            f"[green]ok[/green]: {len(found)} group(s) in {url} match the format", soft_wrap=True
        )
    if problems:
        raise typer.Exit(1)


@app.command()
def plot(
    url: Url,
    group: Annotated[str, typer.Option("--group", help="Group path (see `store inspect`).")],
    sample: Annotated[int, typer.Option("--sample", help="Sample index.")],
    out: Annotated[Path | None, typer.Option("--out", help="PNG to write.")] = None,
) -> None:
    """Draw one sample into a PNG: its channels over time (the mid-plane in z in 3D), inputs
    constant in time once, titled with its seed and parameters."""
    from pdeladder.dataset.plot import plot_sample
    from pdeladder.dataset.store import open_store
    from pdeladder.outputs import check_apart

    path = out or Path(f"{group.replace('/', '_')}_{sample}.png")
    check_apart(path, [url])
    g = open_store(url).group(group)
    console.print(f"wrote {plot_sample(g, sample, path)}", soft_wrap=True)


@app.command()
def export(
    url: Url,
    tool: Annotated[
        str, typer.Option("--format", help="Format to write: vtk (ParaView), the-well or pdebench.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder to write (must be new or empty).")],
    group: Annotated[
        str | None, typer.Option("--group", help="Group path of the sample (vtk).")
    ] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="Sample index (vtk).")] = None,
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--groups", help="Group to export (the-well, pdebench; repeatable; default all)."
        ),
    ] = None,
    held_out: Annotated[
        float, typer.Option(help="Held-out fraction, split as the trainer does (the-well).")
    ] = 0.1,
    force: Annotated[
        bool, typer.Option(help="Replace a previous export in --out (the same one is completed).")
    ] = False,
) -> None:
    """Write samples in another tool's format: a ParaView time series of one sample (vtk:
    a .pvd of .vti files), one Well dataset per group (the-well: HDF5 per split) or one
    PDEBench file per group (pdebench: HDF5, its 1D, Darcy or per-sample file)."""
    from pdeladder.dataset.export import check_format, check_out, export_job
    from pdeladder.dataset.store import open_store
    from pdeladder.errors import UserInputError

    check_format(tool)
    store = open_store(url)
    settings = {
        "vtk": dict(group=group, sample=sample),
        "the-well": dict(groups=groups, held_out=held_out),
        "pdebench": dict(groups=groups),
    }[tool]
    check_out(out, url, force, export_job(tool, store.url, **settings))
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    )

    def progress(description: str) -> Callable[[int], Callable[[int], None]]:
        def start(total: int) -> Callable[[int], None]:
            bar.start()  # after every input check: errors print one line
            task = bar.add_task(description, total=total)
            return lambda n: bar.advance(task, n)

        return start

    try:
        if tool == "vtk":
            from pdeladder.dataset.export.vtk import export_vtk

            if group is None or sample is None:
                raise UserInputError("--format vtk needs --group and --sample")
            g = store.group(group)
            written = export_vtk(
                g, sample, out, force=force, progress=progress(f"{group} sample {sample}")
            )
        elif tool == "the-well":
            from pdeladder.dataset.export.well import export_well

            written = export_well(
                store, out, groups=groups, held_out=held_out, force=force, progress=progress
            )
        else:
            from pdeladder.dataset.export.pdebench import export_pdebench

            written = export_pdebench(store, out, groups=groups, force=force, progress=progress)
    finally:
        if bar.live.is_started:
            bar.stop()
    console.print(f"wrote {written}")
