"""Where a stage's training loop runs: on Ray Train's worker group (one process per rank) or in
the calling process (one rank). The loop reads its rank, device and the checkpoint to resume
from through a session, and hands it each checkpoint it writes."""

import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from pdeladder.errors import PdeladderError


class TrainSession(Protocol):
    """A stage's training session as the loop sees it."""

    rank: int
    world_size: int
    device: torch.device

    def latest_checkpoint(self) -> AbstractContextManager[str | None]:
        """The folder of the checkpoint to resume from, or None, while open."""

    def report(self, metrics: dict[str, Any], folder: str) -> None:
        """Keep the checkpoint written to ``folder`` (rank 0's ``metrics`` go with it)."""


class RayTrainSession:
    """The session of a Ray Train worker: its rank in the worker group, the device Ray Train
    gave it, and Ray Train's checkpoints (kept by its controller)."""

    def __init__(self):
        import ray.train
        import ray.train.torch

        ctx = ray.train.get_context()
        self.rank, self.world_size = ctx.get_world_rank(), ctx.get_world_size()
        self.device = ray.train.torch.get_device()

    @contextmanager
    def latest_checkpoint(self) -> Iterator[str | None]:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as folder:
            yield folder

    def report(self, metrics: dict[str, Any], folder: str) -> None:
        import ray.train

        # every report waits on the controller's poll: it is made with checkpoints only
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


CHECKPOINT_PREFIX = "step_"


class InProcessSession:
    """Rank 0 of 1 in the calling process, as a context manager: a one-rank process group for
    the loop's collectives (gloo; NCCL for CUDA tensors with ``use_gpu``) while it is open, and
    checkpoints under ``folder`` as ``step_<N>``, each copied to a hidden temporary name and
    then renamed (a crash leaves no partial ``step_<N>``), the last ``keep`` kept. The latest one
    is what a rerun of the stage resumes from."""

    rank, world_size = 0, 1

    def __init__(self, folder: Path, use_gpu: bool = False, keep: int = 2):
        self.folder, self.use_gpu, self.keep = Path(folder), use_gpu, keep
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if use_gpu else torch.device("cpu")
        )

    def __enter__(self) -> "InProcessSession":
        if dist.is_initialized():
            raise PdeladderError("a process group is already open in this process")
        backend = "cpu:gloo,cuda:nccl" if self.use_gpu else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        self.folder.mkdir(parents=True, exist_ok=True)
        for partial in self.folder.glob(f".{CHECKPOINT_PREFIX}*"):  # left by a crash
            shutil.rmtree(partial)
        return self

    def __exit__(self, *exc) -> None:
        dist.destroy_process_group()

    def checkpoints(self) -> list[Path]:
        """The kept checkpoint folders, oldest first."""
        found = self.folder.glob(f"{CHECKPOINT_PREFIX}*")
        return sorted(found, key=lambda p: int(p.name.removeprefix(CHECKPOINT_PREFIX)))

    @contextmanager
    def latest_checkpoint(self) -> Iterator[str | None]:
        kept = self.checkpoints()
        yield str(kept[-1]) if kept else None

    def report(self, metrics: dict[str, Any], folder: str) -> None:
        name = f"{CHECKPOINT_PREFIX}{metrics['step']}"
        partial = self.folder / f".{name}"
        shutil.copytree(folder, partial)
        partial.rename(self.folder / name)
        for old in self.checkpoints()[: -self.keep]:
            shutil.rmtree(old)
