"""`store export --out`: an out that is, contains or lies inside the store is refused in one
line before anything is touched, even with --force; --force replaces only a previous export."""

import os
import subprocess
import sys

import pytest

from pdeladder.dataset.verify import verify
from pdeladder.solvers import get_family

from .conftest import family_group

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def export(url: str, tool: str, out, *extra: str) -> subprocess.CompletedProcess:
    args = [EXE, "store", "export", url, "--format", tool, "--out", str(out), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def refused(result: subprocess.CompletedProcess, text: str) -> None:
    message = result.stderr.strip()
    assert result.returncode == 2 and text in message, result.stderr
    assert "\n" not in message and result.stdout == ""


@pytest.mark.parametrize(
    ("tool", "where", "text"),
    [
        ("pdebench", "store", "is the input"),  # the reproductions
        ("the-well", "parent", "contains the input"),
        ("vtk", "inside", "lies inside the input"),
    ],
)
def test_an_out_over_the_store_is_refused_and_the_store_kept(tmp_path, tool, where, text):
    url = str(tmp_path / "s.zarr")
    g = family_group(url, "heat", get_family("heat").grid(1, 9, 3), 3)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = {"store": url, "parent": tmp_path, "inside": tmp_path / "s.zarr" / "x"}[where]
    extra = ["--group", g.path, "--sample", "0"] if tool == "vtk" else []
    refused(export(url, tool, out, *extra, "--force"), text)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    verify(url)


def test_force_replaces_a_previous_export_and_refuses_a_foreign_folder(tmp_path):
    url = str(tmp_path / "s.zarr")
    family_group(url, "heat", get_family("heat").grid(1, 9, 3), 3)
    out, mine = tmp_path / "out", tmp_path / "mine"
    assert export(url, "pdebench", out).returncode == 0
    (out / "stale.txt").write_text("from before")
    assert export(url, "pdebench", out).returncode == 0  # the same export: kept, complete
    refused(export(url, "the-well", out), "pass --force")  # another one
    assert export(url, "pdebench", out, "--force").returncode == 0
    assert not (out / "stale.txt").exists() and any(out.glob("*.hdf5"))
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    refused(export(url, "the-well", mine, "--force"), "not a pdeladder output")
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]


#: Exports two groups in a fresh interpreter, SIGKILLing itself after the first sample of the
#: second group is written (argv: format, store, out): the first group is complete and
#: recorded, the second half-written under its part name.
KILLED = """
import os, signal, sys
from pathlib import Path
from pdeladder.dataset.store import open_store
from pdeladder.dataset.export.pdebench import export_pdebench
from pdeladder.dataset.export.well import export_well

def progress(description):
    second = description.startswith(sorted(open_store(sys.argv[2]).groups())[1])
    return lambda total: (lambda n: os.kill(os.getpid(), signal.SIGKILL) if second else None)

export = export_pdebench if sys.argv[1] == "pdebench" else export_well
export(open_store(sys.argv[2]), Path(sys.argv[3]), progress=progress)
"""


def files(out) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("tool", ["pdebench", "the-well"])
def test_a_killed_export_resumes_to_the_undisturbed_files(tmp_path, tool):
    """kill -9 half-way through the second group: the rerun keeps the first group's files (not
    rewritten), removes the part being written, writes the second, and every file equals an
    undisturbed export's byte for byte."""
    url = str(tmp_path / "s.zarr")
    heat = get_family("heat")
    for n in (9, 17):
        family_group(url, "heat", heat.grid(1, n, 3), 3)
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert export(url, tool, reference).returncode == 0
    killed = subprocess.run([sys.executable, "-c", KILLED, tool, url, str(out)], timeout=600)
    assert killed.returncode == -9
    assert any(p.name.endswith(".part") for p in out.iterdir())
    first = {p: p.stat().st_mtime_ns for p in out.rglob("*.hdf5") if ".part" not in str(p)}
    assert len(first) >= 1  # the first group's, recorded
    assert export(url, tool, out).returncode == 0
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())  # kept, not rewritten
    assert files(out) == files(reference)
