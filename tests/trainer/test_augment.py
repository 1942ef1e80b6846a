"""The box's symmetries in training and inference, on solver data.

Augmentation: every moved sample is the image of its solve under the element drawn for it (so an
exact solution: its residual keeps its norm), the draws are a function of (seed, step, rank), and
the normalised fields are made again from the moved ones (on x slabs over domain ranks:
test_domain_symmetry.py).
Symmetrized prediction: exactly equivariant where the model is not, and the default of
``evaluate`` and ``predict`` for a model trained on augmented batches."""

from mpi4py import MPI  # noqa: F401  (before DOLFINx)

import json

import numpy as np
import pytest
import torch

from pdeladder.dataset.collate import make_batch
from pdeladder.dataset.slots import Normaliser, SlotLayout
from pdeladder.dataset.store import open_store
from pdeladder.solvers.registry import get_family
from pdeladder.solvers.symmetry import box_group
from pdeladder.trainer.evaluate import evaluate_checkpoint
from pdeladder.trainer.inference import predict, symmetrized
from pdeladder.trainer.predict import predict_store
from pdeladder.trainer.processor import DataProcessor
from pdeladder.trainer.training.augment import Augmentation

from .conftest import tiny_operator

FAMILIES = ["heat", "burgers", "advection_diffusion"]


@pytest.fixture(scope="module")
def layout() -> SlotLayout:
    layout = SlotLayout.for_families(FAMILIES, [2])
    layout.set_normalisation({"burgers": {"u": (0.1, 0.5), "v": (-0.2, 0.4)},
                              "advection_diffusion": {"bx": (0.05, 0.9), "by": (0.0, 1.1)}})  # fmt: skip
    return layout


@pytest.fixture(scope="module")
def batches(layout) -> dict[str, dict]:
    """A batch of four 2D 17² solves per family, with ``normalised`` as the loader makes it."""
    out = {}
    normaliser = Normaliser(layout)
    for name in FAMILIES:
        fam = get_family(name)
        grid = fam.grid(2, 17, 6)
        samples = [fam.run(fam.Params(), grid, seed=s) for s in range(4)]
        fields = np.stack([s.fields for s in samples])
        params = np.stack([s.params.vector() for s in samples])
        batch = make_batch(layout, name, grid, fields, params, solved=True)
        batch["normalised"] = normaliser.normalise(
            batch["fields"], batch["family"], batch["present"]
        )
        out[name] = batch
    return out


def residual_norms(layout, batch) -> torch.Tensor:
    """Per-sample norm of the family's residual of the batch's physical fields."""
    fam = get_family(layout.families[int(batch["family"][0])])
    fields = DataProcessor(layout).fields(batch).double()[:, layout.slot_indices(fam, 2)]
    r = fam.residual(fields, torch.from_numpy(np.asarray(batch["params"])).double(), batch["grid"])
    return torch.linalg.vector_norm(r.flatten(1), dim=1)


@pytest.mark.parametrize("name", FAMILIES)
def test_moved_samples_are_images_of_their_solves(layout, batches, name):
    batch = batches[name]
    augment = Augmentation(DataProcessor(layout), seed=7, rank=0)
    moved_any = False
    for step in range(6):
        moved = augment(batch, step)
        elements = augment.elements(name, 2, step, 4)
        fam = get_family(name)
        for i, g in enumerate(elements):
            image = g.apply(batch["fields"][i], layout.slots, fam.vectors, channel_axis=0)
            assert torch.equal(moved["fields"][i], image)
            moved_any |= not g.is_identity
        expected = Normaliser(layout).normalise(moved["fields"], batch["family"], batch["present"])
        assert torch.allclose(moved["normalised"], expected)
        assert torch.allclose(residual_norms(layout, moved), residual_norms(layout, batch),
                              rtol=1e-5)  # fmt: skip
        assert torch.equal(moved["params"], batch["params"])
    assert moved_any


def test_draws_are_a_function_of_seed_step_and_rank(layout):
    processor = DataProcessor(layout)
    a, b = Augmentation(processor, 7, 0), Augmentation(processor, 7, 0)
    assert a.elements("heat", 2, 3, 4) == b.elements("heat", 2, 3, 4)
    draws = {tuple(a.elements("heat", 2, s, 4)) for s in range(40)}
    assert len(draws) > 30  # other steps, other elements
    other = Augmentation(processor, 7, 1)
    assert any(a.elements("heat", 2, s, 4) != other.elements("heat", 2, s, 4) for s in range(5))
    seen = {g for s in range(40) for g in a.elements("burgers", 2, s, 4)}
    assert seen == set(box_group(2))  # every element is drawn


@pytest.mark.parametrize("name", ["burgers", "advection_diffusion"])
def test_the_symmetrized_prediction_is_equivariant(layout, batches, name):
    processor, fam = DataProcessor(layout), get_family(name)
    model = tiny_operator(layout, (3, 3, 3, 1)).eval()
    batch = batches[name]
    plain = predict(model, processor, batch)
    x, ids = processor.inputs(batch)
    assert torch.equal(plain, processor.physical(model(x, ids).float(), ids))
    sym = predict(model, processor, batch, symmetrize=True)
    scale = sym.abs().max()
    broken = 0.0
    for g in box_group(2)[1:]:
        moved = processor.moved(batch, [g] * 4)
        image = g.apply(sym, layout.slots, fam.vectors, channel_axis=1)
        got = predict(model, processor, moved, symmetrize=True)
        assert torch.allclose(got, image, atol=1e-5 * scale), g
        plain_image = g.apply(plain, layout.slots, fam.vectors, channel_axis=1)
        broken = max(broken, (predict(model, processor, moved) - plain_image).abs().max().item())
    assert broken > 1e-2 * scale  # the model alone is not equivariant


def test_evaluate_and_predict_symmetrize_a_model_trained_on_augmented_batches(
    known_store, operator_checkpoint, tmp_path
):
    ckpt = operator_checkpoint(tmp_path / "model", known_store.url, known_store.paths)
    plain = evaluate_checkpoint(ckpt, known_store.url)
    doc = json.loads((ckpt / "model.json").read_text())
    doc["metadata"]["augmented"] = True
    (ckpt / "model.json").write_text(json.dumps(doc))
    sym = evaluate_checkpoint(ckpt, known_store.url)
    assert not any(r["symmetrized"] for r in plain["groups"].values())
    assert all(r["symmetrized"] for r in sym["groups"].values())  # 1D and 2D by default
    darcy = known_store.paths[1]  # its permeability is not symmetric: the x flip is another input
    assert sym["groups"][darcy]["nrmse"] != pytest.approx(plain["groups"][darcy]["nrmse"])
    off = evaluate_checkpoint(ckpt, known_store.url, symmetrize=False)
    assert off["groups"][darcy]["nrmse"] == plain["groups"][darcy]["nrmse"]
    for asked, expected in ((None, True), (False, False)):  # predict follows the same rule
        out = str(tmp_path / f"pred-{asked}.zarr")
        predict_store(ckpt, known_store.url, out, [darcy], symmetrize=asked)
        provenance = json.loads(open_store(out).group(darcy).column("provenance")[0])
        assert provenance["symmetrized"] is expected


def test_symmetrized_by_default_in_1d_and_2d_only():
    """An augmented model is symmetrized by default where it costs 2 or 8 passes, not 3D's 48;
    what is asked is done; a model trained without augmentation is not symmetrized unasked."""
    augmented, plain = {"augmented": True}, {}
    assert [symmetrized(augmented, None, d) for d in (1, 2, 3)] == [True, True, False]
    assert not any(symmetrized(plain, None, d) for d in (1, 2, 3))
    assert all(symmetrized(m, True, d) for m in (augmented, plain) for d in (1, 2, 3))
    assert not any(symmetrized(augmented, False, d) for d in (1, 2, 3))
