"""``pdeladder solvers ...``: the equation families from the shell (list them, run their
convergence studies, check them against the family contract, start a new one)."""

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pdeladder.errors import UserInputError, one_line
from pdeladder.solvers.registry import family_names, family_package, get_family

app = typer.Typer(
    help="Equation families: list them, run their convergence studies, check their contract, "
    "write a new one's package.",
    no_args_is_help=True,
)
FamilyName = StrEnum("FamilyName", {n: n for n in family_names()})
console = Console()


def family_info(name: str) -> dict:
    """Everything ``solvers list`` shows about one family, as JSON-able values."""
    fam = get_family(name)
    return {
        "name": fam.name,
        "title": fam.title,
        "package": family_package(type(fam)),
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
    """List the equation families: dimensions, channels, parameters with ranges, boundary
    conditions and the package that provides each. A broken family (its entry point cannot be
    imported, or two packages claim its name) is left out: one line each on stderr, after the
    good ones, and exit code 2."""
    infos, broken = [], []
    for name in family_names():
        try:
            infos.append(family_info(name))
        except UserInputError as err:
            broken.append(str(err))
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
    else:
        print_table(infos)
    for line in broken:
        typer.secho(f"error: {one_line(line)}", err=True, fg=typer.colors.RED)
    if broken:
        raise typer.Exit(2)


def print_table(infos: list[dict]) -> None:
    """``solvers list``'s terminal view of :func:`family_info`'s dicts."""
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
        grid.add_row("package", Text(f"{info['package']['name']} {info['package']['version']}"))
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


@app.command("check")
def check(
    family: Annotated[
        str, typer.Argument(help="Family name, built in or plugin (see `solvers list`).")
    ],
    dim: Annotated[
        int | None, typer.Option(help="Spatial dimension (default: the lowest >= 2 it supports).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON: one object per check.")
    ] = False,
) -> None:
    """Run the family contract against FAMILY: metadata, parameters refused in one line, the
    pure part importable without DOLFINx, a sample solved, determinism, drawn inputs, the
    residual of its own solves at the discretisation floor, the declared symmetries and walls,
    a 2-rank solve (x slabs, mpiexec) equal to the serial one, and the manufactured-solution
    convergence orders. Exit code 0 when every check passes, 1 when one fails, 2 for bad
    input (an unknown family or dimension)."""
    from pdeladder.solvers.checks import run_checks

    results = run_checks(family, dim=dim)
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in results]))
    else:
        table = Table(title=f"{family}: the family contract")
        for col in ("check", "result", "figure"):
            table.add_column(col)
        for r in results:
            verdict = Text("pass", style="green") if r.passed else Text("FAIL", style="bold red")
            figure = Text(r.figure + (f"\n{r.detail}" if r.detail else ""))
            table.add_row(r.name, verdict, figure)
        console.print(table)
    if not all(r.passed for r in results):
        raise typer.Exit(1)


@app.command("new")
def new(
    name: Annotated[
        str, typer.Argument(help="The family's name: a lower-case Python identifier, new.")
    ],
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Folder to write, absent or empty (default: ./NAME)."),
    ] = None,
) -> None:
    """Write a ready package for a new family NAME: pyproject.toml with its entry point, the
    pure part (parameters with ranges and units, channels, walls, residual), the FEM part (the
    weak form in UFL), a test that runs the family contract, and a README. Its physics is the
    heat equation, each block of it marked REPLACE; installed (`pip install -e DIR`), it passes
    `pdeladder solvers check NAME` as written. Tutorial: docs/families.md."""
    from pdeladder.solvers.scaffold import new_family

    path = new_family(name, directory)
    typer.echo(f"wrote {path}")
    typer.echo(f"next: pip install -e {path} && pdeladder solvers check {name}")
