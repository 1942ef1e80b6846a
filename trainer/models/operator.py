"""The neural operator: maps a sample's inputs to its whole trajectory at once (FNO-style).

Shapes are ``(batch, channels, t, x, y, z)`` throughout; 1D/2D problems have singleton spatial
axes, steady problems ``t = 1``. The input holds the data channels the
:class:`~pdeladder.trainer.processor.DataProcessor` builds (initial state per channel slot,
slot mask, parameters broadcast as channels); the model appends the coordinates ``(t, x, y, z)``
itself, so it works on any grid. Families share one network through fixed channel slots and a
learned family embedding.

The trajectory is predicted as ``u(0)`` at ``t = 0`` (met exactly) and ``g u(0) + N(inputs)``
after it (``output="state"``, the default; ``g`` a learnt gain per family and output slot that
starts at 0, so the network predicts the state itself), or as the change
``u(t) = u(0) + τ(t) · N(inputs)`` with ``τ = t / t_end`` in ``[0, 1]`` (``output="change"``, the
parametrisation of checkpoints written before the choice existed). The state form learns the
decaying and moving families (Burgers, advection–diffusion) in far fewer steps: ``τ N`` has to
cancel ``u(0)`` where a trajectory decays within its first snapshot, while the gain lets a family
whose state stays near ``u(0)`` (heat) keep it without carrying it through the network
(benchmarks/RESULTS.md, "The output form").
"""

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from pdeladder.errors import UserInputError
from pdeladder.slabs import Slab, input_slab, padding
from pdeladder.trainer.layers.spectral import SpectralConv
from pdeladder.trainer.models.offload import offloaded

OUTPUTS = ("state", "change")
# The gain ``g`` is ``GAIN_STEP`` times its parameter: under Adam, whose steps are about the
# learning rate whatever a parameter's scale, one scalar per family and slot then moves ten
# times as fast as the network's weights and reaches ``g ≈ 1`` within a stage where that fits.
GAIN_STEP = 10.0


@dataclass(frozen=True)
class OperatorConfig:
    """JSON-able arguments of :class:`LadderOperator` (stored in checkpoints).

    Attributes:
        in_channels: data input channels (coordinates excluded; the model adds four).
        out_channels: predicted channel slots.
        width: hidden channels.
        layers: spectral blocks.
        modes: kept Fourier modes per axis ``(t, x, y, z)``.
        families: size of the family embedding table.
        padding: fraction of each non-singleton axis appended as zeros before the spectral
            blocks (the problems are not periodic), cropped after them.
        output: ``"state"`` (``u(0)`` at ``t = 0``, ``g u(0) + N`` after it) or ``"change"``
            (``u(0) + τ N``); see the module docstring.
    """

    in_channels: int
    out_channels: int
    width: int = 32
    layers: int = 4
    modes: tuple[int, int, int, int] = (8, 8, 8, 1)
    families: int = 1
    padding: float = 0.25
    output: str = "state"

    def __post_init__(self):
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")

    def to_json(self) -> dict:
        return {**asdict(self), "modes": list(self.modes)}

    @classmethod
    def from_json(cls, data: dict) -> "OperatorConfig":
        # a checkpoint written before ``output`` existed predicted the change
        return cls(**{"output": "change", **data, "modes": tuple(data["modes"])})


class Pointwise(nn.Module):
    """A linear map over the channel axis: ``(B, in, ...)`` → ``(B, out, ...)``."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.linear = nn.Linear(in_channels, out_channels)

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """``W x + b``; with ``offset`` (broadcastable to ``(B, out, N)``, ``N`` the flattened
        grid, and standing in for ``b``) ``W x + offset``, in the same pass over the output."""
        # (out, in) @ (B, in, N): one batched matrix product on the channels-first layout,
        # without moving the channel axis last and back (two copies of the activations).
        weight = self.linear.weight.expand(x.shape[0], -1, -1)
        add = self.linear.bias[:, None] if offset is None else offset
        return torch.baddbmm(add, weight, x.flatten(2)).unflatten(2, x.shape[2:])


class FourierBlock(nn.Module):
    """``h ↦ σ(K h + W h)``: spectral convolution plus a pointwise path, ``(B, width, ...)``.

    The pointwise path's bias is added by the spectral layer (as its zero-frequency
    coefficient) and the spectral output by the pointwise product: one pass over the output.
    """

    def __init__(self, width: int, modes: tuple[int, int, int, int], activate: bool):
        super().__init__()
        self.spectral = SpectralConv(width, width, modes)
        self.pointwise = Pointwise(width, width)
        self.activate = activate

    def forward(self, h: torch.Tensor, slab: Slab | None = None) -> torch.Tensor:
        spectral = self.spectral(h, bias=self.pointwise.linear.bias, slab=slab)  # K h + b
        out = self.pointwise(h, offset=spectral.flatten(2))
        return nn.functional.gelu(out) if self.activate else out


class LadderOperator(nn.Module):
    """Fourier neural operator over ``(t, x, y, z)`` for many families and dimensions.

    ``forward(x, family)``: ``x`` ``(B, in_channels, T, X, Y, Z)`` (parameters arrive as channels
    of ``x``), ``family`` ``(B,)`` integer ids; returns ``(B, out_channels, T, X, Y, Z)``. The
    first ``out_channels`` input channels are the initial state ``u(0)`` per slot.

    Set ``checkpointing = True`` to recompute activations in the backward pass instead of
    keeping them (activation checkpointing): of the lift, each block and the projection. With
    checkpointing, ``offload`` (``"none"``, ``"host"``, ``"disk"``) moves the blocks' kept
    inputs off the device until the backward pass needs them
    (:mod:`~pdeladder.trainer.models.offload`).
    """

    name = "ladder_operator"

    def __init__(self, config: OperatorConfig):
        super().__init__()
        if config.in_channels < config.out_channels:
            raise ValueError("in_channels must include the initial state of every output slot")
        self.config = config
        width = config.width
        self.lift = nn.Sequential(
            Pointwise(config.in_channels + 4, 2 * width), nn.GELU(), Pointwise(2 * width, width)
        )
        self.family_embedding = nn.Embedding(config.families, width)
        self.blocks = nn.ModuleList(
            FourierBlock(width, config.modes, activate=i < config.layers - 1)
            for i in range(config.layers)
        )
        self.project = nn.Sequential(
            Pointwise(width, 2 * width), nn.GELU(), Pointwise(2 * width, config.out_channels)
        )
        if config.output == "state":  # (families, out_channels): g / GAIN_STEP, from g = 0
            self.gain = nn.Parameter(torch.zeros(config.families, config.out_channels))
        self.checkpointing = False
        self.offload = "none"

    def forward(
        self, x: torch.Tensor, family: torch.Tensor, slab: Slab | None = None
    ) -> torch.Tensor:
        """``(B, in_channels, T, X, Y, Z)``, ``(B,)`` → ``(B, out_channels, T, X, Y, Z)``.

        ``slab``: the part of the global grid that ``x`` holds when a sample is split across
        domain ranks (default: the whole grid); the output is the same part of the prediction.
        """
        cfg = self.config
        slab = input_slab(x, cfg.in_channels, self.name, slab)
        if family.shape != (x.shape[0],) or family.dtype != torch.long:
            raise UserInputError(
                f"{self.name}: family must be int64 ({x.shape[0]},), "
                f"got {family.dtype} {tuple(family.shape)}"
            )
        if family.numel() and (family.min() < 0 or family.max() >= cfg.families):
            raise UserInputError(f"{self.name}: family ids must lie in [0, {cfg.families})")
        # With checkpointing, each stage keeps only its input for the backward pass and
        # recomputes the rest: the lift's and projection's wide hidden layers as well as the blocks.
        checkpointing = self.checkpointing and torch.is_grad_enabled()
        stage = self.checkpointed if checkpointing else called
        coords = coordinates(x, slab)  # (B, 4, T, X, Y, Z)
        # The padding is split with the grid (Slab.padded).
        padded = slab.padded(padding(slab.shape, cfg.padding))
        h = stage(self.lifted, x, coords, family, padded)  # (B, width, padded T, X, Y, Z)
        with offloaded(self.offload if checkpointing else "none", x.device):
            for block in self.blocks:  # each keeps only its input h, which may be offloaded
                h = stage(block, h, padded)
        out = stage(self.projected, h, x.shape[2:])  # (B, out_channels, T, X, Y, Z)
        tau = coords[:, :1]  # (B, 1, T, X, Y, Z), t / t_end; 1 for steady problems
        initial = x[:, : cfg.out_channels]
        if cfg.output == "change":
            return initial + tau * out
        gain = GAIN_STEP * self.gain[family][:, :, None, None, None, None]  # (B, out, 1, ..)
        return torch.where(tau == 0, initial, gain * initial + out)

    def lifted(
        self, x: torch.Tensor, coords: torch.Tensor, family: torch.Tensor, padded: Slab
    ) -> torch.Tensor:
        """Inputs and coordinates lifted to ``width`` channels, plus the family embedding, then
        zero-padded to the ``padded`` slab: ``(B, width, *padded.local_shape)``."""
        h = self.lift[1](self.lift[0](torch.cat([x, coords], dim=1)))  # (B, 2·width, ..)
        shift = self.lift[2].linear.bias + self.family_embedding(family)  # (B, width)
        h = self.lift[2](h, offset=shift[:, :, None])  # (B, width, T, X, Y, Z)
        pad = [p - n for p, n in zip(padded.local_shape, x.shape[2:], strict=True)]
        return nn.functional.pad(h, [p for n in reversed(pad) for p in (0, n)])

    def checkpointed(self, fn, *args):
        """``fn(*args)``, recomputed in the backward pass but for the collectives of the blocks'
        transform (one for all blocks, set behind their seam), whose results are kept
        (:meth:`~pdeladder.trainer.layers.fft.SpectralTransform.checkpoint_contexts`)."""
        contexts = (
            self.blocks[0].spectral.transform.checkpoint_contexts
            if self.blocks
            else noop_context_fn
        )
        return checkpoint(fn, *args, use_reentrant=False, context_fn=contexts)

    def projected(self, h: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """The padding cropped to ``shape`` ``(T, X, Y, Z)``, then projected to the output slots."""
        return self.project(h[..., : shape[0], : shape[1], : shape[2], : shape[3]])


def called(fn, *args):
    return fn(*args)


def coordinates(x: torch.Tensor, slab: Slab | None = None) -> torch.Tensor:
    """Normalised coordinates of ``x``'s points on the global grid of ``slab`` (default: ``x``'s
    own grid): ``(B, 4, T, X, Y, Z)`` with ``t/t_end, x, y, z`` in ``[0, 1]`` (a singleton
    spatial axis is 0; a steady ``t`` axis is 1)."""
    slab = slab or Slab.whole(x.shape[2:])
    axes = [
        torch.linspace(0.0, 1.0, n, device=x.device, dtype=x.dtype)[lo:hi]
        if n > 1
        else torch.full((1,), 1.0 if a == 0 else 0.0, device=x.device, dtype=x.dtype)
        for a, (n, lo, hi) in enumerate(zip(slab.shape, slab.lo, slab.hi, strict=True))
    ]
    b = x.shape[0]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"))  # (4, T, X, Y, Z)
    return grid.expand(b, *grid.shape)


MODELS: dict[str, type[LadderOperator]] = {LadderOperator.name: LadderOperator}
