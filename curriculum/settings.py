"""Curriculum settings that need no family: the configuration every curriculum model shares
(:data:`FROZEN`) and the parts of a stage's ``training`` block that the trainer receives as they
are (:class:`LearningRate`, :class:`LossWeights`, :class:`SelfImprovement`; the stage's
:class:`~pdeladder.curriculum.spec.Training` holds them). Nothing here loads MPI or a family's
module, so a training worker that unpickles them stays free of both
(:class:`~pdeladder.trainer.training.config.StageConfig`)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

#: Every curriculum model is immutable and rejects unknown keys (a YAML typo names the field).
FROZEN = ConfigDict(frozen=True, extra="forbid")


class LearningRate(BaseModel):
    """Learning-rate schedule: linear warm-up from 0 to ``initial`` over ``warmup_steps``, then
    ``constant``, ``cosine`` decay to ``final`` at the last step, or ``step`` decay by ``gamma``
    every ``step_size`` steps.

    The defaults are the measured recipe (benchmarks/RESULTS.md, "What held the quick-start back"): AdamW at 1e-3
    left the operator far from fitting its own training set in a few hundred steps (2D Burgers,
    400 steps: held-out nRMSE 0.94, 3e-3 with a 20-step warm-up: 0.37)."""

    model_config = FROZEN

    initial: float = Field(3e-3, gt=0)
    schedule: Literal["constant", "cosine", "step"] = "cosine"
    final: float = Field(1e-5, ge=0, description="cosine: rate at the last step")
    warmup_steps: StrictInt = Field(20, ge=0)
    step_size: StrictInt = Field(1000, ge=1, description="step: steps between decays")
    gamma: float = Field(0.5, gt=0, le=1, description="step: factor per decay")

    @model_validator(mode="after")
    def _final_below_initial(self) -> "LearningRate":
        if self.final > self.initial:
            raise ValueError(f"final {self.final:g} is above initial {self.initial:g}")
        return self


class LossWeights(BaseModel):
    """Weights of the loss terms: relative L2 to the solver's data, and the mean-square strong-form
    PDE residual of the prediction (the family's ``residual``)."""

    model_config = FROZEN

    data: float = Field(1.0, ge=0)
    residual: float = Field(0.0, ge=0)
    h1: bool = Field(
        False,
        description="measure the data term in the relative H1 norm (values plus spatial "
        "gradients), which weights fine scales more than L2",
    )

    @model_validator(mode="after")
    def _not_both_zero(self) -> "LossWeights":
        if self.data == 0 and self.residual == 0:
            raise ValueError("data and residual weights are both 0: nothing to train on")
        return self


class SelfImprovement(BaseModel):
    """Residual-driven phase after the supervised steps: ``samples`` new parameter points are drawn
    from the stage's ranges (no solver), the model's predictions for them are trained on the PDE
    residual (``residual_weight``) while the stage's solver data anchor it (``data_anchor_weight``).

    The defaults keep the data term whole and the residual small: on the quick-start's 2D
    groups, 50 steps at residual 1.0 with the data at 0.2 lowered the held-out residual and
    raised the held-out nRMSE of every family (by 0.7-2.1 points), at residual 0.1 with the data
    at 1.0 the nRMSE stayed within 0.0011 of 50 more data-only steps (benchmarks/RESULTS.md,
    "The self-improvement phase's weights")."""

    model_config = FROZEN

    steps: StrictInt = Field(ge=1)
    residual_weight: float = Field(0.1, ge=0)
    data_anchor_weight: float = Field(1.0, ge=0)
    samples: StrictInt = Field(ge=1, description="parameter points drawn per family")
    refine_steps: StrictInt = Field(
        0,
        ge=0,
        le=10_000,
        description="give each draw a target: its residual's minimiser, at most this many "
        "Gauss-Newton iterations from the initial state held (L-BFGS steps beyond a "
        "direct solve's size; 0: no targets, the residual alone)",
    )
    target_weight: float = Field(1.0, ge=0, description="weight of the data loss on the targets")
    resolution: StrictInt | None = Field(
        None,
        ge=3,
        le=4097,
        description="grid points per axis of the draws (default: each group's own): a finer "
        "grid than the data's trains the residual where no solve was paid for",
    )
