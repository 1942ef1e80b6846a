"""The one rule for every ``--out`` (:mod:`pdeladder.outputs`): never over, around or inside an
input; ``force`` replaces only a previous output of the same command, on disk and in memory."""

import uuid

import fsspec
import pytest

from pdeladder.dataset.store import open_store
from pdeladder.errors import UserInputError
from pdeladder.outputs import MARKER, check_apart, check_output, make_output, output_of


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path)
    return f"memory:///pdeladder-outputs-{uuid.uuid4().hex}"


def put(url: str, data: bytes = b"{}") -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, data)


def files(url: str) -> list[str]:
    fs, path = fsspec.core.url_to_fs(url)
    return sorted(p.rsplit("/", 1)[-1] for p in fs.find(path))


@pytest.mark.parametrize(
    ("out", "how"),
    [("in.zarr", "is the input"), ("", "contains the input"), ("in.zarr/g", "lies inside")],
)
def test_an_out_overlapping_an_input_is_refused_even_with_force(root, out, how):
    source = f"{root}/in.zarr"
    put(f"{source}/zarr.json")
    with pytest.raises(UserInputError, match=how):
        make_output(f"{root}/{out}".rstrip("/"), "cmd", [source], force=True)
    assert files(source) == ["zarr.json"]


def test_a_sibling_whose_name_extends_the_input_is_not_inside_it(root):
    make_output(f"{root}/in.zarr2", "cmd", [f"{root}/in.zarr"])
    assert output_of(f"{root}/in.zarr2") == "cmd"


def test_a_symlink_to_the_input_is_the_input(tmp_path):
    (tmp_path / "in.zarr").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "in.zarr")
    with pytest.raises(UserInputError, match="is the input"):
        check_output(tmp_path / "link", "cmd", [str(tmp_path / "in.zarr")])


def test_force_replaces_only_a_previous_output_of_the_same_command(root):
    out = f"{root}/out"
    make_output(out, "cmd", [])
    put(f"{out}/old")
    with pytest.raises(UserInputError, match="pass --force"):
        make_output(out, "cmd", [])
    with pytest.raises(UserInputError, match="output of `pdeladder cmd`"):
        make_output(out, "other", [], force=True)
    make_output(out, "cmd", [], force=True)
    assert files(out) == [MARKER]


def test_force_over_a_foreign_folder_or_a_file_is_refused(root):
    put(f"{root}/mine/keep.txt")
    with pytest.raises(UserInputError, match="not a pdeladder output"):
        make_output(f"{root}/mine", "cmd", [], force=True)
    with pytest.raises(UserInputError, match="not a folder"):
        make_output(f"{root}/mine/keep.txt", "cmd", [], force=True)
    assert files(f"{root}/mine") == ["keep.txt"]


def test_a_zarr_output_is_marked_in_its_root_attributes(tmp_path):
    out = tmp_path / "p.zarr"
    make_output(out, "predict", [], zarr=True)
    store = open_store(str(out), "a")  # no foreign object in the hierarchy: zarr does not warn
    assert store.groups() == [] and dict(store.root.attrs)["format"] == "pdeladder"
    assert output_of(out) == "predict" and files(str(out)) == ["zarr.json"]


def test_resume_keeps_a_previous_output_of_the_same_command_untouched(root):
    out = f"{root}/out"
    assert make_output(out, "cmd", [], resume=True) is False  # made new
    put(f"{out}/part")
    assert make_output(out, "cmd", [], resume=True) is True
    assert files(out) == sorted([MARKER, "part"])
    with pytest.raises(UserInputError, match="output of `pdeladder cmd`"):
        make_output(out, "other", [], resume=True)


def test_an_out_that_only_adds_files_may_hold_an_input(root) -> None:
    """``around=False`` (train's run folder): an out holding an input is let be; one that is
    the input or lies inside it is refused all the same."""
    source = f"{root}/in.zarr"
    check_apart(root, [source], around=False)
    for out, how in ((source, "is the input"), (f"{source}/run", "lies inside the input")):
        with pytest.raises(UserInputError, match=how):
            check_apart(out, [source], around=False)
