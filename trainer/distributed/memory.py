"""What one training rank holds at its peak, predicted from the model, the sample and the
layout, so that ``domain_ranks: auto`` can pick the fewest domain ranks that fit a budget, and
``pdeladder scale`` (:mod:`~pdeladder.trainer.distributed.scale`) can size runs no one can make
here.

Counted in bytes per rank (the tensors a step keeps, not the interpreter and libraries):

- parameters, gradients and AdamW's two moments (float32), sharded by FSDP over the ``world``
  ranks, plus the root's parameters and the largest Fourier block unsharded while they compute
  (in the parameter dtype), and that block's unsharded gradient;
- the batch (float32): the fields read ``(B, T, C, x, Y, Z)``, the model input and the
  normalised target;
- activations kept for the backward pass (:func:`saved_bytes`): what autograd saves, counted
  tensor by tensor from the model's code (``tests/trainer/test_scale.py`` checks it against the
  storages autograd's saved-tensor hooks see);
- the transient working set of one block (its output, the spectral branch, the gradient) and the
  transform's buffers (:func:`transform_bytes`).

``x`` is the rank's slab: the layout must cut the padded grid with the model's padding
(``DomainLayout.padding``); the largest rank sets the peak. ``benchmarks/domain_parallel.py``
checks the prediction against measured peaks.
"""

import functools
import itertools
import math
from dataclasses import dataclass

import torch

from pdeladder.trainer.distributed.fft import share_rows
from pdeladder.trainer.distributed.offload import MIN_BYTES
from pdeladder.trainer.distributed.slab import DomainLayout, Slab, padding
from pdeladder.trainer.layers.fft import ModeSelection
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

FLOAT = 4
COMPLEX = 8  # complex64: the transforms run in float32 under every precision
LONG = 8
#: Bytes of a parameter (and of the activations) in the compute dtype of each precision.
PRECISIONS = {"fp32": 4, "bf16": 2}


@functools.cache
def parameter_count(config: OperatorConfig) -> tuple[int, int]:
    """(all parameters, parameters of one Fourier block), counted on the meta device."""
    with torch.device("meta"):
        model = LadderOperator(config)
    block = sum(p.numel() for p in model.blocks[0].parameters())
    return sum(p.numel() for p in model.parameters()), block


def kept_modes(config: OperatorConfig, grid: tuple[int, int, int, int]) -> ModeSelection:
    """The modes a spectral layer keeps on the padded global grid of ``grid`` ``(T, X, Y, Z)``."""
    pad = padding(grid, config.padding)
    return ModeSelection.of(tuple(n + p for n, p in zip(grid, pad, strict=True)), config.modes)


@dataclass(frozen=True)
class Saved:
    """Bytes autograd holds for one rank's backward pass.

    Attributes:
        kept: on the device at the end of the forward pass.
        offloaded: moved to host memory or disk by ``offload`` (the blocks' kept inputs).
        recompute: with checkpointing, the largest stage's saved tensors, rebuilt while its
            backward runs (on top of ``kept``); 0 without.
    """

    kept: int
    offloaded: int
    recompute: int


def saved_bytes(
    config: OperatorConfig,
    slab: Slab,
    batch: int,
    checkpointing: bool,
    offload: str = "none",
    precision: str = "fp32",
    domain: int = 1,
) -> Saved:
    """What autograd saves in a training forward pass of ``batch`` samples on ``slab`` (of the
    unpadded grid) of a sample split over ``domain`` ranks, parameters and the model input
    excluded (counted elsewhere).

    Per tensor, with ``N``/``P`` the slab's unpadded/padded points, ``M`` the kept modes this
    rank mixes (all of them in one process, ``⌈M/k⌉`` of them on ``k`` domain ranks), ``w`` the
    width, ``a`` the activation dtype's bytes: the coordinates ``4 N a`` (one grid, broadcast
    over the batch); the lift's concatenated input, hidden layer and its GELU
    ``B N (in + 4 + 4w) a`` and the family ids; per block its input and (all but the last) its
    GELU's input, ``B w P a`` each, the spectral mixing's rows ``2 B w M`` and kept weights
    ``2 w² M`` (float32, index cached); the projection's cropped input (``B w N a``, or
    the last block's whole output ``B w P a`` when the crop is a view of it), its hidden layer and
    GELU ``B N 4w a``. With checkpointing only each stage's input stays: the coordinates,
    the family ids and ``layers + 1`` hidden fields ``B w P a``, of which ``offload`` moves the
    blocks' ``layers`` off the device (tensors under the offload's ``MIN_BYTES`` stay).
    """
    act = PRECISIONS[precision]
    b, w, layers = batch, config.width, config.layers
    n = math.prod(slab.local_shape)
    padded = slab.padded(padding(slab.shape, config.padding))
    p = math.prod(padded.local_shape)
    sel = ModeSelection.of(padded.shape, config.modes)
    m = share_rows(math.prod(sel.block_shape), domain)
    coords, family, hidden = 4 * n * act, LONG * b, b * w * p * act
    lift = b * n * (config.in_channels + 4 + 4 * w) * act + family
    spectral = FLOAT * (2 * b * w * m + 2 * w * w * m)
    # the cropped hidden field flattens to a view of the last block's output when the padding
    # cut off the leading non-singleton axis only, else to a copy
    view = _crop_is_view(slab.local_shape, padded.local_shape)
    project = b * n * (4 * w + (0 if view else w)) * act  # the view is its input, kept anyway
    if not checkpointing:
        blocks = layers * (hidden + spectral) + (layers - 1) * hidden  # inputs, GELUs, mixing
        return Saved(coords + lift + blocks + project + (hidden if view else 0), 0, 0)
    moved = layers * hidden if offload != "none" and hidden >= MIN_BYTES else 0
    kept = coords + family + (layers + 1) * hidden - moved
    return Saved(kept, moved, max(lift, spectral + hidden, project))


def _crop_is_view(local: tuple[int, ...], padded: tuple[int, ...]) -> bool:
    """Whether the crop of a contiguous ``padded`` grid to its first ``local`` points per axis
    flattens without a copy (torch's view rule: each kept axis's stride is the next kept axis's
    stride times its size)."""
    strides = [math.prod(padded[a + 1 :]) for a in range(len(padded))]
    kept = [a for a, n in enumerate(local) if n > 1]
    return all(strides[a] == strides[b] * local[b] for a, b in itertools.pairwise(kept))


def transform_bytes(config: OperatorConfig, slab: Slab, batch: int) -> int:
    """The spectral transform's largest buffers at once on one rank: the pruned transform's
    largest intermediate (complex, with the FFT's output beside it) and the kept block
    ``(B, w, *kept)`` three times (this rank's part, its rows padded to the domain ranks' equal
    shares, the gathered mixed block; the shares themselves are ``1/k`` of it)."""
    padded = slab.padded(padding(slab.shape, config.padding))
    sel = ModeSelection.of(padded.shape, config.modes)
    dims = list(padded.local_shape)
    dims[sel.half] = sel.kept[sel.half][0]
    largest = math.prod(dims)
    for a in reversed(sel.full_axes):  # each full axis: its FFT's output, then the kept rows
        largest = max(largest, 2 * math.prod(dims))
        dims[a] = sum(sel.kept[a])
    return COMPLEX * batch * config.width * (largest + 3 * math.prod(sel.block_shape))


def largest_ranks(grid: tuple[int, int, int, int], layout: DomainLayout) -> list[Slab]:
    """The slabs of an x layout that may set its peak: the parts of the padded x axis grow with
    the rank (:func:`~pdeladder.trainer.distributed.slab.bounds`), so the rank holding the grid's
    last x point, the one before it (the largest part all of grid points) and the last rank
    (the most padding)."""
    k, n = layout.x, grid[1]
    total = n + padding(grid, layout.padding)[1]
    last_point = -(-n * k // total) - 1  # the first part i with (i + 1) total // k >= n
    return [layout.slab(grid, i) for i in sorted({max(last_point - 1, 0), last_point, k - 1})]


def rank_bytes(
    config: OperatorConfig,
    slab: Slab,
    channels: int,
    batch: int,
    world: int,
    checkpointing: bool,
    *,
    offload: str = "none",
    precision: str = "fp32",
    fsdp: bool = True,
    domain: int = 1,
) -> dict[str, int]:
    """One training rank's predicted tensor bytes by part (see the module docstring), the sample
    split over ``domain`` ranks: keys
    ``parameters``, ``gradients``, ``optimizer``, ``unsharded``, ``data``, ``activations``,
    ``offloaded`` (not on the device), ``recompute``, ``working``, ``transform``, ``peak``."""
    params, block = parameter_count(config)
    shard = params // world if fsdp else params
    root = params - config.layers * block
    # FSDP: the root's and one block's parameters gathered in the compute dtype, the block's
    # gradient before its reduce-scatter; without FSDP every rank holds them all anyway.
    unsharded = (root + block) * PRECISIONS[precision] + FLOAT * block if fsdp else 0
    n, p = (
        math.prod(slab.local_shape),
        math.prod(slab.padded(padding(slab.shape, config.padding)).local_shape),
    )
    saved = saved_bytes(config, slab, batch, checkpointing, offload, precision, domain)
    act = PRECISIONS[precision]
    parts = {
        "parameters": FLOAT * shard,
        "gradients": FLOAT * shard,
        "optimizer": 2 * FLOAT * shard,
        "unsharded": unsharded,
        "data": FLOAT * batch * n * (channels + config.in_channels + config.out_channels),
        "activations": saved.kept,
        "recompute": saved.recompute
        # offloaded inputs come back one block ahead: two on the device during the backward
        + (2 * batch * config.width * p * act if saved.offloaded else 0),
        "working": batch * p * config.width * (2 * act + FLOAT),  # output, gradient; spectral
        "transform": transform_bytes(config, slab, batch),
    }
    return parts | {"offloaded": saved.offloaded, "peak": sum(parts.values())}


def peak_bytes(
    config: OperatorConfig,
    grid: tuple[int, int, int, int],
    channels: int,
    batch: int,
    domain: DomainLayout,
    world: int,
    checkpointing: bool,
    *,
    offload: str = "none",
    precision: str = "fp32",
    fsdp: bool = True,
) -> int:
    """Predicted peak tensor bytes of the largest rank for a sample of ``grid`` ``(T, X, Y, Z)``
    with ``channels`` stored channels, ``batch`` samples per data-parallel group, split over
    ``domain`` within a run of ``world`` ranks."""
    return max(
        rank_bytes(
            config,
            slab,
            channels,
            batch,
            world,
            checkpointing,
            offload=offload,
            precision=precision,
            fsdp=fsdp,
            domain=domain.size,
        )["peak"]
        for slab in largest_ranks(grid, domain)
    )
