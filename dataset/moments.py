"""Normalisation statistics that merge in parallel.

Each sample stores, per channel, ``(count, mean, M2)`` over all its snapshots and grid points
(``M2 = Σ (x - mean)²``); in a sample with the channel :data:`~pdeladder.solvers.family.MASK`,
over its points inside the domain, so that a normaliser's means and stds ignore the outside. Partials of disjoint parts merge exactly (Chan, Golub & LeVeque's
parallel algorithm, here for many parts at once), so statistics of a stage, a family or a whole
store come from these small arrays without reading any field twice.
"""

import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from pdeladder.dataset.format import OK
from pdeladder.solvers.family import MASK

#: Values per block of :func:`sample_moments`: its float64 block stays in the L2 cache.
BLOCK_VALUES = 1 << 16


def mask_channel(channels: list[str]) -> int | None:
    """The index of :data:`~pdeladder.solvers.family.MASK` in ``channels``, None without it."""
    return channels.index(MASK) if MASK in channels else None


def sample_moments(fields: np.ndarray, mask: int | None = None) -> np.ndarray:
    """``(C, 3)`` float64 ``(count, mean, M2)`` per channel of one ``(T, C, X, Y, Z)`` sample.

    ``mask``: the index of the channel :data:`~pdeladder.solvers.family.MASK` in a sample
    that has one; every other channel then counts only its points inside the domain (where the
    mask is not 0), the mask itself all points (its mean is the domain's share of the box).

    One pass in float64, block by block (no float64 copy of the sample): sums of ``x - s`` and
    ``(x - s)**2`` with ``s`` the mean of the channel's first block, so that
    ``M2 = Σ(x - s)² - n (mean - s)²`` does not cancel unless the mean drifts from ``s`` by
    orders of magnitude more than the spread (relative error about ``1e-16 (mean - s)² / var``).
    """
    fields = np.asarray(fields)
    T, C = fields.shape[:2]
    frame = fields[0, 0].size
    rows = max(1, min(T, BLOCK_VALUES // max(frame, 1)))
    buf = np.empty(rows * frame)
    inside = None if mask is None else fields[:, mask].reshape(T, frame) != 0
    out = np.empty((C, 3))
    for c in range(C):
        x = fields[:, c].reshape(T, frame)
        if inside is None or c == mask:
            blocks = [x[t : t + rows] for t in range(0, T, rows)]
        else:
            kept = x[inside]  # (n,), the points inside
            blocks = [kept[i : i + buf.size] for i in range(0, kept.size, buf.size)]
        out[c] = _moments(blocks, buf)
    return out


def _moments(blocks: list[np.ndarray], buf: np.ndarray) -> tuple[float, float, float]:
    """``(count, mean, M2)`` of the values of ``blocks`` (each at most ``buf.size``), shifted
    by the first block's mean (:func:`sample_moments`); zeros for no values."""
    n = sum(block.size for block in blocks)
    if n == 0:
        return 0.0, 0.0, 0.0
    shift = float(blocks[0].mean(dtype=np.float64))
    total = squares = 0.0
    for block in blocks:
        d = buf[: block.size]
        np.subtract(block, shift, out=d.reshape(block.shape), dtype=np.float64)
        total += float(d.sum())
        squares += float(np.einsum("i,i->", d, d))  # not BLAS: no thread pool to wake
    return n, shift + total / n, max(squares - total * total / n, 0.0)


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


def normalisation(channels: list[str], merged: np.ndarray, status: np.ndarray) -> dict[str, Any]:
    """A group's normalisation statistics, as its ``normalization`` attribute caches them:
    ``{"channels", "count", "mean", "std", "m2": [C], "ok_samples", "status_crc"}`` from its
    ok samples' merged ``(C, 3)`` moments ``merged``, and ``status`` ``(N,)``, the status they
    were merged under (its CRC-32 tells a stale cache, :func:`describes`)."""
    mean, std = mean_std(merged)
    return {
        "channels": list(channels),
        "count": merged[:, 0].tolist(),
        "mean": mean.tolist(),
        "std": std.tolist(),
        "m2": merged[:, 2].tolist(),
        "ok_samples": int((status == OK).sum()),
        "status_crc": zlib.crc32(status.tobytes()),
    }


def describes(cached: dict[str, Any] | None, status: np.ndarray) -> bool:
    """Whether cached statistics (:func:`normalisation`) were merged under ``status``."""
    return bool(cached) and cached.get("status_crc") == zlib.crc32(status.tobytes())


def family_normalisation(
    groups: Iterable[Any], status: dict[str, np.ndarray] | None = None
) -> dict[str, dict[str, tuple[float, float]]]:
    """The normaliser of a set of store groups: per family, per channel name, ``(mean, std)``
    in physical units over every ok sample of the family in ``groups`` (each group's cached
    or merged moments, :meth:`~pdeladder.dataset.group.Group.normalisation`, merged across
    groups); ``std`` is 1 for a constant channel. ``status``: the groups' status arrays by
    path, where the caller has read them already."""
    parts: dict[str, dict[str, list[list[float]]]] = {}
    for g in groups:
        norm = g.normalisation(None if status is None else status[g.path])
        for c, name in enumerate(norm["channels"]):
            parts.setdefault(g.family, {}).setdefault(name, []).append(
                [norm["count"][c], norm["mean"][c], norm["m2"][c]]
            )
    out = {}
    for fam, by_channel in parts.items():
        names = list(by_channel)
        merged = np.stack([merge_moments(np.array(by_channel[n])[:, None, :])[0] for n in names])
        mean, std = mean_std(merged)
        out[fam] = {
            n: (float(m), float(s) if s > 0 else 1.0)
            for n, m, s in zip(names, mean, std, strict=True)
        }
    return out
