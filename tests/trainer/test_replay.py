"""``training.replay``: a stage trains on its own groups and on those of the earlier stages it
names, and the layout's normalisation comes from all of them."""

from pdeladder.curriculum.loader import parse_curriculum
from pdeladder.dataset.moments import family_normalisation
from pdeladder.dataset.store import open_store
from pdeladder.trainer.training.run import build_layout, stage_config

from .conftest import CURRICULUM

OPTIONS = dict(
    checkpoint_every=10, log_every=1, activation_checkpointing=False, held_out=0.1, workers=1
)


def test_a_stage_trains_on_the_groups_it_replays(tiny) -> None:
    _, url, _ = tiny
    spec = parse_curriculum(
        CURRICULUM.replace("      modes: 4\n", "      modes: 4\n      replay: [s1]\n")
    )
    s2 = spec.stage("s2")
    layout = build_layout(spec, url, [s2])
    cfg = stage_config(spec, s2, layout, url, None, **OPTIONS)
    assert cfg.paths == ("s2/heat/1d_n33_t6", "s1/heat/1d_n17_t6")
    assert [u.grid.resolution for u in cfg.unsolved] == [33]  # draws: its own groups

    store = open_store(url)
    both = family_normalisation(store.group(p) for p in cfg.paths)["heat"]["u"]
    own = family_normalisation([store.group("s2/heat/1d_n33_t6")])["heat"]["u"]
    slot = layout.slots.index("u")
    norm = (layout.normalisation["heat"]["mean"][slot], layout.normalisation["heat"]["std"][slot])
    assert norm == both != own


def test_without_replay_a_stage_trains_on_its_own_groups(tiny) -> None:
    spec, url, _ = tiny
    s2 = spec.stage("s2")
    cfg = stage_config(spec, s2, build_layout(spec, url, [s2]), url, None, **OPTIONS)
    assert cfg.paths == ("s2/heat/1d_n33_t6",)
