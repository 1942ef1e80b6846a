"""What the flows share: the curriculum source, and which task errors are worth a retry."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pdeladder.curriculum.loader import load_curriculum, parse_curriculum
from pdeladder.curriculum.spec import Curriculum
from pdeladder.errors import ClusterLostError, UserInputError
from pdeladder.examples import path as example_path


class CurriculumSource(BaseModel):
    """A curriculum file, or the same YAML pasted inline (the inline text wins)."""

    model_config = ConfigDict(extra="forbid")

    curriculum: str = Field(
        # The installed file, not a path relative to the folder the flows are served from.
        str(example_path("quickstart.yaml")),
        description="Path of a curriculum YAML file, as seen by the process running the flow; "
        "the default is the quick-start example installed with pdeladder.",
    )
    inline_spec: str | None = Field(
        None,
        description="A curriculum as YAML text; when given, it is used instead of the file.",
    )

    def load(self) -> Curriculum:
        """The validated curriculum; YAML is parsed safely, never evaluated."""
        if self.inline_spec and self.inline_spec.strip():
            return parse_curriculum(self.inline_spec, source="inline_spec")
        return load_curriculum(self.curriculum)

    def yaml_text(self) -> str:
        """The curriculum's YAML text, to hand to a process on another machine."""
        if self.inline_spec and self.inline_spec.strip():
            return self.inline_spec
        self.load()  # fail here, with the file's line numbers, rather than on the cluster
        with open(self.curriculum, encoding="utf-8") as f:
            return f.read()


def transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: retry everything but bad input and a lost Ray cluster (this process
    stays bound to it), which fail the same way every time."""
    return not isinstance(state.result(raise_on_failure=False), UserInputError | ClusterLostError)
