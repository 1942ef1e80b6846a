"""Every bad curriculum file is one line on stderr and exit code 2 from `pdeladder curriculum
validate` (issue 32): undecodable, too deep, alias bombs, wrong types, absurd sizes, a grid too
coarse for the group's parameters; and `solve --snapshots 0` and a grid too coarse for its
sample are refused before any solve."""

import time
from pathlib import Path

import pytest

GOOD = """name: ok
seed: 1
stages:
  - name: s1
    families:
      - {family: heat, dims: [1], resolutions: [9], samples: SAMPLES, snapshots: 3}
    training: {steps: 2, batch_size: 2, workers: WORKERS}
"""
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)

FILES = [
    pytest.param(b"name: \xff\xfe bad\n", "not UTF-8", id="non-utf8"),
    pytest.param(b"[" * 20000 + b"]" * 20000, "nested too deeply", id="20000-deep"),
    pytest.param(BOMB.encode(), "aliases expanded", id="alias-bomb"),
    pytest.param(b"a: &a [*a]\n", "alias", id="recursive-alias"),
    pytest.param(
        GOOD.replace("SAMPLES", "4").replace("WORKERS", "true").encode(),
        "workers",
        id="workers-true",
    ),
    pytest.param(
        GOOD.replace("SAMPLES", "1000000000000").replace("WORKERS", "1").encode(),
        "samples",
        id="samples-1e12",
    ),
    pytest.param(
        GOOD.replace("heat", "advection_diffusion")
        .replace("SAMPLES", "2")
        .replace("WORKERS", "1")
        .encode(),
        "use a resolution of at least 51 or a Péclet number of at most 16",
        id="unresolved-outflow-layer",
    ),
    pytest.param(
        GOOD.replace("heat, dims: [1]", "channel_flow, dims: [2]")
        .replace("snapshots: 3", "snapshots: 1")
        .replace("SAMPLES", "2")
        .replace("WORKERS", "1")
        .encode(),
        "cannot resolve an obstacle of radius 0.25 m in the 2 x 2 m box; use a resolution of "
        "at least 17",
        id="unresolved-obstacle",
    ),
]


@pytest.mark.parametrize(("text", "message"), FILES)
def test_a_bad_curriculum_is_one_line(refused, tmp_path: Path, text: bytes, message: str) -> None:
    (tmp_path / "c.yaml").write_bytes(text)
    started = time.perf_counter()
    line = refused("curriculum", "validate", "c.yaml", cwd=tmp_path)
    assert message in line and time.perf_counter() - started < 60


def test_solve_refuses_zero_snapshots(refused, tmp_path: Path) -> None:
    refused(
        "solve",
        "heat",
        "--dim",
        "1",
        "--resolution",
        "9",
        "--snapshots",
        "0",
        "--out",
        "s.zarr",
        out="s.zarr",
        cwd=tmp_path,
    )


def test_solve_refuses_a_grid_too_coarse_for_its_sample(refused, tmp_path: Path) -> None:
    line = refused("solve", "advection_diffusion", "--dim", "1", "--resolution", "17",
                   "--out", "s.zarr", out="s.zarr", cwd=tmp_path)  # fmt: skip
    assert "use a resolution of at least 51 or a Péclet number of at most 32" in line
