"""Child processes that end with their parent: a K-rank solve's ``mpiexec`` and the ranks of a
domain-parallel ``predict`` write into stores, and a killed caller must not leave them writing
beside the rerun that redoes their samples."""

import os
import sys

#: Run as ``python -c TIED PARENT_PID PROGRAM ARGS...``: exec ``PROGRAM`` tied to the process
#: ``PARENT_PID`` (Linux's ``PR_SET_PDEATHSIG``: the kernel sends it SIGTERM when the parent
#: dies, by SIGKILL too; the setting survives the exec), or exit at once when that parent is
#: gone already. Elsewhere a plain exec.
TIED = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"  # 1: PR_SET_PDEATHSIG
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(143)\n"
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def tied(command: list[str]) -> list[str]:
    """``command`` (its program an absolute path) as a command that the kernel ends with
    SIGTERM when this process dies; SIGTERM ends ``mpiexec``'s ranks too."""
    return [sys.executable, "-c", TIED, str(os.getpid()), *command]
