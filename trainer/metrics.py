"""Accuracy metrics: pdeladder's nRMSE and, beside it under their own names, PDEBench's and
The Well's, so that a score can be compared with a published one.

The scores take a prediction and its truth ``(B, C, T, X, Y, Z)`` (physical units, the uniform
grid of the unit box, singleton axes for the missing dimensions) and the spatial dimension
``dim`` where it matters; PDEBench's and The Well's compute in float64. All are pure torch.

**pdeladder's nRMSE** (:func:`nrmse`) is the one definition used by training validation
(:func:`pdeladder.trainer.training.validation.sample_scores`), ``pdeladder evaluate`` and the
closed loop: the relative L2 error over space-time with trapezoidal weights,

.. math:: \\mathrm{nRMSE}_{b,c} = \\sqrt{\\frac{\\sum_{t,x} w_{t,x} (p - u)^2}
          {\\sum_{t,x} w_{t,x} u^2 + 10^{-12}}}

per sample and channel; a group's score is its mean over samples and predicted channels. Snapshot
0 (the initial condition) is included: it carries weight ``1/2`` of an inner snapshot.

**PDEBench** (Takamoto et al., NeurIPS 2022, "PDEBench: an extensive benchmark for scientific
machine learning", and its ``metric_func``), written here from those definitions:

- :func:`pdebench_nrmse`: per sample, channel and time step the spatial RMS of the error over the
  spatial RMS of the truth (plain means, no quadrature weights), averaged over time steps;
  the ``initial_step`` input snapshots are excluded (time-dependent groups only);
- :func:`pdebench_rmse`: the same without the division;
- :func:`pdebench_crmse`: error of the conserved quantity, the spatial mean: RMS over samples of
  ``mean_x p - mean_x u``, averaged over time;
- :func:`pdebench_brmse`: RMS of the error over the points of the ``2 dim`` boundary faces (1D:
  the two end points; 2D: ``2 nx + 2 ny`` points, a corner once per face it is on), averaged
  over samples and time (PDEBench's 3D code sums the channels together here; this is per
  channel, as its 1D and 2D code);
- :func:`pdebench_frmse`: RMSE in Fourier space in the bands of wavenumber index
  ``[0, 4)``, ``[4, 12)``, ``[12, ...)`` (PDEBench's fixed ``iLow = 4``, ``iHigh = 12``). In 1D
  the error spectrum ``|F(p - u)_k|²`` (``rfft``) is averaged over samples, rooted and divided
  by ``nx`` per mode; in 2D/3D ``|F(p - u)|²`` (``fftn``) of the non-negative wavenumbers
  ``0 <= k_i < n_i/2`` is summed into shells ``floor(|k|)`` (``|k| < min(n_i/2)``), averaged over
  samples, rooted and divided by the number of grid points. Each band's value is the mean over
  its modes, then over time. An empty band (a grid with fewer modes than the band's start) is
  NaN, as in PDEBench. This is a score of a set of samples, not of one.

**The Well** (Ohana et al., NeurIPS 2024, ``the_well.benchmark.metrics``):

- :func:`well_vrmse`: ``sqrt(mean_x (p - u)² / (std_x(u)² + 1e-7))`` per sample, channel and time
  step; ``std`` is torch's (unbiased, ``N - 1``) as in The Well's code. The input snapshot is
  excluded as for PDEBench; a group's VRMSE is the mean over samples and scored time steps.

Differences worth knowing when comparing numbers: PDEBench and The Well weigh every grid point
alike and score each time step separately, so their nRMSE weights late, small-norm snapshots
more than pdeladder's space-time ratio does; neither has a baseline, so pdeladder reports both
beside the trivial baseline's on the same samples.

**pdeladder's diagnostics** beside the nRMSE, of one channel ``(B, T, X, Y, Z)`` (``pdeladder
evaluate``'s report):
:func:`band_rmse` (RMSE in thirds of the resolved radial wavenumbers), :func:`conservation_error`
(drift of the spatial mean, prediction against truth) and :func:`boundary_error` (error on the
walls over the field's RMS). :data:`CONVENTIONS` names the sets ``evaluate --metrics`` adds and
:func:`convention_scores` computes them.

**A domain that is not its whole box** (a family with the channel
:data:`~pdeladder.solvers.family.MASK`): every score takes it as ``inside``, 1 at the domain's
grid points and 0 outside (:meth:`~pdeladder.dataset.slots.SlotLayout.inside`,
``(B, 1, 1, X, Y, Z)`` beside the six-axis fields, ``(B, 1, X, Y, Z)`` beside one channel's),
and counts the points inside only: its means, sums, standard deviations and the box walls'
points are those inside, and values outside change nothing. The Fourier scores
(:func:`band_rmse`, :func:`pdebench_frmse`) are of the error set to 0 outside (the transform
of a field on the box): :func:`band_rmse`'s bands still add up, in squares, to the mean squared
error inside; :func:`pdebench_frmse` keeps PDEBench's division by the box's grid points. The
obstacles' surfaces are not walls of the box: :func:`boundary_error` and
:func:`pdebench_brmse` score only the box's walls.
"""

import itertools
import math
from typing import Any

import torch

from pdeladder.slabs import Slab
from pdeladder.trainer.losses.data import relative_errors

#: PDEBench's fixed Fourier band edges (wavenumber index): low ``[0, 4)``, mid ``[4, 12)``, high.
PDEBENCH_BANDS = (4, 12)
#: The Well's ``eps`` in VRMSE's denominator.
WELL_EPS = 1e-7
SPACE = (-3, -2, -1)
#: The metric conventions ``evaluate --metrics`` names, and the report sections each adds to
#: pdeladder's own (always there: the family scores and the closed loop read them).
CONVENTIONS: dict[str, tuple[str, ...]] = {
    "ours": (),
    "pdebench": ("pdebench",),
    "well": ("well",),
    "all": ("pdebench", "well"),
}


def _outside_zero(f: torch.Tensor, inside: torch.Tensor | None) -> torch.Tensor:
    """``f`` with 0 at the points outside the domain ``inside`` (``f`` where it is None)."""
    return f if inside is None else torch.where(inside != 0, f, 0.0)


def _space_mean(f: torch.Tensor, inside: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``f`` over its last three (space) axes, over the points ``inside`` only."""
    if inside is None:
        return f.mean(SPACE)
    count = (inside != 0).sum(SPACE).to(f.dtype).clamp_min(1.0)
    return _outside_zero(f, inside).sum(SPACE) / count


def nrmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    *,
    inside: torch.Tensor | None = None,
    slab: Slab | None = None,
) -> torch.Tensor:
    """pdeladder's nRMSE ``(B, C)``: the trapezoid-weighted relative L2 error over space-time
    (module docstring), over the points ``inside``; on a ``slab`` of a sample split over
    ``slab.domain``, as :func:`pdeladder.trainer.losses.data.relative_errors`, which it is."""
    return relative_errors(pred, target, inside=inside, slab=slab)


def channel_nrmse(
    pred: torch.Tensor,
    truth: torch.Tensor,
    predicted: torch.Tensor,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`nrmse` ``(B, C)`` of ``pred`` against ``truth`` (``(B, C, T, X, Y, Z)``,
    physical) over the points ``inside``, 0 where ``predicted`` ``(B, C)`` is false. A group's
    nRMSE is its mean over samples and predicted channels, for the model and the baseline
    alike (as the trainer's held-out score)."""
    return nrmse(pred, truth, inside=inside) * predicted.to(pred.dtype)


def band_rmse(err: torch.Tensor, dim: int, inside: torch.Tensor | None = None) -> list[float]:
    """RMSE of ``err`` ``(B, T, X, Y, Z)`` in three radial wavenumber bands of the space axes
    (low / mid / high: thirds of ``[0, max |k|]``); with ``inside`` ``(B, 1, X, Y, Z)``, of
    ``err`` set to 0 outside, per point inside (the bands' squares add up to the mean squared
    error inside)."""
    err = _outside_zero(err, inside)
    spec = torch.fft.fftn(err, dim=tuple(range(2, 2 + dim)), norm="ortho").abs().square()
    k = torch.stack(
        torch.meshgrid(*[torch.fft.fftfreq(n) * n for n in err.shape[2 : 2 + dim]], indexing="ij")
    )
    radius = k.square().sum(0).sqrt()
    radius = radius.reshape(*radius.shape, *([1] * (3 - dim)))
    edges = torch.linspace(0, float(radius.max()) + 1e-9, 4)
    if inside is None:
        points = err.shape[0] * err.shape[1] * err[0, 0].numel()
    else:
        points = err.shape[1] * int((inside != 0).sum())
    return [
        float((spec * ((radius >= lo) & (radius < hi))).sum() / points) ** 0.5
        for lo, hi in itertools.pairwise(edges.tolist())
    ]


def conservation_error(
    pred: torch.Tensor, truth: torch.Tensor, inside: torch.Tensor | None = None
) -> float:
    """Largest change of the spatial mean since snapshot 0, prediction against truth
    (``(B, T, X, Y, Z)``, one channel), relative to the truth's standard deviation; means and
    deviation over the points ``inside`` ``(B, 1, X, Y, Z)``."""
    mean_p, mean_t = _space_mean(pred, inside), _space_mean(truth, inside)  # (B, T)
    drift_p = mean_p - mean_p[:, :1]
    drift_t = mean_t - mean_t[:, :1]
    spread = truth.std() if inside is None else truth[(inside != 0).expand_as(truth)].std()
    return float((drift_p - drift_t).abs().max() / spread.clamp_min(1e-20))


def boundary_mask(shape: tuple[int, int, int], dim: int) -> torch.Tensor:
    """``(X, Y, Z)`` mask of the grid points on the box's walls (the active axes' ends)."""
    m = torch.zeros(shape, dtype=torch.bool)
    for a in range(dim):
        idx = [slice(None)] * 3
        for end in (0, -1):
            idx[a] = end
            m[tuple(idx)] = True
    return m


def boundary_error(
    pred: torch.Tensor, truth: torch.Tensor, dim: int, inside: torch.Tensor | None = None
) -> float:
    """RMS of ``pred - truth`` (``(B, T, X, Y, Z)``, one channel) on the walls, relative to the
    RMS of ``truth`` over the whole grid: how far the prediction misses the boundary values, on
    the field's scale (on a Dirichlet wall the truth is 0, so a ratio to its values there would
    be undefined). With ``inside`` ``(B, 1, X, Y, Z)``: the walls' points inside and the RMS
    over the points inside."""
    walls = boundary_mask(truth.shape[2:], dim)
    if inside is None:
        miss = (pred - truth)[..., walls].square().mean()
        return float((miss / truth.square().mean().clamp_min(1e-20)).sqrt())
    counted = (inside != 0).expand_as(truth)
    miss = (pred - truth)[counted & walls].square().mean()
    return float((miss / truth[counted].square().mean().clamp_min(1e-20)).sqrt())


def scored_steps(fields: torch.Tensor, initial_step: int = 1) -> torch.Tensor:
    """The snapshots PDEBench and The Well score: all but the first ``initial_step`` (the model's
    input) when there are more, else all (a steady group's one snapshot)."""
    return fields[:, :, initial_step:] if fields.shape[2] > initial_step else fields


def _pair(pred: torch.Tensor, target: torch.Tensor, initial_step: int, inside=None):
    """The scored steps of ``pred`` and ``target`` in float64, each set to 0 outside the
    domain ``inside`` (where given)."""
    if pred.shape != target.shape or pred.ndim != 6:
        raise ValueError(
            f"pred {tuple(pred.shape)} and target {tuple(target.shape)}: want equal "
            "(B, C, T, X, Y, Z)"
        )
    p, u = (_outside_zero(scored_steps(f.double(), initial_step), inside) for f in (pred, target))
    return p, u


def pdebench_rmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    initial_step: int = 1,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """PDEBench's RMSE ``(B, C)``: spatial RMS of the error per time step, mean over time."""
    p, u = _pair(pred, target, initial_step, inside)
    return _space_mean((p - u).square(), inside).sqrt().mean(-1)


def pdebench_nrmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    initial_step: int = 1,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """PDEBench's nRMSE ``(B, C)``: spatial RMS of the error over the spatial RMS of the truth
    per time step (no epsilon, as PDEBench), mean over the scored time steps."""
    p, u = _pair(pred, target, initial_step, inside)
    rms_e, rms_u = (_space_mean(f.square(), inside).sqrt() for f in (p - u, u))
    return (rms_e / rms_u).mean(-1)


def pdebench_crmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    initial_step: int = 1,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """PDEBench's cRMSE ``(C,)``: RMS over samples of the spatial means' difference, mean over
    time (a score of the set of samples)."""
    p, u = _pair(pred, target, initial_step, inside)
    return (_space_mean(p, inside) - _space_mean(u, inside)).square().mean(0).sqrt().mean(-1)


def pdebench_brmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    dim: int,
    initial_step: int = 1,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """PDEBench's bRMSE ``(B, C)``: RMS of the error over the points of the ``2 dim`` boundary
    faces (each face with all its points; those inside, with ``inside``), mean over time."""
    p, u = _pair(pred, target, initial_step, inside)
    sq = (p - u).square()
    total, count = torch.zeros(sq.shape[:3], dtype=sq.dtype), 0
    for a in range(dim):
        axis = 3 + a
        for end in (0, sq.shape[axis] - 1):
            face = sq.select(axis, end)
            total = total + face.sum((-2, -1))
            if inside is None:
                count += face[0, 0, 0].numel()
            else:  # (B, 1, 1): the face's points inside, per sample
                count = count + (inside.select(axis, end) != 0).sum((-2, -1)).to(sq.dtype)
    if inside is not None:
        count = count.clamp_min(1.0)
    return (total / count).sqrt().mean(-1)


def pdebench_frmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    dim: int,
    initial_step: int = 1,
    bands: tuple[int, int] = PDEBENCH_BANDS,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """PDEBench's fRMSE ``(C, 3)``: low / mid / high Fourier bands (module docstring) of the set
    of samples, mean over time; NaN for a band without modes. With ``inside``: of the error
    set to 0 outside, still divided by the box's grid points."""
    p, u = _pair(pred, target, initial_step, inside)
    e = p - u  # (B, C, T, X, Y, Z)
    n = e.shape[3 : 3 + dim]
    space = tuple(range(3, 3 + dim))
    if dim == 1:
        spec = torch.fft.rfft(e[..., 0, 0], dim=3).abs().square()  # (B, C, T, X//2 + 1)
        per_mode = spec.mean(0).sqrt() / n[0]  # (C, T, modes)
    else:
        spec = torch.fft.fftn(e, dim=space).abs().square()
        spec = spec[(slice(None),) * 3 + tuple(slice(0, m // 2) for m in n)]
        if dim == 2:
            spec = spec[..., 0]
        shells = min(m // 2 for m in n)
        k = torch.stack(
            torch.meshgrid(*[torch.arange(m // 2, dtype=e.dtype) for m in n], indexing="ij")
        )
        shell = k.square().sum(0).sqrt().floor().long()  # floor(|k|) per mode
        flat = spec.flatten(3)[..., (shell < shells).flatten()]
        idx = shell.flatten()[shell.flatten() < shells]
        summed = torch.zeros((*flat.shape[:3], shells), dtype=e.dtype)
        summed.index_add_(3, idx, flat)  # (B, C, T, shells)
        per_mode = summed.mean(0).sqrt() / math.prod(n)  # (C, T, shells)
    lo, hi = bands
    out = [
        per_mode[..., s].mean(-1).mean(-1) for s in (slice(0, lo), slice(lo, hi), slice(hi, None))
    ]
    return torch.stack(out, dim=-1)


def well_vrmse(
    pred: torch.Tensor,
    target: torch.Tensor,
    initial_step: int = 1,
    eps: float = WELL_EPS,
    inside: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Well's VRMSE ``(B, C, T')``: ``sqrt(mean_x (p - u)² / (std_x(u)² + eps))`` per sample,
    channel and scored time step (``std`` unbiased, as torch's and The Well's)."""
    p, u = _pair(pred, target, initial_step, inside)
    if inside is None:
        var = u.flatten(3).std(-1).square()
    else:
        n = (inside != 0).sum(SPACE).to(u.dtype)  # (B, 1, 1)
        dev = _outside_zero(u - _space_mean(u, inside)[..., None, None, None], inside)
        var = dev.square().sum(SPACE) / (n - 1).clamp_min(1.0)
    return (_space_mean((p - u).square(), inside) / (var + eps)).sqrt()


def pdebench_scores(
    pred: torch.Tensor,
    target: torch.Tensor,
    dim: int,
    initial_step: int = 1,
    inside: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every PDEBench metric of a set of samples, per channel: ``rmse``, ``nrmse``, ``crmse``,
    ``brmse`` ``(C,)`` (means over samples) and ``frmse`` ``(C, 3)``; over the points
    ``inside`` (module docstring)."""
    on = {"initial_step": initial_step, "inside": inside}
    return {
        "rmse": pdebench_rmse(pred, target, **on).mean(0),
        "nrmse": pdebench_nrmse(pred, target, **on).mean(0),
        "crmse": pdebench_crmse(pred, target, **on),
        "brmse": pdebench_brmse(pred, target, dim, **on).mean(0),
        "frmse": pdebench_frmse(pred, target, dim, **on),
    }


def _finite(v: float) -> float | None:
    """A score for JSON: None where it is undefined (an empty PDEBench band)."""
    return v if math.isfinite(v) else None


def convention_scores(
    pred: torch.Tensor,
    truth: torch.Tensor,
    slots: list[int],
    names: list[str],
    dim: int,
    conventions: tuple[str, ...],
    inside: torch.Tensor | None = None,
) -> dict[str, Any]:
    """PDEBench's and The Well's scores per channel of ``pred`` against ``truth``
    (``(B, C, T, X, Y, Z)``, physical), for the ``conventions`` asked for (sections of
    :data:`CONVENTIONS`), channel ``slots`` named ``names``, over the points ``inside``."""
    out: dict[str, Any] = {}
    p, t = pred[:, slots], truth[:, slots]
    if "pdebench" in conventions:
        s = pdebench_scores(p, t, dim, inside=inside)
        out["pdebench"] = {
            name: {
                **{k: _finite(float(s[k][i])) for k in ("nrmse", "rmse", "crmse", "brmse")},
                "frmse": dict(
                    zip(("low", "mid", "high"), map(_finite, s["frmse"][i].tolist()), strict=True)
                ),
            }
            for i, name in enumerate(names)
        }
    if "well" in conventions:
        v = well_vrmse(p, t, inside=inside).mean((0, 2))
        out["well"] = {name: {"vrmse": _finite(float(v[i]))} for i, name in enumerate(names)}
    return out
