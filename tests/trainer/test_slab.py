"""Slabs tile the grid: the ranks' grid points cover ``[0, X)`` and their parts of the padded
grid cover ``[0, X + pad)``, each without gap or overlap, for even splits (every rank holding an
even share of the points and of the padding) and for explicit x cuts; bad tilings fail in one
line. A domain group's slab carries the group."""

import itertools

import pytest

from pdeladder.errors import UserInputError
from pdeladder.slabs import DomainTiling, padding
from pdeladder.trainer.distributed.collectives import DomainGroup

GRID = (6, 33, 7, 1)


@pytest.mark.parametrize(
    "tiling",
    [
        DomainTiling(x=2, padding=0.25),
        DomainTiling(x=4, padding=0.25),
        DomainTiling(x=5, padding=0.25),
        DomainTiling(t=2, x=2, padding=0.25),
        DomainTiling(x=3, padding=0.25, x_cuts=(0, 11, 22, 33)),
        DomainTiling(x=4),
    ],
)
def test_slabs_tile_the_grid_and_the_padded_grid(tiling):
    pad = padding(GRID, tiling.padding)
    slabs = [tiling.slab(GRID, i) for i in range(tiling.size)]
    for a, parts in ((0, tiling.t), (1, tiling.x)):
        row = [s for s in slabs if all(s.lo[b] == 0 for b in (0, 1) if b != a)]
        assert len(row) == parts
        data = [(s.lo[a], s.hi[a]) for s in row]
        held = sorted(r for s in row for r in s.padded(pad).ranges(a))
        for spans, end in ((data, GRID[a]), (held, GRID[a] + pad[a])):
            assert spans[0][0] == 0 and spans[-1][1] == end
            assert all(hi == lo for (_, hi), (lo, _) in itertools.pairwise(spans))
        assert all(hi - lo >= 2 for lo, hi in data)
        if parts > 1 and tiling.x_cuts is None:  # even shares of the points and the padding
            points = [hi - lo for lo, hi in data]
            padded = [s.padded(pad).local_shape[a] for s in row]
            assert max(points) - min(points) <= 1 and max(padded) - min(padded) <= 2


def test_a_padded_slab_holds_its_points_then_its_padding():
    pad = padding(GRID, 0.25)  # 9 x points appended to 33
    first, last = (DomainTiling(x=2, padding=0.25).slab(GRID, i).padded(pad) for i in (0, 1))
    assert first.ranges(1) == ((0, 16), (33, 37)) and first.local_shape[1] == 20
    assert last.ranges(1) == ((16, 33), (37, 42)) and last.local_shape[1] == 22


def test_a_rank_with_one_grid_point_is_refused():
    with pytest.raises(UserInputError, match="leave a rank 1; each needs at least 2"):
        DomainTiling(x=4, padding=0.25).slab((6, 7, 1, 1), 0)


def test_a_ranks_slab_carries_its_domain_group_which_is_no_part_of_the_box():
    """The losses, halos and symmetries read the group from the slab (``Slab.domain``); the
    padded slab keeps it; the box's equality, hash and repr ignore it."""
    tiling = DomainTiling(x=2, padding=0.25)
    domain = DomainGroup(None, tiling, (0, 1), 1)
    held, bare = domain.slab(GRID), tiling.slab(GRID, 1)
    assert held.domain is domain and bare.domain is None
    assert held == bare and hash(held) == hash(bare) and repr(held) == repr(bare)
    assert held.padded(padding(GRID, 0.25)).domain is domain
    assert bare.held_by(domain).domain is domain and held.held_by(None).domain is None
