"""The record of a command's work in progress in its output folder (``evaluate``'s
``scored.json``, ``store export``'s ``exported.json``): the command's job and, per store group
done, the samples it read with their checksums and what it made of them.

The record is rewritten whole (a temporary file renamed over it) after each group, so a kill
leaves the last complete one. A rerun of the same job keeps every group whose samples are
still those recorded (a store regenerated or changed since is done again) and does the rest;
another job's record is not resumed.
"""

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from pdeladder.dataset.format import OK
from pdeladder.dataset.group import Group


class Ledger:
    """A command's record, the JSON file ``file``: ``{"job": ..., "groups": {path: {"samples",
    "checksums", ...}}}`` and whatever else the command keeps there (:attr:`state`)."""

    def __init__(self, file: Path, job: dict[str, Any], resumed: bool, state: dict[str, Any]):
        self.file, self.job, self.resumed, self.state = file, job, resumed, state

    @classmethod
    def open(cls, file: Path, job: dict[str, Any], previous: bool) -> "Ledger":
        """The record at ``file`` when it is of ``job`` (and its folder held a ``previous``
        output of the command), else a new one, written at once."""
        state = None
        if previous and file.is_file():
            try:
                state = json.loads(file.read_text())
            except ValueError:
                state = None  # not a record this version wrote: started afresh
        resumed = isinstance(state, dict) and state.get("job") == job
        ledger = cls(file, job, resumed, state if resumed else {"job": job, "groups": {}})
        if not resumed:
            ledger.save()
        return ledger

    @staticmethod
    def recorded_job(file: Path) -> Any:
        """The job of the record at ``file``, or None where there is none to read."""
        try:
            return json.loads(file.read_text()).get("job")
        except (OSError, ValueError, AttributeError):
            return None

    def done(self, path: str, group: Group, samples: np.ndarray) -> dict[str, Any] | None:
        """The record of group ``path`` if it was done from exactly ``samples`` of ``group`` as
        they are now (their checksums), else None."""
        entry = self.state["groups"].get(path)
        if entry is None or entry["samples"] != [int(i) for i in samples]:
            return None
        return entry if entry.get("checksums") == self.read(group, samples)["checksums"] else None

    def record(self, path: str, group: Group, samples: np.ndarray, **made: Any) -> None:
        """Record group ``path`` done from ``samples`` of ``group``, with what it ``made``."""
        self.state["groups"][path] = {**self.read(group, samples), **made}
        self.save()

    @staticmethod
    def read(group: Group, samples: np.ndarray) -> dict[str, list[int]]:
        """``samples`` (ok ones) and their checksums; only their records are read."""
        only = np.zeros(group.n_samples, np.uint8)
        only[samples] = OK
        sums = group.checksums(only)[samples]
        return {"samples": [int(i) for i in samples], "checksums": [int(c) for c in sums]}

    def save(self) -> None:
        part = self.file.with_name(self.file.name + ".part")
        part.write_text(json.dumps(self.state))
        os.replace(part, self.file)
