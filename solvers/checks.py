"""The family contract: every check a family must pass, built in or plugin, as functions.

Each check takes a :class:`Target` (a family, a dimension, and the contract sample solved once
on first use) and returns a :class:`CheckResult` with its figure; :func:`run_checks` runs them
all, each isolated, for ``pdeladder solvers check`` and for a family author's own tests::

    from pdeladder.solvers.checks import run_checks

    def test_my_family_meets_the_contract():
        failed = [r for r in run_checks(MyFamily(), dim=2) if not r.passed]
        assert not failed, failed

Sizes are small (2D: 17² and 33², a few snapshots), so one family's whole contract takes
seconds to a minute on one core; the convergence study uses the family's
``convergence_plan`` unless given smaller levels. The solving checks import DOLFINx (through
the family's FEM part); the two subprocess checks need the family's class importable from a
fresh interpreter (as its entry point is).
"""

import copy
import dataclasses
import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from pdeladder.errors import UserInputError, one_line
from pdeladder.solvers.family import (
    MANUFACTURED_T_END,
    MASK,
    Family,
    Parameters,
    Sample,
    residual_shape_error,
)
from pdeladder.solvers.grid import Grid

#: Points per axis of the contract sample; the residual check refines it to ``2 R - 1``.
RESOLUTION = 17
#: Seed of the contract sample.
SEED = 7
#: The residual on solver data must fall by at least this factor from R to ``2 R - 1`` points.
RESIDUAL_DROP = 0.7
#: Noise of this fraction of the field's std must raise the residual at least ``NOISE_RISE``-fold.
NOISE, NOISE_RISE = 0.1, 10.0
#: Largest |2-rank − serial| / max |serial| (docs/curriculum.md, "One sample on K ranks").
TWO_RANKS_BOUND = 1e-6
#: Largest |walls' value − solver's| / max |solver's| where a family sets its own walls
#: (float32 data against its conditions in float64).
WALL_BOUND = 1e-6
#: Modules the pure part of a family must not load.
FEM_MODULES = ("dolfinx", "petsc4py", "ufl", "basix")


@dataclass(frozen=True)
class CheckResult:
    """One check of one family: ``figure`` the measured numbers, ``detail`` why it failed."""

    name: str
    passed: bool
    figure: str
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def result(name: str, figure: str, problems: dict[str, bool]) -> CheckResult:
    """The result whose failures are the keys of ``problems`` whose value is True."""
    failed = [what for what, bad in problems.items() if bad]
    return CheckResult(name, not failed, figure, "; ".join(failed))


@dataclass
class Target:
    """The family under check in ``dim`` dimensions, and its contract sample."""

    family: Family
    dim: int

    def grid(self, refined: bool = False) -> Grid:
        """The contract grid: :data:`RESOLUTION` points per axis and the family's
        ``check_snapshots`` up to ``check_t_end``; refined, both steps halved."""
        fam = self.family
        res, snaps = RESOLUTION, 1 if fam.steady else fam.check_snapshots
        if refined:
            res, snaps = 2 * res - 1, 1 if fam.steady else 2 * snaps - 1
        return fam.grid(self.dim, res, snaps, fam.check_t_end)

    @cached_property
    def sample(self) -> Sample:
        """The contract sample at :data:`SEED`, the family's :meth:`~Family.check_params`."""
        return self.family.run(self.family.check_params(self.dim), self.grid(), seed=SEED)

    def fields(self, sample: Sample) -> torch.Tensor:
        """A sample's fields as float64 ``(1, C, T, X, Y, Z)``."""
        return torch.from_numpy(sample.fields).double().movedim(0, 1)[None]

    def residual_rms(self, fields: np.ndarray | torch.Tensor, grid: Grid) -> float:
        """The rms of the residual of ``fields`` ``(T, C, X, Y, Z)`` at the contract sample's
        parameters."""
        f = torch.as_tensor(fields).double().movedim(0, 1)[None]
        params = torch.from_numpy(self.family.check_params(self.dim).vector())[None]
        walled = self.family.with_walls(f, params, grid)
        return float(torch.sqrt(torch.mean(self.family.residual(walled, params, grid) ** 2)))


# -- declarations --------------------------------------------------------------------------------


def metadata(t: Target) -> CheckResult:
    """Names, dimensions, channels and every parameter's range, default and description."""
    fam, problems = t.family, {}
    problems["a name, title, equation or boundary description is empty"] = not (
        fam.name and fam.title and fam.equation and fam.boundary_conditions
    )
    problems[f"dims {fam.dims} not a non-empty subset of 1, 2, 3"] = not (
        fam.dims and set(fam.dims) <= {1, 2, 3}
    )
    names = [c.name for c in fam.channels]
    problems["channel names repeat or no output channel"] = not (
        names and len(set(names)) == len(names) and any(c.role == "output" for c in fam.channels)
    )
    rows = fam.Params.describe()
    for row in rows:
        lo, hi, default = row["low"], row["high"], row["default"]
        problems[f"parameter {row['name']}: no range low < default < high"] = not (
            lo is not None and hi is not None and lo < hi and lo <= default <= hi
        )
        problems[f"parameter {row['name']}: no description"] = not row["description"]
    problems[f"difficulty {fam.difficulty!r} is no parameter"] = (
        fam.difficulty is not None and fam.difficulty not in fam.Params.names()
    )
    figure = f"{len(fam.channels)} channels, {len(rows)} parameters, dims {list(fam.dims)}"
    return result("metadata", figure, problems)


def parameters(t: Target) -> CheckResult:
    """Every parameter below its range and above it, and an unknown name, refused by
    ``parse_params`` with a one-line :class:`UserInputError` that names it."""
    fam, problems = t.family, {}
    cases = [({"nonsense": 1.0}, "nonsense")]
    for name, (lo, hi) in fam.Params.ranges().items():
        cases += [({name: lo - abs(lo) - 1}, name), ({name: hi + abs(hi) + 1}, name)]
    for values, name in cases:
        try:
            fam.parse_params(values)
        except UserInputError as err:
            message = str(err)
            problems[f"{values}: message {message!r} not one line naming {name}"] = (
                name not in message or "\n" in message
            )
        else:
            problems[f"{values} accepted"] = True
    return result("parameters", f"{len(cases)} bad values refused", problems)


# -- one sample ----------------------------------------------------------------------------------


def solve(t: Target) -> CheckResult:
    """The contract sample solves: float32 ``(T, C, X, Y, Z)``, finite, with statistics and
    JSON-able provenance."""
    fam, s = t.family, t.sample
    if not s.ok:
        return CheckResult("solve", False, "failed", one_line(s.stats.reason))
    g = s.grid
    shape = (g.snapshots, len(fam.channels_for(g.dim)), *g.shape)
    try:
        json.dumps(s.provenance)
        json_ok = True
    except TypeError:
        json_ok = False
    problems = {
        f"fields {s.fields.dtype}{s.fields.shape}, expected float32{shape}": (
            s.fields.shape != shape or s.fields.dtype != np.float32
        ),
        "non-finite values": not np.all(np.isfinite(s.fields)),
        "no dofs or wall time in the statistics": not (s.stats.dofs > 0 and s.stats.wall_s > 0),
        "fewer steps than snapshot intervals": not fam.steady and s.stats.steps < g.snapshots - 1,
        "provenance not JSON-able": not json_ok,
    }
    figure = f"{s.stats.dofs} dofs, {s.stats.steps} steps, {s.stats.wall_s:.2f} s"
    return result("solve", figure, problems)


def determinism(t: Target) -> CheckResult:
    """The same seed gives the same bytes; the next seed other ones."""
    s, fam = t.sample, t.family
    again = fam.run(s.params, s.grid, seed=s.seed)
    other = fam.run(s.params, s.grid, seed=s.seed + 1)
    problems = {
        "the same seed gave other bytes": not np.array_equal(again.fields, s.fields),
        "the next seed gave the same bytes": np.array_equal(other.fields, s.fields),
    }
    return result("determinism", f"seeds {s.seed}, {s.seed} and {s.seed + 1}", problems)


def inputs(t: Target) -> CheckResult:
    """``draw_inputs`` is the solve's snapshot 0 bit for bit in the drawn channels (a steady
    family's inputs only; the rest zero), and depends on the seed."""
    s, fam = t.sample, t.family
    drawn = fam.draw_inputs(s.params, s.grid, s.seed)
    mask = np.array([not fam.steady or c.role == "input" for c in fam.channels_for(s.grid.dim)])
    other = fam.draw_inputs(s.params, s.grid, s.seed + 1)
    problems = {
        f"drawn {drawn.dtype}{drawn.shape}, expected float32{s.fields.shape[1:]}": (
            drawn.dtype != np.float32 or drawn.shape != s.fields.shape[1:]
        ),
    }
    if not any(problems.values()):
        problems["not the solve's snapshot 0"] = not np.array_equal(drawn[mask], s.fields[0, mask])
        problems["channels only the solve sets are not zero"] = bool(np.any(drawn[~mask]))
        problems["the next seed draws the same"] = np.array_equal(other[mask], drawn[mask])
    return result("inputs", f"{int(mask.sum())} drawn channels", problems)


# -- the residual against the solver -------------------------------------------------------------


def residual(t: Target) -> CheckResult:
    """The residual of the solver's own data is at the discretisation floor: it falls by
    :data:`RESIDUAL_DROP` when space and time are refined together, and noise of
    :data:`NOISE` of the field's std raises it :data:`NOISE_RISE`-fold.

    Both resolutions solve the same continuous problem. A draw depends on the grid it is drawn
    on (:func:`~pdeladder.solvers.random_fields.gaussian_random_field` draws one noise value
    per mode of a grid-sized box), so the same seed at 17 and 33 points gives two unrelated
    fields, and the ratio of their residuals measures the draws as much as the resolution: in
    1D, where a field has a handful of modes, heat's fell only to 0.95. The coarse sample
    therefore starts from the fine sample's draw at the coarse points (:func:`coarse_draw`:
    every other point of the refined grid is a coarse point), a continuous field both grids
    sample exactly, so the ratio is the solver's and the residual stencil's error alone. That
    is one deterministic extra coarse solve; averaging over seeds instead would cost several
    solves at each resolution and still leave the draws' scatter in the ratio. A family whose
    solve does not start from :meth:`Family.initial_fields` (a discrete projection on its own
    mesh, as Navier–Stokes's) keeps its own coarse draw: where the coarse snapshot 0 is not the
    fine one's at the coarse points, the figure says "own draws".
    """
    fam, params, seed = t.family, t.sample.params, t.sample.seed
    fine = fam.run(params, t.grid(refined=True), seed=seed)
    coarse = coarse_draw(fam).run(params, t.grid(), seed=seed)
    if not (coarse.ok and fine.ok):
        return CheckResult("residual", False, "", "a solve failed")
    drawn = np.array([not fam.steady or c.role == "input" for c in fam.channels_for(t.dim)])
    shared = np.array_equal(
        coarse.fields[0, drawn], fine.fields[0, drawn][(slice(None), *every_other(t.dim))]
    )
    r_coarse = t.residual_rms(coarse.fields, coarse.grid)
    r_fine = t.residual_rms(fine.fields, fine.grid)
    noise = np.random.default_rng(0).standard_normal(fine.fields.shape)
    noisy = fine.fields + NOISE * fine.fields.std() * noise.astype(np.float32)
    r_noisy = t.residual_rms(noisy, fine.grid)
    figure = (
        f"rms {r_coarse:.2e} at {coarse.grid.resolution}, {r_fine:.2e} at "
        f"{fine.grid.resolution} (x{r_fine / r_coarse:.2f}); noise x{r_noisy / r_fine:.0f}"
        + ("" if shared or not drawn.any() else "; own draws")
    )
    problems = {
        f"does not fall by {RESIDUAL_DROP} with resolution": not r_fine < RESIDUAL_DROP * r_coarse,
        f"noise raises it less than {NOISE_RISE:g}-fold": not r_noisy > NOISE_RISE * r_fine,
    }
    return result("residual", figure, problems)


def every_other(dim: int) -> tuple[slice, slice, slice]:
    """The index of a refined grid's ``(X, Y, Z)`` (``2 R - 1`` points per axis) that picks
    the ``R`` points of the grid it refines: every other point along the ``dim`` axes."""
    return tuple(slice(None, None, 2 if a < dim else 1) for a in range(3))  # type: ignore[return-value]


def coarse_draw(family: Family) -> Family:
    """A copy of ``family`` whose :meth:`~Family.initial_fields` on a grid of ``R`` points per
    axis draws on the refined grid of ``2 R - 1`` (the same generator, left in the same state
    as the refined sample's) and keeps every other point: the refined sample's initial state
    and inputs, at the coarse grid's points."""
    coarse = copy.copy(family)
    draw = family.initial_fields

    def initial_fields(params: Parameters, grid: Grid, rng: np.random.Generator, comm=None):
        fine = dataclasses.replace(grid, resolution=2 * grid.resolution - 1)
        return draw(params, fine, rng, comm)[(slice(None), *every_other(grid.dim))]

    coarse.initial_fields = initial_fields  # type: ignore[method-assign]
    return coarse


def convergence(
    t: Target,
    kind: Literal["space", "time"],
    *,
    levels: tuple[int, ...] | None = None,
    fixed: int | None = None,
) -> CheckResult:
    """The manufactured solution's observed order (between the two finest ``levels``, default
    the family's ``convergence_plan``) reaches the declared one within the tolerance of
    :mod:`~pdeladder.solvers.convergence`."""
    from pdeladder.solvers.convergence import TOLERANCE, study

    s = study(t.family, t.dim, kind, levels=levels, fixed=fixed)
    n = [round((1 if kind == "space" else MANUFACTURED_T_END) / r.h) for r in s.rows]
    figure = (
        f"rate {s.observed_rate:.2f} (declared {s.expected_rate:g}); "
        f"{'cells' if kind == 'space' else 'steps'} {','.join(map(str, n))}, "
        f"error {s.rows[-1].error:.1e}"
    )
    detail = f"observed rate {s.observed_rate:.2f}, more than {TOLERANCE:g} below the declared"
    return CheckResult(f"convergence_{kind}", s.passed, figure, "" if s.passed else detail)


# -- symmetries and walls ------------------------------------------------------------------------


def symmetry(t: Target) -> CheckResult:
    """Every element of the declared symmetry group maps the sample to data with the same
    residual norm (a vector residual to the image of the residual), and moving vector
    components as scalars does not: by one element at least, it doubles the residual."""
    from pdeladder.solvers.symmetry import family_group

    fam, s = t.family, t.sample
    fields = t.fields(s)
    params = torch.from_numpy(s.params.vector())[None]
    names = fam.channel_names(t.dim)

    def residual(f: torch.Tensor) -> torch.Tensor:
        return fam.residual(fam.with_walls(f, params, s.grid), params, s.grid)

    res = residual(fields)
    norm = torch.linalg.vector_norm(res)
    group = family_group(fam, t.dim)[1:]
    problems = {"the residual is exactly 0": not norm > 0}
    worst = 0.0
    for g in group:
        image = g.apply(fields, names, fam.vectors, channel_axis=1)
        moved = residual(image)
        gap = float(abs(torch.linalg.vector_norm(moved) - norm) / norm)
        worst = max(worst, gap)
        problems[f"{g} leaves the fields unchanged"] = torch.equal(image, fields)
        problems[f"{g} changes the residual norm by {gap:.1e}"] = gap > 1e-10
        if res.shape[1] == fields.shape[1]:  # a vector equation's rows are a vector
            expected = g.apply(res, names, fam.vectors, channel_axis=1)
            problems[f"{g}: the residual is not the image of the residual"] = not torch.allclose(
                moved, expected, rtol=1e-10, atol=1e-12 * float(norm)
            )
    vectors = [v for v in fam.vectors if any(c in names for c in v)]
    figure = f"{len(group)} elements, max norm change {worst:.0e}" if group else "none declared"
    if vectors and group:  # the vector rule matters: components moved as scalars break it
        # the largest rise over the group: how much one element's misplaced components raise
        # the residual depends on the sample (a weak flow's advection barely shows through
        # the floor), so the quarter turn alone may not show it where another element does
        rise = max(
            float(torch.linalg.vector_norm(residual(wrong)) / norm)
            for wrong in (g.apply(fields, names, (), channel_axis=1) for g in group)
        )
        figure += f"; moved as scalars x{rise:.1f}"
        problems[f"vector components moved as scalars keep the residual (x{rise:.2f})"] = not (
            rise > 2
        )
    return result("symmetry", figure, problems)


def walls(t: Target) -> CheckResult:
    """Every predicted channel but a pressure declares its wall condition, one kind per family,
    unless the family completes its walls itself (:meth:`~Family.with_walls`); and the solver's
    data hold the values the walls set: 0 on the walls of a ``"zero"`` channel, the family's
    own values (to :data:`WALL_BOUND` of the largest) where it sets them. A family with a
    :data:`~pdeladder.solvers.family.MASK` has boundaries that are not its box's walls (an
    inflow, an outflow, obstacles): its channels may declare none."""
    from pdeladder.solvers.stencils import inner_points

    fam = t.family
    channels = fam.channels_for(t.dim)
    declared = [c.wall for c in channels]
    fields = t.fields(t.sample)
    problems = {
        "both zero and no_flux walls": {"zero", "no_flux"} <= set(declared),
        "a predicted channel declares no wall": not (
            all(c.wall is not None for c in channels if c.role == "output" and c.name != "p")
            or (fam.steady and declared == [None, "zero"])
            or MASK in fam.channel_names(t.dim)
            or fam.walls_own()
        ),
    }
    if fam.walls_set_values(t.dim):
        params = torch.from_numpy(t.sample.params.vector())[None]
        ends = [(True, True)] * t.dim
        completed = inner_points(fam.with_walls(fields, params, t.sample.grid), fields.shape, ends)
        gap = float((completed - fields).abs().max() / fields.abs().max())
        bound = WALL_BOUND if fam.walls_own() else 0.0
        problems[f"the solver's data do not hold their walls' values ({gap:.1e} of max)"] = not (
            gap <= bound
        )
    figure = ", ".join(f"{c.name}: {c.wall}" for c in channels)
    if fam.walls_own():
        figure += "; completed by the family"
    return result("walls", figure, problems)


# -- fresh processes -----------------------------------------------------------------------------


def class_path(family: Family) -> str:
    """``module:Class`` of ``family``, as a fresh interpreter imports it."""
    return f"{type(family).__module__}:{type(family).__qualname__}"


_LOAD = "from importlib import import_module\nmodule, _, cls = sys.argv[1].partition(':')\n"
_LOAD += "fam = getattr(import_module(module), cls)()\n"

_TWO_RANKS = (
    "import sys\nfrom mpi4py import MPI\nimport numpy as np\n"
    + _LOAD
    + textwrap.dedent(
        """
        from pdeladder import slabs as cut
        from pdeladder.curriculum.slab_solve import solve_slab
        from pdeladder.solvers.grid import Grid, SlabGrid

        comm, out = MPI.COMM_WORLD, sys.argv[3]
        dim, res, snaps, t_end, seed, *lengths = map(float, sys.argv[2].split(","))
        g = Grid(int(dim), int(res), int(snaps), t_end, tuple(lengths))
        X = g.shape[0]
        sg = SlabGrid.of(g, tuple(cut.slabs(X, cut.slab_chunk(X, 2), 2)))
        params = fam.check_params(g.dim)
        fields, stats, _ = solve_slab(fam, params, sg, int(seed), comm)
        assert stats.status == "ok", stats.reason
        parts = comm.gather(fields, root=0)
        whole = fam.run(params, g, int(seed), comm=comm)
        assert whole.ok, whole.stats.reason
        if comm.rank == 0:
            np.save(out + "/slabs.npy", np.concatenate(parts, axis=2))
            np.save(out + "/whole.npy", whole.fields)
        """
    )
)


def two_ranks(t: Target) -> CheckResult:
    """The sample solved on 2 MPI ranks, in x slabs as ``pdeladder solve --ranks 2`` does and
    on the whole grid (``run`` on 2 ranks), equals the serial one within
    :data:`TWO_RANKS_BOUND` of its largest magnitude. Runs ``mpiexec -n 2``."""
    from pdeladder.network import mpi_env, mpiexec

    s = t.sample
    g = s.grid
    spec = ",".join(map(str, (g.dim, g.resolution, g.snapshots, g.t_end, s.seed, *g.lengths)))
    with tempfile.TemporaryDirectory(prefix="pdeladder-check-") as out:
        command = [mpiexec(), "-n", "2", sys.executable, "-c", _TWO_RANKS]
        done = subprocess.run(
            [*command, class_path(t.family), spec, out],
            env={**mpi_env(), "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not (Path(out) / "whole.npy").exists():
            lines = [ln for ln in done.stderr.strip().splitlines() if "Return code" not in ln]
            tail = (lines or done.stderr.strip().splitlines() or ["no output"])[-1]
            return CheckResult("two_ranks", False, "", f"mpiexec exit {done.returncode}: {tail}")
        slabs, whole = np.load(Path(out) / "slabs.npy"), np.load(Path(out) / "whole.npy")
    scale = float(np.abs(s.fields).max())
    gaps = {
        k: float(np.abs(v - s.fields).max() / scale)
        for k, v in (("x slabs", slabs), ("whole", whole))
    }
    figure = ", ".join(f"{k} {v:.1e}" for k, v in gaps.items()) + " of max"
    problems = {
        f"{k} differ by {v:.1e} > {TWO_RANKS_BOUND:g}": v > TWO_RANKS_BOUND for k, v in gaps.items()
    }
    return result("two_ranks", figure, problems)


_PURE = (
    "import sys\n"
    + _LOAD
    + textwrap.dedent(
        """
        import json
        import numpy as np
        import torch

        fem = sys.argv[3].split(",")
        loaded = lambda: sorted({m.split(".")[0] for m in sys.modules} & set(fem))
        dim, snaps = map(int, sys.argv[2].split(","))
        grid = fam.grid(dim, 9, snaps)
        channels = len(fam.channels_for(dim))
        fields = torch.randn(2, channels, grid.snapshots, *grid.shape, dtype=torch.float64)
        params = torch.from_numpy(np.stack([fam.Params().vector()] * 2))
        r = fam.residual(fields, params, grid)
        out = {"finite": bool(r.shape[0] == 2 and torch.isfinite(r).all()), "residual": loaded()}
        out["shape"], out["fields"] = list(r.shape), list(fields.shape)
        fam.draw_inputs(fam.Params(), grid, seed=0)
        out["draw_inputs"] = loaded()
        print(json.dumps(out))
        """
    )
)


def pure(t: Target, *, pure_inputs: bool = False) -> CheckResult:
    """In a fresh interpreter, the family's package and its residual (on random fields, 9
    points per axis) load no DOLFINx, PETSc, UFL or basix, and the residual is finite and
    shaped ``(B, R, T', X', Y', Z')``, no axis longer than the fields'; the figure says what
    ``draw_inputs`` loads after (a discrete projection may need the FEM part), a failure with
    ``pure_inputs``."""
    fam = t.family
    snaps = "1" if fam.steady else "4"
    done = subprocess.run(
        [sys.executable, "-c", _PURE, class_path(fam), f"{t.dim},{snaps}", ",".join(FEM_MODULES)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult("pure", False, "", f"exit {done.returncode}: {tail}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    drawn = out["draw_inputs"]
    misshapen = residual_shape_error(tuple(out["shape"]), tuple(out["fields"]))
    figure = "residual loads no FEM; draw_inputs " + (
        f"loads {','.join(drawn)}" if drawn else "none"
    )
    problems = {
        f"the residual loads {','.join(out['residual'])}": bool(out["residual"]),
        "the residual of random fields is not finite": not out["finite"],
        **({misshapen: True} if misshapen else {}),
        f"draw_inputs loads {','.join(drawn)}": pure_inputs and bool(drawn),
    }
    return result("pure", figure, problems)


# -- all of them ---------------------------------------------------------------------------------

#: Every check but the convergence studies, in the order :func:`run_checks` runs them.
CHECKS: dict[str, Callable[[Target], CheckResult]] = {
    "metadata": metadata,
    "parameters": parameters,
    "pure": pure,
    "solve": solve,
    "determinism": determinism,
    "inputs": inputs,
    "residual": residual,
    "symmetry": symmetry,
    "walls": walls,
    "two_ranks": two_ranks,
}


def default_dim(family: Family) -> int:
    """The lowest dimension >= 2 the family supports (else its only one)."""
    return next((d for d in family.dims if d >= 2), family.dims[0])


def isolated(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """``check()``, an exception in it turned into its failure with a one-line detail."""
    try:
        return check()
    except Exception as err:  # a family's bug of any kind fails that check only
        return CheckResult(name, False, "", f"{type(err).__name__}: {one_line(str(err))}")


def run_checks(
    family: str | Family,
    *,
    dim: int | None = None,
    studies: dict[str, tuple[tuple[int, ...] | None, int | None]] | None = None,
) -> list[CheckResult]:
    """Every check of ``family`` (a registered name or an instance) in ``dim`` dimensions
    (default :func:`default_dim`), each isolated: an exception fails that check only.
    ``studies`` overrides the convergence plan per kind: ``{"space": (levels, fixed)}``."""
    if isinstance(family, str):
        from pdeladder.solvers.registry import get_family

        family = get_family(family)
    dim = default_dim(family) if dim is None else dim
    if dim not in family.dims:
        raise UserInputError(f"{family.name} supports dimensions {list(family.dims)}, not {dim}")
    target = Target(family, dim)
    results = [isolated(name, lambda c=check: c(target)) for name, check in CHECKS.items()]
    kinds = ["space"] + ([] if family.expected_rate_time is None else ["time"])
    for kind in kinds:
        levels, fixed = (studies or {}).get(kind, (None, None))
        results.append(
            isolated(
                f"convergence_{kind}",
                lambda k=kind, lv=levels, fx=fixed: convergence(target, k, levels=lv, fixed=fx),
            )
        )
    return results
