"""Offload of the checkpointed blocks' inputs: the spill file holds every block input while the
forward pass goes on, the backward pass reads them back (one block ahead), and the gradients
are bitwise those of checkpointing alone."""

import os

import pytest
import torch

from pdeladder.trainer.models import offload
from pdeladder.trainer.models.operator import LadderOperator, OperatorConfig

CONFIG = OperatorConfig(5, 2, width=8, layers=3, modes=(2, 4, 3, 1), families=2)


def gradients(mode: str) -> torch.Tensor:
    torch.manual_seed(0)
    model = LadderOperator(CONFIG)
    model.checkpointing, model.offload = True, mode
    x, family = torch.randn(2, 5, 6, 40, 30, 1), torch.tensor([0, 1])
    model(x, family).square().mean().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_disk_offload_gives_the_checkpointed_gradients_bitwise():
    assert torch.equal(gradients("disk"), gradients("none"))
    assert torch.equal(gradients("host"), gradients("none"))  # nothing to move on the CPU


def test_spill_file_holds_each_block_input_and_gives_it_back_in_backward_order(tmp_path):
    spill = offload._Spill(str(tmp_path))
    blocks = [torch.randn(2, 8, 32, 33) * (i + 1) for i in range(3)]
    small = torch.arange(4)
    keys = [spill.pack(t) for t in blocks]
    assert spill.pack(small) is small  # under MIN_BYTES: kept as it is
    assert keys == [0, 1, 2]
    back = [spill.unpack(k) for k in reversed(keys)]  # the backward pass's order
    assert os.fstat(spill.fd).st_size == sum(t.numel() * 4 for t in blocks)
    for t, b in zip(blocks, reversed(back), strict=True):
        assert torch.equal(t, b)
    assert not spill.ahead  # every read ahead was used


def test_unknown_offload_is_refused():
    with pytest.raises(ValueError, match="offload must be one of none, host, disk"):
        with offload.offloaded("ram", torch.device("cpu")):
            pass
