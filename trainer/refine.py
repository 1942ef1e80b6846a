"""Refinement at inference: a predicted rollout improved against its family's PDE residual.

PINO's test-time optimisation, on the field values rather than the weights: starting from the
model's prediction, ``steps`` iterations minimise the equation loss's relative residual
(:func:`~pdeladder.trainer.losses.equation.relative_residual`: one equation per snapshot
interval, fourth order in time, the walls completed by their conditions) over the predicted
values of one sample: Gauss–Newton with sparse direct solves (:func:`least_squares`, all
snapshots at once, or one snapshot's system at a time where the residual is linear and the same
at every time) up to :func:`direct_limit` values, L-BFGS (:func:`refine`) beyond. What the
sample is given stays as given: its input-role channels, its initial state (snapshot 0 of a time
series) and the points of a zero wall, which hold their condition, 0. The minimiser of that
residual lies at the discretisation error from the solver's data (benchmarks/RESULTS.md, "The
residual's floor"), so the iteration moves a prediction whose error is larger than that toward
the solution.

Each sample is refined alone, in float64 (a sample's result does not depend on the batch it is
predicted in). On x slabs of a domain group (``slab.domain``), Gauss–Newton solves the gathered
sample on every rank; L-BFGS all-reduces every reduction it takes, the residual's sums and its
inner products, over the group, so every rank takes the same steps. Either way the refined
slabs are those of the unsharded refinement (to rounding).

Tensors are ``(b, C_f, T, X, Y, Z)``: one family's channels, physical units.
"""

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from pdeladder.dataset.slots import SlotLayout
from pdeladder.errors import UserInputError
from pdeladder.slabs import Slab
from pdeladder.solvers import stencils
from pdeladder.solvers.family import MASK, Family
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.distributed.collectives import DomainGroup, gather_x
from pdeladder.trainer.losses.equation import (
    family_views,
    interval_weights,
    residual_points,
    residual_squares,
    wall_ends,
)

#: Levenberg–Marquardt's damping of singular normal equations, relative to their largest
#: diagonal entry (:func:`factorise`).
DAMPING = 1e-12
#: L-BFGS curvature pairs kept (each costs two inner products and two updates of a sample's
#: size per step: more than 10 cost more time than they save iterations here).
HISTORY = 10
#: Armijo's sufficient-decrease constant and the fewest halvings of a step before giving up.
ARMIJO, HALVINGS = 1e-4, 30
#: The most free values of one sample :func:`least_squares` takes, by the number of axes its
#: values couple along (space, and time for a series): a sparse LU's fill and time grow faster
#: than the values, the more so the more axes. 2D 1024²; a 2D series 150² × 11 snapshots or 3D
#: 64³; a 3D series 19³ × 11. Measured: Burgers' 65² × 11 series (79 380 values) factorises in
#: 3.7 s into 43 M entries.
DIRECT_LIMITS = {1: 2**22, 2: 2**20, 3: 2**18, 4: 2**16}
#: The squared residual, relative to its start, at which :func:`least_squares` has converged.
ROUNDING = 1e-24
#: :func:`sparse_jacobian`'s flat point index of a value with no point of a colour in its range.
NOWHERE = -(2**60)
#: A step of :func:`least_squares` on the last Jacobian's factors is kept while it lowers the
#: squared residual at least this much (a sparse LU costs 10-100 residual evaluations).
CHORD = 0.01


@dataclass(frozen=True)
class Refined:
    """The refined fields ``(b, C_f, T, X, Y, Z)`` and, per sample, the relative residual at
    the start and after each iteration ``(b, steps + 1)`` (a sample converged to rounding
    early repeats its last value)."""

    fields: torch.Tensor
    residual: torch.Tensor


def check_steps(steps: int | str) -> int:
    """``--refine``'s value as a number of iterations, 0 (no refinement) or more; anything else
    is a one-line :class:`~pdeladder.errors.UserInputError`."""
    text = str(steps).strip()
    if isinstance(steps, bool) or not text.isascii() or not text.isdecimal():
        raise UserInputError(f"--refine must be a whole number of steps >= 0, got {steps!r}")
    return int(text)


def held_mask(
    fam: Family, fields: torch.Tensor, predicted: torch.Tensor, grid, slab: Slab
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which values of ``fields`` ``(b, C_f, T, X, Y, Z)`` on ``slab`` of the global ``grid``
    the refinement holds, and which of those are wall points, set by the family's boundary
    conditions (both ``(C_f, T, X, Y, Z)`` bool).

    Held: the channels not ``predicted`` ``(C_f,)``, snapshot 0 of a time series (on the slab
    holding it) and, after snapshot 0, the points of the predicted channels that
    :meth:`Family.with_walls` sets (x's walls only at the global ends), as
    :func:`~pdeladder.trainer.losses.equation.walled` sets them: those whose completed value
    does not depend on the fields."""
    shape = fields.shape[1:]
    inputs = ~predicted.reshape(-1, 1, 1, 1, 1).expand(shape)
    first = torch.zeros(shape, dtype=torch.bool)
    if slab.shape[0] > 1 and slab.lo[0] == 0:
        first[:, 0] = True
    walls = torch.zeros(shape, dtype=torch.bool)
    if fam.walls_set_values(grid.dim):
        ends = wall_ends(slab, grid.dim)
        probe = torch.rand((2, *shape), generator=torch.Generator().manual_seed(0))
        probe = probe.double() + 1.0  # two fields that differ at every point, nowhere 0
        params = torch.tensor(np.array([fam.Params().vector()] * 2), dtype=torch.float64)
        out = stencils.inner_points(fam.with_walls(probe, params, grid, ends), probe.shape, ends)
        walls = (out[0] == out[1]) & ~inputs & ~first
    return inputs | first | walls, walls


def with_walls_set(
    fam: Family, fields: torch.Tensor, params: torch.Tensor, grid, slab: Slab, walls: torch.Tensor
) -> torch.Tensor:
    """``fields`` ``(b, C_f, T, X, Y, Z)`` on ``slab`` with the ``walls`` points
    (:func:`held_mask`) at the values the family's boundary conditions give them."""
    ends = wall_ends(slab, grid.dim)
    out = stencils.inner_points(fam.with_walls(fields, params, grid, ends), fields.shape, ends)
    return torch.where(walls, out, fields)


def refine(
    family_name: str,
    fields: torch.Tensor,
    trivial: torch.Tensor,
    params: torch.Tensor,
    predicted: torch.Tensor,
    grid,
    steps: int,
    *,
    slab: Slab | None = None,
    observe: Callable[[int, torch.Tensor], None] | None = None,
) -> Refined:
    """``fields`` refined by ``steps`` L-BFGS iterations against ``family_name``'s residual.

    Args:
        fields: the prediction completed by the given values (inputs, initial state), physical.
        trivial: the trivial prediction the residual is measured against (the initial state
            held; :func:`~pdeladder.trainer.losses.equation.family_views`).
        params: ``(b, P_f)`` physical parameters.
        predicted: ``(C_f,)`` bool, the channels the model predicts (the others are inputs).
        grid: the global grid; ``slab``: the part of it these fields hold (default: whole),
            split over ``slab.domain``.
        observe: called as ``observe(iteration, fields)`` after each iteration (from 0, the
            start), for a caller's curve.

    Returns:
        :class:`Refined`, in ``fields``' dtype; the held values (:func:`held_mask`) exactly
        as given, the wall points at their conditions' values.
    """
    fam = get_family(family_name)
    slab = slab or Slab.whole(fields.shape[2:])
    masks = held_mask(fam, fields, predicted.cpu(), grid, slab)
    held, walls = (m.to(fields.device) for m in masks)
    physics = params.double()
    squares = partial(residual_squares, family_name, params=physics, grid=grid, slab=slab)
    scale = 1.0 / squares(trivial.double()).clamp_min(1e-20)  # (b,): relative to the trivial's

    def objective(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():  # also under a caller's no_grad
            x = x.detach().requires_grad_(True)
            r = squares(x) * scale  # (b,): the samples are independent
            (g,) = torch.autograd.grad(r.sum(), x)
        return r.detach(), g.masked_fill(held, 0.0)

    def seen(k: int, x: torch.Tensor) -> None:
        if observe is not None:
            observe(k, x.to(fields.dtype))

    start = with_walls_set(fam, fields.double(), physics, grid, slab, walls)
    x, values = lbfgs(objective, start, steps, slab.domain, seen)
    return Refined(x.to(fields.dtype), values)


def direct_limit(shape: tuple[int, ...], dim: int) -> int:
    """The most free values :func:`least_squares` takes on the grid ``shape`` ``(T, X, Y, Z)``
    of ``dim`` spatial axes (:data:`DIRECT_LIMITS`)."""
    return DIRECT_LIMITS[dim + (shape[0] > 1)]


def direct(family_name: str, predicted: torch.Tensor, shape: tuple[int, ...], dim: int) -> bool:
    """Whether a sample of ``family_name`` on the global grid ``shape`` ``(T, X, Y, Z)``, its
    channels ``predicted`` ``(C_f,)``, is refined by :func:`least_squares`: at most
    :func:`direct_limit` free values."""
    return len(free_values(family_name, predicted, shape, dim)) <= direct_limit(shape, dim)


def free_values(
    family_name: str, predicted: torch.Tensor, shape: tuple[int, ...], dim: int
) -> torch.Tensor:
    """The flat indices ``(F,)`` into a sample's values ``(C_f, T, X, Y, Z)`` on the grid
    ``shape`` that a refinement moves: those :func:`held_mask` does not hold."""
    fam = get_family(family_name)
    grid = fam.grid(dim, shape[1], shape[0])
    probe = torch.empty((1, len(predicted), *shape), device="meta")
    held = held_mask(fam, probe, predicted.cpu(), grid, Slab.whole(shape))[0]
    return (~held).flatten().nonzero().squeeze(1)


@functools.cache
def reach(family_name: str, dim: int, predicted: tuple[bool, ...]) -> tuple[int, ...]:
    """How far, in grid points along each axis ``(t, x, y, z)`` (t's 0 for a steady family), a
    residual point of ``family_name`` reaches into the free values (through the walls'
    completion and the time rule too): read off the Jacobian at random fields on a grid of 9
    points per axis, 9 snapshots, where every coupling shows (a :data:`MASK` all inside: the
    residual is posed everywhere)."""
    fam, mask = get_family(family_name), torch.tensor(predicted)
    grid = fam.grid(dim, 9, 1 if fam.steady else 9)
    shape = grid.space_time
    free = free_values(family_name, mask, shape, dim)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((1, len(predicted), *shape), generator=generator, dtype=torch.float64)
    if MASK in (names := fam.channel_names(dim)):
        x[:, names.index(MASK)] = 1.0
    params = torch.tensor(np.array([fam.Params().vector()]), dtype=torch.float64)

    def residual(v: torch.Tensor) -> torch.Tensor:
        values = x.flatten().index_put((free,), v).reshape(x.shape)
        return residual_points(family_name, values, params, grid)[0].flatten()

    jacobian = torch.autograd.functional.jacobian(residual, x.flatten()[free])
    rows, cols = jacobian.nonzero().unbind(1)
    out = residual_points(family_name, x, params, grid)[0].shape[2:]
    centres = _positions(rows, out) + torch.tensor(_offset(shape, out))
    points = _positions(free[cols], shape)
    return tuple(int((centres[:, a] - points[:, a]).abs().max()) for a in range(1 + dim))


def _offset(space: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """Where a residual's points start on the grid ``space`` ``(T, X, Y, Z)``, per axis: the
    interior in space, in time interval ``k`` at snapshot ``k``."""
    return tuple((n - m) // 2 for n, m in zip(space, out, strict=True))


def _positions(flat: torch.Tensor, space: tuple[int, ...]) -> torch.Tensor:
    """The grid points ``(n, 4)`` ``(t, x, y, z)`` of flat indices into ``(..., *space)``
    (the leading axes, channels or residual components, dropped)."""
    return torch.stack(torch.unravel_index(flat % math.prod(space), space), dim=1)


def sparse_jacobian(
    residual: Callable[[torch.Tensor], torch.Tensor],
    v: torch.Tensor,
    free: torch.Tensor,
    space: tuple[int, ...],
    out: tuple[int, ...],
    ranges: tuple[int, ...],
):
    """The Jacobian, a SciPy CSR array ``(R·K·X'·Y'·Z', F)``, of the flat ``residual``
    (``out`` = ``(R, K, X', Y', Z')``) in the free values ``v`` (flat indices ``free`` into
    ``(C, *space)``, ``space`` = ``(T, X, Y, Z)``), from one vector-Jacobian product per colour
    and component: residual points ``ranges`` (per axis ``(t, x, ...)``, :func:`reach`) apart
    share no value, so each value's entry of a colour's product is the derivative of the one
    point of that colour within its range (Curtis–Powell–Reid compression, by rows)."""
    import scipy.sparse

    period = [2 * r + 1 for r in ranges] + [1] * (4 - len(ranges))
    offset, n = _offset(space, out[1:]), math.prod(out[1:])
    values_at = _positions(free, space)  # (F, 4)
    # per axis and colour, each value's one point of that colour within its range, as its
    # term of the point's flat index; NOWHERE (the sum stays negative) where it lies outside
    terms = []
    for a, (p, o, m) in enumerate(zip(period, offset, out[1:], strict=True)):
        c = values_at[:, a]
        at = c + (torch.arange(p)[:, None] - c + p // 2) % p - p // 2 - o  # (p, F)
        terms.append(torch.where((at >= 0) & (at < m), at * math.prod(out[2 + a :]), NOWHERE))
    _, pullback = torch.func.vjp(residual, v)
    rows, cols, data = [], [], []
    for colour in itertools.product(*[range(p) for p in period]):
        point = sum(t[m] for t, m in zip(terms, colour, strict=True))  # (F,)
        # the residual points of this colour: every period-th along each axis
        starts = [(m - o) % p for m, o, p in zip(colour, offset, period, strict=True)]
        if any(a >= n for a, n in zip(starts, out[1:], strict=True)):
            continue  # no residual point of this colour (an axis shorter than its period)
        mine = tuple(slice(a, None, p) for a, p in zip(starts, period, strict=True))
        for component in range(out[0]):
            seed = torch.zeros(out, dtype=v.dtype)
            seed[(component, *mine)] = 1.0
            (g,) = pullback(seed.flatten())
            keep = ((point >= 0) & (g != 0)).nonzero().squeeze(1)
            rows.append(component * n + point[keep])
            cols.append(keep)
            data.append(g[keep])
    return scipy.sparse.csr_array(
        (torch.cat(data).numpy(), (torch.cat(rows).numpy(), torch.cat(cols).numpy())),
        shape=(out[0] * n, len(free)),
    )


#: :func:`time_diagonal` is used where its Kronecker form reproduces a vector-Jacobian product
#: to this relative accuracy, and its eigenvectors in time are conditioned better than
#: :data:`EIGENVECTORS`.
KRONECKER, EIGENVECTORS = 1e-9, 1e8


def time_diagonal(
    residual: Callable[[torch.Tensor], torch.Tensor],
    v: torch.Tensor,
    free: torch.Tensor,
    space: tuple[int, ...],
    out: tuple[int, ...],
    ranges: tuple[int, ...],
) -> Callable[[np.ndarray], np.ndarray] | None:
    """``rhs ↦ J⁻¹ rhs`` for the Jacobian ``J`` of a time series' residual that is linear in
    its values and the same at every time (heat, advection–diffusion): None where it is not,
    or where the values are not the same points at every snapshot after the first.

    :func:`~pdeladder.trainer.losses.equation.step_residual` poses interval ``k`` as
    ``Σ_s Wd[k, s] u_s / Δt - F(Σ_s Wv[k, s] u_s)`` (the time rule's weights); for an ``F``
    linear and autonomous ``J = Wd ⊗ E + Wv ⊗ A`` over the snapshots ``s ≥ 1``, ``E`` and
    ``A`` (``m × m``, ``m`` values a snapshot) read off the Jacobian's blocks ``(k, s)`` and
    ``(k, s + 1)`` of one inner interval (:func:`sparse_jacobian` over those two snapshots:
    its colours in space only). ``B = Wv⁻¹ Wd = V Λ V⁻¹`` (``K × K``) then splits ``J δ = r``
    into one sparse system ``(λ_j E + A) ζ_j = (V⁻¹ Wv⁻¹ r)_j`` per snapshot, ``δ = V ζ``
    (diagonalisation in time): K factorisations of a snapshot's size in place of one of the
    whole series'. The form is checked, not assumed: ``Jᵀ w`` for a random ``w`` by one
    vector-Jacobian product, to :data:`KRONECKER`.

    Args: as :func:`sparse_jacobian`'s; ``space`` ``(T, X, Y, Z)``, ``out`` ``(R, K, X', Y',
    Z')`` with ``K = T - 1`` intervals.
    """
    (t, *_), (rows, k, *points) = space, out
    n, m = math.prod(space[1:]), len(free) // max(t - 1, 1)
    if k != t - 1 or k < 3 or m * (t - 1) != len(free) or rows * math.prod(points) != m:
        return None
    at = free // (t * n) * n + free % n  # each value's (channel, point) key
    snapshot = free // n % t
    order = torch.argsort(snapshot * (int(at.max()) + 1) + at)
    columns = order.reshape(k, m)  # (K, m): the indices into v of snapshot s + 1's values
    if (snapshot[columns[:, 0]] != torch.arange(1, t)).any() or (
        at[columns] != at[columns[:1]]
    ).any():
        return None
    weights = interval_weights(t, 0, t, (0, k)).numpy()
    wd, wv = weights[:k, 1:], weights[k:, 1:]  # (K, K): the snapshots after the first
    i = k // 2
    s1, s2 = i, i + 1  # unknowns i and i + 1: snapshots i + 1 and i + 2, both in interval i's
    key = at[columns[0]]  # (m,): the values' (channel, point), the same at every snapshot
    on_two = key // n * 2 * n + key % n  # their flat indices into (C, 2, X, Y, Z) at time 0
    sub, pick = torch.sort(torch.cat([on_two, on_two + n]))
    both = torch.cat([columns[s1], columns[s2]])[pick]

    def block_residual(w: torch.Tensor) -> torch.Tensor:
        r = residual(v.index_put((both,), w)).reshape(rows, k, -1)
        return r[:, i].flatten()

    block = sparse_jacobian(
        block_residual, v[both], sub, (2, *space[1:]), (rows, 1, *points), (1, *ranges[1:])
    ).tocsc()
    first = (sub // n % 2 == 0).numpy()  # the sorted columns of snapshot s1, in key order
    g1, g2 = block[:, np.flatnonzero(first)], block[:, np.flatnonzero(~first)]
    det = wd[i, s1] * wv[i, s2] - wd[i, s2] * wv[i, s1]
    e = (wv[i, s2] * g1 - wv[i, s1] * g2) / det
    a = (wd[i, s1] * g2 - wd[i, s2] * g1) / det
    rows_of = torch.arange(rows * k * math.prod(points)).reshape(rows, k, -1)
    rows_of = rows_of.transpose(0, 1).reshape(k, m).numpy()  # (K, m): interval k's rows
    keyed = columns.numpy()

    def transposed(w: np.ndarray) -> np.ndarray:  # Jᵀ w from the Kronecker form
        by_interval = w[rows_of]  # (K, m)
        y = wd.T @ (e.T @ by_interval.T).T + wv.T @ (a.T @ by_interval.T).T
        out_w = np.empty(len(v))
        out_w[keyed] = y
        return out_w

    w = torch.randn(rows_of.size, dtype=v.dtype, generator=torch.Generator().manual_seed(0))
    _, pullback = torch.func.vjp(residual, v)
    (jw,) = pullback(w)
    jw = jw.detach().numpy()
    if np.abs(transposed(w.numpy()) - jw).max() > KRONECKER * max(np.abs(jw).max(), 1e-300):
        return None
    lam, vec = np.linalg.eig(np.linalg.solve(wv, wd))
    if np.linalg.cond(vec) > EIGENVECTORS:
        return None
    to_eigen = np.linalg.solve(vec, np.linalg.inv(wv))  # V⁻¹ Wv⁻¹
    # LAPACK lists a complex pair's eigenvalues and eigenvectors conjugate and adjacent, the
    # positive imaginary part first: for a real right-hand side the second one's solution is
    # the first one's conjugate, and a real eigenvalue's system is real
    paired = [j > 0 and lam[j].imag < 0 and lam[j] == lam[j - 1].conj() for j in range(k)]
    factors = [
        None if paired[j] else lu(lam[j].real * e + a if lam[j].imag == 0 else lam[j] * e + a)
        for j in range(k)
    ]

    def solve(rhs: np.ndarray) -> np.ndarray:
        z = to_eigen @ rhs[rows_of]  # (K, m)
        zeta = np.empty_like(z)
        for j in range(k):
            if paired[j]:
                zeta[j] = zeta[j - 1].conj()
            elif lam[j].imag == 0 and np.iscomplexobj(z):  # a real system, its parts apart
                zeta[j] = factors[j].solve(z[j].real) + 1j * factors[j].solve(z[j].imag)
            else:
                zeta[j] = factors[j].solve(z[j])
        delta = np.empty(len(v))
        delta[keyed] = (vec @ zeta).real
        return delta

    return solve


def lu(matrix):
    """SciPy's sparse LU of ``matrix``, ordered by ``A + Aᵀ`` (a residual's Jacobian is
    structurally near-symmetric)."""
    import scipy.sparse.linalg

    return scipy.sparse.linalg.splu(matrix.tocsc(), permc_spec="MMD_AT_PLUS_A")


def factorise(jacobian) -> Callable[[np.ndarray], np.ndarray]:
    """``rhs ↦`` the least-squares solution of ``jacobian δ = rhs``, from one sparse LU: of
    the Jacobian where it is square and regular, else of its normal equations, damped by
    :data:`DAMPING` of their largest diagonal entry where they are singular (free values the
    residual does not see, as the points of a masked family whose every stencil reaches
    outside its domain: their step is 0, the others' changes by that fraction)."""
    import scipy.sparse

    if jacobian.shape[0] == jacobian.shape[1]:
        try:
            return lu(jacobian).solve
        except RuntimeError:  # singular
            pass
    normal = jacobian.T @ jacobian
    try:
        factors = lu(normal)
    except RuntimeError:  # singular
        damping = DAMPING * max(float(np.abs(normal.diagonal()).max()), 1e-300)
        factors = lu(normal + damping * scipy.sparse.identity(normal.shape[0], format="csc"))
    return lambda rhs: factors.solve(jacobian.T @ rhs)


def least_squares(
    family_name: str,
    fields: torch.Tensor,
    trivial: torch.Tensor,
    params: torch.Tensor,
    predicted: torch.Tensor,
    grid,
    iterations: int,
    observe: Callable[[int, torch.Tensor], None] | None = None,
    *,
    slab: Slab | None = None,
) -> Refined:
    """``fields`` moved to the minimiser of ``family_name``'s residual over their free values
    by Gauss–Newton: each iteration a sparse direct solve of ``J δ = -R`` (``J`` the Jacobian
    of the residual ``R`` in the free values, :func:`sparse_jacobian`, all snapshots of a time
    series at once; float64; in the least-squares sense, :func:`factorise`; a series' residual
    linear and the same at every time by one system per snapshot, :func:`time_diagonal`), the
    step halved until it lowers the residual; its factors serve the next steps while each
    lowers the squared residual :data:`CHORD`-fold.

    The route for what L-BFGS cannot reach: the squared residual's Hessian is conditioned as
    ``h⁻⁴`` in space, and L-BFGS stalls far from its minimiser on fine grids ("The residual's
    floor", benchmarks/RESULTS.md), while one iteration minimises a residual linear in the
    values (heat, advection–diffusion, Darcy's pressure) exactly, and the iteration stops
    there; a nonlinear one (Burgers) converges as Newton's method does. Each sample alone, of at most
    :func:`direct_limit` free values, else ValueError; on the x ``slab`` this rank of
    ``slab.domain`` holds, every rank solves the gathered samples alike and keeps its rows. On
    the host (SciPy's sparse LU), whatever the fields' device.

    Args: as :func:`refine`'s (``iterations``, at most, in place of ``steps``);
        ``observe(iteration, fields)`` after each iteration, from 0, for every sample at once.

    Returns:
        :class:`Refined`: the held values (:func:`held_mask`) as given, wall points set; the
        relative residual at the start and after each iteration (an iteration that no longer
        lowers it ends the sample's: its value repeats).
    """
    if slab is not None and slab.domain is not None and slab.is_split(1):
        lo, n = slab.lo[1], slab.hi[1] - slab.lo[1]

        def mine(x: torch.Tensor) -> torch.Tensor:
            return x.narrow(-3, lo, n)

        seen = None if observe is None else (lambda k, x: observe(k, mine(x)))
        whole = [gather_x(t, slab) for t in (fields, trivial)]
        done = least_squares(family_name, *whole, params, predicted, grid, iterations, seen)
        return Refined(mine(done.fields).contiguous(), done.residual)
    if (device := fields.device).type != "cpu":  # the sparse solve is SciPy's, on the host
        seen = None if observe is None else (lambda k, x: observe(k, x.to(device)))
        done = least_squares(family_name, fields.cpu(), trivial.cpu(), params.cpu(), predicted,
                             grid, iterations, seen)  # fmt: skip
        return Refined(done.fields.to(device), done.residual.to(device))
    fam = get_family(family_name)
    whole = Slab.whole(fields.shape[2:])
    held, walls = held_mask(fam, fields, predicted.cpu(), grid, whole)
    free = (~held).flatten().nonzero().squeeze(1)
    if len(free) > (limit := direct_limit(fields.shape[2:], grid.dim)):
        raise ValueError(f"samples of at most {limit} free values, not {len(free)}")
    ranges = reach(family_name, grid.dim, tuple(predicted.cpu().tolist()))
    physics = params.double()
    x = with_walls_set(fam, fields.double(), physics, grid, whole, walls)
    scale = 1.0 / residual_squares(family_name, trivial.double(), physics, grid).clamp_min(1e-20)
    res, count = residual_points(family_name, x[:1], physics[:1], grid)
    out_shape = (res.shape[1], *res.shape[2:])  # (R, K, X', Y', Z')
    out, curves = [], []
    for i in range(len(x)):
        base, p = x[i].flatten(), physics[i : i + 1]

        def residual(v: torch.Tensor, base=base, p=p) -> torch.Tensor:
            values = base.index_put((free,), v).reshape(1, *x.shape[1:])
            return residual_points(family_name, values, p, grid)[0].flatten()

        v = base[free]
        r = residual(v)
        value = r.square().sum()
        curve, iterates = [value], [v]
        solve = None  # the last Jacobian's factors, reused while they contract fast
        linear = grid.snapshots > 1  # a series' Jacobian tried in time-diagonal form first
        for _ in range(iterations):
            if solve is not None:  # a chord step: Newton's with the last Jacobian
                step = torch.from_numpy(solve(-r.detach().numpy()))
                r_next = residual(v + step)
                if not r_next.square().sum() < CHORD * value:
                    solve = None
            if solve is None:
                args = (residual, v, free, x.shape[2:], out_shape, ranges)
                solve = time_diagonal(*args) if linear else None
                linear = solve is not None  # else this sample's Jacobian is assembled whole
                solve = solve or factorise(sparse_jacobian(*args))
                step = torch.from_numpy(solve(-r.detach().numpy()))
                for _ in range(HALVINGS):  # Newton's step, halved until it lowers the residual
                    r_next = residual(v + step)  # (a nonlinear one's, far from its minimiser)
                    if r_next.square().sum() < value:
                        break
                    step = 0.5 * step
                else:  # converged to rounding
                    break
            v, r, value = v + step, r_next, r_next.square().sum()
            curve.append(value)
            if observe is not None:
                iterates.append(v)
            if value <= ROUNDING * curve[0]:  # a linear residual's one iteration
                break
        curve += [value] * (iterations + 1 - len(curve))
        iterates = iterates + [v] * (iterations + 1 - len(iterates)) if observe else [v]
        out.append([base.index_put((free,), u).reshape(x.shape[1:]) for u in iterates])
        curves.append(torch.stack(curve) / count * scale[i])
    for k in range(iterations + 1 if observe is not None else 0):
        observe(k, torch.stack([o[k] for o in out]).to(fields.dtype))
    return Refined(torch.stack([o[-1] for o in out]).to(fields.dtype), torch.stack(curves))


def lbfgs(
    objective: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    x: torch.Tensor,
    steps: int,
    domain: DomainGroup | None,
    observe: Callable[[int, torch.Tensor], None],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` iterations of L-BFGS from ``x`` ``(b, ...)``, one independent problem per
    sample (two-loop recursion, backtracking Armijo line search, every scalar per sample).

    ``objective(x)`` returns the (replicated) values ``(b,)`` and the gradient on this rank's
    part of ``x``; inner products are summed over ``domain``. Returns the last iterate and the
    objective at each iterate ``(b, steps + 1)``. A sample whose step no longer lowers its
    objective (converged to rounding) stays where it is.
    """

    def dot(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        d = torch.linalg.vecdot(a.flatten(1), c.flatten(1))  # (b,), no product held
        if domain is not None and domain.size > 1:
            dist.all_reduce(d, group=domain.group)
        return d

    def per(v: torch.Tensor) -> torch.Tensor:  # (b,) -> (b, 1, ...) against x
        return v.reshape(-1, *[1] * (x.ndim - 1))

    f, g = objective(x)
    values = [f]
    observe(0, x)
    pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    active = torch.ones_like(f, dtype=torch.bool)  # samples still moving
    gamma = torch.zeros_like(f)  # s.y / y.y of each sample's last pair; 0: none yet
    for k in range(1, steps + 1):
        gg = dot(g, g)
        active &= gg > 0
        first = f.clamp_max(1.0) / gg.clamp_min(1e-300).sqrt()  # a first step of f's size
        q, alphas = -g, []
        for s, y, rho in reversed(pairs):
            a = rho * dot(s, q)
            alphas.append(a)
            q = q - per(a) * y
        q = q * per(torch.where(gamma > 0, gamma, first))  # H0 = gamma I, from the last pair
        for (s, y, rho), a in zip(pairs, reversed(alphas), strict=True):
            q = q + per(a - rho * dot(y, q)) * s
        slope = dot(g, q)
        uphill = slope >= 0  # not a descent direction: steepest descent this once
        q = torch.where(per(uphill), -per(first) * g, q)
        slope = torch.where(uphill, -first * gg, slope)
        t = torch.ones_like(f)
        accepted = ~active
        nf, ng = f, g
        for _ in range(HALVINGS):
            tf, tg = objective(x + per(t) * q)
            better = ~accepted & (tf <= f + ARMIJO * t * slope)
            nf, ng = torch.where(better, tf, nf), torch.where(per(better), tg, ng)
            accepted |= better
            if bool(accepted.all()):
                break
            t = torch.where(accepted, t, 0.5 * t)
        moved = active & accepted
        active = moved
        s = per(torch.where(moved, t, 0.0)) * q
        y = ng - g
        sy = dot(s, y)
        keep = moved & (sy > 1e-12 * (dot(y, y) * dot(s, s)).sqrt())
        # a sample's pair enters its memory only where its curvature is positive: elsewhere
        # the pair is zero, which the two-loop recursion passes over (rho 0)
        s, y = per(keep) * s, per(keep) * y
        rho = torch.where(keep, 1.0 / torch.where(keep, sy, 1.0), 0.0)
        gamma = torch.where(keep, sy / dot(y, y).clamp_min(1e-300), gamma)
        pairs = [*pairs[-(HISTORY - 1) :], (s, y, rho)]
        x = x + s
        f, g = torch.where(moved, nf, f), torch.where(per(moved), ng, g)
        values.append(f)
        observe(k, x)
        if not bool(active.any()):
            break
    values += [f] * (steps + 1 - len(values))
    return x, torch.stack(values, dim=1)


def refine_batch(
    pred: torch.Tensor,
    given: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    steps: int,
    *,
    slab: Slab | None = None,
    observe: Callable[[str, torch.Tensor, int, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The physical prediction ``pred`` ``(B, C_slots, T, X, Y, Z)`` of a batch whose physical
    fields are ``given`` (the same shape) with the given values put in (input channels, the
    initial state) and every family's rows refined by ``steps`` iterations (on the x ``slab``
    of the global grid, split over ``slab.domain``): of :func:`least_squares` where the samples
    are steady and small enough (:func:`direct`; on slabs, every rank solves the gathered
    sample and keeps its rows), of :func:`refine`'s L-BFGS elsewhere.

    Returns:
        (refined prediction, ``{family: relative residual per iteration (b, steps + 1)}``).
        ``observe(family, rows (b,), iteration, fields (b, C_f, T, X, Y, Z))``: see
        :func:`refine`.
    """
    grid = batch["grid"]
    slab = slab or Slab.whole(pred.shape[2:])
    if slab.lo[0] > 0:
        raise ValueError("refinement takes slabs of the whole time axis")
    out, curves = pred.clone(), {}
    for name, rows, fields, trivial, params in family_views(pred, given, batch, layout, slab):
        slots = torch.tensor(layout.slot_indices(get_family(name), grid.dim), device=pred.device)
        if grid.snapshots > 1:
            fields = torch.cat([trivial[:, :, :1], fields[:, :, 1:]], dim=2)  # the given u(0)
        predicted = batch["predicted"][rows[0], slots].bool()
        seen = None if observe is None else (lambda k, x, n=name, r=rows: observe(n, r, k, x))
        how = least_squares if direct(name, predicted, slab.shape, grid.dim) else refine
        done = how(name, fields, trivial, params, predicted, grid, steps,
                   slab=slab, observe=seen)  # fmt: skip
        out[rows[:, None], slots] = done.fields
        curves[name] = done.residual
    return out, curves
