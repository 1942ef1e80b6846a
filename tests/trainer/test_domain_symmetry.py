"""The box's symmetries on samples split in x slabs over 2 and 3 gloo processes (3: uneven, and
cut unevenly as ``predict`` cuts at chunk boundaries) are the symmetries of the whole samples:
every element of the 1D, 2D and 3D groups (the x reflection and the permutations that move x
among them) moves the slabs exactly as it moves the whole sample, augmentation of slabs gives
the slabs of the augmented samples, and symmetrized prediction on slabs equals symmetrized
prediction on whole samples to 1e-6 relative. (Training with augmentation on over two domain
ranks: test_domain_training.py.)"""

import json
from pathlib import Path

import pytest

from .conftest import run_ranks

RANK = Path(__file__).with_name("domain_symmetry_rank.py")


@pytest.fixture(scope="module", params=[2, 3])
def found(request, tmp_path_factory) -> tuple[int, dict[str, float]]:
    """(world size, what its ranks found), one run of the ranks per world size."""
    folder = tmp_path_factory.mktemp(f"symmetry{request.param}")
    return request.param, json.loads(run_ranks([str(RANK)], request.param, folder).read_text())


def test_every_element_moves_slabs_as_it_moves_the_whole_sample(found):
    world, results = found
    moves = {k: v for k, v in results.items() if k.startswith("move") and ":" not in k}
    assert len(moves) == 4
    for case, worst in moves.items():
        assert worst == 0.0, f"{case} at k = {world}: differs by {worst}"
        dim = int(case.split()[1][0])
        # every element but those keeping x in place moves data across the ranks
        assert results[f"{case}: elements moving x"] == {1: 1, 2: 6, 3: 40}[dim]


def test_augmented_slabs_are_slabs_of_augmented_samples(found):
    results = found[1]
    assert results["augment 2d"] == 0.0
    assert results["augment 2d: samples moved in x"] > 0


def test_symmetrized_prediction_on_slabs_equals_one_rank(found):
    world, results = found
    predictions = {k: v for k, v in results.items() if k.startswith("symmetrized")}
    assert len(predictions) == {2: 2, 3: 3}[world]
    for case, relative in predictions.items():
        assert relative <= 1e-6, f"{case} at k = {world}: {relative:.2e}"
