"""How a training stage spreads over its workers: how many domain ranks split each sample (the
number asked for, or, ``auto``, the fewest that divide the workers and whose predicted per-rank
peak fits the memory budget), and whether the parameters are sharded (FSDP2) or replicated
(DDP). Checked before any worker starts, with one-line errors naming the numbers."""

from pdeladder.errors import UserInputError
from pdeladder.trainer.distributed.memory import peak_bytes
from pdeladder.trainer.distributed.slab import DomainLayout
from pdeladder.trainer.models.operator import OperatorConfig


def domain_ranks_for(
    asked: int | str,
    *,
    workers: int,
    grids: list[tuple[int, int, int, int]],
    config: OperatorConfig,
    channels: int,
    batch: int,
    checkpointing: bool,
    budget_gb: float | None,
) -> int:
    """The domain ranks for a stage whose groups have the ``grids`` ``(T, X, Y, Z)``.

    Raises UserInputError when ``asked`` does not divide ``workers``, when a group's x axis is
    too short for it, or (``auto``) when no divisor of ``workers`` fits ``budget_gb``.
    """

    def fits_grids(k: int) -> None:
        layout = DomainLayout(x=k, padding=config.padding)
        for grid in grids:
            layout.slab(grid, k - 1)  # raises when the last rank would hold too few points

    def peak_gb(k: int) -> float:
        layout = DomainLayout(x=k, padding=config.padding)
        return (
            max(
                peak_bytes(config, g, channels, batch, layout, workers, checkpointing)
                for g in grids
            )
            / 2**30
        )

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
        tried.append((k, peak_gb(k)))
        if tried[-1][1] <= budget_gb:
            return k
    predicted = ", ".join(f"k={k}: {gb:.2f} GB" for k, gb in tried)
    raise UserInputError(
        f"no domain_ranks dividing {workers} workers fits memory_budget_gb {budget_gb:g} "
        f"(predicted peak per rank {predicted}); add workers or lower the batch"
    )


def shard_for(
    asked: str,
    *,
    domain_ranks: int,
    workers: int,
    grids: list[tuple[int, int, int, int]],
    config: OperatorConfig,
    channels: int,
    batch: int,
    checkpointing: bool,
    budget_gb: float | None,
) -> str:
    """How a stage holds its parameters (:class:`~pdeladder.trainer.distributed.parallelize.
    ParallelDims` ``shard``): ``"all"`` (FSDP2 over all ranks) or ``"none"`` (replicated, DDP).

    ``asked`` is ``"fsdp"``, ``"ddp"`` or ``"auto"``. The rule for ``auto``: shard only when it
    is needed, that is when samples are split over domain ranks (their gradient convention is
    FSDP2's) or when the predicted per-rank peak with replicated parameters exceeds
    ``budget_gb``; otherwise replicate, since sharding a model that fits costs a gather per
    block in the forward and the backward pass and a reduce-scatter per block.
    """
    if asked not in ("auto", "ddp", "fsdp"):
        raise UserInputError(f"parallel must be auto, ddp or fsdp, got {asked!r}")
    if asked == "ddp" and domain_ranks > 1:
        raise UserInputError(
            f"parallel ddp needs one rank per sample, not {domain_ranks}: split samples "
            "train with FSDP2 (parallel fsdp or auto)"
        )
    if asked != "auto":
        return "none" if asked == "ddp" else "all"
    if domain_ranks > 1:
        return "all"
    if budget_gb is None:
        return "none"
    layout = DomainLayout(x=1, padding=config.padding)
    replicated = max(
        peak_bytes(config, g, channels, batch, layout, workers, checkpointing, fsdp=False)
        for g in grids
    )
    return "none" if replicated / 2**30 <= budget_gb else "all"
