"""The unit box's symmetries: the group, the vector rule, and every family's solver data mapped to
data whose residual is the image of the residual (same norm), on real DOLFINx solves; and the
walls every family's channels declare, against the same solves."""

import numpy as np
import pytest
import torch

from pdeladder.solvers import family_names, get_family
from pdeladder.solvers.grid import Grid
from pdeladder.solvers.stencils import grad, interior, with_walls
from pdeladder.solvers.symmetry import BoxSymmetry, box_group


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


@pytest.fixture(scope="module")
def solved() -> dict[str, tuple[torch.Tensor, torch.Tensor, Grid]]:
    """One 2D sample of every family, 17², 9 snapshots, as ``(fields (1, C, T, X, Y, Z), params, grid)``."""
    out = {}
    for name in family_names():
        fam = get_family(name)
        grid = fam.grid(2, 17, 1 if fam.steady else 9)
        sample = fam.run(fam.Params(), grid, seed=3)
        assert sample.ok, (name, sample.stats.reason)
        fields = torch.from_numpy(sample.fields).double().movedim(1, 0)[None]
        out[name] = fields, torch.from_numpy(fam.Params().vector())[None], grid
    return out


@pytest.mark.parametrize("name", family_names())
def test_every_image_of_a_solution_has_the_same_residual(solved, name):
    fam = get_family(name)
    assert fam.box_symmetric
    fields, params, grid = solved[name]
    residual = fam.residual(fields, params, grid)
    norm = torch.linalg.vector_norm(residual)
    assert norm > 0
    for g in box_group(2)[1:]:
        image = g.apply(fields, fam.channel_names(2), fam.vectors, channel_axis=1)
        assert not torch.equal(image, fields)
        moved = fam.residual(image, params, grid)
        assert torch.allclose(torch.linalg.vector_norm(moved), norm, rtol=1e-10), g
        # residual rows of a vector equation are a vector: their image is the moved residual
        if residual.shape[1] == fields.shape[1]:
            expected = g.apply(residual, fam.channel_names(2), fam.vectors, channel_axis=1)
            assert torch.allclose(moved, expected, rtol=1e-10, atol=1e-12 * norm), g
    if fam.vectors:  # the vector rule matters: components moved as scalars break the equation
        turned = BoxSymmetry(perm=(1, 0), flips=(True, False))
        wrong = turned.apply(fields, fam.channel_names(2), (), channel_axis=1)
        assert torch.linalg.vector_norm(fam.residual(wrong, params, grid)) > 2 * norm


@pytest.mark.parametrize("name", family_names())
def test_every_family_declares_the_walls_its_solver_imposes(solved, name):
    """Every predicted channel but a pressure has a wall condition; the solver's data are 0 on
    the walls of a ``"zero"`` channel (Dirichlet, imposed at the nodes), so completing them by
    :func:`with_walls` changes nothing there."""
    fam = get_family(name)
    fields, _, _ = solved[name]
    channels = fam.channels_for(2)
    assert not {"zero", "no_flux"} <= {c.wall for c in channels}  # one rule per family
    walls = [c.wall for c in channels]
    assert all(c.wall is not None for c in channels if c.role == "output" and c.name != "p") or (
        fam.steady and walls == [None, "zero"]
    )
    completed = with_walls(fields, walls, [[False] * len(walls)] * 2, 2)
    if "zero" in walls:
        assert torch.equal(completed, fields)


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
