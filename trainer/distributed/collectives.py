"""The domain group of ranks that share one sample, and the collectives with autograd that the
sharded model and losses use.

Gradient convention: every rank's backward produces the gradient of the *global* loss with
respect to what that rank holds: its slab of the activations, and its partial share of each
parameter's gradient (the shares of a domain group sum to the unsharded gradient).

- :func:`scatter_sum` and :func:`gather_shares`: the two halves of an all-reduce (a ring
  all-reduce is a reduce-scatter, then an all-gather) with work between them: the kept Fourier
  block, summed and split in equal shares of its rows, which each rank mixes alone, then
  gathered whole again. The adjoint of a reduce-scatter is an all-gather and vice versa, so each
  one's backward is the other.
- :func:`sum_partials`: the same all-reduce in one piece, where every rank then mixes the whole
  kept block itself (fewer collectives for the mixing done ``k`` times); its backward is again
  an all-reduce, of the ranks' partial gradients of the sum (each evaluates it at its own
  points).
- :func:`sum_replicated`: forward all-reduce of a reduction (a loss's sums over points) that
  every rank then uses in the *same* computation; its backward is the identity, since each
  rank's gradient of the replicated result is already the whole gradient.

Each call adds its payload to the group's :attr:`DomainGroup.sent` counter (bytes handed to the
collective; a ring all-reduce moves ``2 (k - 1) / k`` of it per rank) and one to
:attr:`DomainGroup.runs`. A reduce-scatter and the all-gather that completes it count as one
all-reduce of the reduce-scatter's input, under ``"all_reduce"``: the same bytes on the wire.

Activation checkpointing recomputes a stage's forward pass in the backward pass; the forward
collectives in it do not run again: :func:`replayed` (the checkpoint's ``context_fn``) keeps
each one's result from the forward pass and hands it back, bit for bit, to the recomputation.
"""

from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from pdeladder.slabs import SPLIT_AXES, DomainTiling, Slab


@dataclass(frozen=True)
class DomainGroup:
    """The ``tiling.size`` ranks that hold slabs of the same sample.

    Attributes:
        group: their process group (``None``: the default group).
        tiling: how they tile a sample.
        ranks: their global ranks, by index in the group.
        index: this rank's index in the group.
        sent: bytes handed to each kind of collective since the counter was last cleared.
        runs: collectives run, by kind (``"reduce_scatter"``, ``"all_gather"``,
            ``"all_reduce"``), since the counter was last cleared.
    """

    group: dist.ProcessGroup | None
    tiling: DomainTiling
    ranks: tuple[int, ...]
    index: int
    sent: Counter = field(default_factory=Counter, compare=False)
    runs: Counter = field(default_factory=Counter, compare=False)

    @property
    def size(self) -> int:
        return self.tiling.size

    def slab(self, shape: tuple[int, ...]) -> Slab:
        """This rank's slab of a sample whose grid is ``shape`` ``(T, X, Y, Z)``, carrying this
        group (``Slab.domain``)."""
        return self.tiling.slab(shape, self.index).held_by(self)

    def neighbour(self, axis: str, step: int) -> int | None:
        """Global rank of the group's rank ``step`` (±1) parts away along ``axis`` ("t" or "x"),
        or ``None`` past the first or the last part."""
        it, ix = self.tiling.coordinate(self.index)
        parts = (it, ix)
        a = SPLIT_AXES[axis]
        moved = parts[a] + step
        if not 0 <= moved < (self.tiling.t, self.tiling.x)[a]:
            return None
        index = self.tiling.index(*(moved if b == a else parts[b] for b in (0, 1)))
        return self.ranks[index]


class _Replay:
    """The results of the forward collectives of one checkpointed stage, in the order they ran,
    from its forward pass to its recomputation (which takes each once). They are small: a kept
    block's share ``(s, B, C)`` and the gathered block ``(k·s, B, C)`` per spectral layer."""

    def __init__(self):
        self.results: deque[torch.Tensor] = deque()
        self.replaying = False

    @contextmanager
    def active(self, replaying: bool) -> Iterator[None]:
        self.replaying = replaying
        token = _REPLAY.set(self)
        try:
            yield
        finally:
            _REPLAY.reset(token)


_REPLAY: ContextVar[_Replay | None] = ContextVar("pdeladder_replay", default=None)


def replayed():
    """``context_fn`` of :func:`torch.utils.checkpoint.checkpoint` (non-reentrant): its forward
    pass keeps the results of the forward collectives run in it, its recomputation reuses them
    instead of communicating again."""
    replay = _Replay()
    return replay.active(False), replay.active(True)


def _once(
    collective: Callable[[torch.Tensor, DomainGroup], torch.Tensor],
    x: torch.Tensor,
    domain: DomainGroup,
) -> torch.Tensor:
    """``collective(x, domain)`` in a forward pass; inside a checkpointed stage, its result kept
    for the stage's recomputation, which gets it back instead of running it."""
    replay = _REPLAY.get()
    if replay is not None and replay.replaying:
        return replay.results.popleft()
    out = collective(x, domain)
    if replay is not None:
        replay.results.append(out.detach())  # a new tensor: the recomputation sets its history
    return out


def _all_reduce(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    out = x.contiguous().clone()
    domain.sent["all_reduce"] += out.numel() * out.element_size()
    domain.runs["all_reduce"] += 1
    dist.all_reduce(out, group=domain.group)
    return out


def _reduce_scatter(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    x = x.contiguous()
    domain.sent["all_reduce"] += x.numel() * x.element_size()  # with its all-gather: see above
    domain.runs["reduce_scatter"] += 1
    out = x.new_empty(x.shape[0] // domain.size, *x.shape[1:])
    dist.reduce_scatter_single(out, x, group=domain.group)
    return out


def _all_gather(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    x = x.contiguous()
    domain.runs["all_gather"] += 1
    out = x.new_empty(x.shape[0] * domain.size, *x.shape[1:])
    dist.all_gather_single(out, x, group=domain.group)
    return out


def _identity(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    return x


class _Collective(torch.autograd.Function):
    """``forward(x, domain)`` (run once: :func:`_once`) with ``backward(grad, domain)`` as its
    backward pass: the collective's adjoint under the module's gradient convention."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, domain: DomainGroup, forward, backward) -> torch.Tensor:
        ctx.domain, ctx.adjoint = domain, backward
        return _once(forward, x, domain)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.adjoint(grad, ctx.domain), None, None, None


def sum_replicated(x: torch.Tensor, domain: DomainGroup | None) -> torch.Tensor:
    """The sum of every domain rank's ``x``, consumed identically by all (see the module
    docstring); ``x`` itself without a domain group."""
    if domain is None or domain.size == 1:
        return x
    return _Collective.apply(x, domain, _all_reduce, _identity)


def sum_partials(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    """The sum of every domain rank's ``x``, which each rank then uses in its own computation
    (its gradient a partial one, summed in the backward pass)."""
    return _Collective.apply(x, domain, _all_reduce, _all_reduce)


def scatter_sum(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    """Share ``domain.index`` of the sum of every domain rank's ``x`` ``(k · s, ...)``: rows
    ``[index · s, (index + 1) · s)``, ``(s, ...)``."""
    return _Collective.apply(x, domain, _reduce_scatter, _all_gather)


def gather_shares(x: torch.Tensor, domain: DomainGroup) -> torch.Tensor:
    """Every domain rank's share ``x`` ``(s, ...)``, concatenated in rank order ``(k · s, ...)``."""
    return _Collective.apply(x, domain, _all_gather, _reduce_scatter)


def gather_x(x: torch.Tensor, slab: Slab) -> torch.Tensor:
    """The whole x axis of ``x`` ``(..., x, Y, Z)``, of which each rank of ``slab.domain`` holds
    the rows ``[slab.lo[1], slab.hi[1])`` (every rank the same other axes): every rank gets all
    ``slab.shape[1]`` rows, in order (uneven slabs too). Data movement, no autograd."""
    domain = slab.domain
    bounds = torch.tensor([slab.lo[1], slab.hi[1]], device=x.device)
    domain.sent["all_gather"] += bounds.numel() * bounds.element_size()
    every = _all_gather(bounds, domain).view(-1, 2).tolist()
    widest = max(hi - lo for lo, hi in every)
    rows = x.movedim(-3, 0)
    padded = torch.cat([rows, rows.new_zeros(widest - len(rows), *rows.shape[1:])])
    domain.sent["all_gather"] += padded.numel() * padded.element_size()
    parts = _all_gather(padded, domain).split(widest)
    whole = torch.cat(
        [
            p[: hi - lo]
            for (lo, hi), p in sorted(zip(every, parts, strict=True), key=lambda e: e[0][0])
        ]
    )
    return whole.movedim(0, -3)
