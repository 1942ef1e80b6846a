"""Offload of the activations that activation checkpointing keeps: each Fourier block's input.

With checkpointing, a block keeps only its input for the backward pass and recomputes the rest;
those inputs, one per block, are then the model's activation memory. :func:`offloaded` moves
them off the device while the forward pass goes on and brings each back, one block ahead, during
the backward pass, through autograd's saved-tensor hooks (the checkpoint saves its inputs
through them):

- ``"host"``: on a GPU, into pinned host memory on a side stream (the copy back of the next
  block's input is issued when the current one is unpacked); on the CPU there is nowhere
  cheaper to put them, so nothing moves.
- ``"disk"``: into an unlinked spill file on local disk, written by a background thread (the
  tensor is freed once written) and read back ahead of use. Plain ``pwrite``/``preadv`` rather
  than a memory map: mapped pages would count in the process's resident memory.

The values come back bit for bit, so training with offload equals training with checkpointing
alone. Tensors under ``MIN_BYTES`` (indices, small inputs) stay where they are.
"""

import contextlib
import os
import tempfile
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch

OFFLOAD = ("none", "host", "disk")
MIN_BYTES = 1 << 16


class _Spill:
    """One forward pass's spilled tensors: an unlinked file and one thread that writes and reads
    it in order (a read of a slot is queued after its write)."""

    def __init__(self, folder: str | None):
        self.fd, path = tempfile.mkstemp(prefix="pdeladder-offload-", dir=folder)
        os.unlink(path)  # the space goes back to the disk when the descriptor closes
        self.io = ThreadPoolExecutor(1, thread_name_prefix="pdeladder-offload")
        # Closed with the last saved handle (autograd drops them after the backward pass).
        weakref.finalize(self, _release, self.fd, self.io)
        self.end = 0
        self.slots: list[tuple[int, torch.Size, torch.dtype]] = []
        self.ahead: dict[int, Future] = {}

    def pack(self, t: torch.Tensor):
        if t.device.type != "cpu" or t.numel() * t.element_size() < MIN_BYTES:
            return t
        data = t.detach().contiguous()
        offset, self.end = self.end, self.end + data.numel() * data.element_size()
        self.io.submit(os.pwrite, self.fd, data.numpy().data, offset)  # holds data
        self.slots.append((offset, data.shape, data.dtype))
        return len(self.slots) - 1

    def _read(self, key: int) -> torch.Tensor:
        offset, shape, dtype = self.slots[key]
        out = torch.empty(shape, dtype=dtype)
        os.preadv(self.fd, [out.numpy().data], offset)
        return out

    def unpack(self, key):
        if isinstance(key, torch.Tensor):
            return key
        read = self.ahead.pop(key, None) or self.io.submit(self._read, key)
        if key > 0:  # the previous block's input comes next in the backward pass
            self.ahead[key - 1] = self.io.submit(self._read, key - 1)
        return read.result()


def _release(fd: int, io: ThreadPoolExecutor) -> None:
    io.shutdown(wait=False)
    os.close(fd)


class _Host:
    """A forward pass's block inputs in pinned host memory (GPU), copied on a side stream."""

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device)
        self.slots: list[tuple[torch.Tensor, torch.cuda.Event, torch.device]] = []
        self.ahead: dict[int, torch.Tensor] = {}

    def pack(self, t: torch.Tensor):
        if t.device.type != "cuda" or t.numel() * t.element_size() < MIN_BYTES:
            return t
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        self.stream.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(self.stream):
            host.copy_(t, non_blocking=True)
            t.record_stream(self.stream)
            done = torch.cuda.Event()
            done.record()
        self.slots.append((host, done, t.device))
        return len(self.slots) - 1

    def _fetch(self, key: int) -> torch.Tensor:
        host, done, device = self.slots[key]
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(done)
            return host.to(device, non_blocking=True)

    def unpack(self, key):
        if isinstance(key, torch.Tensor):
            return key
        out = self.ahead.pop(key, None)
        out = self._fetch(key) if out is None else out
        torch.cuda.current_stream(out.device).wait_stream(self.stream)
        out.record_stream(torch.cuda.current_stream(out.device))
        if key > 0:
            self.ahead[key - 1] = self._fetch(key - 1)
        return out


@contextlib.contextmanager
def offloaded(mode: str, device: torch.device, folder: str | None = None) -> Iterator[None]:
    """Within the block, tensors saved for backward (the checkpointed blocks' inputs) are
    offloaded as ``mode`` says (see the module docstring); ``"none"`` changes nothing."""
    if mode not in OFFLOAD:
        raise ValueError(f"offload must be one of {', '.join(OFFLOAD)}, got {mode!r}")
    if mode == "none" or (mode == "host" and device.type != "cuda"):
        yield
        return
    store = _Host(device) if mode == "host" else _Spill(folder)
    # The store lives as long as the saved handles: autograd drops them after the backward pass.
    with torch.autograd.graph.saved_tensors_hooks(store.pack, store.unpack):
        yield
