"""``pdeladder solvers new NAME``: the package it writes, installed with pip as a user installs
it (here into a folder of its own on ``PYTHONPATH``, not into the shared environment), is listed,
passes ``pdeladder solvers check`` and its own test untouched; bad input writes nothing."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pdeladder.errors import UserInputError
from pdeladder.solvers import checks, scaffold

BIN = Path(sys.executable).parent
PDELADDER = str(BIN / "pdeladder")
FILES = {
    ".gitignore",
    "README.md",
    "pyproject.toml",
    "demo_family/__init__.py",
    "demo_family/fem.py",
    "tests/test_demo_family.py",
}


def run(*command: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        list(command), capture_output=True, text=True, env=env, cwd=cwd, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The package of ``demo_family`` as ``solvers new`` writes it, and the environment in
    which it is installed (pip, without its dependencies: pdeladder is here already)."""
    root = tmp_path_factory.mktemp("new")
    written = run(PDELADDER, "solvers", "new", "demo_family", "--dir", str(root / "pkg"))
    assert written.returncode == 0 and not written.stderr, written.stderr
    assert written.stdout.splitlines()[0] == f"wrote {root / 'pkg'}"
    assert {p.relative_to(root / "pkg").as_posix() for p in root.rglob("*") if p.is_file()} == FILES
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    installed = run(*pip, "--no-index", "--target", str(site), str(root / "pkg"))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    return root / "pkg", env


def test_the_package_registers_the_family_and_is_lint_clean(package):
    pkg, env = package
    project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pdeladder.families"] == {
        "demo_family": "demo_family:DemoFamily"
    }
    for path in FILES:
        assert "$" not in (pkg / path).read_text(), f"{path}: a placeholder left"
    assert "REPLACE" in (pkg / "demo_family/__init__.py").read_text()
    assert "REPLACE" in (pkg / "demo_family/fem.py").read_text()
    for command in (["check"], ["format", "--check"]):
        linted = run(str(BIN / "ruff"), *command, ".", cwd=pkg)
        assert linted.returncode == 0, linted.stdout + linted.stderr
    listed = run(PDELADDER, "solvers", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [info] = [i for i in json.loads(listed.stdout) if i["name"] == "demo_family"]
    assert info["package"] == {"name": "demo-family", "version": "0.1.0"}
    assert [p["units"] for p in info["parameters"]] == ["1", "1"]


@pytest.mark.mpi
def test_the_package_passes_the_contract_untouched(package):
    _, env = package
    done = run(PDELADDER, "solvers", "check", "demo_family", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert [r["name"] for r in results] == [*checks.CHECKS, "convergence_space", "convergence_time"]
    assert all(r["passed"] for r in results), results


@pytest.mark.mpi
def test_the_packages_own_test_passes(package):
    pkg, env = package
    done = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", env=env, cwd=pkg)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("Demo", "not a lower-case Python identifier"),
        ("demo-family", "not a lower-case Python identifier"),
        ("2d", "not a lower-case Python identifier"),
        ("class", "not a lower-case Python identifier"),
        ("heat", "'heat' is taken"),
        ("json", "a module of that name is importable"),
    ],
)
def test_a_bad_name_is_one_line_exit_2_nothing_written(refused, tmp_path, name, words):
    assert words in refused("solvers", "new", name, out=name, cwd=tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_folder_with_files_is_refused_and_left_alone(refused, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for folder in ("pkg", "file"):
        line = refused("solvers", "new", "demo_family", "--dir", folder, cwd=tmp_path)
        assert "exists and is not an empty folder" in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["file", "notes.txt", "pkg"]


def test_an_empty_folder_receives_the_package(tmp_path):
    (tmp_path / "pkg").mkdir()
    assert scaffold.new_family("demo_family", tmp_path / "pkg") == tmp_path / "pkg"
    assert (tmp_path / "pkg" / "demo_family" / "fem.py").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    """A file that cannot be written (here a path under a file) removes the partial package."""
    monkeypatch.setattr(scaffold, "render", lambda name: {"a": "text", "a/b": "text"})
    with pytest.raises(UserInputError, match="cannot be written"):
        scaffold.new_family("demo_family", tmp_path / "pkg")
    assert not list(tmp_path.iterdir())
