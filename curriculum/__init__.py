"""Curricula: stages of samples planned from YAML and materialized into a store on Ray actors.

>>> spec = load_curriculum("examples/quickstart.yaml")  # doctest: +SKIP
>>> plan = plan_stage(spec, "line")                      # doctest: +SKIP
>>> summary = materialize(spec, stages=["line"], workers=2)  # doctest: +SKIP

The names below are imported on first use; the spec imports the equation families (and so
DOLFINx), whose parameter models make up the curriculum schema.
"""

from pdeladder.lazy import lazy_exports

#: Public name -> submodule; imported on first use, so ``pdeladder --help`` stays fast.
_EXPORTS = {
    "load_curriculum": ".loader",
    "parse_curriculum": ".loader",
    "GroupSummary": ".generation",
    "MaterializeSummary": ".generation",
    "ProgressEvent": ".generation",
    "materialize": ".generation",
    "GroupPlan": ".plan",
    "SampleSpec": ".plan",
    "StagePlan": ".plan",
    "plan_stage": ".plan",
    "Curriculum": ".spec",
    "Stage": ".spec",
    "Training": ".spec",
    "Weights": ".weights",
    "load_weights": ".weights",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


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
