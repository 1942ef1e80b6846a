"""Domain parallelism is exact: one sample split across 2 and 4 real gloo processes (time, x and
time × x splits; uneven; 1D/2D/3D and steady; padding on and off; batch > 1; activation
checkpointing) gives the unsharded model's outputs, input gradients and parameter gradients,
and one FSDP2 + AdamW step on a ``(dp, domain)`` mesh gives the unsharded data-parallel step,
each to 1e-6 relative in float32, also where some ranks mix no modes. The bytes a forward pass
hands to collectives are the kept blocks' (``8 · B · width · M`` per spectral layer, ``M``
rounded up to equal shares of the domain ranks), whatever the grid. A training state saved on
one mesh resumes on another."""

import json
from pathlib import Path

import pytest

from .conftest import run_ranks

RANK = Path(__file__).with_name("domain_parallel_rank.py")


@pytest.mark.parametrize("world_size", [2, 4])
def test_sharded_model_equals_unsharded(tmp_path, world_size):
    out = run_ranks([str(RANK)], world_size, tmp_path)
    results = json.loads(out.read_text())
    assert len(results) == {2: 9, 4: 11}[world_size]
    for case, values in results.items():
        for quantity, value in values.items():
            if quantity.endswith("forward_bytes"):
                continue
            assert value <= 1e-6, f"{case}: {quantity} differs by {value:.2e} (relative)"
        if "forward_bytes" in values:
            assert values["forward_bytes"] == values["expected_forward_bytes"], case
