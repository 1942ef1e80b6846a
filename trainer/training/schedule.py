"""Learning-rate schedules (the curriculum's ``training.learning_rate`` block)."""

import math
from typing import Any


def learning_rate(step: int, total: int, spec: dict[str, Any]) -> float:
    """Rate at ``step`` of ``total``: linear warm-up over ``warmup_steps``, then ``constant``,
    ``cosine`` (from ``initial`` to ``final`` at the last step) or ``step`` (times ``gamma`` every
    ``step_size`` steps).

    The warm-up takes at most a tenth of ``total``, so a short stage (a smoke test, a demo) still
    spends most of its steps at its rate instead of ramping up to it.
    """
    initial = spec["initial"]
    warmup = min(spec.get("warmup_steps", 0), total // 10)
    if step < warmup:
        return initial * (step + 1) / warmup
    kind = spec.get("schedule", "cosine")
    if kind == "constant":
        return initial
    if kind == "step":
        return initial * spec.get("gamma", 0.5) ** ((step - warmup) // spec.get("step_size", 1000))
    final = spec.get("final", 0.0)
    progress = (step - warmup) / max(1, total - warmup - 1)
    return final + 0.5 * (initial - final) * (1 + math.cos(math.pi * min(1.0, progress)))
