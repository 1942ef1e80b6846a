"""The curriculum specification: what a curriculum YAML file holds, as frozen pydantic models.

A curriculum is an ordered list of stages. Each stage lists its families (a group of samples per
family, dimension and resolution, with the parameter ranges that set its difficulty) and the
``training`` settings the trainer uses on that stage's data; ``model`` sets the neural operator.
"""

from typing import Literal

from pydantic import (
    BaseModel,
    Field,
    PositiveInt,
    StrictInt,
    field_validator,
    model_validator,
)

from pdeladder.curriculum.families import FROZEN, FamilyEntry
from pdeladder.solvers.grid import Grid

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Share of each group's samples held out of training by default (``training.held_out``).
HELD_OUT = 0.1


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
        description="give each draw a target: its residual's minimiser, this many L-BFGS steps "
        "from the initial state held (0: no targets, the residual alone)",
    )
    target_weight: float = Field(1.0, ge=0, description="weight of the data loss on the targets")


class Training(BaseModel):
    """How the trainer uses one stage's data (after training on the stages before it)."""

    model_config = FROZEN

    steps: StrictInt = Field(1000, ge=1)
    batch_size: StrictInt = Field(8, ge=1)
    learning_rate: LearningRate = LearningRate()
    loss: LossWeights = LossWeights()
    modes: StrictInt | None = Field(
        None, ge=1, description="Fourier modes kept per axis in this stage (grow with resolution)"
    )
    self_improvement: SelfImprovement | None = None
    replay: list[str] = Field(
        default_factory=list,
        description="earlier stages whose groups this stage trains on too, mixed into its "
        "batches (rehearsal against forgetting; or, on the last stage alone, every stage's "
        "samples shuffled together)",
    )
    augment: bool = Field(
        True,
        description="move each solved training sample of a box-symmetric family by a random "
        "reflection or axis permutation of the box (an exact solution too): up to 2, 8 or 48 "
        "trajectories per sample in 1D, 2D or 3D",
    )
    workers: StrictInt | None = Field(
        None,
        ge=1,
        description="ranks that train this stage (default: the command's --workers); 1 trains "
        "in the calling process, without a Ray Train worker group",
    )
    threads: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="CPU threads of each rank's kernels; auto: in the calling process (one "
        "worker), every CPU the process may use; on Ray Train, the one CPU each worker "
        "reserves. A number N makes each Ray Train worker reserve N CPUs",
    )
    domain_ranks: StrictInt | Literal["auto"] = Field(
        1,
        description="ranks that split each sample along x; auto: the fewest whose predicted "
        "peak memory fits memory_budget_gb",
    )
    memory_budget_gb: float | None = Field(
        None, gt=0, description="per-rank memory for the training tensors (domain_ranks: auto)"
    )
    offload: Literal["none", "host", "disk"] = Field(
        "none",
        description="where the checkpointed blocks' inputs wait for the backward pass (turns "
        "activation checkpointing on): host memory (GPU) or a spill file on local disk",
    )
    held_out: float = Field(
        HELD_OUT,
        gt=0,
        lt=1,
        description="share of each group's ok samples held out of training (its last ones, "
        "rounded up), scored by the trainer and by evaluate; the same in every stage",
    )

    @model_validator(mode="after")
    def _domain_ranks(self) -> "Training":
        if self.domain_ranks == "auto" and self.memory_budget_gb is None:
            raise ValueError("domain_ranks: auto needs memory_budget_gb")
        if isinstance(self.domain_ranks, int) and self.domain_ranks < 1:
            raise ValueError(f"domain_ranks must be at least 1, got {self.domain_ranks}")
        return self


class Model(BaseModel):
    """The neural operator: lifting width, Fourier modes kept per axis, number of spectral layers."""

    model_config = FROZEN

    width: StrictInt = Field(32, ge=1)
    modes: StrictInt = Field(8, ge=1)
    layers: StrictInt = Field(4, ge=1)


class Generation(BaseModel):
    """How ``curriculum materialize`` solves the samples."""

    model_config = FROZEN

    memory_budget_gb: float | None = Field(
        None,
        gt=0,
        description="memory one solver rank may use (ranks_per_sample: auto picks the fewest "
        "ranks whose predicted per-rank peak fits it)",
    )


class Stage(BaseModel):
    model_config = FROZEN

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    families: list[FamilyEntry] = Field(min_length=1)
    training: Training = Training()

    @model_validator(mode="after")
    def _groups_unique(self) -> "Stage":
        seen = set()
        for entry in self.families:
            for grid in entry.grids():
                key = (entry.family, grid)
                if key in seen:
                    raise ValueError(
                        f"{entry.family} {grid.dim}D at resolution {grid.resolution} "
                        f"with {grid.snapshots} snapshots is listed twice"
                    )
                seen.add(key)
        return self

    def groups(self) -> list[tuple[FamilyEntry, Grid]]:
        """The stage's groups in file order: (family entry, grid)."""
        return [(entry, grid) for entry in self.families for grid in entry.grids()]


class Curriculum(BaseModel):
    """A whole curriculum. ``seed`` determines every sample; ``store`` is the default store URL,
    ``compression`` the codec of the groups it creates there."""

    model_config = FROZEN

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    seed: StrictInt = Field(ge=0)
    store: str | None = None
    compression: str = Field(
        default_factory=lambda: _codecs()[0],
        description="codec of the fields of new groups (docs/format.md, Compression); "
        "an existing group keeps its own",
    )
    model: Model = Model()
    generation: Generation = Generation()
    stages: list[Stage] = Field(min_length=1)

    @field_validator("compression")
    @classmethod
    def _known_codec(cls, name: str) -> str:
        _, known = _codecs()
        if name not in known:
            raise ValueError(f"unknown compression {name!r}; available: {', '.join(known)}")
        return name

    @model_validator(mode="after")
    def _stage_names_unique(self) -> "Curriculum":
        names = [s.name for s in self.stages]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"stage names must be unique; repeated: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _replay_earlier_stages(self) -> "Curriculum":
        names = [s.name for s in self.stages]
        for k, stage in enumerate(self.stages):
            if wrong := [n for n in stage.training.replay if n not in names[:k]]:
                raise ValueError(
                    f"stage {stage.name!r}: replay {', '.join(wrong)}: not an earlier stage; "
                    f"earlier: {', '.join(names[:k]) or 'none'}"
                )
        return self

    @model_validator(mode="after")
    def _one_held_out_share(self) -> "Curriculum":
        shares = {s.name: s.training.held_out for s in self.stages}
        if len(set(shares.values())) > 1:
            listed = ", ".join(f"{n}: {v:g}" for n, v in shares.items())
            raise ValueError(
                f"training.held_out differs between stages ({listed}): a sample held out of one "
                "stage must stay out of the stages that replay or follow it; use one value"
            )
        return self

    @property
    def held_out(self) -> float:
        """The share of each group's samples held out of training (every stage's
        ``training.held_out``)."""
        return self.stages[0].training.held_out

    @model_validator(mode="after")
    def _auto_ranks_have_a_budget(self) -> "Curriculum":
        auto = [
            f"{s.name}/{e.family}"
            for s in self.stages
            for e in s.families
            if e.ranks_per_sample == "auto"
        ]
        if auto and self.generation.memory_budget_gb is None:
            raise ValueError(
                f"ranks_per_sample: auto ({', '.join(auto)}) needs generation.memory_budget_gb"
            )
        return self

    def stage(self, name: str) -> Stage:
        """The stage called ``name``; an unknown name lists the available ones."""
        from pdeladder.errors import UnknownNameError

        for s in self.stages:
            if s.name == name:
                return s
        raise UnknownNameError(
            f"curriculum {self.name!r} has no stage {name!r}; available: "
            + ", ".join(s.name for s in self.stages)
        )


def _codecs() -> tuple[str, list[str]]:
    """The store's default codec and all it knows (imported on use: the store pulls in zarr)."""
    from pdeladder.dataset.format import COMPRESSIONS, DEFAULT_COMPRESSION

    return DEFAULT_COMPRESSION, list(COMPRESSIONS)
