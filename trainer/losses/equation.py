"""Equation loss: the family's strong-form PDE residual (from ``solvers/``) on the prediction.

The residual must determine the solution, not only vanish on it. Given the initial state, the
trajectory that minimises the families' centred residual on the prediction as it is lies
44-102 % (nRMSE) from the solver's data on 17² heat, Burgers and advection–diffusion, 3-16 %
with the two changes below (benchmarks/RESULTS.md, "The residual that determines the
solution"), and 0.5-6 % at 33² with the fourth-order time rule ("The residual's floor"):

- **one equation per snapshot interval**: :func:`step_residual`, ``∂u/∂t = F(u)`` at the
  midpoint of the interval from snapshot ``k`` to ``k + 1``, ``∂u/∂t`` and ``u`` there from
  the polynomial through the snapshots nearest it (:func:`interval_weights`: fourth order in
  the snapshot spacing; two snapshots give the implicit midpoint rule), ``F`` the family's own
  centred residual. The centred difference ``(u_{k+1} - u_{k-1}) / 2Δt = F(u_k)`` that the
  families' ``residual`` takes gives one equation fewer than unknown snapshots: it leaves the
  odd snapshots free (leapfrog's computational mode). The midpoint rule's second order left
  its minimiser's time error above the solver data's own ("The residual's floor");
- **the walls**: the residual sees interior points only, so the prediction enters it completed
  by every channel's wall condition (:func:`walled`): zero walls set to 0 (its snapshot 0, the
  given initial state, as it is), no-flux walls mirrored and posed as equations too.

The residual is made dimensionless by that of the *trivial* prediction, the initial state held
constant in time (zero output for steady problems, where the coefficients alone drive the
residual): ``r = ‖R(u_pred)‖² / ‖R(u_trivial)‖²`` per sample, mean squares over the residual's
points. It is 1 for a model that learned nothing about the dynamics and 0 for an exact solution;
solver data sit at the level of the discretisation error.

The loss takes ``min(r, 1)`` per sample: a prediction whose residual exceeds the trivial one's
contributes 1 and no gradient. Without the cap the term rewards moving *toward* the trivial
prediction wherever the stencil amplifies small errors: a Darcy pressure 27 % off its solution in
rough coefficients has ``r ≈ 26`` (the solution itself 0.18 on 17²), and the quick-start's
residual-weighted stage took its Darcy predictions to ``r ≈ 1``, the zero field's level, and
worse than the mean field (benchmarks/RESULTS.md, "What else holds it back"). Logged values stay
``r``.

Split samples (DESIGN.md, "Domain parallelism"): each rank of a domain group holds the
``slab`` of the global grid, which carries the group (``slab.domain``). It extends its fields
by halos as wide as the residual's stencils reach (along time and ``x``,
:func:`~pdeladder.trainer.distributed.halo.extended`), evaluates the family's unchanged residual
there, which gives exactly the residual points it owns, and the sums of squares are all-reduced
(:func:`sum_replicated`) before the division by the global number of points: every rank gets
the unsharded value, and its backward the gradient with respect to its own points.

Every tensor here is in the model's axis order ``(B, C, T, X, Y, Z)``, the residual's too: the
batch's fields come in through :meth:`~pdeladder.trainer.processor.DataProcessor.fields`.
"""

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import torch

from pdeladder.dataset.slots import SlotLayout
from pdeladder.errors import UserInputError
from pdeladder.slabs import Slab
from pdeladder.solvers import stencils
from pdeladder.solvers.family import Family
from pdeladder.solvers.registry import get_family
from pdeladder.trainer.distributed.collectives import sum_replicated
from pdeladder.trainer.distributed.halo import extended

#: Tensor dimension of each split axis in the residual's ``(b, C, T, X, Y, Z)`` order.
FIELD_DIMS = {"t": 2, "x": 3}


#: Snapshots in an inner interval's equation (:func:`interval_weights`): the interpolating
#: polynomial through them gives the time derivative and the state at the interval's midpoint,
#: to order ``STENCIL`` in ``Δt``.
STENCIL = 4


@functools.cache
def interval_weights(snapshots: int, first: int, count: int, intervals: tuple[int, int]):
    """The time rule of :func:`step_residual` for the global ``intervals`` ``[k0, k1)`` of a
    series of ``snapshots``, on fields whose time axis holds the ``count`` global snapshots
    from ``first``: float64 ``(2 K, count)``, rows ``0 .. K - 1`` the derivative (times ``Δt``)
    and rows ``K .. 2 K - 1`` the value of the interpolating polynomial at each interval's
    midpoint ``t_k + Δt / 2``.

    Interval ``k`` (from snapshot ``k`` to ``k + 1``) takes the ``STENCIL`` snapshots centred
    on it, ``k - 1 .. k + 2``, where the series holds them (the symmetric rule is fourth order);
    at the series' ends the ``STENCIL + 1`` snapshots nearest it (a one-sided rule of four
    would be third order); a series of fewer snapshots all of them (two: the implicit
    midpoint rule ``u_{k+1} - u_k`` and ``(u_k + u_{k+1}) / 2``).
    """
    k0, k1 = intervals
    weights = np.zeros((2, k1 - k0, count))
    for row, k in enumerate(range(k0, k1)):
        s = k - STENCIL // 2 + 1
        q = STENCIL if 0 <= s and s + STENCIL <= snapshots else min(STENCIL + 1, snapshots)
        s = min(max(s, 0), snapshots - q)
        if s < first or s + q > first + count:
            raise ValueError(f"interval {k} needs snapshots {s}..{s + q - 1}, not all held")
        nodes = np.arange(s, s + q) - (k + 0.5)  # offsets from the midpoint, in Δt
        vandermonde = np.vander(nodes, increasing=True).T  # row i: nodes ** i
        weights[:, row, s - first : s + q - first] = np.linalg.solve(
            vandermonde, np.eye(q)[[1, 0]].T
        ).T
    return torch.as_tensor(weights.reshape(2 * (k1 - k0), count))


def step_residual(
    fam: Family,
    fields: torch.Tensor,
    params: torch.Tensor,
    grid,
    *,
    first: int = 0,
    intervals: tuple[int, int] | None = None,
) -> torch.Tensor:
    """``fam``'s residual of one equation per snapshot interval of ``fields``
    ``(b, C_f, T, X, Y, Z)``: ``(b, R, K, X', Y', Z')``, row ``k`` the interval from snapshot
    ``k`` to ``k + 1`` (a steady family's residual as it is).

    At each interval's midpoint ``∂u/∂t - F(u)``, with ``∂u/∂t`` and ``u`` there from the
    :func:`interval_weights` rule (fourth order in the snapshot spacing ``Δt`` of ``grid``, the
    global grid). ``F`` is the family's own centred residual, evaluated on one series of step
    ``Δt / 2`` that holds the midpoint states ``m_k`` at its odd entries and, between them,
    entries ``p_k`` whose differences ``p_{k+1} - p_k = Δt ∂u/∂t(m_k)`` make its centred
    difference at ``m_k`` the rule's derivative (``p`` is a running sum; only its differences
    enter the residual at the odd entries).

    ``first``: the global snapshot the time axis of ``fields`` starts at; ``intervals``: the
    global intervals ``[k0, k1)`` to pose (default: all ``T - 1`` of the series).
    """
    if grid.snapshots == 1:
        return fam.residual(fields, params, grid)
    intervals = intervals or (0, grid.snapshots - 1)
    b, c, t, *space = fields.shape
    weights = interval_weights(grid.snapshots, first, t, intervals)
    k = intervals[1] - intervals[0]
    rows = fields.transpose(0, 2).reshape(t, -1)  # one GEMM over every (c, b, x) column
    rule = (weights.to(fields.device, fields.dtype) @ rows).reshape(2, k, c, b, *space)
    step, state = rule.permute(0, 3, 2, 1, 4, 5, 6).unbind(0)  # Δt ∂u/∂t, u (b, C, K, ...)
    between = state[:, :, :1] - 0.5 * step[:, :, :1] + torch.cumsum(step, dim=2)
    between = torch.cat([state[:, :, :1] - 0.5 * step[:, :, :1], between], dim=2)  # K + 1
    series = torch.stack([between[:, :, :-1], state], dim=3).flatten(2, 3)  # p_0, m_0, p_1, ..
    series = torch.cat([series, between[:, :, -1:]], dim=2)  # ..., m_{K-1}, p_K
    half = dataclasses.replace(grid, snapshots=series.shape[2], t_end=grid.dt * k)
    return fam.residual(series, params, half)[:, :, ::2]


@functools.cache
def residual_shapes(
    family_name: str, shape: tuple[int, ...], n_params: int, grid
) -> tuple[torch.Size, torch.Size]:
    """Shapes of fields of ``shape`` ``(1, C_f, T, X, Y, Z)`` completed by their walls
    (:func:`walled`) and of the family's :func:`step_residual` on them ``(1, R, T', X', Y', Z')``
    with ``n_params`` parameters, found once per shape on the meta device (nothing is computed
    or allocated)."""
    fam = get_family(family_name)
    params = torch.empty((1, n_params), device="meta")
    probe = walled(fam, torch.empty(shape, device="meta"), params, grid, Slab.whole(shape[2:]))
    return probe.shape, step_residual(fam, probe, params, grid).shape


def _halos(
    fam: Family, fields: torch.Tensor, params: torch.Tensor, grid, slab: Slab
) -> tuple[dict[str, tuple[int, int, int]], int]:
    """The halos the residual's stencils need on ``slab`` (``{axis: (dim, before, after)}``,
    along the axes its ``domain`` splits) and the number of residual points per sample on the
    global grid.

    In space the residual is centred (as ``solvers/stencils.py``'s are): it drops ``r`` points
    at each end of an axis that its stencils reach ``r`` points along, of the fields completed
    by their walls (a no-flux wall's mirrored plane among them); the residual's shape on the
    global grid tells ``r``. In time (:func:`step_residual`) an interval's rule reaches up to
    ``STENCIL // 2 + 1`` snapshots before and after it (:func:`interval_weights`).
    """
    shape = (1, fields.shape[1], *slab.shape)
    glob, out = residual_shapes(fam.name, shape, params.shape[1], grid)
    reach = {"t": (STENCIL // 2 + 1,) * 2 if grid.snapshots > 1 else (0, 0)}
    drop = glob[FIELD_DIMS["x"]] - out[FIELD_DIMS["x"]]
    reach["x"] = (drop // 2, drop // 2)
    halos, domain = {}, slab.domain
    for axis, dim in FIELD_DIMS.items():
        a = 0 if axis == "t" else 1
        parts = (domain.tiling.t, domain.tiling.x)[a] if domain is not None else 1
        if parts > 1 and max(reach[axis]):
            parts_of = (domain.tiling.slab(slab.shape, i) for i in range(domain.size))
            fewest = min(part.hi[a] - part.lo[a] for part in parts_of)  # grid points, no padding
            if fewest < max(reach[axis]):
                raise UserInputError(
                    f"{fam.name}: its residual reaches {max(reach[axis])} points along "
                    f"{axis}, more than the smallest of {parts} parts of {slab.shape[a]} points "
                    f"holds ({fewest})"
                )
            halos[axis] = (dim, *reach[axis])
    return halos, math.prod(out[1:])


def relative_residual(
    family_name: str,
    fields: torch.Tensor,
    reference: torch.Tensor,
    params: torch.Tensor,
    grid,
    *,
    slab: Slab | None = None,
) -> torch.Tensor:
    """``‖R(fields)‖² / ‖R(reference)‖²`` per sample (the same on every rank of
    ``slab.domain``), ``R`` the :func:`step_residual` of the fields completed by their walls
    (:func:`walled`).

    Args:
        fields, reference: ``(b, C_f, T, X, Y, Z)`` physical fields of one family (all its
            channels, inputs included), on the box ``slab`` of the global grid, held by a rank
            of its ``domain`` (default: the whole grid, on one rank).
        params: ``(b, P_f)`` physical parameters.

    Returns:
        ``(b,)``.
    """
    sums = residual_squares(family_name, torch.cat([fields, reference]), params.repeat(2, 1),
                            grid, slab=slab)  # fmt: skip
    return sums[: len(fields)] / sums[len(fields) :].clamp_min(1e-20)


def residual_squares(
    family_name: str,
    fields: torch.Tensor,
    params: torch.Tensor,
    grid,
    *,
    slab: Slab | None = None,
) -> torch.Tensor:
    """Mean square of :func:`step_residual` over the global grid's residual points, per sample
    ``(b,)`` (the same on every rank of ``slab.domain``), of the fields ``(b, C_f, T, X, Y, Z)``
    (on ``slab``, as :func:`relative_residual`'s) completed by their walls."""
    slab = slab or Slab.whole(fields.shape[2:])
    res, count = residual_points(family_name, fields, params, grid, slab=slab)
    return sum_replicated(res.square().sum(tuple(range(1, res.ndim))), slab.domain) / count


def residual_points(
    family_name: str,
    fields: torch.Tensor,
    params: torch.Tensor,
    grid,
    *,
    slab: Slab | None = None,
) -> tuple[torch.Tensor, int]:
    """The :func:`step_residual` ``(b, R, K, X', Y', Z')`` that this rank owns of the fields
    ``(b, C_f, T, X, Y, Z)`` (on ``slab``, as :func:`relative_residual`'s) completed by their
    walls, and the number of residual points per sample on the global grid."""
    fam = get_family(family_name)
    slab = slab or Slab.whole(fields.shape[2:])
    halos, count = _halos(fam, fields, params, grid, slab)
    before = halos["t"][1] if "t" in halos and slab.lo[0] > 0 else 0  # t halo got, if split
    res = step_residual(
        fam,
        walled(fam, extended(fields, slab.domain, halos), params, grid, slab),
        params,
        grid,
        first=slab.lo[0] - before,
        intervals=(slab.lo[0], min(slab.hi[0], grid.snapshots - 1)),
    )
    return res, count


def initial_state(
    given: torch.Tensor, slab: Slab | None = None, initial: torch.Tensor | None = None
) -> torch.Tensor:
    """Snapshot 0 of the physical fields ``given`` ``(B, C, T, X, Y, Z)``: ``(B, C, 1, X, Y, Z)``
    (on the slab's space).

    Fields on a time slab that does not start at snapshot 0 do not hold it: there it must come
    as ``initial`` (the model's input needs it too).
    """
    if slab is not None and slab.lo[0] > 0:
        if initial is None:
            raise ValueError(f"fields on time slab [{slab.lo[0]}, {slab.hi[0]}) need the initial")
        return initial
    return given[:, :, :1]


def family_views(
    pred: torch.Tensor,
    given: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    slab: Slab | None = None,
    initial: torch.Tensor | None = None,
) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Split a mixed batch by family into the fields ``residual`` takes.

    Args:
        pred: physical prediction ``(B, C_slots, T, X, Y, Z)``, on the box ``slab`` of the
            global grid (default: the whole grid).
        given: the batch's physical fields, the same shape
            (:meth:`~pdeladder.trainer.processor.DataProcessor.fields`): the
            input-role channels and the initial state come from them, not from the prediction.
        initial: snapshot 0 ``(B, C_slots, 1, X, Y, Z)``, needed on a later time slab
            (:func:`initial_state`).

    Returns:
        ``[(family, rows (b,), fields (b, C_f, T, X, Y, Z), trivial (same), params (b, P_f))]``.
    """
    grid = batch["grid"]
    slab = slab or Slab.whole(pred.shape[2:])
    initial = initial_state(given, slab, initial)
    out = []
    for fid in torch.unique(batch["family"]).tolist():
        name = layout.families[fid]
        fam = get_family(name)
        rows = (batch["family"] == fid).nonzero().squeeze(1)
        slots = torch.tensor(layout.slot_indices(fam, grid.dim), device=pred.device)
        inputs = given[rows][:, slots]  # (b, C_f, T, X, Y, Z)
        predicted = batch["predicted"][rows][:, slots][:, :, None, None, None, None]
        fields = torch.where(predicted, pred[rows][:, slots], inputs)
        steady = slab.shape[0] == 1
        held = torch.zeros_like(inputs) if steady else initial[rows][:, slots].expand_as(inputs)
        trivial = torch.where(predicted, held, inputs)
        params = batch["params"][rows][:, : len(fam.Params.names())]
        out.append((name, rows, fields, trivial, params))
    return out


def walled(
    fam: Family, fields: torch.Tensor, params: torch.Tensor, grid, slab: Slab
) -> torch.Tensor:
    """``fields`` ``(b, C_f, T, X, Y, Z)`` of ``fam`` on ``slab`` (extended by its halos)
    completed by the family's boundary conditions (:meth:`Family.with_walls`, with the physical
    ``params`` ``(b, P_f)`` and the global ``grid``) on the walls the slab holds (x's only at the
    global ends: a slab splits x alone); snapshot 0 of a time series, the given initial state,
    keeps its values."""
    ends = wall_ends(slab, grid.dim)
    out = fam.with_walls(fields, params, grid, ends)
    if slab.shape[0] > 1 and slab.lo[0] == 0 and fam.walls_set_values(grid.dim):
        out = out.clone()
        stencils.inner_points(out, fields.shape, ends)[:, :, :1] = fields[:, :, :1]
    return out


def wall_ends(slab: Slab, dim: int) -> list[tuple[bool, bool]]:
    """Per active axis, whether ``slab`` holds its low and high wall: x's only at the global
    ends (a slab splits x alone), every other axis's always."""
    return [(slab.lo[1] == 0, slab.hi[1] == slab.shape[1]), (True, True), (True, True)][:dim]


def equation_loss(
    pred: torch.Tensor,
    given: torch.Tensor,
    batch: dict[str, Any],
    layout: SlotLayout,
    *,
    initial: torch.Tensor | None = None,
    slab: Slab | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mean relative residual, capped at 1 per sample, of the physical prediction
    ``(B, C, T, X, Y, Z)`` over the batch whose physical fields are ``given`` (same shape), for
    a prediction on the box ``slab`` of the global grid split over ``slab.domain`` (see the
    module docstring and :func:`family_views`).

    Returns:
        (scalar loss, ``{family: mean relative residual, uncapped}`` for logging, detached
        scalar tensors, so that a step does not wait for the device to read them), the same on
        every rank.
    """
    total = pred.new_zeros(())
    per_family = {}
    for name, _, fields, trivial, params in family_views(pred, given, batch, layout, slab, initial):
        r = relative_residual(name, fields, trivial, params, batch["grid"], slab=slab)
        total = total + r.clamp_max(1.0).sum()  # see the module docstring: never toward trivial
        per_family[name] = r.mean().detach()
    return total / pred.shape[0], per_family
