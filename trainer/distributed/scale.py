"""Scale on paper: per-rank memory, FLOPs, communication and a step-time lower bound of a run of
the neural operator on a sample no one can run here, and the smallest tiling that fits a device.

One model: memory is :mod:`~pdeladder.trainer.distributed.memory`'s (``auto`` uses it too); this
module adds what a step computes and sends, per rank:

- FLOPs, counted from the model's code (a multiply-add is 2): the pointwise products of the
  lift, the blocks' ``W`` paths and the projection; the pruned transform (the half axis's DFT
  columns as a real product, each full axis as an FFT, ``5 n log₂ n`` real FLOPs per complex
  transform of ``n`` points, or on a split axis as a product with the kept frequencies' DFT rows,
  8 FLOPs per complex multiply-add); the mixing ``8 B M w²`` per layer, each of the ``k``
  domain ranks mixing the whole kept block, or ``8 B ⌈M/k⌉ w²``, each its share of the modes
  (the run's ``mixing``, :mod:`~pdeladder.trainer.distributed.fft`). The backward pass is twice
  the forward for products (input and weight gradients; the lift's first has no input
  gradient) and the adjoint transforms for the transforms; checkpointing adds one forward pass.
- bytes handed to each collective, as :attr:`DomainGroup.sent` counts them: the spectral
  all-reduce (or its reduce-scatter and all-gather pair around a shared mixing) of ``8 B w M'``
  per layer (``M'`` the kept modes, padded to ``k`` equal shares when shared) in the forward
  pass and again in the backward pass (a checkpointed recomputation reuses the forward's
  results); the data loss's all-reduce of its sums ``8 B C``; the H1 loss's
  halo planes (one x plane of the error and of the target forward, the error's gradient back).
  And FSDP's all-gathers of parameters (blocks in the forward and the backward pass, the root
  once) and reduce-scatter of float32 gradients, or without FSDP one all-reduce of them. On the
  wire a ring all-reduce moves ``2 (k-1)/k`` of its payload per rank, an all-gather or a
  reduce-scatter ``(k-1)/k`` of the whole tensor.
- a lower bound on the step time: the larger of compute (pointwise FLOPs at the precision's
  peak, the transforms and mixing, which run in float32, at the float32 peak) and communication
  (wire bytes over the link bandwidth: intra-node when the group fits a node, inter-node
  otherwise). Memory-bandwidth limits and kernel overheads only make it longer.

Inference (forward only, whole parameters on every rank, no gradients or optimizer state;
outputs written slab by slab) keeps one block's working set instead of the saved activations.
"""

import functools
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from typing import get_args

import torch

from pdeladder.errors import UserInputError
from pdeladder.slabs import DomainTiling, Slab, padding
from pdeladder.trainer.distributed.fft import Mixing, mixing_shares, share_rows
from pdeladder.trainer.distributed.memory import (
    COMPLEX,
    FLOAT,
    PRECISIONS,
    kept_modes,
    largest_ranks,
    parameter_count,
    rank_bytes,
    transform_bytes,
)
from pdeladder.trainer.layers.fft import ModeSelection
from pdeladder.trainer.models.offload import OFFLOAD
from pdeladder.trainer.models.operator import OperatorConfig

GB = 1e9
LOSSES = ("none", "l2", "h1")
#: The largest share of a rank's forward FLOPs that mixing a split sample's whole kept block
#: (not only its share of the modes) may add, for the collectives it saves
#: (:func:`mixing_by_flops`).
WHOLE_MIXING_EXTRA = 0.1


@dataclass(frozen=True)
class Device:
    """One accelerator: ``memory`` bytes, peak dense ``flops`` per second by precision, link
    bandwidths in bytes per second per device and direction, and devices per node."""

    name: str
    memory: float
    flops: dict[str, float]
    intra_bw: float
    inter_bw: float
    per_node: int
    source: str = ""


#: Datasheet figures (docs/scale.md cites them): dense (no sparsity) peaks, fp32 = plain FP32
#: (non-tensor-core) rate, one 400 Gb/s (A100: 200 Gb/s) NIC per GPU between nodes.
PRESETS = {
    "h100": Device(
        "H100 SXM 80 GB",
        80 * GB,
        {"fp32": 67e12, "bf16": 989e12},
        450 * GB,
        50 * GB,
        8,
        "NVIDIA H100 Tensor Core GPU datasheet: 80 GB HBM3, FP32 67 TFLOPS, BF16 989 TFLOPS "
        "dense, NVLink 900 GB/s bidirectional; DGX H100: 8x 400 Gb/s ConnectX-7",
    ),
    "h200": Device(
        "H200 SXM 141 GB",
        141 * GB,
        {"fp32": 67e12, "bf16": 989e12},
        450 * GB,
        50 * GB,
        8,
        "NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e, FP32 67 TFLOPS, BF16 989 TFLOPS "
        "dense, NVLink 900 GB/s bidirectional; 400 Gb/s per GPU",
    ),
    "a100": Device(
        "A100 SXM 80 GB",
        80 * GB,
        {"fp32": 19.5e12, "bf16": 312e12},
        300 * GB,
        25 * GB,
        8,
        "NVIDIA A100 Tensor Core GPU datasheet: 80 GB HBM2e, FP32 19.5 TFLOPS, BF16 312 TFLOPS "
        "dense, NVLink 600 GB/s bidirectional; DGX A100: 8x 200 Gb/s HDR",
    ),
    "mi300x": Device(
        "AMD Instinct MI300X",
        192 * GB,
        {"fp32": 163.4e12, "bf16": 1307.4e12},
        448 * GB,
        50 * GB,
        8,
        "AMD Instinct MI300X datasheet: 192 GB HBM3, FP32 matrix 163.4 TFLOPS, BF16 1307.4 "
        "TFLOPS dense, Infinity Fabric 896 GB/s aggregate bidirectional; 400 Gb/s per GPU",
    ),
}


def this_cpu() -> Device:
    """This machine as a node of ``cpu_count`` one-core ranks: its memory, one core's float32
    matmul rate and its memory-copy bandwidth, both measured now (a fraction of a second)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    start = time.perf_counter()
    for _ in range(8):
        a @ a
    flops = 8 * 2 * 512**3 / (time.perf_counter() - start)
    big = torch.empty(2**24)
    start = time.perf_counter()
    big.clone()
    bw = 2 * big.numel() * FLOAT / (time.perf_counter() - start)
    torch.set_num_threads(threads)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cores = os.cpu_count() or 1
    return Device(
        "this machine's CPU",
        memory,
        {"fp32": flops, "bf16": flops},
        bw,
        bw,
        cores,
        "measured: one core's float32 512² matmul, a 64 MiB copy, the physical memory",
    )


def device(name: str, **custom: float) -> Device:
    """A preset (``h100``, ``h200``, ``a100``, ``mi300x``, ``cpu``) with any of ``memory_gb``,
    ``tflops`` (every precision), ``intra_gbs``, ``inter_gbs``, ``per_node`` replaced."""
    if name != "cpu" and name not in PRESETS:
        raise UserInputError(f"unknown device {name!r}; presets: {', '.join([*PRESETS, 'cpu'])}")
    base = this_cpu() if name == "cpu" else PRESETS[name]
    for key, value in custom.items():
        if value is not None and value <= 0:
            raise UserInputError(f"--{key.replace('_', '-')} must be positive, got {value:g}")
    changes = {
        "memory": custom.get("memory_gb") and custom["memory_gb"] * GB,
        "flops": custom.get("tflops") and dict.fromkeys(PRECISIONS, custom["tflops"] * 1e12),
        "intra_bw": custom.get("intra_gbs") and custom["intra_gbs"] * GB,
        "inter_bw": custom.get("inter_gbs") and custom["inter_gbs"] * GB,
        "per_node": custom.get("per_node") and int(custom["per_node"]),
    }
    changes = {k: v for k, v in changes.items() if v}
    return replace(base, **changes, name=base.name + (" (custom)" if changes else ""))


@dataclass(frozen=True)
class Run:
    """What is run: the model, one sample ``(T, C, X, Y, Z)`` (``C`` stored channels), the
    samples per data-parallel group, the tiling (``ranks`` in groups of ``domain`` x ranks) and
    the step's settings."""

    config: OperatorConfig
    sample: tuple[int, int, int, int, int]
    batch: int = 1
    ranks: int = 1
    domain: int = 1
    precision: str = "fp32"
    fsdp: bool = True
    checkpointing: bool = False
    offload: str = "none"
    loss: str = "l2"
    training: bool = True
    #: who mixes a split sample's kept modes: ``whole``, ``share``, or ``auto``
    #: (:func:`mixing_by_flops`)
    mixing: str = "auto"

    def __post_init__(self):
        if len(self.sample) != 5 or min(self.sample) < 1:
            raise UserInputError(
                f"sample (T, C, X, Y, Z) must have five positive axes, got {self.sample}"
            )
        for name in ("batch", "ranks", "domain"):
            if getattr(self, name) < 1:
                raise UserInputError(f"{name} must be positive, got {getattr(self, name)}")
        if self.ranks % self.domain:
            raise UserInputError(
                f"{self.ranks} ranks do not split into domain groups of {self.domain}"
            )
        if self.precision not in PRECISIONS:
            raise UserInputError(f"precision must be one of {', '.join(PRECISIONS)}")
        if self.offload not in OFFLOAD or self.loss not in LOSSES:
            raise UserInputError(f"offload: one of {OFFLOAD}, loss: one of {LOSSES}")
        if self.mixing not in ("auto", *get_args(Mixing)):
            raise UserInputError(f"mixing must be auto, whole or share, got {self.mixing!r}")
        if self.offload != "none" and not self.checkpointing:
            raise UserInputError("offload moves the checkpointed blocks' inputs: add checkpointing")
        self.tiling.slab(self.grid, self.domain - 1)  # one line when a rank holds too few x

    @property
    def grid(self) -> tuple[int, int, int, int]:
        t, _, x, y, z = self.sample
        return (t, x, y, z)

    @property
    def tiling(self) -> DomainTiling:
        return DomainTiling(x=self.domain, padding=self.config.padding)

    @property
    def dp(self) -> int:
        return self.ranks // self.domain

    @functools.cached_property
    def mixes(self) -> Mixing:
        """Who mixes the kept modes: ``mixing``, or by :func:`mixing_by_flops` for ``auto``
        (counted once per run)."""
        if self.mixing != "auto":
            return self.mixing
        return mixing_by_flops(self.config, [self.grid], self.batch, self.domain)

    @property
    def shares(self) -> int:
        """Shares the kept modes are mixed in, one per domain rank, or 1 (each mixes all)."""
        return mixing_shares(self.mixes, self.domain)


def forward_flops(
    config: OperatorConfig, slab: Slab, batch: int, shares: int = 1
) -> dict[str, int]:
    """FLOPs of one forward pass on ``slab`` by part: ``pointwise`` (lift, ``W`` paths,
    projection), ``transform`` (the pruned forward and inverse transforms), ``mixing`` (of this
    rank's share of the kept modes, mixed in ``shares`` shares; 1: all of them)."""
    b, w, cin, cout = batch, config.width, config.in_channels, config.out_channels
    n = math.prod(slab.local_shape)
    padded = slab.padded(padding(slab.shape, config.padding))
    p = math.prod(padded.local_shape)
    sel = ModeSelection.of(padded.shape, config.modes)
    m = math.prod(sel.block_shape)
    lift = 2 * b * n * ((cin + 4) * 2 * w + 2 * w * w)
    project = 2 * b * n * (w * 2 * w + 2 * w * cout)
    return {
        "pointwise": lift + config.layers * 2 * b * p * w * w + project,
        "transform": config.layers * _transform_flops(b * w, sel, padded),
        "mixing": config.layers * 8 * b * share_rows(m, shares) * w * w,
    }


def mixing_by_flops(
    config: OperatorConfig, grids: list[tuple[int, int, int, int]], batch: int, domain: int
) -> Mixing:
    """Who mixes the kept modes of samples of ``grids`` split over ``domain`` ranks
    (:mod:`~pdeladder.trainer.distributed.fft`): ``"whole"``, every rank all of them, at one
    collective per layer and pass, unless that adds more than :data:`WHOLE_MIXING_EXTRA` to
    the FLOPs of a rank's forward pass on one of the grids (its largest slab); then
    ``"share"``, each rank its share, at two. A kept block does not grow with the grid while a
    rank's slab does, so large samples mix whole."""
    if domain == 1:
        return "whole"
    tiling = DomainTiling(x=domain, padding=config.padding)
    for grid in grids:
        slab = largest_ranks(grid, tiling)[0]
        whole = forward_flops(config, slab, batch)
        extra = whole["mixing"] - forward_flops(config, slab, batch, domain)["mixing"]
        if extra > WHOLE_MIXING_EXTRA * sum(whole.values()):
            return "share"
    return "whole"


def _transform_flops(rows: int, sel: ModeSelection, slab: Slab) -> int:
    """Real FLOPs of the pruned forward plus inverse transform of ``rows`` fields on ``slab``
    (of the padded grid), following :func:`~pdeladder.trainer.layers.fft.pruned_forward`."""
    dims = list(slab.local_shape)
    h, half = sel.half, sel.kept[sel.half][0]
    total = 2 * rows * math.prod(dims) * 2 * half  # real (.., n) @ (n, 2p), both ways
    dims[h] = half
    for a in reversed(sel.full_axes):
        kept, others = sum(sel.kept[a]), rows * math.prod(dims) // dims[a]
        if slab.is_split(a):
            one = 8 * others * dims[a] * kept
        else:
            one = others * 5 * dims[a] * math.ceil(math.log2(dims[a]))
        total += 2 * one  # the inverse runs the same axis back on the same sizes
        dims[a] = kept
    return total


def step_flops(run: Run, slab: Slab) -> dict[str, int]:
    """FLOPs of one step on ``slab`` by part (training: forward, backward, recomputation)."""
    fwd = forward_flops(run.config, slab, run.batch, run.shares)
    if not run.training:
        return fwd
    cfg = run.config  # the lift's first product has no input gradient
    first = 2 * run.batch * math.prod(slab.local_shape) * (cfg.in_channels + 4) * 2 * cfg.width
    passes = 2 if run.checkpointing else 1  # the forward pass, and again in the backward
    return {
        "pointwise": (passes + 2) * fwd["pointwise"] - first,
        "transform": (passes + 1) * fwd["transform"],
        "mixing": (passes + 2) * fwd["mixing"],
    }


def domain_sent(run: Run, index: int) -> dict[str, int]:
    """Bytes rank ``index`` of a domain group hands to each collective in one step, as
    :attr:`~pdeladder.trainer.distributed.collectives.DomainGroup.sent` counts them."""
    k = run.domain
    if k == 1:
        return {"all_reduce": 0, "halo": 0}
    cfg, b = run.config, run.batch
    m = math.prod(kept_modes(cfg, run.grid).block_shape)
    rows = run.shares * share_rows(m, run.shares)  # shared: padded to k equal shares
    spectral = COMPLEX * b * cfg.width * rows * cfg.layers
    if not run.training:
        return {"all_reduce": spectral, "halo": 0}
    loss = 2 * FLOAT * b * cfg.out_channels if run.loss != "none" else 0
    halo = 0
    if run.loss == "h1":
        t, _, _, y, z = run.sample
        plane = FLOAT * b * cfg.out_channels * t * y * z
        has_prev, has_next = index > 0, index < k - 1
        halo = plane * (2 * has_prev + has_next)  # error and target forward, error's gradient
    return {"all_reduce": 2 * spectral + loss, "halo": halo}  # forward and backward


def fsdp_sent(run: Run) -> dict[str, int]:
    """Bytes one rank puts on the wire per step for the parameters' collectives over all
    ``ranks``: FSDP's all-gathers (``all_gather``) and reduce-scatter (``reduce_scatter``), or
    without FSDP the gradients' all-reduce (``grad_all_reduce``)."""
    params, block = parameter_count(run.config)
    r = run.ranks
    if not run.training:  # inference keeps whole parameters on every rank
        return {}
    if not run.fsdp:
        return {"grad_all_reduce": 2 * FLOAT * params * (r - 1) // r}
    root = params - run.config.layers * block
    gathered = (root + 2 * run.config.layers * block) * PRECISIONS[run.precision]
    return {
        "all_gather": gathered * (r - 1) // r,
        "reduce_scatter": FLOAT * params * (r - 1) // r,
    }


@dataclass
class Estimate:
    """One run's prediction (bytes, FLOPs and seconds per rank and step; see the module
    docstring). ``memory`` and ``sent`` are the largest rank's."""

    run: dict
    device: dict
    memory: dict[str, int]
    fits: bool
    flops: dict[str, int]
    sent: dict[str, int]
    wire: dict[str, int]
    seconds: dict[str, float]
    nodes: int


def estimate(run: Run, dev: Device) -> Estimate:
    """The per-rank memory, FLOPs, communication and step-time lower bound of ``run`` on
    ``dev`` (the largest rank of the domain group)."""
    cfg = run.config
    slabs = largest_ranks(run.grid, run.tiling)
    channels = run.sample[1]
    if run.training:
        per = [
            rank_bytes(
                cfg,
                s,
                channels,
                run.batch,
                run.ranks,
                run.checkpointing,
                offload=run.offload,
                precision=run.precision,
                fsdp=run.fsdp,
                domain=run.domain,
                mixing=run.mixes,
            )
            for s in slabs
        ]
    else:
        per = [inference_bytes(run, s) for s in slabs]
    memory = max(per, key=lambda d: d["peak"])
    slab = max(slabs, key=lambda s: math.prod(s.padded(padding(s.shape, cfg.padding)).local_shape))
    flops = step_flops(run, slab)
    index = min(1, run.domain - 1)  # a rank with both neighbours sends the most halo
    sent = domain_sent(run, index)
    k = run.domain
    wire = {
        "all_reduce": sent["all_reduce"] * 2 * (k - 1) // k,
        "halo": sent["halo"],
        **fsdp_sent(run),
    }
    domain_bw = dev.intra_bw if k <= dev.per_node else dev.inter_bw
    world_bw = dev.intra_bw if run.ranks <= dev.per_node else dev.inter_bw
    compute = (
        flops["pointwise"] / dev.flops[run.precision]
        + (flops["transform"] + flops["mixing"]) / dev.flops["fp32"]
    )
    comm = (wire["all_reduce"] + wire["halo"]) / domain_bw + sum(
        v for key, v in wire.items() if key not in ("all_reduce", "halo")
    ) / world_bw
    seconds = {
        "compute": compute,
        "communication": comm,
        "step_lower_bound": max(compute, comm),
        "communication_share": comm / (compute + comm) if compute + comm else 0.0,
    }
    return Estimate(
        run={**asdict(run), "config": cfg.to_json(), "dp": run.dp, "mixing": run.mixes},
        device=asdict(dev),
        memory=memory,
        fits=memory["peak"] <= dev.memory,
        flops=flops,
        sent=sent,
        wire=wire,
        seconds=seconds,
        nodes=-(-run.ranks // dev.per_node),
    )


def inference_bytes(run: Run, slab: Slab) -> dict[str, int]:
    """One inference rank's tensor bytes: the parameters (whole, in the compute dtype), the
    input slab and its output slab (written out slab by slab), one block's working set (input,
    output, spectral branch) and the transform's buffers."""
    cfg, act = run.config, PRECISIONS[run.precision]
    params, _ = parameter_count(cfg)
    n = math.prod(slab.local_shape)
    p = math.prod(slab.padded(padding(slab.shape, cfg.padding)).local_shape)
    parts = {
        "parameters": params * act,
        "data": FLOAT * run.batch * n * (cfg.in_channels + cfg.out_channels),
        "working": run.batch * p * cfg.width * (2 * act + FLOAT),
        "lift": run.batch * n * 2 * cfg.width * act,  # the lift's and projection's hidden layer
        "transform": transform_bytes(cfg, slab, run.batch),
    }
    return parts | {"peak": sum(parts.values())}


#: The most domain ranks :func:`smallest_tiling` tries (the search stays quick on any grid).
MAX_FIT_DOMAIN = 4096


def smallest_tiling(run: Run, dev: Device, dp: int = 1) -> Estimate:
    """The fewest domain ranks (``dp`` groups of them, on as few nodes) whose largest rank's
    predicted peak fits ``dev``'s memory; a one-line error when none up to the grid's x points
    does."""
    best = None
    for k in range(1, min(run.grid[1] // 2, MAX_FIT_DOMAIN) + 1):
        try:
            candidate = replace(run, ranks=dp * k, domain=k)
        except UserInputError:
            break  # the last rank would hold too few x points: more ranks will not do
        found = estimate(candidate, dev)
        best = found if best is None or found.memory["peak"] < best.memory["peak"] else best
        if found.fits:
            return found
    raise UserInputError(
        f"no x tiling of this sample fits {dev.name}'s {dev.memory / GB:g} GB: the least is "
        f"{best.memory['peak'] / GB:.3g} GB per rank at k={best.run['domain']} (checkpointing, "
        f"offload, bf16 or a smaller batch help)"
    )
