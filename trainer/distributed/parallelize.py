"""The parallel dimensions of a training run and the one function that applies them to a model.

Ranks form a 2-D mesh ``(dp, domain)`` (DESIGN.md): each of the ``dp`` groups trains on samples
of its own, the ``domain.size`` ranks of a group hold slabs of the same sample. FSDP2 shards the
parameters over all ranks, or over the dp groups with each domain group holding them whole
(``ParallelDims.shard``). Under the gradient convention of
:mod:`~pdeladder.trainer.distributed.collectives` the domain ranks' gradients are shares that sum
to a sample's gradient (a spectral weight's share: the points that rank evaluates, or the modes
it mixes, :mod:`~pdeladder.trainer.distributed.fft`), so FSDP's reduction sums each once and
divides by ``dp`` (the mean over samples), not by the world size. Without domain ranks the parameters may
instead be replicated (plain data parallel, DDP: one bucketed gradient all-reduce overlapping the
backward pass, no per-block gathers); :func:`~pdeladder.trainer.distributed.choose.shard_for`
makes the choice.
"""

import warnings
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from pdeladder.errors import UserInputError
from pdeladder.slabs import DomainTiling
from pdeladder.trainer.distributed.collectives import DomainGroup
from pdeladder.trainer.distributed.fft import Mixing, SlabFFT
from pdeladder.trainer.models.operator import LadderOperator


@dataclass(frozen=True)
class ParallelDims:
    """``dp`` data-parallel groups of ``domain.size`` domain ranks each."""

    dp: int = 1
    domain: DomainTiling = field(default_factory=DomainTiling)
    #: FSDP2 shards parameters over ``"all"`` ranks, or over the ``"dp"`` groups only with
    #: each domain group holding them whole (HSDP: replicated over the domain ranks, whose
    #: gradient shares an all-reduce sums), or ``"none"``: every rank holds them whole and
    #: DDP all-reduces the gradients (only without domain ranks).
    shard: Literal["all", "dp", "none"] = "all"
    #: who mixes a split sample's kept Fourier block (:data:`~pdeladder.trainer.distributed.fft.
    #: Mixing`): every domain rank all of it, or each its share
    mixing: Mixing = "whole"

    @classmethod
    def of(
        cls, world_size: int, domain: DomainTiling, shard: str = "all", mixing: Mixing = "whole"
    ) -> "ParallelDims":
        """The dims for ``world_size`` ranks in domain groups of ``domain``, or a one-line error
        naming the numbers when the groups do not divide the ranks."""
        if world_size % domain.size:
            raise UserInputError(
                f"{world_size} workers do not split into domain groups of {domain.size} ranks "
                f"(t={domain.t} × x={domain.x})"
            )
        if shard == "none" and domain.size > 1:
            raise UserInputError(
                f"replicated parameters (DDP) need one rank per sample, not {domain.size}: "
                "split samples train with FSDP2"
            )
        return cls(world_size // domain.size, domain, shard, mixing)

    @property
    def world_size(self) -> int:
        return self.dp * self.domain.size

    def build(self, device_type: str) -> tuple[DeviceMesh, DomainGroup]:
        """The ``(dp, domain)`` device mesh over the initialised default group, and this rank's
        domain group."""
        if dist.get_world_size() != self.world_size:
            raise UserInputError(
                f"parallel dims dp={self.dp} × domain={self.domain.size} need {self.world_size} "
                f"ranks, the process group has {dist.get_world_size()}"
            )
        mesh = init_device_mesh(
            device_type, (self.dp, self.domain.size), mesh_dim_names=("dp", "domain")
        )
        group = mesh["domain"].get_group()
        domain = DomainGroup(
            group=group,
            tiling=self.domain,
            ranks=tuple(dist.get_process_group_ranks(group)),
            index=mesh["domain"].get_local_rank(),
        )
        return mesh, domain

    def dp_rank(self, rank: int) -> int:
        """The data-parallel group of global ``rank`` (row-major mesh: ranks of a domain group
        are consecutive)."""
        return rank // self.domain.size


def split_samples(
    model: LadderOperator, domain: DomainGroup | None, mixing: Mixing = "whole"
) -> LadderOperator:
    """``model`` (in place) taking x slabs of its samples over ``domain``'s ranks: each
    spectral layer's transform the slab transform (:class:`SlabFFT`, its kept block mixed as
    ``mixing`` says) where the group has more than one rank. The one place a model learns its
    samples are split, for training (:func:`parallelize`) and for inference alike."""
    if domain is not None and domain.size > 1:
        for block in model.blocks:
            block.spectral.transform = SlabFFT(domain, mixing)
    return model


def parallelize(
    model: LadderOperator, dims: ParallelDims, domain: DomainGroup | None, device: torch.device
) -> torch.nn.Module:
    """Apply the parallel dims to ``model`` in place, in a fixed order: the slab transform
    (:class:`~pdeladder.trainer.distributed.fft.SlabFFT`) behind each spectral layer's seam
    (when the domain group has more than one rank), then FSDP2 over all ranks or the dp
    groups (``dims.shard``; bf16 parameters with fp32 reductions on GPU): on every Fourier
    block and on the root, or, with domain ranks, on the root alone (one unit, gathered from
    the forward pass's start to the backward's end). Activation checkpointing is the model's own switch
    (``model.checkpointing``). With ``dims.shard == "none"`` the model is returned as it is on
    one rank and wrapped in DDP on more (its ``module`` is ``model``)."""
    if dims.shard == "none":
        if dims.world_size == 1:
            return model
        # gradients as views into DDP's all-reduce buckets: no second copy of the gradients
        return DistributedDataParallel(
            model,
            device_ids=[device] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
        )
    split_samples(model, domain, dims.mixing)
    kwargs = {}
    if device.type == "cuda":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    # FSDP2 warns when a wrapped block returns a view: the blocks return views of a fresh
    # product (a reshape), which nothing modifies in place, so its pre-backward hook holds.
    warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view", UserWarning)
    if dims.shard == "dp" and dims.domain.size > 1:
        # (replicate, shard) = (domain, dp): a domain group's ranks are consecutive
        ranks = torch.arange(dims.world_size).reshape(dims.dp, dims.domain.size).T
        kwargs["mesh"] = DeviceMesh(device.type, ranks, mesh_dim_names=("domain", "dp"))
    # A split sample makes the whole model one FSDP unit: all its parameters are gathered once
    # at the forward pass's start and stay gathered to the backward's end (the checkpointed
    # recomputation and the backward reuse them), and its gradients are reduced once there:
    # one all-gather and one reduce-scatter per step instead of one per block (each a wait
    # for the slower rank, and FSDP's per-unit copies and hooks). The rank holds all the
    # parameters whole through the backward either way, and its gradients until it ends.
    if dims.domain.size == 1:
        for block in model.blocks:
            fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    if dims.domain.size > 1:
        model.set_gradient_divide_factor(float(dims.dp))
        model.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM: sum, divide
    return model
