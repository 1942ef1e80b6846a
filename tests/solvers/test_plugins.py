"""Families from other distributions: entry points of the group ``pdeladder.families`` in fake
installed distributions (a ``.dist-info`` folder and a package) on ``PYTHONPATH``, seen by the
real console script, as a user's plugin would be; no mocks."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pdeladder.dataset.store import open_store

EXE = os.path.join(os.path.dirname(sys.executable), "pdeladder")
PDELADDER = {"name": "pdeladder", "version": importlib.metadata.version("pdeladder")}
BUILT_IN = {"advection_diffusion", "allen_cahn", "burgers", "darcy", "gray_scott", "heat"}
BUILT_IN |= {"navier_stokes", "wave"}
#: The families of this environment without the tests' sites, by name: their packages
#: (pdeladder's eight, and those of installed plugins such as examples/plugins/helmholtz).
INSTALLED = {
    ep.name: {"name": ep.dist.name, "version": ep.dist.version}
    for ep in importlib.metadata.entry_points(group="pdeladder.families")
}
DEMO = {"name": "demo-plugin", "version": "0.3"}
#: The demo plugin's package: heat under another name, its FEM part heat's.
DEMO_PACKAGE = {
    "demo_plugin/__init__.py": (
        "from pdeladder.solvers.heat import Heat\n\n\n"
        "class Diffusion(Heat):\n"
        '    name = "diffusion"\n'
        '    title = "Diffusion (the heat equation, from a plugin)"\n'
    ),
    "demo_plugin/fem.py": "from pdeladder.solvers.heat.fem import manufactured_error, solve\n",
}


def install(site: Path, name: str, version: str, entries: dict[str, str], files=None) -> None:
    """A distribution ``name`` ``version`` installed in ``site``: its metadata, its entry points
    of ``pdeladder.families`` and ``files`` ({relative path: text})."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[pdeladder.families]\n{lines}")
    for path, text in (files or {}).items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site folder holding the demo plugin (``diffusion`` of demo-plugin 0.3)."""
    site = tmp_path / "site"
    install(site, "demo-plugin", "0.3", {"diffusion": "demo_plugin:Diffusion"}, DEMO_PACKAGE)
    return site


def run(paths: list[Path], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=600)


def listed(out: subprocess.CompletedProcess) -> dict[str, dict]:
    """``solvers list --json``'s families by name: their packages."""
    return {info["name"]: info["package"] for info in json.loads(out.stdout)}


def test_a_plugin_family_is_listed_with_its_package_once_though_installed_twice(tmp_path, site):
    twin = tmp_path / "twin"  # the same distribution found a second time on the path
    shutil.copytree(site, twin)
    out = run([site, twin], "solvers", "list", "--json")
    assert out.returncode == 0 and not out.stderr, out.stderr
    packages = listed(out)
    assert packages == {"diffusion": DEMO} | INSTALLED
    assert {name: INSTALLED[name] for name in BUILT_IN} == dict.fromkeys(BUILT_IN, PDELADDER)
    table = run([site], "solvers", "list")
    assert table.returncode == 0 and "demo-plugin 0.3" in table.stdout
    assert f"pdeladder {PDELADDER['version']}" in table.stdout


def test_a_plugin_family_solves_and_its_samples_name_its_package(tmp_path, site):
    store = str(tmp_path / "store.zarr")
    args = ["--dim", "2", "--resolution", "9", "--snapshots", "3", "--seed", "1", "--out", store]
    out = run([site], "solve", "diffusion", *args, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "ok"
    info = open_store(store).group("adhoc/diffusion/2d_n9_t3").info(0)
    assert info["provenance"]["family_package"] == DEMO
    assert info["provenance"]["element"] == "P1"  # heat's FEM part, found as the plugin's
    verify = run([site], "store", "verify", store)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_built_in_sample_names_pdeladder():
    from pdeladder.solvers import get_family

    heat = get_family("heat")
    sample = heat.run(heat.parse_params(), heat.grid(1, 9, 2), seed=0)
    assert sample.ok and sample.provenance["family_package"] == PDELADDER


def test_a_broken_plugin_is_one_line_for_its_name_only(tmp_path, site):
    other = tmp_path / "other"
    broken = {
        "brokenname": "broken_plugin.missing:Nope",
        "notafamily": "os:getcwd",
        "misnamed": "demo_plugin:Heat",
    }
    install(other, "broken-plugin", "1.0", broken, {"broken_plugin/__init__.py": ""})
    out = run([site, other], "solve", "brokenname", "--resolution", "9", "--out", str(tmp_path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: family 'brokenname' (entry point brokenname = broken_plugin.missing:Nope of "
        "broken-plugin 1.0): cannot be imported: ModuleNotFoundError: No module named "
        "'broken_plugin.missing'"
    ]
    out = run([site, other], "solve", "misnamed", "--resolution", "9", "--out", str(tmp_path))
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "error: family 'misnamed' (entry point misnamed = demo_plugin:Heat of broken-plugin "
        "1.0): the class declares name 'heat'"
    ]
    out = run([site, other], "solvers", "list", "--json")
    assert out.returncode == 2
    assert set(listed(out)) == set(INSTALLED) | {"diffusion"}
    errors = out.stderr.splitlines()
    assert [e.split()[:3] for e in errors] == [
        ["error:", "family", f"'{name}'"] for name in ("brokenname", "misnamed", "notafamily")
    ]
    assert errors[2].endswith(
        "(entry point notafamily = os:getcwd of broken-plugin 1.0): not a Family subclass"
    )


def test_a_name_two_distributions_claim_is_one_line_for_that_name_only(tmp_path, site):
    rival = tmp_path / "rival"
    install(rival, "rival", "2.0", {"diffusion": "rival:Diffusion"})
    out = run([site, rival], "solve", "diffusion", "--resolution", "9", "--out", str(tmp_path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: family 'diffusion' is claimed by 2 entry points: entry point diffusion = "
        "demo_plugin:Diffusion of demo-plugin 0.3; entry point diffusion = rival:Diffusion of "
        "rival 2.0; uninstall all but one"
    ]
    out = run([site, rival], "solvers", "list", "--json")
    assert out.returncode == 2 and set(listed(out)) == set(INSTALLED)
    assert [line.split(":")[0] for line in out.stderr.splitlines()] == ["error"]
    assert "'diffusion' is claimed by 2" in out.stderr
