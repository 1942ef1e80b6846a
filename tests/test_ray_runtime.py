"""Starting Ray: a node that times out during start-up is started again (an injected fault)."""

import pytest

from pdeladder import ray_runtime


class FlakyStart:
    """``ray.init`` failing like a node whose raylet registered too late, ``failures`` times."""

    def __init__(self, failures: int, message: str):
        self.failures, self.message, self.calls, self.shutdowns = failures, message, 0, 0

    def init(self, **kwargs) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise Exception(self.message)

    def shutdown(self) -> None:
        self.shutdowns += 1


TIMED_OUT = "The current node timed out during startup. This could happen because ..."


@pytest.fixture
def flaky(monkeypatch):
    import ray

    def make(failures: int, message: str = TIMED_OUT) -> FlakyStart:
        fake = FlakyStart(failures, message)
        monkeypatch.setattr(ray, "init", fake.init)
        monkeypatch.setattr(ray, "shutdown", fake.shutdown)
        return fake

    return make


def test_a_start_that_timed_out_is_tried_again(flaky):
    fake = flaky(ray_runtime.START_ATTEMPTS - 1)
    ray_runtime.ray_init(address="local")
    assert fake.calls == ray_runtime.START_ATTEMPTS
    assert fake.shutdowns == ray_runtime.START_ATTEMPTS - 1  # each failed start cleaned up


def test_gives_up_after_the_last_attempt(flaky):
    fake = flaky(ray_runtime.START_ATTEMPTS)
    with pytest.raises(Exception, match="timed out during startup"):
        ray_runtime.ray_init(address="local")
    assert fake.calls == ray_runtime.START_ATTEMPTS


def test_other_errors_are_not_retried(flaky):
    fake = flaky(1, "Could not find any running Ray instance")
    with pytest.raises(Exception, match="Could not find"):
        ray_runtime.ray_init(address="auto")
    assert fake.calls == 1
