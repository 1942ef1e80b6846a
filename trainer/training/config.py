"""One stage's training configuration: what the driver sends to every Ray Train worker (pickled,
as ``train_loop_config["stage"]``), built by :func:`pdeladder.trainer.training.run.stage_config`
and read by :func:`pdeladder.trainer.training.loop.train_loop_per_worker`. The curriculum's
typed settings (learning rate, loss weights, self-improvement) travel as they are, so their
defaults and names are the curriculum's (:mod:`pdeladder.curriculum.settings`)."""

from dataclasses import dataclass
from pathlib import Path

from pdeladder.curriculum.settings import LearningRate, LossWeights, SelfImprovement
from pdeladder.dataset.slots import SlotLayout
from pdeladder.trainer.models.checkpoint import read_model_json
from pdeladder.trainer.models.operator import OperatorConfig
from pdeladder.trainer.training.unsolved import UnsolvedSpec


def warm_started(model: OperatorConfig, warm_start: Path | None) -> OperatorConfig:
    """The model a stage trains: ``model`` (the stage's) when it starts fresh; from a warm start,
    that model's width, layers and channels, with its Fourier modes grown to the stage's on each
    axis (modes only grow)."""
    if warm_start is None:
        return model
    old = OperatorConfig.from_json(read_model_json(warm_start)["args"])
    modes = tuple(max(a, b) for a, b in zip(old.modes, model.modes, strict=True))
    return OperatorConfig.from_json({**old.to_json(), "modes": modes})


@dataclass(frozen=True)
class StageConfig:
    """Attributes:
    stage: the stage's name.
    model: the operator trained (:func:`warm_started`).
    layout: channel slots and normalisation statistics (physical units).
    warm_start: model folder whose weights the stage starts from, or None.
    store_url: the store the groups are read from.
    paths: groups trained on: the stage's, then those of the stages it replays.
    steps: supervised steps.
    batch_size: samples per data-parallel rank and step.
    learning_rate: the stage's ``training.learning_rate``
        (:func:`~pdeladder.trainer.training.schedule.learning_rate`).
    loss: the stage's ``training.loss``: the supervised loss's weights
        (:func:`~pdeladder.trainer.losses.weighting.combine`).
    augment: move the solved training samples by the box's symmetries
        (:mod:`~pdeladder.trainer.training.augment`).
    self_improvement: the stage's ``training.self_improvement``, the residual phase after the
        supervised steps (:func:`~pdeladder.trainer.training.loop.step_losses`), or None.
    unsolved: the stage's own groups, from which the residual phase draws.
    seed: the curriculum's seed (weights, batch order, unsolved draws).
    held_out: fraction of each group's samples held out of training, scored on.
    checkpoint_every: steps between training checkpoints (and the last step).
    log_every: steps between metrics reports.
    activation_checkpointing: recompute activations in the backward pass.
    offload: where saved activations go (``none``, ``host``, ``disk``).
    domain_ranks: workers that split each sample along x.
    shard: ``all`` (FSDP2 over every rank), ``dp`` (FSDP2 over the data-parallel groups, whole
        on each sample's domain ranks) or ``none`` (replicated).
    mixing: who mixes a split sample's kept modes: every domain rank ``whole``, or each its
        ``share``.
    threads: CPU threads of each rank's kernels (``torch.set_num_threads``).
    """

    stage: str
    model: OperatorConfig
    layout: SlotLayout
    warm_start: Path | None
    store_url: str
    paths: tuple[str, ...]
    steps: int
    batch_size: int
    learning_rate: LearningRate
    loss: LossWeights
    augment: bool
    self_improvement: SelfImprovement | None
    unsolved: tuple[UnsolvedSpec, ...]
    seed: int
    held_out: float
    checkpoint_every: int
    log_every: int
    activation_checkpointing: bool
    offload: str
    domain_ranks: int
    shard: str
    mixing: str
    threads: int

    @property
    def total_steps(self) -> int:
        """Supervised steps plus the residual phase's."""
        return self.steps + (self.self_improvement.steps if self.self_improvement else 0)
