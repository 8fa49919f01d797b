"""Fixtures for provider tests: a simulator on an ephemeral loopback port and
clients with small budgets so fault tests stay fast."""

import pytest

from devtools.simulator import FaultConfig, SimulatorServer
from sandboxes.providers.base import CALL_HOOKS
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.providers.local import LocalProvider

API_KEY = "test-key"


@pytest.fixture
def simulator():
    with SimulatorServer(
        seed=7, config=FaultConfig(transition_seconds=0.02), api_key=API_KEY
    ) as srv:
        yield srv


@pytest.fixture
def sim(simulator):
    """The simulator's HTTP control API."""
    return simulator.control


def make_client(url, **overrides):
    options = {
        "api_key": API_KEY,
        "budget_seconds": 3,
        "poll_interval": 0.01,
        "backoff_base": 0.01,
        "backoff_cap": 0.1,
        "max_concurrency": 8,
        "seed": 1,
    }
    options.update(overrides)
    return DaytonaProvider(url, **options)


@pytest.fixture
def daytona(simulator):
    client = make_client(simulator.url)
    yield client
    client.close()


@pytest.fixture
def local(tmp_path):
    return LocalProvider(root=tmp_path / "sandboxes", budget_seconds=3)


@pytest.fixture
def hook_calls():
    calls = []

    def hook(provider, operation, seconds, error):
        calls.append((provider, operation, seconds, error))

    CALL_HOOKS.append(hook)
    yield calls
    CALL_HOOKS.remove(hook)
