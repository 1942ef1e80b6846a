"""Domain parallelism is exact: one sample split across 2 and 4 real gloo processes (time, x and
time × x splits; uneven; 1D/2D/3D and steady; padding on and off; batch > 1; activation
checkpointing; every rank mixing the whole kept block, or each its share) gives the unsharded
model's outputs, input gradients and parameter gradients, and one FSDP2 + AdamW step on a
``(dp, domain)`` mesh gives the unsharded data-parallel step, each to 1e-6 relative in float32,
also where some ranks mix no modes. The bytes a forward pass hands to collectives are the kept
blocks' (``8 · B · width · M`` per spectral layer, ``M`` rounded up to equal shares of the
domain ranks when shared), whatever the grid. With activation checkpointing, a training step
runs each spectral layer's collectives once each way: the recomputation in the backward pass
reuses the forward's. A training state saved on one mesh resumes on another."""

import json
from pathlib import Path

import pytest

from .conftest import run_ranks

RANK = Path(__file__).with_name("domain_parallel_rank.py")


@pytest.fixture(scope="module", params=[2, 4])
def ranks_found(request, tmp_path_factory) -> tuple[int, dict]:
    """(world size, what its ranks found), one run of the ranks per world size."""
    folder = tmp_path_factory.mktemp(f"domain{request.param}")
    return request.param, json.loads(run_ranks([str(RANK)], request.param, folder).read_text())


def test_sharded_model_equals_unsharded(ranks_found):
    world_size, found = ranks_found
    results = found["exactness"]
    assert len(results) == {2: 16, 4: 18}[world_size]
    for case, values in results.items():
        for quantity, value in values.items():
            if quantity.endswith("forward_bytes"):
                continue
            assert value <= 1e-6, f"{case}: {quantity} differs by {value:.2e} (relative)"
        if "forward_bytes" in values:
            assert values["forward_bytes"] == values["expected_forward_bytes"], case


@pytest.mark.parametrize("mixing", ["whole", "share"])
def test_checkpointed_step_runs_each_collective_once(ranks_found, mixing):
    found = ranks_found[1]["collectives"][mixing]
    layers = found["layers"]
    if mixing == "whole":  # an all-reduce of each kept block, forward and backward; the loss's
        once = {"all_reduce": 2 * layers + 1}
    else:  # a reduce-scatter before and an all-gather after each mixing, and their adjoints
        once = {"reduce_scatter": 2 * layers, "all_gather": 2 * layers, "all_reduce": 1}
    assert found["plain"] == once
    assert found["checkpointed"] == once  # the recomputation reran them: 3 times as many
    assert found["grad_vs_plain"] <= 1e-6
