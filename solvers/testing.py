"""The contract every family must meet, as a pytest base class subclassed once per family
(the pattern of ``zarr.testing.store.StoreTests``). Imported by tests only; needs pytest.

Subclass it, set ``family`` (and any smaller study plans), and pytest runs every check::

    class TestHeat(FamilyContract):
        family = "heat"
"""

import json
import os
import subprocess
import sys
from typing import ClassVar

import numpy as np
import pytest
import torch

from pdeladder.solvers.convergence import study
from pdeladder.solvers.family import Family
from pdeladder.solvers.registry import get_family


class FamilyContract:
    #: registry name of the family under test
    family: ClassVar[str]
    #: dimension of the sample-level checks (solve, determinism, residual, MPI)
    dim: ClassVar[int] = 2
    #: small sample used by the solve checks: (resolution, snapshots)
    sample_size: ClassVar[tuple[int, int]] = (17, 5)
    #: convergence studies run in CI: {(dim, kind): (levels, fixed)}; families shrink them to fit
    studies: ClassVar[dict[tuple[int, str], tuple[tuple[int, ...] | None, int | None]]] = {}
    #: resolutions of the residual check (coarse, fine) and the factor the residual must fall by
    residual_resolutions: ClassVar[tuple[int, int]] = (17, 33)
    residual_drop: ClassVar[float] = 0.7

    @pytest.fixture(scope="class")
    @classmethod
    def fam(cls) -> Family:
        return get_family(cls.family)

    @pytest.fixture(scope="class")
    @classmethod
    def sample(cls, fam: Family):
        res, snaps = cls.sample_size
        return fam.run(fam.Params(), fam.grid(cls.dim, res, 1 if fam.steady else snaps), seed=7)

    # -- metadata -------------------------------------------------------------------------

    def test_metadata_is_complete(self, fam: Family) -> None:
        assert fam.name and fam.title and fam.equation and fam.boundary_conditions
        assert set(fam.dims) <= {1, 2, 3} and fam.dims
        assert fam.channels and len({c.name for c in fam.channels}) == len(fam.channels)
        assert any(c.role == "output" for c in fam.channels)
        for row in fam.Params.describe():
            assert (
                row["low"] is not None and row["high"] is not None and row["low"] < row["high"]
            ), row
            assert row["low"] <= row["default"] <= row["high"], row
            assert row["description"], row
        if fam.difficulty is not None:
            assert fam.difficulty in fam.Params.names()

    def test_parameter_out_of_range_is_rejected(self, fam: Family) -> None:
        from pdeladder.errors import UserInputError

        name = fam.Params.names()[0]
        _, high = fam.Params.ranges()[name]
        with pytest.raises(UserInputError, match=name):
            fam.parse_params({name: high * 2 + 1})
        with pytest.raises(UserInputError, match="nonsense"):
            fam.parse_params({"nonsense": 1.0})

    # -- one sample -------------------------------------------------------------------------

    def test_sample_shape_and_status(self, fam: Family, sample) -> None:
        assert sample.ok, sample.stats.reason
        g = sample.grid
        assert sample.fields.shape == (g.snapshots, len(fam.channels_for(g.dim)), *g.shape)
        assert sample.fields.dtype == np.float32
        assert np.all(np.isfinite(sample.fields))
        assert sample.stats.dofs > 0 and sample.stats.wall_s > 0
        assert fam.steady or sample.stats.steps >= g.snapshots - 1
        json.dumps(sample.provenance)  # provenance is JSON-able

    def test_same_seed_is_bitwise_identical_and_seed_matters(self, fam: Family, sample) -> None:
        again = fam.run(sample.params, sample.grid, seed=sample.seed)
        assert np.array_equal(again.fields, sample.fields)
        other = fam.run(sample.params, sample.grid, seed=sample.seed + 1)
        assert not np.array_equal(other.fields, sample.fields)

    def test_drawn_inputs_are_the_solves_snapshot_zero(self, fam: Family, sample) -> None:
        drawn = fam.draw_inputs(sample.params, sample.grid, sample.seed)
        assert drawn.dtype == np.float32 and drawn.shape == sample.fields.shape[1:]
        # The initial state and inputs; a steady family's snapshot 0 is its solution, of which
        # only the input channels are drawn, and the rest is zero.
        drawn_channels = np.array(
            [not fam.steady or c.role == "input" for c in fam.channels_for(sample.grid.dim)]
        )
        np.testing.assert_array_equal(drawn[drawn_channels], sample.fields[0, drawn_channels])
        assert not np.any(drawn[~drawn_channels])
        other = fam.draw_inputs(sample.params, sample.grid, sample.seed + 1)
        assert not np.array_equal(other[drawn_channels], drawn[drawn_channels])

    # -- the residual agrees with the solver -------------------------------------------------

    def residual_rms(self, fam: Family, fields: np.ndarray, params, grid) -> float:
        stored = torch.from_numpy(fields).double()  # (T, C, X, Y, Z)
        r = fam.residual(stored.movedim(0, 1)[None], torch.from_numpy(params.vector())[None], grid)
        return float(torch.sqrt(torch.mean(r**2)))

    def residual_grids(self, fam: Family):
        """Grids of the residual check: space and time refined together."""
        coarse, fine = self.residual_resolutions
        snaps = self.sample_size[1]
        if fam.steady:
            return fam.grid(self.dim, coarse, 1), fam.grid(self.dim, fine, 1)
        return (fam.grid(self.dim, coarse, snaps), fam.grid(self.dim, fine, 2 * (snaps - 1) + 1))

    def test_residual_is_small_on_solver_data_and_falls_with_resolution(self, fam: Family) -> None:
        params = fam.Params()
        coarse, fine = (fam.run(params, g, seed=3) for g in self.residual_grids(fam))
        assert coarse.ok and fine.ok
        r_coarse = self.residual_rms(fam, coarse.fields, params, coarse.grid)
        r_fine = self.residual_rms(fam, fine.fields, params, fine.grid)
        assert r_fine < self.residual_drop * r_coarse, (r_coarse, r_fine)
        # A perturbation the size of the field's variation makes the residual large.
        rng = np.random.default_rng(0)
        noisy = fine.fields + 0.1 * fine.fields.std() * rng.standard_normal(
            fine.fields.shape
        ).astype(np.float32)
        assert self.residual_rms(fam, noisy, params, fine.grid) > 10 * r_fine

    # -- convergence -------------------------------------------------------------------------

    def test_convergence_orders(self, fam: Family) -> None:
        plans = self.studies or {(self.dim, "space"): (None, None)}
        for (dim, kind), (levels, fixed) in plans.items():
            s = study(fam, dim, kind, levels=levels, fixed=fixed)
            assert s.passed, s.as_dict()

    # -- parallel ----------------------------------------------------------------------------

    @pytest.mark.mpi
    def test_two_ranks_agree_with_one(self, fam: Family, sample, tmp_path) -> None:
        res, snaps = self.sample_size
        script = (
            "from mpi4py import MPI\n"
            "import numpy as np, sys\n"
            "from pdeladder.solvers import get_family\n"
            f"fam = get_family({self.family!r})\n"
            f"s = fam.run(fam.Params(), fam.grid({self.dim}, {res}, {1 if fam.steady else snaps}), seed=7, comm=MPI.COMM_WORLD)\n"
            "assert s.ok, s.stats.reason\n"
            "if MPI.COMM_WORLD.rank == 0: np.save(sys.argv[1], s.fields)\n"
        )
        out = str(tmp_path / "parallel.npy")
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(
            [mpiexec, "-n", "2", sys.executable, "-c", script, out],
            check=True,
            env=env,
            timeout=600,
        )
        parallel = np.load(out)
        scale = float(np.abs(sample.fields).max())
        np.testing.assert_allclose(parallel, sample.fields, atol=1e-5 * scale, rtol=0)
