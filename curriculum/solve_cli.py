"""``pdeladder solve``: one sample solved and appended to a store group, in one process or on K
MPI ranks in x slabs (:mod:`pdeladder.curriculum.slab_solve`)."""

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from pdeladder.errors import UserInputError
from pdeladder.solvers.registry import get_family

console = Console()


def parse_assignments(items: list[str]) -> dict[str, float]:
    """``["name=value", ...]`` -> ``{name: value}``; values are numbers, never evaluated."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserInputError(f"--param expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise UserInputError(f"--param {name}: {value!r} is not a number") from None
    return out


def solve(
    family: Annotated[str, typer.Argument(help="Family name (see `pdeladder solvers list`).")],
    out: Annotated[
        str, typer.Option("--out", help="Store URL: a path, file://, memory:// or s3://.")
    ],
    dim: Annotated[int, typer.Option("--dim", help="Spatial dimension.")] = 2,
    resolution: Annotated[
        int, typer.Option("--resolution", help="Grid points per axis (>= 3).")
    ] = 32,
    snapshots: Annotated[
        int | None,
        typer.Option(
            "--snapshots", min=1, help="Stored time levels T.", show_default="11; steady: 1"
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="NAME=VALUE, repeatable; defaults otherwise."),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the random initial condition and coefficients.")
    ] = 0,
    stage: Annotated[
        str, typer.Option("--stage", help="Stage name of the group written.")
    ] = "adhoc",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON line of statistics.")
    ] = False,
    ranks: Annotated[
        int | None,
        typer.Option(
            "--ranks",
            help="Solve on K MPI processes (mpiexec), the mesh cut into x slabs, each "
            "process writing its own slab.",
            show_default="one process",
        ),
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option("--hosts", help="With --ranks: MPI hosts to run on (mpiexec -hosts)."),
    ] = None,
) -> None:
    """Solve one sample and append it to a store."""
    from pdeladder.dataset.store import open_store

    fam = get_family(family)
    values = parse_assignments(param or [])
    params = fam.parse_params(values)
    grid = fam.grid(dim, resolution, (1 if fam.steady else 11) if snapshots is None else snapshots)
    if why := fam.unresolved(grid, {n: (v, v) for n, v in params.model_dump().items()}):
        raise UserInputError(why)
    if ranks is not None:
        solve_on_ranks(fam, grid, values, seed, stage, out, ranks, hosts, as_json)
        return
    store = open_store(out, mode="a", check_writable=True)  # fails before any solve, writes nothing
    sample = fam.run(params, grid, seed)
    index = store.require_group(stage, fam, grid).append(sample)
    s = sample.stats
    line = {
        "family": fam.name,
        "dim": dim,
        "resolution": resolution,
        "dofs": s.dofs,
        "steps": s.steps,
        "wall_s": round(s.wall_s, 4),
        "solve_s": round(s.solve_s, 4),
        "status": s.status,
        "index": index,
    }
    if not sample.ok:
        line["reason"] = s.reason
    if as_json:
        typer.echo(json.dumps(line))
    else:
        console.print(line)
    if not sample.ok:
        raise typer.Exit(1)


def solve_on_ranks(
    fam: Any,
    grid: Any,
    values: dict[str, float],
    seed: int,
    stage: str,
    out: str,
    ranks: int,
    hosts: str | None,
    as_json: bool,
) -> None:
    """``solve --ranks K``: check K and the group here (one line, exit 2, nothing written),
    then solve on K MPI processes, each writing its x slab (:mod:`.slab_solve`)."""
    from pdeladder.curriculum import slab_solve
    from pdeladder.dataset.store import open_store
    from pdeladder.errors import SolveError
    from pdeladder.slabs import slab_chunk

    slab_solve.check_ranks(ranks, grid, hosts=hosts)
    store = open_store(out, mode="a", check_writable=True)
    group = store.require_group(stage, fam, grid, chunk_x=slab_chunk(grid.shape[0], ranks))
    slab_solve.x_slabs(group, ranks)  # a group made before with too few x chunks is refused
    spec = slab_solve.job(fam.name, out, grid, values, seed, stage)
    try:
        line = slab_solve.run_on_ranks(spec, ranks, hosts)
    except SolveError as err:
        typer.echo(f"error: {err.reason}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(line))
    else:
        console.print(line)
    if line["status"] != "ok":
        raise typer.Exit(1)
