"""Reading curriculum YAML files: safe parsing that keeps line numbers, and errors that name the
field and the line it came from."""

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pdeladder.curriculum.families import UNAVAILABLE
from pdeladder.curriculum.spec import Curriculum
from pdeladder.errors import CurriculumError, UserInputError

Path_ = tuple[str | int, ...]
#: The most YAML nodes a curriculum may hold with every alias expanded: far above any
#: curriculum, far below what a small file of nested aliases (a "billion laughs") expands to.
MAX_NODES = 100_000


def load_curriculum(path: str | Path) -> Curriculum:
    """Load and validate a curriculum file; :class:`CurriculumError` names the field and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserInputError(f"cannot read curriculum {str(path)!r}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UserInputError(
            f"{path}: not UTF-8 text (byte {err.start}); a curriculum is a UTF-8 YAML file"
        ) from None
    return parse_curriculum(text, source=str(path))


def parse_curriculum(text: str, source: str = "<string>") -> Curriculum:
    """Validate curriculum YAML given as text; ``source`` names it in error messages."""
    data, lines = read_yaml(text, source)
    if not isinstance(data, dict):
        raise CurriculumError(f"{source}: a curriculum is a mapping with name, seed and stages")
    try:
        return Curriculum.model_validate(data)
    except ValidationError as err:
        raise CurriculumError(describe_errors(err, lines, source)) from None


def read_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML safely (no tags evaluated); return the data and the 1-based line of every
    mapping value and sequence item, keyed by its path of keys and indices."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        check_size(node, source)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise CurriculumError(f"{source}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err)
        raise CurriculumError(f"{where}: invalid YAML: {problem}") from None
    finally:
        loader.dispose()
    lines: dict[Path_, int] = {}

    def walk(n: yaml.Node, path: Path_) -> None:
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                walk(value, (*path, key.value))
                lines[(*path, key.value)] = key.start_mark.line + 1
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                walk(item, (*path, i))

    if node is not None:
        walk(node, ())
    return data, lines


def check_size(node: yaml.Node | None, source: str) -> None:
    """Refuse a document whose nodes, every alias expanded, exceed :data:`MAX_NODES`, or that
    holds itself (a recursive alias): counted once per distinct node, so in linear time."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)] if node is not None else []
    open_: set[int] = set()
    while stack:
        n, done = stack.pop()
        if done:
            children = _children(n)
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in children)
            open_.discard(id(n))
            if sizes[id(n)] > MAX_NODES:
                raise CurriculumError(
                    f"{source}:{n.start_mark.line + 1}: more than {MAX_NODES} values with its "
                    "aliases expanded; write the curriculum out"
                )
            continue
        if id(n) in sizes:
            continue
        if id(n) in open_:
            raise CurriculumError(f"{source}:{n.start_mark.line + 1}: a recursive alias")
        open_.add(id(n))
        stack.append((n, True))
        stack.extend((c, False) for c in _children(n) if id(c) not in sizes)


def _children(n: yaml.Node) -> list[yaml.Node]:
    if isinstance(n, yaml.MappingNode):
        return [x for pair in n.value for x in pair]
    if isinstance(n, yaml.SequenceNode):
        return list(n.value)
    return []


def describe_errors(
    err: ValidationError, lines: dict[Path_, int], source: str, most: int = 3
) -> str:
    """One line naming, for the first ``most`` errors, the YAML line, the field and the problem."""
    parts = []
    for e in err.errors(include_url=False)[:most]:
        path: Path_ = ()
        for part in e["loc"]:  # skip the union's tags and validator names, which are not keys
            if (*path, part) in lines:
                path = (*path, part)
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        parts.append(f"{source}:{lines.get(path, 1)}: {field or '(top level)'}: {_message(e)}")
    more = len(err.errors()) - most
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _message(e: dict[str, Any]) -> str:
    if e["type"] == "union_tag_invalid":
        tag = e["ctx"]["tag"]
        if tag in UNAVAILABLE:
            return UNAVAILABLE[tag]
        return f"unknown family {tag!r}; available: {e['ctx']['expected_tags'].replace("'", '')}"
    if e["type"] == "union_tag_not_found":
        return "each family entry needs a 'family' key"
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown field (a typo?)"
    return msg
