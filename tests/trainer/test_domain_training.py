"""`pdeladder train --domain-ranks 2` on Ray Train: two workers that each hold an x slab of
every sample (read as slabs from the store) train the same model, step by step, as one worker
holding whole samples, through the supervised steps and the self-improvement phase (whose
equation loss exchanges halos), with symmetry augmentation on (its x reflection moves each
sample across the slabs); bad tilings fail before anything is written."""

import subprocess
import sys
from pathlib import Path

import pytest

from pdeladder.trainer.training.run import train_curriculum

pytestmark = [
    pytest.mark.usefixtures("ray_local"),
    # Ray Train copies Ray Data's context, whose attribute access warns about its own deprecated
    # options (use_push_based_shuffle, use_polars); nothing of ours sets them.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


def test_two_domain_ranks_train_as_one_worker(tiny, tmp_path):
    spec, url, _ = tiny
    assert all(s.training.augment for s in spec.stages)  # the x reflection moves slabs across
    runs = {}
    for workers, ranks in ((1, 1), (2, 2)):
        seen = []
        train_curriculum(
            spec,
            stages=["s1"],
            store_url=url,
            workers=workers,
            domain_ranks=ranks,
            run_dir=tmp_path / f"k{ranks}",
            log_every=1,
            checkpoint_every=100,
            progress=False,
            on_metrics=seen.append,
        )
        runs[ranks] = {m["step"]: m for m in seen}
    one, two = runs[1], runs[2]
    assert sorted(one) == sorted(two) == list(range(1, 13))  # 8 supervised + 4 self-improvement
    for step in one:
        for key in ("loss", "data_loss", "equation_loss"):
            a, b = one[step][key], two[step][key]
            assert abs(a - b) <= 1e-6 * abs(a), f"step {step} {key}: {a} vs {b}"
    for key in ("held_out_nrmse_after", "held_out_residual_after"):
        assert abs(one[12][key] - two[12][key]) <= 1e-6 * abs(one[12][key]), key
    assert two[12]["domain_ranks"] == 2 and two[12]["dp"] == 1
    # auto: the parameters whole on both domain ranks, each mixing the whole kept block
    assert (two[12]["shard"], two[12]["mixing"]) == ("dp", "whole")
    assert len(two[12]["peak_rss_mb"]) == 2 and min(two[12]["peak_rss_mb"]) > 0
    assert two[12]["comm_bytes_per_step"] > 0 and one[12]["comm_bytes_per_step"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2", "--domain-ranks", "3"], "--domain-ranks 3 does not divide the 2"),
        (
            ["--workers", "9", "--domain-ranks", "9"],  # 17 x points: 1, 2, .., 2
            "17 points along x over 9 ranks leave a rank 1; each needs at least 2",
        ),
        (["--workers", "2", "--domain-ranks", "two"], "positive number or auto"),
    ],
)
def test_bad_domain_ranks_fail_in_one_line_writing_nothing(tiny, tmp_path, args, message):
    _, url, path = tiny
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).with_name("pdeladder")
    command = [exe, "train", path, "--store", url, "--run-dir", run_dir, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not run_dir.exists()


def test_auto_picks_the_fewest_ranks_that_fit_the_budget(tiny, tmp_path):
    """A budget below the one-worker peak needs two domain ranks; none fits a tiny budget."""
    from pdeladder.errors import UserInputError
    from pdeladder.slabs import DomainTiling
    from pdeladder.trainer.distributed.choose import StageSizing, domain_ranks_for
    from pdeladder.trainer.distributed.memory import peak_bytes
    from pdeladder.trainer.models.operator import OperatorConfig

    config = OperatorConfig(5, 2, width=16, layers=4, modes=(4, 8, 1, 1))
    grid = (21, 257, 1, 1)
    one, two = (
        peak_bytes(config, grid, 2, 8, DomainTiling(x=k, padding=0.25), 2, True, mixing="share")
        / 2**30
        for k in (1, 2)
    )
    assert two < 0.6 * one

    def sizing(budget_gb: float | None) -> StageSizing:
        return StageSizing(2, [grid], config, 2, 8, True, budget_gb)

    assert sizing(None).peak_gb(1) == one and sizing(None).peak_gb(2) == two
    assert domain_ranks_for("auto", sizing((one + two) / 2)) == 2
    assert domain_ranks_for("auto", sizing(one * 1.01)) == 1
    with pytest.raises(UserInputError, match=r"no domain_ranks dividing 2 workers fits"):
        domain_ranks_for("auto", sizing(two / 2))
