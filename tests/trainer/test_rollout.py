"""`rollout`: a model's prediction of one sample from its initial state, without a store, is the
prediction `pdeladder predict` writes for the same sample."""

from pathlib import Path

import numpy as np
import pytest

from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.trainer import rollout
from pdeladder.trainer.predict import predict_store


@pytest.fixture
def predicted(known_store, operator_checkpoint, tmp_path: Path):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    out = str(tmp_path / "pred.zarr")
    predict_store(ckpt, known_store.url, out, symmetrize=False)
    return ckpt, open_store(known_store.url), open_store(out)


@pytest.mark.parametrize("index", [0, 3])
def test_a_rollout_is_the_stored_prediction_of_the_same_sample(predicted, index: int) -> None:
    ckpt, source, pred = predicted
    for path in source.groups():
        group = source.group(path)
        truth = group.read(index)  # (T, C, X, 1, 1)
        params = dict(zip(group.param_names, group.params()[index].tolist(), strict=True))
        got = rollout(
            ckpt,
            group.family,
            truth[0, :, :, 0, 0],  # every channel at t = 0, (C, n)
            params=params,
            snapshots=group.grid.snapshots,
            t_end=group.grid.t_end or None,
            symmetrize=False,
        )
        expected = pred.group(path).read(index).swapaxes(0, 1)[..., 0, 0]  # (C, T, X)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
        if group.grid.snapshots > 1:  # the initial state as given (steady: the inputs only)
            np.testing.assert_array_equal(got[:, 0], truth[0, :, :, 0, 0])


def test_a_refined_rollout_keeps_the_initial_state_and_lowers_the_residual(predicted) -> None:
    ckpt, source, _ = predicted
    group = source.group(next(p for p in source.groups() if "heat" in p))
    initial = group.read(1)[0, :, :, 0, 0]
    plain = rollout(ckpt, "heat", initial, snapshots=5, t_end=0.5, symmetrize=False)
    refined = rollout(ckpt, "heat", initial, snapshots=5, t_end=0.5, symmetrize=False, refine=20)
    np.testing.assert_array_equal(refined[:, 0], initial)
    assert not np.array_equal(refined, plain)


@pytest.mark.parametrize(
    ("family", "shape", "says"),
    [
        ("heat", (2, 9), "channels"),  # heat has one channel
        ("heat", (1, 9, 8), "(C, n, n)"),  # not square
        ("heat", (1, 9, 9), "not trained on heat in 2D"),  # the model is 1D
        ("burgers", (1, 9), "not trained on burgers"),
    ],
)
def test_bad_input_is_one_line(predicted, family: str, shape, says: str) -> None:
    ckpt = predicted[0]
    with pytest.raises(UserInputError, match=None) as refused:
        rollout(ckpt, family, np.zeros(shape), snapshots=5, t_end=0.5)
    assert says in str(refused.value) and "\n" not in str(refused.value)
