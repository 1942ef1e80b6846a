"""The deployments that ``pdeladder flows serve`` serves; ``deploy/prefect.yaml`` mirrors them."""

from prefect.deployments.runner import EntrypointType, RunnerDeployment

from pdeladder.flows.closed_loop import closed_loop
from pdeladder.flows.data_campaign import data_campaign
from pdeladder.flows.train import train

TAGS = ["pdeladder"]


def deployments() -> list[RunnerDeployment]:
    """One deployment per flow, loaded by module path so that any install can run it."""
    return [
        fl.to_deployment(
            name,
            description=(fl.description or "").split("\n\n")[0],
            tags=TAGS,
            entrypoint_type=EntrypointType.MODULE_PATH,
        )
        for name, fl in (
            ("data-campaign", data_campaign),
            ("train", train),
            ("closed-loop", closed_loop),
        )
    ]
