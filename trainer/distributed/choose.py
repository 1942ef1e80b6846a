"""How a training stage spreads over its workers: how many domain ranks split each sample (the
number asked for, or, ``auto``, the fewest that divide the workers and whose predicted per-rank
peak fits the memory budget), whether the parameters are sharded (FSDP2) or replicated (DDP, or
over a sample's domain ranks), and who mixes a split sample's kept modes. Checked before any
worker starts, with one-line errors naming the numbers."""

from dataclasses import dataclass

from pdeladder.errors import UserInputError
from pdeladder.slabs import DomainTiling
from pdeladder.trainer.distributed.fft import Mixing
from pdeladder.trainer.distributed.memory import peak_bytes
from pdeladder.trainer.distributed.scale import mixing_by_flops
from pdeladder.trainer.models.operator import OperatorConfig


@dataclass(frozen=True)
class StageSizing:
    """What sets a training stage's per-rank memory: ``workers`` ranks, the ``grids``
    ``(T, X, Y, Z)`` of its groups, the model, the model's input ``channels``, the per-rank
    ``batch``, activation checkpointing, and the per-rank ``budget_gb`` (None: no budget)."""

    workers: int
    grids: list[tuple[int, int, int, int]]
    config: OperatorConfig
    channels: int
    batch: int
    checkpointing: bool
    budget_gb: float | None

    def peak_gb(self, domain_ranks: int, *, shard: str = "all", mixing: Mixing = "share") -> float:
        """Predicted peak GiB of the largest rank over the stage's grids
        (:func:`~pdeladder.trainer.distributed.memory.peak_bytes`), the parameters held as
        ``shard`` says (:class:`~pdeladder.trainer.distributed.parallelize.ParallelDims`), the
        kept modes mixed as ``mixing`` says; the defaults hold the least."""
        tiling = DomainTiling(x=domain_ranks, padding=self.config.padding)
        fsdp_ranks = self.workers // domain_ranks if shard == "dp" else self.workers
        peak = max(
            peak_bytes(
                self.config,
                g,
                self.channels,
                self.batch,
                tiling,
                fsdp_ranks,
                self.checkpointing,
                fsdp=shard != "none",
                mixing=mixing,
            )
            for g in self.grids
        )
        return peak / 2**30


def domain_ranks_for(asked: int | str, sizing: StageSizing) -> int:
    """The domain ranks for a stage of ``sizing``.

    Raises UserInputError when ``asked`` does not divide the workers, when a group's x axis is
    too short for it, or (``auto``) when no divisor of the workers fits the budget.
    """
    workers, budget_gb = sizing.workers, sizing.budget_gb

    def fits_grids(k: int) -> None:
        tiling = DomainTiling(x=k, padding=sizing.config.padding)
        for grid in sizing.grids:
            tiling.slab(grid, k - 1)  # raises when the last rank would hold too few points

    if asked != "auto":
        k = int(asked)
        if k < 1 or workers % k:
            raise UserInputError(f"--domain-ranks {k} does not divide the {workers} workers")
        fits_grids(k)
        return k
    tried = []
    for k in (k for k in range(1, workers + 1) if workers % k == 0):
        try:
            fits_grids(k)
        except UserInputError:
            break
        tried.append((k, sizing.peak_gb(k)))
        if tried[-1][1] <= budget_gb:
            return k
    predicted = ", ".join(f"k={k}: {gb:.2f} GB" for k, gb in tried)
    raise UserInputError(
        f"no domain_ranks dividing {workers} workers fits memory_budget_gb {budget_gb:g} "
        f"(predicted peak per rank {predicted}); add workers or lower the batch"
    )


def check_parallel(asked: str) -> None:
    """``--parallel``'s value is ``auto``, ``ddp`` or ``fsdp``; anything else is one line."""
    if asked not in ("auto", "ddp", "fsdp"):
        raise UserInputError(f"--parallel must be auto, ddp or fsdp, got {asked!r}")


def shard_for(asked: str, domain_ranks: int, sizing: StageSizing) -> str:
    """How a stage holds its parameters (:class:`~pdeladder.trainer.distributed.parallelize.
    ParallelDims` ``shard``): ``"all"`` (FSDP2 over all ranks), ``"dp"`` (FSDP2 over the
    data-parallel groups, whole on each sample's domain ranks) or ``"none"`` (replicated, DDP).

    ``asked`` is ``"fsdp"``, ``"ddp"`` or ``"auto"``. The rule for ``auto``: shard only as far
    as the budget needs (with no budget, not at all): replicate when the predicted per-rank
    peak with replicated parameters fits, else shard over all ranks, since sharding a model
    that fits costs an all-gather and a reduce-scatter of the parameters every step where one
    all-reduce of the gradients does. Split samples keep FSDP2's gradient convention, so their
    parameters are replicated over the domain ranks only (``"dp"``: one all-reduce of the
    gradients over them, and FSDP2 over the data-parallel groups, if more than one).
    """
    check_parallel(asked)
    if asked == "ddp" and domain_ranks > 1:
        raise UserInputError(
            f"parallel ddp needs one rank per sample, not {domain_ranks}: split samples "
            "train with FSDP2 (parallel fsdp or auto)"
        )
    if asked != "auto":
        return "none" if asked == "ddp" else "all"
    replicated = "dp" if domain_ranks > 1 else "none"
    if sizing.budget_gb is None:
        return replicated
    mixing = mixing_for(domain_ranks, sizing)
    fits = sizing.peak_gb(domain_ranks, shard=replicated, mixing=mixing) <= sizing.budget_gb
    return replicated if fits else "all"


def mixing_for(domain_ranks: int, sizing: StageSizing) -> Mixing:
    """Who mixes a split sample's kept modes (:mod:`~pdeladder.trainer.distributed.fft`):
    :func:`~pdeladder.trainer.distributed.scale.mixing_by_flops`'s choice on the stage's grids,
    or ``"share"`` where only that fits the budget."""
    mixing = mixing_by_flops(sizing.config, sizing.grids, sizing.batch, domain_ranks)
    if mixing == "whole" and sizing.budget_gb is not None:
        if sizing.peak_gb(domain_ranks, mixing="whole") > sizing.budget_gb:
            return "share"
    return mixing
