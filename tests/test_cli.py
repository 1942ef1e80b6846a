"""The command line as a user runs it: real subprocesses, exit codes, one-line errors, no debris."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pdeladder.solvers import family_names

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)


def test_help_reads_at_every_level():
    top = run("--help")
    assert top.returncode == 0 and "solvers" in top.stdout and "solve" in top.stdout
    for sub in (["solvers", "--help"], ["solvers", "list", "--help"], ["solve", "--help"]):
        out = run(*sub)
        assert out.returncode == 0 and "Usage" in out.stdout, sub


def test_every_help_text_is_shown_whole():
    """Rich markup must not eat a help text's brackets (``[default: ...]`` once vanished)."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from pdeladder.cli import app

    def commands(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from commands(sub, [*path, name])

    seen = 0
    for path, cmd in commands(get_command(app), []):
        out = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"}, color=False)
        assert out.exit_code == 0, (path, out.output)
        shown = " ".join(out.output.split())
        for param in cmd.params:
            if param.help:
                assert " ".join(param.help.split()) in shown, (path, param.help)
                seen += 1
    assert seen > 40
    solve = CliRunner().invoke(app, ["solve", "--help"], env={"COLUMNS": "400"}, color=False)
    assert "Stored time levels T. [default: (11; steady: 1)]" in solve.output


def test_solvers_list_json_describes_every_family():
    out = run("solvers", "list", "--json")
    assert out.returncode == 0, out.stderr
    infos = {f["name"]: f for f in json.loads(out.stdout)}
    assert set(infos) == set(family_names()) and len(infos) >= 8
    for info in infos.values():
        assert info["dims"] and info["channels"] and info["boundary_conditions"]
        for p in info["parameters"]:
            assert p["low"] < p["high"] and p["units"]
    assert {c["role"] for c in infos["darcy"]["channels"]} == {"input", "output"}
    assert infos["darcy"]["steady"] and not infos["heat"]["steady"]
    table = run("solvers", "list")
    assert table.returncode == 0 and "navier_stokes" in table.stdout


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_solvers_list_shows_equations_as_text_and_whole_parameter_names(columns: int):
    """The terminal gets Unicode equations (LaTeX stays in --json) and every parameter name
    whole, at any width a terminal has."""
    from typer.testing import CliRunner

    from pdeladder.cli import app
    from pdeladder.solvers import get_family

    out = CliRunner().invoke(app, ["solvers", "list"], env={"COLUMNS": str(columns)}).output
    assert "\\" not in out and "…" not in out
    assert max(map(len, out.splitlines())) <= columns
    assert "∂ₜu = κ Δu" in out and "∂ₜ²u = c² Δu" in out and "-∇ · (eᵃ ∇p) = f" in out
    words = set(out.split())
    for name in family_names():
        family = get_family(name)
        assert f"{name}:" in words
        assert {p["name"] for p in family.Params.describe()} <= words, name
    assert "velocity_length_scale" in words
    infos = json.loads(CliRunner().invoke(app, ["solvers", "list", "--json"]).output)
    heat = next(info for info in infos if info["name"] == "heat")
    assert heat["equation"] == r"\partial_t u = \kappa \Delta u"


def test_plain_equation_keeps_what_unicode_cannot_write():
    from pdeladder.solvers.cli import plain_equation

    assert plain_equation(r"\partial_t u = D_{xy} \Delta u + u^{q+1}") == (
        "∂ₜu = D_(xy) Δu + u^(q+1)"
    )
    assert plain_equation(r"\alpha_i^2 \, \zeta") == "αᵢ² zeta"


def test_convergence_json_reports_rows_and_rates():
    out = run("solvers", "convergence", "heat", "--dim", "1", "--json")
    assert out.returncode == 0, out.stderr
    studies = json.loads(out.stdout)
    assert [s["kind"] for s in studies] == ["space", "time"]
    for s in studies:
        assert len(s["rows"]) >= 3 and s["passed"]
        assert abs(s["observed_rate"] - s["expected_rate"]) < 0.2


@pytest.mark.parametrize(
    "args, message",
    [
        (["solve", "nosuch", "--out", "{out}"], "'nosuch'; available: advection_diffusion"),
        (["solve", "heat", "--param", "diffusivity=5", "--out", "{out}"], "diffusivity"),
        (["solve", "heat", "--param", "diffusivity", "--out", "{out}"], "NAME=VALUE"),
        (["solve", "heat", "--resolution", "0", "--out", "{out}"], "resolution"),
        (["solve", "heat", "--dim", "4", "--out", "{out}"], "dimensions"),
        (["solve", "darcy", "--snapshots", "5", "--out", "{out}"], "steady"),
        (
            ["solve", "heat", "--out", "/proc/forbidden/store.zarr"],
            "/proc/forbidden/store.zarr: cannot create it: making a folder in /proc fails (",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args, message):
    out = tmp_path / "store.zarr"
    result = run(*[a.replace("{out}", str(out)) for a in args])
    assert result.returncode == 2, result
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_store_of_an_older_format_is_one_line_exit_2(tmp_path: Path, command):
    import zarr

    zarr.open_group(
        str(tmp_path), mode="w", attributes={"format": "pdeladder", "format_version": 7}
    )
    result = run("store", command, str(tmp_path))
    assert result.returncode == 2, result
    message = (
        f"error: {tmp_path}: format version 7 was written by an older pdeladder; this one "
        "reads only version 8: regenerate the store with `pdeladder curriculum materialize`"
    )
    assert result.stderr.strip() == message, result.stderr


def test_solve_writes_a_sample_and_reports_json(tmp_path: Path):
    from pdeladder.dataset.store import open_store

    out = tmp_path / "s.zarr"
    for seed in (1, 2):
        result = run(
            "solve",
            "heat",
            "--dim",
            "2",
            "--resolution",
            "9",
            "--snapshots",
            "3",
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--json",
        )
        assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["status"] == "ok" and line["family"] == "heat" and line["dofs"] == 81
    assert line["index"] == 1 and line["steps"] >= 2 and line["wall_s"] > 0
    store = open_store(str(out), mode="r")
    (path,) = store.groups()
    group = store.group(path)
    assert list(group.status()) == [1, 1]
    fields = group.read(1)
    assert fields.shape == (3, 1, 9, 9, 1) and fields.dtype == np.float32
