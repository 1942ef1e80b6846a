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

from pdeladder.curriculum.families import FamilyEntry
from pdeladder.curriculum.settings import FROZEN, LearningRate, LossWeights, SelfImprovement
from pdeladder.solvers.grid import Grid

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Share of each group's samples held out of training by default (``training.held_out``).
HELD_OUT = 0.1


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
