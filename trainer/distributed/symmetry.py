"""The unit box's symmetries (:mod:`pdeladder.solvers.symmetry`) applied to a sample split in x
slabs over a domain group: every element, as on one rank, so that ``--domain-ranks k`` changes
speed and memory only (symmetry augmentation and symmetrized prediction use the whole group).

An element that keeps x in place (and unreflected) moves each slab alone. Any other needs rows
of other slabs: new x row ``i`` comes from old row ``i`` (or ``X - 1 - i`` where x is reflected)
of the old axis ``perm[0]``. If that axis is x itself (a reflection), rank ``r``'s slab
``[lo, hi)`` takes the old rows ``[X - hi, X - lo)`` from whichever ranks hold them (one rank
for even tilings, two or more for uneven ones); if it is y or z (a permutation that moves x, a
distributed transpose), every rank sends each rank ``r`` all of its own x rows cut to the y (or
z) range that ``r``'s new x rows come from. Either is one uneven ``all_to_all_single`` in which
each rank receives exactly the old points of its new slab, a box of the old grid, and then
applies the element to that box locally (:meth:`BoxSymmetry.apply`: the permutation, the
reflections and the vectors' turn). No rank holds more than its slab's points.

It is data movement with no autograd: what it moves (augmentation's inputs and targets,
symmetrized prediction under ``no_grad``) needs no gradient.
"""

from collections.abc import Sequence

import torch
import torch.distributed as dist

from pdeladder.slabs import Slab
from pdeladder.solvers.symmetry import BoxSymmetry


def move(
    fields: torch.Tensor,
    g: BoxSymmetry,
    channels: Sequence[str],
    vectors: Sequence[Sequence[str]],
    channel_axis: int,
    slab: Slab | None = None,
) -> torch.Tensor:
    """The image under ``g`` of ``fields``, whose last three axes ``(x, Y, Z)`` hold this rank's
    x rows ``[slab.lo[1], slab.hi[1])`` of a sample of the cube grid ``slab.shape`` split over
    ``slab.domain`` (and whose other axes, time among them, are the same on the ranks holding
    the same time range): this rank's rows of the image, the shape of ``fields``. Arguments as
    :meth:`BoxSymmetry.apply`, which it is without a slab or its domain group.

    Every rank of the group must call it with the same ``g``, in the same order.
    """
    domain = slab.domain if slab is not None else None
    if domain is None or domain.tiling.x == 1 or (g.perm[0] == 0 and not g.flips[0]):
        return g.apply(fields, channels, vectors, channel_axis)
    if torch.is_grad_enabled() and fields.requires_grad:
        raise ValueError("move: a sharded symmetry has no gradient; move data, not activations")
    boxes = _boxes(slab, fields.device)
    t, (lo, hi) = (slab.lo[0], slab.hi[0]), (slab.lo[1], slab.hi[1])
    size, x_dim, source = slab.shape[1], fields.ndim - 3, g.perm[0]

    def wanted(lo: int, hi: int) -> tuple[int, int]:
        """The old rows along ``source`` that new x rows ``[lo, hi)`` come from."""
        return (size - hi, size - lo) if g.flips[0] else (lo, hi)

    sends, shapes = [], []
    for peer_t, (peer_lo, peer_hi) in boxes:
        if peer_t != t:  # another time range: nothing either way
            sends.append(fields.new_empty(0))
            shapes.append((0,))
            continue
        to_peer, from_peer = wanted(peer_lo, peer_hi), wanted(lo, hi)
        shape = list(fields.shape)
        if source == 0:  # x reflected: the rows both hold and want
            a, b = max(lo, to_peer[0]), min(hi, to_peer[1])
            sends.append(fields.narrow(x_dim, a - lo, b - a) if b > a else fields.new_empty(0))
            shape[x_dim] = max(min(peer_hi, from_peer[1]) - max(peer_lo, from_peer[0]), 0)
        else:  # x from y or z: all own rows, cut to the peer's range of the source axis
            sends.append(fields.narrow(x_dim + source, to_peer[0], to_peer[1] - to_peer[0]))
            shape[x_dim], shape[x_dim + source] = peer_hi - peer_lo, hi - lo
        shapes.append(tuple(shape))
    send = torch.cat([s.reshape(-1) for s in sends])
    counts = [s.numel() for s in sends]
    got = [int(torch.Size(s).numel()) for s in shapes]
    out = fields.new_empty(sum(got))
    domain.sent["all_to_all"] += send.numel() * send.element_size()
    domain.runs["all_to_all"] += 1
    dist.all_to_all_single(out, send, got, counts, group=domain.group)
    # the old box this rank's new slab comes from, its x rows in order
    order = sorted(range(len(boxes)), key=lambda i: boxes[i][1][0])
    parts = out.split(got)
    box = torch.cat([parts[i].view(shapes[i]) for i in order if got[i]], dim=x_dim)
    return g.apply(box, channels, vectors, channel_axis)


def _boxes(slab: Slab, device: torch.device) -> list[tuple[tuple, tuple]]:
    """Every rank's ``((t_lo, t_hi), (x_lo, x_hi))``, by index in the group ``slab.domain``:
    gathered, so that any tiling works (the loader's even one, ``predict``'s cut at chunk
    boundaries)."""
    domain = slab.domain
    mine = torch.tensor([slab.lo[0], slab.hi[0], slab.lo[1], slab.hi[1]], device=device)
    every = mine.new_empty(domain.size * 4)
    domain.sent["all_gather"] += mine.numel() * mine.element_size()
    domain.runs["all_gather"] += 1
    dist.all_gather_single(every, mine, group=domain.group)
    return [((a, b), (c, d)) for a, b, c, d in every.view(-1, 4).tolist()]
