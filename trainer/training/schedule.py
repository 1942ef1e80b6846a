"""Learning-rate schedules (the curriculum's ``training.learning_rate``,
:class:`~pdeladder.curriculum.settings.LearningRate`, which holds the one set of defaults)."""

import math

from pdeladder.curriculum.settings import LearningRate


def learning_rate(step: int, total: int, spec: LearningRate) -> float:
    """Rate at ``step`` of ``total``: linear warm-up over ``warmup_steps``, then ``constant``,
    ``cosine`` (from ``initial`` to ``final`` at the last step) or ``step`` (times ``gamma`` every
    ``step_size`` steps).

    The warm-up takes at most a tenth of ``total``, so a short stage (a smoke test, a demo) still
    spends most of its steps at its rate instead of ramping up to it.
    """
    initial = spec.initial
    warmup = min(spec.warmup_steps, total // 10)
    if step < warmup:
        return initial * (step + 1) / warmup
    if spec.schedule == "constant":
        return initial
    if spec.schedule == "step":
        return initial * spec.gamma ** ((step - warmup) // spec.step_size)
    progress = (step - warmup) / max(1, total - warmup - 1)
    return spec.final + 0.5 * (initial - spec.final) * (1 + math.cos(math.pi * min(1.0, progress)))
