"""The learning-rate schedule and the recipe's defaults (docs/trainer.md, "Training recipe";
benchmarks/RESULTS.md, "What held the quick-start back")."""

import itertools
import math

import pytest

from pdeladder.curriculum.settings import LearningRate
from pdeladder.trainer.training.schedule import learning_rate


def test_cosine_with_warmup_shape() -> None:
    spec = LearningRate(initial=3e-3, final=1e-4, schedule="cosine", warmup_steps=20)
    rates = [learning_rate(s, 400, spec) for s in range(400)]
    # linear ramp to the initial rate over the warm-up, then a monotone cosine to the final rate
    assert rates[:20] == pytest.approx([3e-3 * (s + 1) / 20 for s in range(20)])
    assert rates[20] == pytest.approx(3e-3)
    assert rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in itertools.pairwise(rates[20:]))
    mid = 20 + (400 - 20 - 1) / 2
    assert learning_rate(math.ceil(mid), 400, spec) == pytest.approx(
        1e-4 + 0.5 * (3e-3 - 1e-4) * (1 + math.cos(math.pi * (math.ceil(mid) - 20) / 379))
    )


def test_warmup_takes_at_most_a_tenth_of_the_stage() -> None:
    spec = LearningRate(initial=1e-2, schedule="constant", warmup_steps=500)
    assert learning_rate(0, 100, spec) == pytest.approx(1e-3)  # ramp over 10 steps, not 500
    assert learning_rate(9, 100, spec) == pytest.approx(1e-2)
    assert learning_rate(0, 8, spec) == pytest.approx(1e-2)  # too short for a warm-up


def test_step_schedule() -> None:
    spec = LearningRate(initial=1.0, schedule="step", gamma=0.5, step_size=10, warmup_steps=0)
    assert [learning_rate(s, 100, spec) for s in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]


def test_default_recipe() -> None:
    """The measured defaults: 3e-3 with a 20-step warm-up, cosine decay."""
    lr = LearningRate()
    assert (lr.initial, lr.warmup_steps, lr.schedule) == (3e-3, 20, "cosine")
    rates = [learning_rate(s, 300, lr) for s in range(300)]
    assert max(rates) == pytest.approx(3e-3) and rates[0] < 3e-3 / 10
