"""What one training rank holds at its peak, predicted from the model, the sample and the
layout, so that ``domain_ranks: auto`` can pick the fewest domain ranks that fit a budget.

Counted in float32 bytes per rank (the tensors a step keeps, not the interpreter and libraries):

- parameters, gradients and AdamW's two moments, sharded by FSDP over the ``world`` ranks, plus
  the largest Fourier block unsharded while it computes;
- the batch: the fields read ``(B, T, C, x, Y, Z)``, the model input and the normalised target;
- activations kept for the backward pass: without checkpointing every stage's saved tensors;
  with checkpointing only each stage's input, plus one block's saved tensors recomputed in the
  backward pass;
- the transient working set of one block (its output, the spectral branch, the gradient).

``x`` is the rank's slab: the layout must cut the padded grid with the model's padding
(``DomainLayout.padding``); the largest slab sets the peak. ``benchmarks/domain_parallel.py`` checks
the prediction against measured peaks.
"""

import math

import torch

from pdeladder.trainer.distributed.slab import DomainLayout, padding
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

FLOAT = 4


def parameter_count(config: OperatorConfig) -> tuple[int, int]:
    """(all parameters, parameters of one Fourier block), counted on the meta device."""
    with torch.device("meta"):
        model = LadderOperator(config)
    block = sum(p.numel() for p in model.blocks[0].parameters())
    return sum(p.numel() for p in model.parameters()), block


def peak_bytes(
    config: OperatorConfig,
    grid: tuple[int, int, int, int],
    channels: int,
    batch: int,
    domain: DomainLayout,
    world: int,
    checkpointing: bool,
) -> int:
    """Predicted peak tensor bytes of the largest rank for a sample of ``grid`` ``(T, X, Y, Z)``
    with ``channels`` stored channels, ``batch`` samples per data-parallel group, split over
    ``domain`` within a run of ``world`` ranks."""
    slabs = [domain.slab(grid, i) for i in range(domain.size)]
    local = max(math.prod(s.local_shape) for s in slabs)
    pad = padding(grid, config.padding)
    padded = max(math.prod(s.padded(pad).local_shape) for s in slabs)
    w, layers = config.width, config.layers
    params, block = parameter_count(config)
    state = FLOAT * (4 * params // world + block)
    data = FLOAT * batch * local * (channels + config.in_channels + config.out_channels)
    lift = batch * local * (config.in_channels + 4 + 4 * w)  # cat input, hidden, its GELU
    project = batch * local * (w + 4 * w)
    per_block = 2 * batch * padded * w  # the block input and its GELU input
    if checkpointing:
        saved = batch * (local * config.in_channels + (layers + 1) * padded * w) + max(
            lift, per_block, project
        )
    else:
        saved = lift + layers * per_block + project
    transient = 3 * batch * padded * w
    return state + data + FLOAT * (saved + transient)
