"""Stage weights: how training steers generation.

A weights file (YAML or JSON), typically written from the residuals the trainer reports::

    stage: stage2            # optional: apply only to this stage
    families:                # relative weight per family (default 1)
      burgers: 3.0
      heat: 0.5
    regions:                 # optional: parameter intervals to sample more (or less) densely
      burgers:
        - {parameter: viscosity, low: 0.004, high: 0.01, weight: 4.0}
    minimum_fraction: 0.25   # every group keeps at least this share of its configured count

**Budget rule** (:func:`allocate`). The stage's budget ``B`` is the sum of its groups' configured
counts ``n_g``. Each group gets the target ``B · w_g n_g / Σ w n`` (``w_g`` its family's weight),
but never less than its minimum ``m_g = max(1, ceil(minimum_fraction · n_g))``: groups whose
target falls below their minimum are pinned there and the rest of the budget is shared in the
same proportion among the others, until no target is below its minimum. Integer counts follow by
largest remainder, ties to the earlier group. Equal weights give back the configured counts; the
total is always ``B``.

**Regions** (:func:`region_warp`). Along one parameter, the sampling density is piecewise
constant: ``weight`` inside each listed interval, 1 elsewhere (in the range's own scale, linear or
log). The design's unit coordinates are mapped through the inverse of that density's cumulative
distribution, so the space-filling design keeps its structure and a region of weight 4 gets four
times the samples per unit length. Regions of different parameters multiply.
"""

from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from pdeladder.curriculum.families import Range
from pdeladder.curriculum.settings import FROZEN
from pdeladder.errors import UserInputError


class Region(BaseModel):
    model_config = FROZEN

    parameter: str
    low: float
    high: float
    weight: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> "Region":
        if not self.low < self.high:
            raise ValueError(f"region low {self.low:g} must be below high {self.high:g}")
        return self


class Weights(BaseModel):
    """Per-family weights and parameter regions that reallocate a stage's sample budget."""

    model_config = FROZEN

    stage: str | None = None
    families: dict[str, float] = Field(default_factory=dict)
    regions: dict[str, list[Region]] = Field(default_factory=dict)
    minimum_fraction: float = Field(0.25, ge=0, le=1)

    @model_validator(mode="after")
    def _positive(self) -> "Weights":
        if bad := [f for f, w in self.families.items() if not w > 0]:
            raise ValueError(f"family weights must be positive: {', '.join(bad)}")
        return self

    def family_weight(self, family: str) -> float:
        return self.families.get(family, 1.0)

    def applies_to(self, stage: str) -> bool:
        return self.stage is None or self.stage == stage


def load_weights(source: "str | Path | dict[str, Any] | Weights | None") -> Weights | None:
    """Weights from a YAML/JSON file, a mapping, or as given; ``None`` stays ``None``."""
    if source is None or isinstance(source, Weights):
        return source
    where = "weights"
    if not isinstance(source, dict):
        where = str(source)
        try:
            source = yaml.safe_load(Path(source).read_text(encoding="utf-8")) or {}
        except OSError as err:
            raise UserInputError(f"cannot read weights {where!r}: {err.strerror}") from None
        except yaml.YAMLError as err:
            raise UserInputError(f"{where}: invalid YAML/JSON: {err}") from None
    try:
        return Weights.model_validate(source)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        raise UserInputError(
            f"{where}: {field}: {e['msg'].removeprefix('Value error, ')}"
        ) from None


def allocate(counts: list[int], weights: list[float], minimum_fraction: float) -> list[int]:
    """Reallocate the budget ``sum(counts)`` by ``weights`` with per-group minimums (module rule)."""
    n = np.asarray(counts, dtype=np.float64)
    share = np.asarray(weights, dtype=np.float64) * n
    budget = int(n.sum())
    minimum = np.maximum(1.0, np.ceil(minimum_fraction * n))
    pinned = np.zeros(len(n), dtype=bool)
    while True:
        free = budget - minimum[pinned].sum()
        target = np.where(pinned, minimum, free * share / share[~pinned].sum())
        below = ~pinned & (target < minimum)
        if not below.any():
            break
        pinned |= below
    out = np.floor(target + 1e-9).astype(np.int64)
    order = np.argsort(-(target - out), kind="stable")  # largest remainder, earlier group first
    out[order[: budget - int(out.sum())]] += 1
    return out.tolist()


def region_warp(u: np.ndarray, rng: Range, regions: list[Region]) -> np.ndarray:
    """Map unit coordinates ``u`` (any shape) through the inverse CDF of the piecewise-constant
    density the ``regions`` define on ``rng`` (module docstring); identity without regions."""
    if not regions or rng.fixed:
        return u
    scale = np.log if rng.scale == "log" else (lambda v: v)
    lo, hi = scale(rng.low), scale(rng.high)

    def unit(v: float) -> float:  # a parameter value, clipped to the range, in unit coordinates
        return float((scale(min(max(v, rng.low), rng.high)) - lo) / (hi - lo))

    spans = [(unit(r.low), unit(r.high), r.weight) for r in regions]
    x = np.unique([0.0, 1.0, *(c for a, b, _ in spans for c in (a, b))])
    mid = (x[:-1] + x[1:]) / 2
    density = np.ones_like(mid)
    for a, b, w in spans:
        density[(mid > a) & (mid < b)] *= w
    cdf = np.concatenate([[0.0], np.cumsum(density * np.diff(x))])
    return np.interp(u, cdf / cdf[-1], x)
