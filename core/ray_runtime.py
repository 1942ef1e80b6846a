"""Starting Ray for pdeladder's commands, robust to a slow start on a busy machine."""

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: Environment of every task and actor: one BLAS/OpenMP thread, no usage statistics.
RUNTIME_ENV = {"env_vars": {"OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}}

#: Tries at starting a node. Ray gives a new node's raylet 30 s (not configurable) to register
#: with the GCS; on a loaded machine that can run out while nothing is wrong.
START_ATTEMPTS = 3


def ray_init(**kwargs: Any) -> None:
    """``ray.init(**kwargs)``; a node that timed out during start-up is shut down and started
    again, up to :data:`START_ATTEMPTS` times. Any other error is raised at once."""
    import ray

    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as err:
            ray.shutdown()  # a start that failed must not leave its processes behind
            if "timed out during startup" not in str(err) or attempt == START_ATTEMPTS:
                raise
            logger.warning("Ray node start timed out (attempt %d of %d); starting it again",
                           attempt, START_ATTEMPTS)  # fmt: skip
