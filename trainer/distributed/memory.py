"""What one training rank holds at its peak, predicted from the model, the sample and the
tiling, so that ``domain_ranks: auto`` can pick the fewest domain ranks that fit a budget, and
``pdeladder scale`` (:mod:`~pdeladder.trainer.distributed.scale`) can size runs no one can make
here.

Counted in bytes per rank, tensor by tensor from the code (the tensors a step holds, not the
interpreter, libraries or an allocator's cache): what a step holds throughout (the parameter
and AdamW shards, float32, sharded by FSDP over the ``world_size`` ranks; the batch) plus what is
alive at the moment that sets the peak (:func:`step_moments`): the end of the forward pass, the
projection's or the last block's backward, or the optimizer step. Its parts are the activations
kept for the backward pass (:func:`saved_bytes`: what autograd saves, which
``tests/trainer/test_scale.py`` checks against the storages autograd's saved-tensor hooks see),
a checkpointed stage's recomputation, the working tensors of that moment (gradients of hidden
fields, the spectral branch's output), the transform's buffers (:func:`transform_bytes`), FSDP's
gathered parameters and the gradients alive then. Not counted: the results of the forward
collectives a checkpointed block keeps for its recomputation
(:func:`~pdeladder.trainer.distributed.collectives.replayed`), ``8 B w (k + 1) ⌈M/k⌉`` bytes per
layer (under 1 % of the peak at the benchmark's sample). ``tests/trainer/test_scale.py`` checks the
peak against training steps measured on 1, 2 and 4 ranks, ``benchmarks/domain_parallel.py`` on
a larger sample.

``x`` is the rank's slab: the tiling must cut the padded grid with the model's padding
(``DomainTiling.padding``); the largest rank sets the peak.
"""

import functools
import itertools
import math
from dataclasses import dataclass

import torch

from pdeladder.slabs import DomainTiling, Slab, padding
from pdeladder.trainer.distributed.fft import Mixing, mixing_shares, share_rows
from pdeladder.trainer.layers.fft import ModeSelection
from pdeladder.trainer.models.offload import MIN_BYTES
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

FLOAT = 4
COMPLEX = 8  # complex64: the transforms run in float32 under every precision
LONG = 8
BOOL = 1
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
        hidden: one hidden field ``B w P a`` (a block's input).
        spectral: one block's mixing rows and kept weights (float32).
        project: the projection's saved tensors but the last block's output (its crop's copy,
            hidden layer and GELU).
        view: whether the projection's crop is a view of the last block's output (which it
            then saves).
    """

    kept: int
    offloaded: int
    recompute: int
    hidden: int
    spectral: int
    project: int
    view: bool


def saved_bytes(
    config: OperatorConfig,
    slab: Slab,
    batch: int,
    checkpointing: bool,
    offload: str = "none",
    precision: str = "fp32",
    shares: int = 1,
) -> Saved:
    """What autograd saves in a training forward pass of ``batch`` samples on ``slab`` (of the
    unpadded grid), its kept modes mixed in ``shares`` equal shares, one per rank (1: the rank
    mixes them all), parameters and the model input excluded (counted elsewhere).

    Per tensor, with ``N``/``P`` the slab's unpadded/padded points, ``M`` the kept modes this
    rank mixes (all of them, or ``⌈M/k⌉`` of them in ``k`` shares), ``w`` the
    width, ``a`` the activation dtype's bytes: the output's ``t = 0`` mask ``B N`` (bool; for
    ``output="change"`` the coordinates ``4 N a``, one grid broadcast over the batch); the lift's concatenated input, hidden layer and its GELU
    ``B N (in + 4 + 4w) a`` and the family ids; per block its input and (all but the last) its
    GELU's input, ``B w P a`` each, the spectral mixing's rows ``2 B w M`` and kept weights
    ``2 w² M`` (float32, index cached); the projection's cropped input (``B w N a``, or
    the last block's whole output ``B w P a`` when the crop is a view of it), its hidden layer and
    GELU ``B N 4w a``. With checkpointing only each stage's input stays: the coordinates (and
    the output's mask), the family ids and ``layers + 1`` hidden fields ``B w P a``, of which ``offload`` moves the
    blocks' ``layers`` off the device (tensors under the offload's ``MIN_BYTES`` stay).
    """
    act = PRECISIONS[precision]
    b, w, layers = batch, config.width, config.layers
    n = math.prod(slab.local_shape)
    padded = slab.padded(padding(slab.shape, config.padding))
    p = math.prod(padded.local_shape)
    sel = ModeSelection.of(padded.shape, config.modes)
    m = share_rows(math.prod(sel.block_shape), shares)
    coords, family, hidden = 4 * n * act, LONG * b, b * w * p * act
    # the output keeps τ (a view of the coordinates) for ``u0 + τ·change``, or the ``t = 0``
    # mask (bool) for the state form's ``where``, whose coordinates only checkpointing keeps
    state = config.output == "state"
    output = BOOL * b * n if state else coords
    lift = b * n * (config.in_channels + 4 + 4 * w) * act + family
    spectral = FLOAT * (2 * b * w * m + 2 * w * w * m)
    # the cropped hidden field flattens to a view of the last block's output when the padding
    # cut off the leading non-singleton axis only, else to a copy
    view = _crop_is_view(slab.local_shape, padded.local_shape)
    project = b * n * (4 * w + (0 if view else w)) * act  # the view is its input, kept anyway
    parts = {"hidden": hidden, "spectral": spectral, "project": project, "view": view}
    if not checkpointing:
        blocks = layers * (hidden + spectral) + (layers - 1) * hidden  # inputs, GELUs, mixing
        kept = output + lift + blocks + project + (hidden if view else 0)
        return Saved(kept, 0, 0, **parts)
    moved = layers * hidden if offload != "none" and hidden >= MIN_BYTES else 0
    kept = coords + (output if state else 0) + family + (layers + 1) * hidden - moved
    return Saved(kept, moved, max(lift, spectral + hidden, project), **parts)


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


def largest_ranks(grid: tuple[int, int, int, int], tiling: DomainTiling) -> list[Slab]:
    """The slabs of an x tiling that may set its peak: the parts of the padded x axis grow with
    the rank (:func:`~pdeladder.slabs.bounds`), so the rank holding the grid's
    last x point, the one before it (the largest part all of grid points) and the last rank
    (the most padding)."""
    k, n = tiling.x, grid[1]
    total = n + padding(grid, tiling.padding)[1]
    last_point = -(-n * k // total) - 1  # the first part i with (i + 1) total // k >= n
    return [tiling.slab(grid, i) for i in sorted({max(last_point - 1, 0), last_point, k - 1})]


def rank_bytes(
    config: OperatorConfig,
    slab: Slab,
    channels: int,
    batch: int,
    world_size: int,
    checkpointing: bool,
    *,
    offload: str = "none",
    precision: str = "fp32",
    fsdp: bool = True,
    domain: int = 1,
    mixing: Mixing = "whole",
) -> dict[str, int]:
    """One training rank's tensor bytes at its peak, by part, the sample split over ``domain``
    ranks that mix its kept modes as ``mixing`` says (:mod:`~pdeladder.trainer.distributed.fft`):
    keys ``parameters``, ``gradients``, ``optimizer``, ``unsharded``, ``data``, ``activations``,
    ``recompute``, ``working``, ``transform`` (alive at the peak; they sum to ``peak``) and
    ``offloaded`` (not on the device).

    The peak is the largest of the step's moments (:func:`step_moments`) on top of what the step
    holds throughout: the parameter and AdamW shards and the batch (float32): the fields read
    ``(B, C, T, x, Y, Z)``, the model input and the normalised target."""
    params, _ = parameter_count(config)
    shard = -(-params // world_size) if fsdp else params
    shares = mixing_shares(mixing, domain)
    saved = saved_bytes(config, slab, batch, checkpointing, offload, precision, shares)
    fields = channels + config.in_channels + config.out_channels
    held = {
        "parameters": FLOAT * shard,
        "optimizer": 2 * FLOAT * shard,
        "data": FLOAT * batch * math.prod(slab.local_shape) * fields,
    }
    moments = step_moments(
        config, slab, batch, world_size, saved, precision=precision, fsdp=fsdp, split=domain > 1
    )
    adam = {"gradients": FLOAT * shard}  # the trainer's fused AdamW updates in place
    parts = max([*moments.values(), adam], key=lambda m: sum(m.values()))
    names = ("gradients", "unsharded", "activations", "recompute", "working", "transform")
    parts = held | {name: parts.get(name, 0) for name in names}
    return parts | {"offloaded": saved.offloaded, "peak": sum(parts.values())}


def step_moments(
    config: OperatorConfig,
    slab: Slab,
    batch: int,
    world_size: int,
    saved: Saved,
    *,
    precision: str = "fp32",
    fsdp: bool = True,
    split: bool = False,
) -> dict[str, dict[str, int]]:
    """The tensors alive, by part, at the moments of a training step on ``slab`` that may set
    its peak, beside the parameter and optimizer shards and the batch; ``saved`` is
    :func:`saved_bytes`'s count of the same step. With ``H = B w P a`` a hidden field (``P``
    padded points, ``a`` the activation bytes), ``G = B 2w N a`` the lift's and projection's wide
    field, ``O = B out N a`` the output:

    - ``forward`` (without checkpointing): the end of the forward pass, the last step's
      gradients (the trainer drops them before the backward pass), everything saved, the last
      block's output (held by the model until it returns; saved anyway when the
      projection's crop is a view of it), ``u0 + τ·change``'s ``change``, ``τ·change`` and the
      output;
    - ``projection``: the start of the backward pass, in the projection's backward (recomputed
      with checkpointing: its saved tensors), the output, its gradient, and the gradient of the
      wide hidden field ``G``;
    - ``block``: the last block's backward: with checkpointing the blocks' kept inputs (two when
      offloaded: the one in use and the next, read ahead), its output's gradient ``H`` and its
      recomputation, which stops at the spectral branch's float32 output ``B w P 4`` (its mixing
      rows, kept weights and transform buffers beside it); without, everything saved less the
      projection's tensors, the gradients of its output and, through the pointwise path, of its
      input (``2H``).

    FSDP holds the root's parameters gathered through both passes, the block that computes,
    and in the backward pass the next block, whose all-gather it issues ahead (with more than
    one rank: with one it copies when the block runs); the root's gradients stay unsharded
    until the backward pass ends. On a ``split`` sample (domain ranks) the model is one FSDP
    unit, all its parameters gathered from the forward pass's start to the backward's end; its
    all-gather's flat output (all the parameters once more) FSDP2 frees only when the forward
    pass ends, so a ``split`` sample has one more moment with checkpointing, ``forward``: the
    projection's forward pass (every stage's input kept, its hidden layer and GELU ``2G``)
    beside both copies of the parameters and the last step's gradients. The
    optimizer step (fused AdamW, in place: the gradients beside what the step holds
    throughout) is :func:`rank_bytes`'s."""
    act = PRECISIONS[precision]
    b, w, layers = batch, config.width, config.layers
    params, block = parameter_count(config)
    root = params - layers * block
    n = math.prod(slab.local_shape)
    p = math.prod(slab.padded(padding(slab.shape, config.padding)).local_shape)
    hidden, output = saved.hidden, b * config.out_channels * n * act
    start = {"working": 2 * output + b * 2 * w * n * act}  # output, its gradient, G's gradient
    held = fsdp and split  # every block stays gathered: none computes or is fetched ahead alone
    gathered = (params if held else root) * act if fsdp else 0  # else the rank's own
    computes = block * act if fsdp and not held else 0
    ahead = computes if world_size > 1 else 0
    gradients = FLOAT * (-(-params // world_size) if fsdp else params)  # the last step's
    backward = {"unsharded": gathered + ahead, "gradients": FLOAT * root if fsdp else 0}
    in_block = backward | {"unsharded": backward["unsharded"] + computes}
    # the forward pass: the all-gather's flat output too, on a split sample (one unit)
    forward = {"unsharded": gathered * (2 if held else 1), "gradients": gradients}
    if not saved.recompute:  # no checkpointing
        last = 0 if saved.view else hidden
        return {
            "forward": forward | {"activations": saved.kept, "working": last + 3 * output},
            "projection": backward | {"activations": saved.kept} | start,
            "block": in_block | {"working": 2 * hidden, "activations": saved.kept
                                 - saved.project - hidden * saved.view},
        }  # fmt: skip
    ids = saved.kept + saved.offloaded - (layers + 1) * hidden  # coordinates and family ids
    read_ahead = min(2, layers) * hidden if saved.offloaded else layers * hidden
    kept = ids + hidden + (0 if saved.offloaded else layers * hidden)  # every stage's input
    moments = {
        "projection": backward | start | {"recompute": saved.project, "activations": kept},
        "block": in_block | {"activations": ids + read_ahead, "recompute": saved.spectral,
                             "transform": transform_bytes(config, slab, batch),
                             "working": hidden + b * w * p * FLOAT},
    }  # fmt: skip
    if held:
        moments["forward"] = forward | {"activations": kept, "working": b * 4 * w * n * act}
    return moments


def peak_bytes(
    config: OperatorConfig,
    grid: tuple[int, int, int, int],
    channels: int,
    batch: int,
    tiling: DomainTiling,
    world_size: int,
    checkpointing: bool,
    *,
    offload: str = "none",
    precision: str = "fp32",
    fsdp: bool = True,
    mixing: Mixing = "whole",
) -> int:
    """Predicted peak tensor bytes of the largest rank for a sample of ``grid`` ``(T, X, Y, Z)``
    with ``channels`` stored channels, ``batch`` samples per data-parallel group, split over
    ``tiling`` (its kept modes mixed as ``mixing`` says) within a run whose FSDP shards the
    parameters over ``world_size`` ranks."""
    return max(
        rank_bytes(
            config,
            slab,
            channels,
            batch,
            world_size,
            checkpointing,
            offload=offload,
            precision=precision,
            fsdp=fsdp,
            domain=tiling.size,
            mixing=mixing,
        )["peak"]
        for slab in largest_ranks(grid, tiling)
    )
