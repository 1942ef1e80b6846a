"""The process group of a Ray Train worker group, its rendezvous store listening on the node's
address only.

Ray Train's ``TorchConfig`` starts ``torch.distributed`` through ``env://``, whose
``TCPStore`` server (on rank 0) listens on every interface (``[::]:MASTER_PORT``), and torch
has no setting for the address. :class:`NodeBoundTorchConfig` does the same set-up, with
rank 0's store serving a socket bound to the address Ray gives the workers as
``MASTER_ADDR`` (the node's IP: 127.0.0.1 on pdeladder's local runtime, the cluster address
on a cluster), handed to the store as ``master_listen_fd``. A group on the loopback address
also gets gloo on the loopback interface (:func:`pdeladder.network.local_gloo_env`).
"""

import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import ray
import torch.distributed as dist
from ray.train._internal.utils import get_address_and_port
from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
from ray.train.torch.config import (
    TorchConfig,
    _set_torch_distributed_env_vars,
    _TorchBackend,
)

from pdeladder.network import local_gloo_env

#: Rank 0's listening socket, between :func:`_listen` and :func:`_join` (its worker process).
_LISTENER: socket.socket | None = None


def _listen(addr: str) -> int:
    """Rank 0: open the store's listening socket on ``addr``; its port."""
    global _LISTENER
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    _LISTENER = socket.create_server((addr, 0), family=family, backlog=1024)
    return _LISTENER.getsockname()[1]


def _join(backend: str, rank: int, world_size: int, addr: str, port: int, timeout_s: int) -> None:
    """One worker: the process group ``backend`` over a ``TCPStore`` at ``addr:port``, served
    by rank 0 from the socket :func:`_listen` opened."""
    global _LISTENER
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)  # as env:// has them
    if _loopback(addr):
        local_gloo_env()
    timeout = timedelta(seconds=timeout_s)
    if rank == 0:
        assert _LISTENER is not None, "the store's socket was not opened on this worker"
        fd, _LISTENER = _LISTENER.detach(), None  # the store owns it now
        store = dist.TCPStore(addr, port, world_size, True, timeout, master_listen_fd=fd)
    else:
        store = dist.TCPStore(addr, port, world_size, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


class _NodeBoundBackend(_TorchBackend):
    """``_TorchBackend`` whose process-group set-up binds the store to the node's address."""

    def on_start(self, worker_group: Any, backend_config: TorchConfig) -> None:
        if backend_config.backend is not None:
            backend = backend_config.backend
        elif worker_group.get_resources_per_worker().get("GPU", 0) > 0:
            backend = "nccl"
        else:
            backend = "gloo"
        addr, _ = worker_group.execute_single(0, get_address_and_port)
        port = worker_group.execute_single(0, _listen, addr)
        if not isinstance(worker_group, V1WorkerGroup):
            worker_group.execute(_set_torch_distributed_env_vars)
        n = len(worker_group)
        ray.get(
            [
                worker_group.execute_single_async(
                    i, _join, backend, i, n, addr, port, backend_config.timeout_s
                )
                for i in range(n)
            ]
        )


@dataclass
class NodeBoundTorchConfig(TorchConfig):
    """``TorchConfig`` (gloo on CPU, NCCL on GPU, ``env://`` variables set) whose rendezvous
    store listens on the node's address only."""

    @property
    def backend_cls(self):
        return _NodeBoundBackend
