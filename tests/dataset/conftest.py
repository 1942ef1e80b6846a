"""Fixtures of the dataset tests: small real heat samples, stores on disk and in memory, and a
real S3 endpoint (moto's server on 127.0.0.1) for ``s3://`` stores."""

from mpi4py import MPI  # noqa: F401  (loaded before DOLFINx, which get_family("heat") imports)

import os
import uuid
from collections.abc import Iterator

import fsspec
import numpy as np
import pytest
import zarr

from pdeladder.dataset.store import open_store
from pdeladder.solvers import Grid, Sample, SolveStats, get_family

HEAT = get_family("heat")
GRID = HEAT.grid(2, 9, 5)  # (T, C, X, Y, Z) = (5, 1, 9, 9, 1)


@pytest.fixture(scope="session")
def heat_samples() -> list[Sample]:
    """Four real heat solves (2D, 9x9 points, 5 snapshots) with different parameters."""
    return [
        HEAT.run(HEAT.parse_params({"diffusivity": 0.005 + 0.02 * k}), GRID, seed=k)
        for k in range(4)
    ]


def failed_sample(seed: int = 99) -> Sample:
    """A sample whose solve failed: status and reason, no fields."""
    stats = SolveStats(status="failed", reason="Krylov solve diverged")
    return Sample("heat", None, GRID, HEAT.parse_params(), seed, stats)


def array_sample(grid: Grid, seed: int, channels: int = 1) -> Sample:
    """A heat-shaped sample with seeded random fields, for tests about the store alone."""
    shape = (grid.snapshots, channels, *grid.shape)
    fields = np.random.default_rng(seed).normal(1.0, 2.0, shape).astype(np.float32)
    return Sample("heat", fields, grid, HEAT.parse_params(), seed, SolveStats(dofs=grid.points))


def stamp_version(url: str, version: int, path: str = "") -> None:
    """Give the store at ``url`` (its root, or its group at ``path``) the attribute
    ``format_version = version``, as an older pdeladder would have written it."""
    zarr.open_group(url, mode="r+", path=path).update_attributes({"format_version": version})


def family_group(url: str, family: str, grid: Grid, samples: int = 5, seed: int = 0):
    """A group of ``samples`` seeded random samples of ``family`` (for the export tests): input
    channels constant in time as a solver stores them, the first parameter spread over its
    range (sample-varying), the others at their defaults; seeds ``10 + i``."""
    fam = get_family(family)
    g = open_store(url, "a").require_group("s", fam, grid, n_samples=samples)
    rng = np.random.default_rng(seed)
    first, (low, high) = next(iter(fam.Params.ranges().items()))
    inputs = [c.get("role", "output") == "input" for c in g.attrs["channels"]]
    for i in range(samples):
        fields = rng.normal(size=(grid.snapshots, len(inputs), *grid.shape)).astype(np.float32)
        fields[:, inputs] = fields[:1, inputs]
        params = fam.parse_params({first: low + (high - low) * (i + 1) / (samples + 1)})
        g.write(i, Sample(family, fields, grid, params, 10 + i, SolveStats(dofs=grid.points)))
    return g


@pytest.fixture(params=["local", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh store location: a directory under tmp_path, or a memory:// URL."""
    if request.param == "local":
        yield str(tmp_path / "store")
        return
    path = f"/pdeladder-test-{uuid.uuid4().hex}"
    yield f"memory://{path}"
    fs = fsspec.filesystem("memory")
    if fs.exists(path):
        fs.rm(path, recursive=True)


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """An S3 bucket on moto's server (127.0.0.1, free port); ``AWS_ENDPOINT_URL`` points at it."""
    server_mod = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("pdeladder-test")
    yield "pdeladder-test"
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()
