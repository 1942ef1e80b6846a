"""Seeded random fields on the regular grid, the wall bubble that makes them vanish on the walls,
and random divergence-free velocities (pure numpy).

Gaussian random fields are sampled spectrally with a squared-exponential covariance
``C(r) = σ² exp(-r² / (2 ℓ²))``. On a non-periodic box the field is drawn on a periodic box twice
as long per axis and cropped, so no periodic wrap-around correlation remains. The same
``(shape, length_scale, rng state)`` gives bitwise-identical output.
"""

import numpy as np

from pdeladder.solvers.grid import Grid


def gaussian_random_field(
    shape: tuple[int, ...],
    length_scale: float,
    rng: np.random.Generator,
    *,
    periodic: bool = False,
    std: float = 1.0,
) -> np.ndarray:
    """Draw one stationary Gaussian random field on the unit-box grid.

    Args:
        shape: grid points per axis, e.g. ``(X, Y, Z)``; singleton axes are allowed. Spacing is
            ``1 / (n - 1)`` (``1 / n`` if ``periodic``), as in :class:`~pdeladder.solvers.grid.Grid`.
        length_scale: correlation length ``ℓ`` in units of the box length.
        rng: the generator to draw from (seeded by the caller).
        periodic: draw a field periodic on the box instead of cropping from a larger one.
        std: pointwise standard deviation ``σ``.

    Returns:
        float64 array of ``shape`` with zero mean and pointwise standard deviation ``std``
        (in expectation).
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
    k = np.meshgrid(
        *[2 * np.pi * np.fft.fftfreq(m, d=h) for m, h in zip(big, spacing, strict=True)],
        indexing="ij",
    )
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


def wall_bubble(grid: Grid) -> np.ndarray:
    """The wall bubble ``b = Π_i 4 x_i (1 - x_i)`` (product over the grid's ``dim`` axes) at the
    grid points: 1 at the centre, exactly 0 on the walls.

    Returns:
        float64 ``(X, Y, Z)``.
    """
    x = grid.mesh_grid()[: grid.dim]
    return np.prod(4 * x * (1 - x), axis=0)


def divergence_free_field(
    grid: Grid, length_scale: float, speed: float, rng: np.random.Generator
) -> np.ndarray:
    """A random divergence-free velocity on the grid with ``b·n = 0`` on the walls.

    2D: ``b = (∂ψ/∂y, -∂ψ/∂x)``; 3D: ``b = ∇ × A``; ``ψ`` (each component of ``A``) is a Gaussian
    random field of ``length_scale`` times the :func:`wall_bubble`, which vanishes on the walls, so
    the tangential derivatives there, hence ``b·n``, are zero. Derivatives are second-order central
    differences on the grid (one-sided at the walls), so ``b`` is divergence-free to the accuracy
    of the grid. 1D: the constant ``±speed`` (sign drawn from ``rng``). Scaled to root-mean-square
    speed ``speed``.

    Returns:
        float64 ``(dim, X, Y, Z)``.
    """
    if grid.dim == 1:
        return np.full((1, *grid.shape), speed * rng.choice([-1.0, 1.0]))
    bubble = wall_bubble(grid)

    def d(f: np.ndarray, a: int) -> np.ndarray:
        return np.gradient(f, grid.h, axis=a, edge_order=2)

    def potential() -> np.ndarray:
        return gaussian_random_field(grid.shape, length_scale, rng) * bubble

    if grid.dim == 2:
        psi = potential()
        b = np.stack([d(psi, 1), -d(psi, 0)])
    else:
        a = [potential() for _ in range(3)]
        b = np.stack([d(a[2], 1) - d(a[1], 2), d(a[0], 2) - d(a[2], 0), d(a[1], 0) - d(a[0], 1)])
    return b * (speed / np.sqrt(np.mean(np.sum(b**2, axis=0))))
