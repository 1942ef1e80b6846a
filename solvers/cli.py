"""``pdeladder solvers ...`` and ``pdeladder solve``: the solver library from the shell."""

import json
import re
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pdeladder.errors import UserInputError
from pdeladder.solvers.registry import FAMILIES, get_family

app = typer.Typer(
    help="Equation families: list them, run their convergence studies.", no_args_is_help=True
)
FamilyName = StrEnum("FamilyName", {n: n for n in FAMILIES})
console = Console()


def family_info(name: str) -> dict:
    """Everything ``solvers list`` shows about one family, as JSON-able values."""
    fam = get_family(name)
    return {
        "name": fam.name,
        "title": fam.title,
        "equation": fam.equation,
        "dims": list(fam.dims),
        "steady": fam.steady,
        "t_end": fam.t_end,
        "difficulty": fam.difficulty,
        "channels": [
            {"name": c.name, "long_name": c.long_name, "units": c.units, "role": c.role}
            for c in fam.channels
        ],
        "parameters": fam.Params.describe(),
        "boundary_conditions": fam.boundary_conditions,
    }


#: LaTeX commands of the families' equations, as the terminal shows them.
SYMBOLS = {
    "partial": "∂", "Delta": "Δ", "nabla": "∇", "cdot": "·", "kappa": "κ", "nu": "ν",
    "varepsilon": "ε", "epsilon": "ε", "alpha": "α", "beta": "β", "gamma": "γ", "lambda": "λ",
    "mu": "μ", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "omega": "ω", "quad": " ",
    "times": "×",
}  # fmt: skip
SUPERSCRIPT = str.maketrans(
    "0123456789+-=()abcdefghijklmnoprstuvwxyz", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻ"
)
SUBSCRIPT = str.maketrans("0123456789aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ")


def plain_equation(latex: str) -> str:
    """A family's LaTeX equation as plain Unicode text for the terminal.

    >>> plain_equation(r"\\partial_t^2 u = c^2 \\Delta u")
    '∂ₜ²u = c² Δu'
    >>> plain_equation(r"-\\nabla \\cdot (e^{a} \\nabla p) = f")
    '-∇ · (eᵃ ∇p) = f'
    """

    def script(match: re.Match, table: dict[int, str], mark: str) -> str:
        body = match.group(1) or match.group(2)
        shown = body.translate(table)
        if any(ord(c) < 128 and not c.isspace() for c in shown):  # no Unicode form for all of it
            return f"{mark}({body})" if len(body) > 1 else f"{mark}{body}"
        return shown

    text = re.sub(r"\\([A-Za-z]+)", lambda m: SYMBOLS.get(m.group(1), m.group(1)), latex)
    text = text.replace("\\ ", " ").replace("\\,", " ")
    text = re.sub(r"\^\{([^{}]*)\}|\^(\w)", lambda m: script(m, SUPERSCRIPT, "^"), text)
    text = re.sub(r"_\{([^{}]*)\}|_(\w)", lambda m: script(m, SUBSCRIPT, "_"), text)
    text = re.sub(r"\s+", " ", text).strip()  # spacing commands and source spaces: one space
    # An operator binds to what it acts on, as LaTeX's spacing shows it: ∂ₜ u -> ∂ₜu, Δ u -> Δu.
    return re.sub(r"([∂Δ∇][ₜₓ²]*) (?=[\w(])", r"\1", text)


@app.command("list")
def list_families(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table (equations in LaTeX).")
    ] = False,
) -> None:
    """List the equation families: dimensions, channels, parameters with ranges, boundary conditions."""
    infos = [family_info(n) for n in FAMILIES]
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    console = Console()  # the terminal's width now (COLUMNS)
    for info in infos:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column()
        grid.add_row("equation", Text(plain_equation(info["equation"])))
        grid.add_row("dimensions", ", ".join(map(str, info["dims"])))
        grid.add_row(
            "channels",
            Text(", ".join(f"{c['name']} ({c['role']})" for c in info["channels"])),
        )
        grid.add_row(
            "parameters",
            Text(
                "\n".join(
                    f"{p['name']} [{p['low']:g}, {p['high']:g}]"
                    + ("" if p["units"] in ("1", "") else f" {p['units']}")
                    + (" (difficulty)" if p["name"] == info["difficulty"] else "")
                    for p in info["parameters"]
                )
            ),
        )
        grid.add_row("boundaries", Text(info["boundary_conditions"]))
        console.print(Text(f"{info['name']}: {info['title']}", style="bold"))
        console.print(Padding(grid, (0, 0, 1, 2), expand=False))


@app.command("convergence")
def convergence(
    family: Annotated[FamilyName, typer.Argument(help="Family to study.")],
    dim: Annotated[
        int | None, typer.Option(help="Spatial dimension (default: the lowest >= 2 it supports).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON rows plus expected and observed rates.")
    ] = False,
) -> None:
    """Manufactured-solution convergence study in space (and in time for time-dependent families)."""
    from pdeladder.solvers.convergence import study

    fam = get_family(family.value)
    dim = dim or next((d for d in fam.dims if d >= 2), fam.dims[0])
    if dim not in fam.dims:
        raise UserInputError(f"{fam.name} supports dimensions {list(fam.dims)}, not {dim}")
    kinds = ["space"] + ([] if fam.expected_rate_time is None else ["time"])
    results = [study(fam, dim, kind) for kind in kinds]
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in results]))
    else:
        for r in results:
            table = Table(
                title=f"{fam.name} {dim}D, {r.kind} refinement (expected rate {r.expected_rate:g})"
            )
            for col in ("h" if r.kind == "space" else "dt", "L2 error", "rate"):
                table.add_column(col, justify="right")
            for row in r.rows:
                table.add_row(
                    f"{row.h:.4g}",
                    f"{row.error:.3e}",
                    "" if row.rate is None else f"{row.rate:.2f}",
                )
            console.print(table)
            console.print(
                f"observed rate {r.observed_rate:.2f}: {'[green]pass' if r.passed else '[red]FAIL'}"
            )
    if not all(r.passed for r in results):
        raise typer.Exit(1)


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
    from pdeladder.dataset.store import open_store
    from pdeladder.errors import SolveError
    from pdeladder.slabs import slab_chunk
    from pdeladder.solvers import slab_solve

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
