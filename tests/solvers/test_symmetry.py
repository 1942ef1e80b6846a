"""The unit box's symmetries: the group, the vector rule, inverses, and every built-in family
declaring them. That each family's solver data keep their residual under the group, and that
its walls are those the solver sets, are checks of the family contract (solvers/checks.py)."""

import numpy as np
import pytest
import torch

from pdeladder.solvers import family_names, get_family
from pdeladder.solvers.family import MASK
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.stencils import grad, interior
from pdeladder.solvers.symmetry import BoxSymmetry, box_group, family_group


@pytest.mark.parametrize(("dim", "size"), [(1, 2), (2, 8), (3, 48)])
def test_group_sizes_identity_first_and_distinct_images(dim, size):
    group = box_group(dim)
    assert len(group) == size and group[0].is_identity
    assert all(not g.is_identity for g in group[1:])
    shape = (1, 1, *[5 if a < dim else 1 for a in range(3)])
    field = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    images = {g.apply(field, ["s"], (), 1).numpy().tobytes() for g in group}
    assert len(images) == size  # a generic field tells every element apart


@pytest.mark.parametrize("dim", [2, 3])
def test_the_gradient_of_the_image_is_the_image_of_the_gradient(dim):
    """A scalar φ and its gradient as a vector: moving both by an element equals taking the
    gradient of the moved φ, for every element (exact: central differences are symmetric)."""
    grid = Grid(dim, 7, 1, 0.0)
    x = torch.linspace(0, 1, 7, dtype=torch.float64)
    axes = torch.meshgrid(
        *[x if a < dim else torch.zeros(1, dtype=x.dtype) for a in range(3)], indexing="ij"
    )
    phi = torch.sin(3 * axes[0] + 1) * torch.cos(2 * axes[1] - 0.5) + axes[2] ** 2 * axes[0]
    phi = (phi + 0.3 * axes[1] ** 3)[None, None]  # (1, 1, X, Y, Z): no symmetry of its own

    def with_gradient(f):  # (1, 1 + dim, X', Y', Z'): φ and ∇φ at the interior points
        return torch.cat([interior(f, dim), *[g[:, None] for g in grad(f[:, 0], grid)]], dim=1)

    names = ["phi", "gx", "gy", "gz"][: 1 + dim]
    vectors = (("gx", "gy", "gz"),)
    for g in box_group(dim):
        moved = g.apply(with_gradient(phi), names, vectors, channel_axis=1)
        assert torch.allclose(moved, with_gradient(g.apply(phi, ["phi"], (), 1)), atol=1e-12)
    turned = BoxSymmetry(perm=(1, 0, *range(2, dim)), flips=(True,) + (False,) * (dim - 1))
    wrong = turned.apply(with_gradient(phi), names, (), channel_axis=1)  # components as scalars
    assert not torch.allclose(wrong, with_gradient(turned.apply(phi, ["phi"], (), 1)), atol=1e-3)


#: Built-in families on their whole box whose box has no symmetry, and why.
UNSYMMETRIC = {"chip_stack": "layers along its last axis, a heat sink on its top face only"}


@pytest.mark.parametrize("name", family_names())
def test_every_built_in_box_family_is_box_symmetric(name):
    """So the contract's symmetry check (solvers/checks.py) tests the whole group on each; a
    family on a domain inside its box (a mask: obstacles, an inflow) has no box symmetry, nor
    one whose box's axes differ (:data:`UNSYMMETRIC`)."""
    family = get_family(name)
    masked = MASK in family.channel_names(max(family.dims))
    assert family.box_symmetric == (not masked and name not in UNSYMMETRIC)


def test_a_vector_with_missing_components_is_refused():
    g = box_group(2)[1]
    with pytest.raises(ValueError, match="1 of 2 components"):
        g.channel_map(["u", "bx"], (("bx", "by"),))
    assert np.array_equal(g.channel_map(["u"], (("bx", "by"),))[0], [0])


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_every_element_is_undone_by_its_inverse(dim):
    shape = (1, 4, 2, *[5 if a < dim else 1 for a in range(3)])  # (B, C, T, X, Y, Z)
    fields = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    names, vectors = ["u", "v", "w", "p"], (("u", "v", "w"),)
    group = box_group(dim)
    for g in group:
        back = g.inverse().apply(g.apply(fields, names, vectors, 1), names, vectors, 1)
        assert torch.equal(back, fields), g
        assert g.inverse() in group and g.inverse().inverse() == g


@pytest.mark.parametrize(
    ("name", "dim", "size"),
    [("channel_flow", 2, 2), ("channel_wake", 2, 2), ("chip_stack", 2, 2), ("chip_stack", 3, 8),
     ("heat", 3, 48)],
)  # fmt: skip
def test_a_family_keeps_the_symmetries_of_its_domain(name, dim, size):
    """A channel's reflection across its centre line; a chip stack's lateral reflections and,
    on its square footprint, the swap of x and y, never a move of the stack's axis; a box
    family the whole group."""
    family = get_family(name)
    group = family_group(family, dim)
    assert len(group) == size and group[0].is_identity
    fixed = [a for a in range(dim) if a not in family.symmetric_axes(dim)]
    assert all(g.perm[a] == a and not g.flips[a] for g in group for a in fixed)
