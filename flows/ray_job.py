"""Ray jobs on a cluster: submit a command with files, follow its status and log lines."""

import time
from collections.abc import Callable
from pathlib import Path

from pdeladder.errors import ServiceError


def submit(
    address: str,
    entrypoint: str,
    files: dict[str, str],
    folder: Path,
    metadata: dict[str, str] | None = None,
    agent_wait_s: float = 120,
) -> str:
    """Submit ``entrypoint`` to the job server at ``address`` (``http://head:8265``); ``files``
    (name -> text) are written to ``folder`` and uploaded as the job's working directory. A
    cluster whose job agent is not up yet is asked again for up to ``agent_wait_s``."""
    from ray.job_submission import JobSubmissionClient

    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    deadline = time.monotonic() + agent_wait_s
    while True:
        try:
            return JobSubmissionClient(address).submit_job(
                entrypoint=entrypoint,
                runtime_env={"working_dir": str(folder)},  # env_vars would clash with the driver's
                metadata=metadata or {},
            )
        except (ConnectionError, RuntimeError) as err:
            # A cluster that has just started has no job agent yet: Ray asks to try again.
            if "try again later" not in str(err) or time.monotonic() > deadline:
                raise ServiceError(f"cannot submit a Ray job to {address}: {err}") from None
            time.sleep(2)


def follow(
    address: str,
    job_id: str,
    on_line: Callable[[str], None],
    *,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
) -> str:
    """Pass each new log line of the job to ``on_line`` until it ends; return its final status
    (``SUCCEEDED``, ``FAILED`` or ``STOPPED``). Past ``timeout_s`` the job is stopped."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    consumed = 0
    while True:
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        end = len(logs) if status.is_terminal() else logs.rfind("\n") + 1  # whole lines only
        for line in logs[consumed:end].splitlines():
            on_line(line)
        consumed = max(consumed, end)
        if status.is_terminal():
            return str(status.value)
        if deadline is not None and time.monotonic() > deadline:
            client.stop_job(job_id)
            raise ServiceError(f"Ray job {job_id} ran past {timeout_s:g} s and was stopped")
        time.sleep(poll_s)
