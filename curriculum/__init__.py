"""Curricula: stages of samples planned from YAML and materialized into a store on Ray actors.

>>> spec = load_curriculum("examples/quickstart.yaml")  # doctest: +SKIP
>>> plan = plan_stage(spec, "line")                      # doctest: +SKIP
>>> summary = materialize(spec, stages=["line"], workers=2)  # doctest: +SKIP

Importing this package imports the equation families (and so DOLFINx): their parameter models
make up the curriculum schema.
"""

from pdeladder.curriculum.loader import load_curriculum, parse_curriculum
from pdeladder.curriculum.materialize import (
    GroupSummary,
    MaterializeSummary,
    ProgressEvent,
    materialize,
)
from pdeladder.curriculum.plan import GroupPlan, SampleSpec, StagePlan, plan_stage
from pdeladder.curriculum.spec import Curriculum, Stage, Training
from pdeladder.curriculum.weights import Weights, load_weights

__all__ = [
    "Curriculum",
    "GroupPlan",
    "GroupSummary",
    "MaterializeSummary",
    "ProgressEvent",
    "SampleSpec",
    "Stage",
    "StagePlan",
    "Training",
    "Weights",
    "load_curriculum",
    "load_weights",
    "materialize",
    "parse_curriculum",
    "plan_stage",
]
