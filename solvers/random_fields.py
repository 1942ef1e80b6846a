"""Seeded random fields on the regular grid, the wall bubble that makes them vanish on the walls,
and random divergence-free velocities (pure numpy).

Gaussian random fields are sampled spectrally with a squared-exponential covariance
``C(r) = σ² exp(-r² / (2 ℓ²))``. On a non-periodic box the field is drawn on a periodic box twice
as long per axis and cropped, so no periodic wrap-around correlation remains. The same
``(shape, length_scale, rng state)`` gives bitwise-identical output.

Every function here can draw just the x rows ``[lo, hi)`` of its field (``rows``), as one rank of
a sample solved in x slabs does: the same values as the whole draw's rows to rounding
(``|Δ| ≤ 1e-12`` of the field's scale), the generator left in the same state, and memory of the
order of the rows, never of the whole grid (:func:`gaussian_random_field`).
"""

import math
from typing import Any

import numpy as np

from pdeladder.solvers.grid import Grid

#: Modes where one axis's factor of the spectrum is below this fraction of the spectrum's peak are
#: left out of a rows draw: their amplitude is below 1e-20 of the largest, far below float64's
#: resolution of the field.
NEGLIGIBLE_SPECTRUM = 1e-40

#: Values per chunk when a rows draw streams the generator through the extended box (8 MB).
STREAM_VALUES = 1 << 20


def gaussian_random_field(
    shape: tuple[int, ...],
    length_scale: float,
    rng: np.random.Generator,
    *,
    periodic: bool = False,
    std: float = 1.0,
    rows: tuple[int, int] | None = None,
) -> np.ndarray:
    """Draw one stationary Gaussian random field on the unit-box grid.

    Args:
        shape: grid points per axis, e.g. ``(X, Y, Z)``; singleton axes are allowed. Spacing is
            ``1 / (n - 1)`` (``1 / n`` if ``periodic``), as in :class:`~pdeladder.solvers.grid.Grid`.
        length_scale: correlation length ``ℓ`` in units of the box length.
        rng: the generator to draw from (seeded by the caller).
        periodic: draw a field periodic on the box instead of cropping from a larger one.
        std: pointwise standard deviation ``σ``.
        rows: draw only the rows ``[lo, hi)`` of the first axis: the same noise is drawn (the
            generator streams through it chunk by chunk and ends in the same state), but only
            the modes the spectrum does not make negligible are kept and summed at those rows
            (:func:`_field_rows`), so memory is of the order of the rows, not of the grid.

    Returns:
        float64 array of ``shape`` (its first axis cut to ``hi - lo`` with ``rows``) with zero
        mean and pointwise standard deviation ``std`` (in expectation).
    """
    if length_scale <= 0:
        raise ValueError(f"length_scale must be positive, got {length_scale}")
    active = [n for n in shape if n > 1]
    if periodic:
        spacing = [1.0 / n for n in active]
        big = active
    else:
        spacing = [1.0 / (n - 1) for n in active]
        big = [2 * (n - 1) for n in active]
    # Angular wavenumbers of the extended periodic box, one axis each.
    freqs = [2 * np.pi * np.fft.fftfreq(m, d=h) for m, h in zip(big, spacing, strict=True)]
    if rows is not None and rows != (0, shape[0]):
        if shape[0] == 1 or not 0 <= rows[0] < rows[1] <= shape[0]:
            raise ValueError(f"rows {rows} are not rows of the first axis of {shape}")
        field = _field_rows(big, freqs, length_scale, rng, rows, active)
        return std * field.reshape(rows[1] - rows[0], *shape[1:])
    k = np.meshgrid(*freqs, indexing="ij")
    k2 = sum(ki**2 for ki in k) if k else np.zeros(())
    spectrum = np.exp(-0.5 * k2 * length_scale**2)
    spectrum.flat[0] = 0.0  # zero mean
    total = spectrum.sum()
    if total == 0.0:  # correlation longer than anything the grid resolves: a constant field
        return np.zeros(shape)
    noise = rng.standard_normal(big) + 1j * rng.standard_normal(big)
    # Unnormalised inverse transform: Re(field) has variance sum(spectrum / total) = 1 per point.
    field = std * np.fft.ifftn(noise * np.sqrt(spectrum / total), norm="forward").real
    crop = tuple(slice(0, n) for n in active)
    return field[crop].reshape(shape)


def _field_rows(
    big: list[int],
    freqs: list[np.ndarray],
    length_scale: float,
    rng: np.random.Generator,
    rows: tuple[int, int],
    active: list[int],
) -> np.ndarray:
    """Rows ``[lo, hi)`` of :func:`gaussian_random_field`'s field at unit ``std``, ``(hi - lo,
    *active[1:])``.

    The whole draw is ``Re Σ_k c_k e^{i k·x}`` over the extended box (an unnormalised inverse
    FFT), ``c_k`` the noise times ``sqrt(S(k) / Σ S)``. The spectrum ``S`` is a product of one
    factor per axis, so the modes where some axis's factor is below :data:`NEGLIGIBLE_SPECTRUM`
    times the peak of ``S`` form the complement of a box; the rest is a box of ``(2 r + 1)``
    frequencies per axis, ``r ≈ 4.3 / ℓ``, independent of the grid. The noise is drawn as the whole draw draws it (its real
    parts, then its imaginary parts, in C order), :data:`STREAM_VALUES` at a time, keeping the
    box's values; the sum is then one small dense transform per axis, the first at the rows only.
    """
    per_axis = [np.exp(-0.5 * (f * length_scale) ** 2) for f in freqs]
    peak = max(float(s[1:].max(initial=0.0)) for s in per_axis)  # the largest S(k), k ≠ 0
    if peak == 0.0:  # as in the whole draw: a constant field, no noise drawn
        return np.zeros((rows[1] - rows[0], *active[1:]))
    keep = [np.flatnonzero(s >= NEGLIGIBLE_SPECTRUM * peak) for s in per_axis]
    k = np.meshgrid(*[f[i] for f, i in zip(freqs, keep, strict=True)], indexing="ij")
    spectrum = np.exp(-0.5 * sum(ki**2 for ki in k) * length_scale**2)
    spectrum.flat[0] = 0.0  # zero mean (k = 0 comes first on every axis)
    total = spectrum.sum()
    coefficients = _streamed_box(big, keep, rng) * np.sqrt(spectrum / total)
    # Σ_k c_k e^{i k·x}, one axis at a time: each contraction appends its grid axis at the end.
    points = [np.arange(*rows), *(np.arange(n) for n in active[1:])]
    for m, i, x in zip(big, keep, points, strict=True):
        phase = 2 * np.pi * (np.outer(x, i) % m) / m  # exact integer products, then the angle
        coefficients = np.tensordot(coefficients, np.exp(1j * phase), axes=([0], [1]))
    return coefficients.real


def _streamed_box(big: list[int], keep: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """The complex noise ``standard_normal(big) + 1j standard_normal(big)`` at the box of
    indices ``keep`` (one index array per axis), drawn a chunk of leading-axis rows at a time."""
    row = math.prod(big[1:])
    step = max(1, STREAM_VALUES // row)
    parts: list[np.ndarray] = []
    for _ in range(2):  # the real parts, then the imaginary parts
        kept = []
        for start in range(0, big[0], step):
            chunk = rng.standard_normal((min(step, big[0] - start), *big[1:]))
            lead = keep[0][(keep[0] >= start) & (keep[0] < start + step)] - start
            kept.append(chunk[np.ix_(lead, *keep[1:])])
        parts.append(np.concatenate(kept))
    return parts[0] + 1j * parts[1]


def wall_bubble(grid: Grid, rows: tuple[int, int] | None = None) -> np.ndarray:
    """The wall bubble ``b = Π_i 4 ξ_i (1 - ξ_i)``, ``ξ_i = x_i / L_i`` (product over the grid's
    ``dim`` axes) at the grid points (of the x ``rows`` only, if given): 1 at the centre, exactly
    0 on the walls.

    Returns:
        float64 ``(X, Y, Z)``.
    """
    x = grid.mesh_grid(rows)[: grid.dim] / np.reshape(grid.lengths[: grid.dim], (-1, 1, 1, 1))
    return np.prod(4 * x * (1 - x), axis=0)


def divergence_free_field(
    grid: Grid, length_scale: float, speed: float, rng: np.random.Generator, comm: Any = None
) -> np.ndarray:
    """A random divergence-free velocity on the grid with ``b·n = 0`` on the walls.

    2D: ``b = (∂ψ/∂y, -∂ψ/∂x)``; 3D: ``b = ∇ × A``; ``ψ`` (each component of ``A``) is a Gaussian
    random field of ``length_scale`` times the :func:`wall_bubble`, which vanishes on the walls, so
    the tangential derivatives there, hence ``b·n``, are zero. Derivatives are second-order central
    differences on the grid (one-sided at the walls), so ``b`` is divergence-free to the accuracy
    of the grid. 1D: the constant ``±speed`` (sign drawn from ``rng``). Scaled to root-mean-square
    speed ``speed``. On a sample's rank (``comm``), the rows :meth:`Grid.drawn_rows` gives: the
    potentials are drawn one row wider on each side for the differences, and the mean square is
    summed over the ranks' slabs.

    Returns:
        float64 ``(dim, X, Y, Z)`` (``X`` cut to the drawn rows).
    """
    lo, hi = grid.drawn_rows(comm)
    if grid.dim == 1:
        return np.full((1, hi - lo, 1, 1), speed * rng.choice([-1.0, 1.0]))
    wide = (max(lo - 1, 0), min(hi + 1, grid.shape[0]))  # a row more for the differences
    bubble = wall_bubble(grid, wide)

    def d(f: np.ndarray, a: int) -> np.ndarray:
        return np.gradient(f, grid.spacing[a], axis=a, edge_order=2)

    def potential() -> np.ndarray:
        return gaussian_random_field(grid.shape, length_scale, rng, rows=wide) * bubble

    if grid.dim == 2:
        psi = potential()
        b = np.stack([d(psi, 1), -d(psi, 0)])
    else:
        a = [potential() for _ in range(3)]
        b = np.stack([d(a[2], 1) - d(a[1], 2), d(a[0], 2) - d(a[2], 0), d(a[1], 0) - d(a[0], 1)])
    b = b[:, lo - wide[0] : hi - wide[0]]
    squares = np.sum(b**2, axis=0)
    if (lo, hi) == (0, grid.shape[0]):
        mean_square = np.mean(squares)
    else:  # each rank sums its own slab, not the next slab's first row
        own = squares[: grid.slabs[comm.rank][1] - lo]
        mean_square = comm.allreduce(float(own.sum())) / grid.points
    return b * (speed / np.sqrt(mean_square))
