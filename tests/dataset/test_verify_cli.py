"""``verify`` against the format, and the ``pdeladder store`` commands."""

import json
import threading

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from pdeladder.dataset import chunks as chunks_module
from pdeladder.dataset import cli
from pdeladder.dataset import format as fmt
from pdeladder.dataset import verify as verify_module
from pdeladder.dataset.format import FORMAT_VERSION
from pdeladder.dataset.store import open_store
from pdeladder.dataset.verify import verify
from pdeladder.errors import FormatError

from .conftest import GRID, HEAT, array_sample, failed_sample

runner = CliRunner()
PATH = "s0/heat/2d_n9_t5"


def _store(url, heat_samples, n=5):
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=n)
    for k, sample in enumerate(heat_samples[: n - 1]):
        group.write(k, sample)
    group.write(n - 1, failed_sample())
    return group


def test_good_store_passes(store_url, heat_samples):
    _store(store_url, heat_samples)
    verify(store_url)
    result = runner.invoke(cli.app, ["verify", store_url, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["groups"] == [PATH] and report["problems"] == []
    result = runner.invoke(cli.app, ["inspect", store_url, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["groups"]
    assert (row["samples"], row["ok"], row["failed"], row["missing"]) == (5, 4, 1, 0)
    assert row["bytes"] > 0 and row["compression_ratio"] > 0
    assert runner.invoke(cli.app, ["inspect", store_url]).exit_code == 0


def test_bad_samples_are_all_named(tmp_path, heat_samples):
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=6)
    for k, sample in enumerate(heat_samples):
        group.write(k, sample)
    raw = zarr.open_group(url, mode="a")[PATH]["fields"]
    nan = heat_samples[1].fields.copy()
    nan[2, 0, 3, 3, 0] = np.nan
    raw[1] = nan  # NaN written behind the API's back, checksum kept
    chunk = next((tmp_path / "store" / PATH / "fields").glob("c.3.*"))
    chunk.write_bytes(chunk.read_bytes()[:10])  # truncated
    group.write(5, array_sample(GRID, 5))
    raw = zarr.open_group(url, mode="a")[PATH]["record"]
    row = raw[5]
    row.view(fmt.record_dtype(group.attrs))["moments"] = 0.0  # stats out of step
    raw[5] = row
    result = runner.invoke(cli.app, ["verify", url, "--json"])
    assert result.exit_code == 1
    problems = json.loads(result.output)["problems"]
    named = {p["path"].rsplit(" ", 1)[-1]: p["message"] for p in problems}
    assert set(named) == {"1", "3", "4", "5"}
    assert "checksum" in named["1"] or "NaN" in named["1"]
    assert "corrupt" in named["3"] and "never written" in named["4"]
    assert "moments" in named["5"]
    assert all(p["kind"] == "values" for p in problems)
    with pytest.raises(FormatError, match=r"sample 1: .* \(and 3 more\)"):
        verify(url)
    assert runner.invoke(cli.app, ["verify", url, "--structure-only"]).exit_code == 0
    human = runner.invoke(cli.app, ["verify", url])
    assert human.exit_code == 1 and "4 problem(s)" in human.output


def test_value_checks_report_progress_in_sample_order(tmp_path, monkeypatch):
    """Samples are read on several threads; every ok one is reported to the progress hook
    once, and the problems still come in sample order."""
    monkeypatch.setattr(chunks_module.os, "cpu_count", lambda: 4)
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=8)
    for k in range(7):
        group.write(k, array_sample(GRID, k))
    for k in (5, 2):
        chunk = next((tmp_path / "store" / PATH / "fields").glob(f"c.{k}.*"))
        chunk.write_bytes(chunk.read_bytes()[:-8])
    counts, lock = {}, threading.Lock()

    def progress(path, total):
        counts[path] = [total, 0]

        def advance():
            with lock:
                counts[path][1] += 1

        return advance

    found = verify_module.store_problems(open_store(url), progress=progress)[PATH]
    assert counts == {PATH: [7, 7]}
    assert [p.path.rsplit(" ", 1)[-1] for p in found] == ["2", "5", "7"]
    assert "never written" in found[-1].message


def test_structure_problems_name_the_array(tmp_path, heat_samples):
    url = str(tmp_path / "store")
    _store(url, heat_samples)
    g = zarr.open_group(url, mode="a")[PATH]
    g.update_attributes({"dim": "two"})
    report = json.loads(runner.invoke(cli.app, ["verify", url, "--json"]).output)
    assert [p["message"] for p in report["problems"]] == [
        "attribute 'dim' is 'two' of type str, not int"
    ]
    g.update_attributes({"dim": 2})
    del g["provenance"]
    R = g["record"].shape[1]
    g.create_array("record", shape=(5, R), dtype="float32", chunks=(5, R), overwrite=True)
    report = json.loads(runner.invoke(cli.app, ["verify", url, "--json"]).output)
    messages = [p["message"] for p in report["problems"]]
    assert "array 'provenance' is missing" in messages
    assert "record: dtype is float32, expected uint8" in messages
    assert f"record: chunks is (5, {R}), expected (1, {R})" in messages
    assert "record: dimension_names is (), expected ('sample', 'record_byte')" in messages
    assert {p["kind"] for p in report["problems"]} == {"structure"}


def test_a_tampered_stage_or_an_unknown_family_is_a_problem(tmp_path, heat_samples):
    """The group's attributes must name its own path, and its family one that pdeladder has."""
    url = str(tmp_path / "store")
    _store(url, heat_samples)
    zarr.open_group(url, mode="a")[PATH].update_attributes({"stage": "s9", "family": "nosuch"})
    result = runner.invoke(cli.app, ["verify", url, "--json"])
    assert result.exit_code != 0
    messages = [p["message"] for p in json.loads(result.output)["problems"]]
    assert messages[0] == "its attributes name the group 's9/nosuch/2d_n9_t5', not its path"
    assert messages[1].startswith("unknown family 'nosuch'; available: advection_diffusion")


def test_newer_format_is_refused(tmp_path):
    newer = FORMAT_VERSION + 1
    zarr.open_group(
        str(tmp_path), mode="w", attributes={"format": "pdeladder", "format_version": newer}
    )
    result = runner.invoke(cli.app, ["verify", str(tmp_path)])
    assert isinstance(result.exception, FormatError)
    expected = f"format version {newer} is newer than this pdeladder reads ({FORMAT_VERSION})"
    assert expected in str(result.exception)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_plot_writes_a_png(tmp_path, dim):
    grid = HEAT.grid(dim, 5, 4)
    url = str(tmp_path / "store")
    open_store(url, mode="a").require_group("s0", HEAT, grid).append(array_sample(grid, 0))
    out = tmp_path / "pic.png"
    path = f"s0/heat/{dim}d_n5_t4"
    result = runner.invoke(
        cli.app, ["plot", url, "--group", path, "--sample", "0", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_an_unfinished_write_is_missing_not_corrupt(tmp_path):
    """After a crash mid-write (its fields landed, its record truncated, no status) a sample
    is missing, with a note that its leftovers are overwritten, not a structure error; a
    committed sample's truncated record stays a structure error naming it."""
    url = str(tmp_path / "store")
    group = open_store(url, mode="a").require_group("s0", HEAT, GRID, n_samples=4)
    for k in range(3):
        group.write(k, array_sample(GRID, k))
    folder = tmp_path / "store" / PATH
    (folder / "status" / "c.2").unlink()  # the commit never came
    (folder / "record" / "c.2.0").write_bytes(b"\x01")  # truncated by a full disk
    report = json.loads(runner.invoke(cli.app, ["verify", url, "--json"]).output)
    named = {p["path"].rsplit(" ", 1)[-1]: p for p in report["problems"]}
    assert set(named) == {"2", "3"} and {p["kind"] for p in named.values()} == {"values"}
    assert "did not finish" in named["2"]["message"]
    assert "overwritten" in named["2"]["message"]
    assert named["3"]["message"] == "missing (never written)"
    group.write(2, array_sample(GRID, 2))  # the rerun resumes it
    (folder / "record" / "c.1.0").write_bytes(b"\x01")
    (problem,) = verify_module.store_problems(open_store(url))[PATH]
    assert problem.kind == "structure" and "sample 1: cannot read record" in problem.message
