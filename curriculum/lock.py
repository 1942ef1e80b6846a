"""One materialization per stage and store at a time: a lock object beside the store.

The lock is ``<store>.materialize-<stage>.lock``, a JSON object (beside, not inside, the Zarr hierarchy, where zarr
would warn about a foreign object), created with an exclusive write (``open(..., "xb")``: atomic on
local disks and on S3 with conditional writes). It records the owner's pid, host, start time and
a heartbeat the owner refreshes while it runs.

Stale-lock rule: a lock is stale when its owner is on this host and its pid is no longer running,
or when its heartbeat is older than ``stale_after`` seconds (any host). A stale lock is taken
over; a live one makes the second run refuse with a message naming the owner.

Takeover: the one process that creates ``<lock>.takeover-<token of the stale record>``
exclusively removes the stale lock (once it has read the same token there again) and then
creates its own, exclusively as always; any other process that judged the same record stale
finds that claim taken, and then the new owner's live lock. A claim whose taker died is stale by
the same rule and taken over the same way. So two processes never both hold the lock.
"""

import json
import os
import socket
import time
import uuid
from typing import Any

import fsspec

from pdeladder.errors import StoreError


class StageLock:
    """Context manager holding the materialization lock of ``stage`` in the store at ``url``."""

    def __init__(self, url: str, stage: str, *, stale_after: float = 120.0):
        self.fs, root = fsspec.core.url_to_fs(url)
        self.url, self.stage, self.stale_after = url, stage, stale_after
        self.path = f"{root.rstrip('/')}.materialize-{stage}.lock"
        self.token = uuid.uuid4().hex
        self.started = self.refreshed = 0.0

    def __enter__(self) -> "StageLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": self.started,
            "heartbeat": now,
            "token": self.token,
        }

    def read(self, path: str | None = None) -> dict[str, Any] | None:
        """The lock record (or the record at ``path``: a takeover claim), None when absent."""
        path = path or self.path
        try:
            return json.loads(self.fs.cat_file(path))
        except FileNotFoundError:
            return None
        except ValueError:  # being written, or half-written by a writer that died
            try:
                written = self.fs.modified(path).timestamp()
            except FileNotFoundError:
                return None
            return {"pid": -1, "host": "", "started": 0, "heartbeat": written, "token": ""}

    def is_stale(self, rec: dict[str, Any]) -> bool:
        if time.time() - rec["heartbeat"] > self.stale_after:
            return True
        if rec["host"] == socket.gethostname():
            try:
                os.kill(rec["pid"], 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # alive, owned by another user
                return False
        return False

    def _create(self, path: str) -> bool:
        """Create ``path`` holding this process's record, exclusively; False if it exists."""
        try:
            with self.fs.open(path, "xb") as f:
                f.write(json.dumps(self._record()).encode())
        except FileExistsError:
            return False
        return True

    def _take_over(self, path: str, rec: dict[str, Any]) -> bool:
        """Remove the stale record ``rec`` at ``path`` if this process is its one taker: the
        creator of its claim (a dead taker's claim taken over first); False if another
        process is taking it over."""
        claim = f"{self.path}.takeover-{rec['token']}"
        if not self._create(claim):
            held = self.read(claim)
            if held is None or not self.is_stale(held) or not self._take_over(claim, held):
                return False
            if not self._create(claim):
                return False
        try:
            now = self.read(path)
            if now is not None and now["token"] == rec["token"]:
                self.fs.rm_file(path)
        finally:
            self.fs.rm_file(claim)
        return True

    def acquire(self) -> None:
        self.started = time.time()
        deadline = time.monotonic() + 10.0  # a taker's claim is held for milliseconds
        while time.monotonic() < deadline:
            if self._create(self.path):
                self.refreshed = time.monotonic()
                return
            rec = self.read()
            if rec is None:
                continue
            if not rec["token"] and not self.is_stale(rec):  # being written: read it again
                time.sleep(0.05)
                continue
            if not self.is_stale(rec):
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec["started"]))
                raise StoreError(
                    f"stage {self.stage!r} of {self.url} is being materialized by pid "
                    f"{rec['pid']} on {rec['host']} since {since} (lock {self.path}); wait for "
                    "it to finish, or delete the lock if that process is gone"
                ) from None
            if not self._take_over(self.path, rec):
                time.sleep(0.05)  # another process is taking it over: see whom it is then
        raise StoreError(f"{self.url}: could not take the lock {self.path}; retry")

    def refresh(self, every: float | None = None) -> None:
        """Renew the heartbeat (at most once per ``every`` seconds, default ``stale_after / 4``);
        fails if another process has taken the lock over meanwhile."""
        if time.monotonic() - self.refreshed < (every or self.stale_after / 4):
            return
        rec = self.read()
        if rec is None or rec["token"] != self.token:
            raise StoreError(f"{self.url}: lock {self.path} was taken over by another run")
        self.fs.pipe_file(self.path, json.dumps(self._record()).encode())
        self.refreshed = time.monotonic()

    def release(self) -> None:
        rec = self.read()
        if rec is not None and rec["token"] == self.token:
            self.fs.rm_file(self.path)
