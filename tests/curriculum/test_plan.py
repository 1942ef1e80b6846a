"""Planning: deterministic seeds and designs, budgets reallocated by weights, calibrated costs."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pdeladder.curriculum import load_weights, parse_curriculum, plan_stage
from pdeladder.curriculum.families import Range
from pdeladder.curriculum.plan import sample_seed
from pdeladder.curriculum.weights import Region, allocate, region_warp
from pdeladder.errors import UnknownNameError, UserInputError
from pdeladder.solvers.grid import Grid

SPEC = """\
name: tiny
seed: 11
stages:
  - name: a
    families:
      - family: heat
        dims: [1, 2]
        resolutions: [9]
        samples: {n}
        params:
          diffusivity: {{low: 0.001, high: 0.1, scale: log}}
          ic_length_scale: [0.1, 0.3]
      - family: darcy
        dims: [1]
        resolutions: [9]
        samples: 8
        design: latin_hypercube
        params:
          log_permeability_std: [0.2, 1.0]
"""


def spec(n: int = 8):
    return parse_curriculum(SPEC.format(n=n))


def test_plan_is_deterministic_and_inside_ranges() -> None:
    p1, p2 = plan_stage(spec(), "a"), plan_stage(spec(), "a")
    assert [g.path for g in p1.groups] == [
        "a/heat/1d_n9_t11",
        "a/heat/2d_n9_t11",
        "a/darcy/1d_n9_t1",
    ]
    for g1, g2 in zip(p1.groups, p2.groups, strict=True):
        np.testing.assert_array_equal(g1.params, g2.params)
        np.testing.assert_array_equal(g1.seeds, g2.seeds)
        assert g1.config_hash == g2.config_hash
    heat = p1.groups[0]
    kappa, ell = heat.params[:, 0], heat.params[:, 1]
    assert kappa.min() >= 0.001 and kappa.max() <= 0.1 and len(set(kappa)) == 8
    assert ell.min() >= 0.1 and ell.max() <= 0.3
    darcy = p1.groups[2]
    assert np.all(darcy.params[:, 2] == 1.0)  # `source` unset: the family default, fixed
    # every sample of the stage has its own seed; each is the documented SeedSequence's
    seeds = np.concatenate([g.seeds for g in p1.groups])
    assert len(set(seeds.tolist())) == len(seeds)
    assert heat.seeds[3] == sample_seed(11, "a", "heat", heat.grid, 3)
    assert heat.sample(3).params == {"diffusivity": kappa[3], "ic_length_scale": ell[3]}


def test_seeds_and_sobol_prefix_do_not_depend_on_count() -> None:
    small, large = plan_stage(spec(5), "a").groups[0], plan_stage(spec(13), "a").groups[0]
    np.testing.assert_array_equal(small.seeds, large.seeds[:5])
    np.testing.assert_array_equal(small.params, large.params[:5])
    assert small.config_hash != large.config_hash


def test_seed_changes_with_curriculum_seed_and_group() -> None:
    g = Grid(1, 9, 11, 1.0)
    base = sample_seed(1, "a", "heat", g, 0)
    assert base != sample_seed(2, "a", "heat", g, 0)
    assert base != sample_seed(1, "b", "heat", g, 0)
    assert base != sample_seed(1, "a", "burgers", g, 0)
    assert base != sample_seed(1, "a", "heat", Grid(1, 17, 11, 1.0), 0)


@pytest.mark.parametrize(
    ("counts", "weights", "expected"),
    [
        ([8, 8, 4], [1, 1, 1], [8, 8, 4]),  # equal weights: unchanged
        ([8, 8, 4], [4, 1, 1], [14, 4, 2]),  # others pinned at ceil(0.25 n)
        ([8, 8, 4], [100, 1, 1], [17, 2, 1]),
        ([5, 3], [1, 3], [3, 5]),
    ],
)
def test_allocate_rule(counts: list[int], weights: list[float], expected: list[int]) -> None:
    out = allocate(counts, weights, 0.25)
    assert out == expected and sum(out) == sum(counts)


def test_weights_reallocate_stage_budget(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"families": {"darcy": 3.0}, "minimum_fraction": 0.5}))
    plan = plan_stage(spec(), "a", weights=path)
    assert [g.n for g in plan.groups] == [5, 5, 14] and plan.n == 24  # 24 · (8, 8, 24) / 40
    other = plan_stage(spec(), "a", weights={"stage": "b", "families": {"darcy": 3.0}})
    assert [g.n for g in other.groups] == [8, 8, 8]  # weights for another stage are ignored


def test_region_weights_concentrate_samples() -> None:
    w = {
        "regions": {
            "heat": [{"parameter": "ic_length_scale", "low": 0.1, "high": 0.15, "weight": 8}]
        }
    }
    plain = plan_stage(spec(64), "a").groups[0].params[:, 1]
    warped = plan_stage(spec(64), "a", weights=w).groups[0].params[:, 1]
    assert np.mean(plain < 0.15) == pytest.approx(0.25, abs=0.05)
    assert np.mean(warped < 0.15) == pytest.approx(8 / 11, abs=0.05)
    u = np.linspace(0, 1, 101)
    r = Range(low=0.0, high=1.0)
    warp = region_warp(u, r, [Region(parameter="x", low=0.5, high=1.0, weight=3.0)])
    assert warp[0] == 0 and warp[-1] == 1 and np.all(np.diff(warp) > 0)


@pytest.mark.parametrize(
    ("weights", "error", "words"),
    [
        (
            {"families": {"wave_": 2}},
            UnknownNameError,
            "not in stage 'a': wave_; available: heat, darcy",
        ),
        (
            {"regions": {"heat": [{"parameter": "kappa", "low": 0, "high": 1, "weight": 2}]}},
            UnknownNameError,
            "available: diffusivity",
        ),
        ({"families": {"heat": -1}}, UserInputError, "must be positive"),
        ({"minimum_fraction": 2}, UserInputError, "minimum_fraction"),
    ],
)
def test_bad_weights(weights: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        plan_stage(spec(), "a", weights=load_weights(weights))


#: What a first plan measures per family and dimension.
CALIBRATIONS = ("solve times", "memory", "compression ratio")


def test_plan_cli_estimates_from_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from pdeladder.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    file = tmp_path / "c.yaml"
    file.write_text(SPEC.format(n=8).replace("dims: [1, 2]", "dims: [1]"))
    res = CliRunner().invoke(app, ["curriculum", "plan", str(file), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    (stage,) = out["stages"]
    heat, darcy = stage["groups"]
    assert heat["samples"] == 8 and heat["bytes"] == 8 * 11 * 9 * 4
    assert heat["dof_steps"] >= 8 * 9 * 10  # at least one step per stored snapshot
    assert darcy["dof_steps"] == pytest.approx(8 * 9, rel=0.5)  # steady: about one solve
    cache = json.loads((tmp_path / "cache/pdeladder/cost-model.json").read_text())
    assert {c["family"] for c in cache.values()} == {"heat", "darcy"}
    # the estimate is the calibration's linear model, whatever this machine's timings were
    cal = {c["family"]: c for k, c in cache.items() if k.count("|") == 3}
    memory = {c["family"]: c for k, c in cache.items() if k.endswith("|memory")}
    assert set(memory) == {"heat", "darcy"}  # peak RSS measured in a fresh process
    for g in (heat, darcy):
        m = memory[g["family"]]
        assert m["idle_bytes"] > 0 and m["bytes_per_dof"] >= 0 and "peak RSS" in m["measured"]
        assert g["ranks_per_sample"] == 1 and g["memory_per_sample_bytes"] > m["idle_bytes"]
    for g in (heat, darcy):
        c = cal[g["family"]]
        expected = (
            g["samples"] * c["seconds_per_sample"] + g["dof_steps"] * c["seconds_per_dof_step"]
        )
        assert g["seconds"] == pytest.approx(expected, rel=1e-12) and g["seconds"] > 0
    assert stage["seconds"] == pytest.approx(heat["seconds"] + darcy["seconds"], rel=1e-12)
    assert all("one core" in c["measured"] for c in cal.values())
    # stored bytes: the raw bytes over the group's codec's ratio, measured on the family's fields
    ratios = {c["family"]: c["ratios"] for k, c in cache.items() if k.endswith("|compression")}
    assert set(ratios) == {"heat", "darcy"}
    for g in (heat, darcy):
        ratio = ratios[g["family"]][g["compression"]]
        assert ratios[g["family"]]["none"] == 1.0 and ratio > 1  # smooth fields compress
        assert g["stored_bytes"] == pytest.approx(g["bytes"] / ratio, rel=1e-12)
    assert stage["core_hours"] == pytest.approx(stage["seconds"] / 3600, rel=1e-12)
    # the first plan told each measurement on stderr as it began and ended; a second is silent
    told = res.stderr.splitlines()
    measured = [f"{f} 1D {what}" for f in ("heat", "darcy") for what in CALIBRATIONS]
    assert sorted(line.split(": ", 1)[1].split(" on this machine")[0] for line in told[::2]) == (
        sorted(measured)
    )
    assert all(line.startswith("calibrating the cost model: ") for line in told[::2])
    assert all(re.fullmatch(r"calibrated .* in \d+ s", line) for line in told[1::2])
    again = CliRunner().invoke(app, ["curriculum", "plan", str(file), "--json"])
    assert again.exit_code == 0 and again.stderr == "" and json.loads(again.stdout) == out
