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
    refused(export(url, "pdebench", out), "pass --force")
    assert export(url, "pdebench", out, "--force").returncode == 0
    assert not (out / "stale.txt").exists() and any(out.glob("*.hdf5"))
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    refused(export(url, "the-well", mine, "--force"), "not a pdeladder output")
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]
