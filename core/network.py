"""Where pdeladder's processes listen: on loopback, unless configured.

Importing ``mpi4py`` initialises MPI (the ``mpich`` wheel: ch4 over UCX), and UCX opens a TCP
listener on every interface it finds, the machine's outward address included, in every process
that loads DOLFINx. :func:`loopback_defaults` runs when ``pdeladder`` is imported (before any
``mpi4py`` import of pdeladder's), so every pdeladder process (the CLI, Ray's workers and
actors, the ranks of a K-rank solve, ``flows serve`` and its flow runs) starts MPI with:

- ``UCX_NET_DEVICES=lo``: UCX's network transports on the loopback interface only;
- ``UCX_TLS=self,sm``: no network transport at all (shared memory between the ranks of one
  machine, which is where pdeladder's MPI runs: ``MPI.COMM_SELF`` in the actors, a K-rank gang
  on one node), so no listener is opened.

A variable already set is left as it is: that is how a cluster configures its interface (e.g.
``UCX_NET_DEVICES=eth0 UCX_TLS=all`` for ``solve --ranks K --hosts ...`` across machines).
The names pdeladder filled in are recorded in ``PDELADDER_NET_DEFAULTED``, which child
processes inherit, so that a run across hosts can tell pdeladder's defaults from a user's
settings (:func:`mpi_env`).

gloo (``torch.distributed``) listens on the interface named by ``GLOO_SOCKET_IFNAME``, else on
the address of the machine's host name: process groups whose ranks all run on this machine
(a domain-parallel ``predict``, Ray Train on the local runtime) get the loopback interface
(:func:`local_gloo_env`); on a cluster it is left to the cluster's settings.
"""

import os
import shutil
import socket
import sys
from collections.abc import MutableMapping

from pdeladder.errors import UserInputError

#: The loopback interface's name.
LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"

#: MPI (UCX) settings of a local run: loopback only, and no network transport at all.
MPI_DEFAULTS = {"UCX_NET_DEVICES": LOOPBACK, "UCX_TLS": "self,sm"}

#: The names of :data:`MPI_DEFAULTS` that pdeladder set (comma-separated), not the user.
DEFAULTED = "PDELADDER_NET_DEFAULTED"


def defaulted(env: MutableMapping[str, str] | None = None) -> set[str]:
    """The variables of :data:`MPI_DEFAULTS` in ``env`` that pdeladder filled in."""
    env = os.environ if env is None else env
    return {n for n in env.get(DEFAULTED, "").split(",") if n in MPI_DEFAULTS and n in env}


def loopback_defaults(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each unset variable of :data:`MPI_DEFAULTS` in ``env`` (default: this process's
    environment, before ``mpi4py`` is imported); return the MPI settings now in force."""
    env = os.environ if env is None else env
    filled = defaulted(env)
    for name, value in MPI_DEFAULTS.items():
        if name not in env:
            env[name] = value
            filled.add(name)
    if filled:
        env[DEFAULTED] = ",".join(sorted(filled))
    return {name: env[name] for name in MPI_DEFAULTS}


def _is_local(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn())


def mpi_env(hosts: str | None = None) -> dict[str, str]:
    """The environment of an ``mpiexec``: this process's, with the loopback defaults; with
    ``hosts`` (hydra's ``-hosts``, ``name[:n],...``) naming another machine, UCX must reach it:
    pdeladder's ``UCX_TLS`` default becomes ``all`` (UCX's own), and an interface must be
    configured (UserInputError, one line, when ``UCX_NET_DEVICES`` is pdeladder's loopback)."""
    env = dict(os.environ)
    loopback_defaults(env)
    names = [h.split(":")[0].strip() for h in (hosts or "").split(",") if h.strip()]
    if all(map(_is_local, names)):
        return env
    if "UCX_NET_DEVICES" in defaulted(env):
        raise UserInputError(
            f"--hosts {hosts}: pdeladder keeps MPI on the loopback interface unless configured; "
            "set UCX_NET_DEVICES to the interface the hosts reach each other on (e.g. eth0)"
        )
    if "UCX_TLS" in defaulted(env):
        env["UCX_TLS"] = "all"
    return env


def local_gloo_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """``env`` (default: this process's environment) with ``GLOO_SOCKET_IFNAME`` set to the
    loopback interface unless set already: for gloo process groups whose ranks all run on this
    machine."""
    env = os.environ if env is None else env
    env.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)
    return env


def mpiexec(hosts: str | None = None) -> str:
    """The ``mpiexec`` of the MPI that mpi4py runs on: the mpich wheel's, beside the venv's
    Python (else the first on ``PATH``). Without ``hosts``, its ``mpiexec.gforker`` where there
    is one: it forks the ranks of this machine and opens no TCP port, while hydra's ``mpiexec``
    listens on every interface (``0.0.0.0``, for the proxies of other hosts) with no setting to
    narrow it; with ``hosts``, hydra's, which reaches other machines."""
    names = ("mpiexec",) if hosts else ("mpiexec.gforker", "mpiexec")
    for name in names:
        beside = os.path.join(os.path.dirname(sys.executable), name)
        if os.access(beside, os.X_OK):
            return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise UserInputError("no mpiexec beside this Python or on PATH; install mpich")
    return found
