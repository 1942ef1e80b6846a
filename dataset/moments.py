"""Normalisation statistics that merge in parallel.

Each sample stores, per channel, ``(count, mean, M2)`` over all its snapshots and grid points
(``M2 = Σ (x - mean)²``). Partials of disjoint parts merge exactly (Chan, Golub & LeVeque's
parallel algorithm, here for many parts at once), so statistics of a stage, a family or a whole
store come from these small arrays without reading any field twice.
"""

import numpy as np


def sample_moments(fields: np.ndarray) -> np.ndarray:
    """``(C, 3)`` float64 ``(count, mean, M2)`` per channel of one ``(T, C, X, Y, Z)`` sample."""
    fields = np.asarray(fields)
    count = fields.size // fields.shape[1]
    out = np.empty((fields.shape[1], 3))
    for c in range(fields.shape[1]):
        x = fields[:, c].astype(np.float64).ravel()  # one float64 copy of the channel
        mean = x.mean()
        x -= mean
        out[c] = count, mean, np.dot(x, x)  # M2 = sum of squared deviations (BLAS, no GIL)
    return out


def merge_moments(parts: np.ndarray) -> np.ndarray:
    """Merge ``(K, C, 3)`` partials of disjoint parts into ``(C, 3)``.

    ``mean = Σ n_k m_k / N`` and ``M2 = Σ M2_k + Σ n_k (m_k - mean)²``: the pairwise update of
    Chan et al. applied to K parts at once. Parts with zero count contribute nothing.
    """
    parts = np.asarray(parts, dtype=np.float64).reshape(-1, *np.shape(parts)[-2:])
    n = parts[..., 0].sum(axis=0)
    safe = np.where(n > 0, n, 1.0)
    mean = (parts[..., 0] * parts[..., 1]).sum(axis=0) / safe
    m2 = parts[..., 2].sum(axis=0) + (parts[..., 0] * (parts[..., 1] - mean) ** 2).sum(axis=0)
    return np.stack([n, np.where(n > 0, mean, 0.0), np.where(n > 0, m2, 0.0)], axis=1)


def mean_std(moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation ``(C,)`` from merged ``(C, 3)`` moments."""
    n, mean, m2 = moments[:, 0], moments[:, 1], moments[:, 2]
    return mean, np.sqrt(m2 / np.where(n > 0, n, 1.0))
