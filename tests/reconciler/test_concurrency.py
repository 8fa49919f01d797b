"""Two reconcilers at once over the same 200 candidates, against the simulator:
no sandbox is destroyed twice (the simulator's call log is the witness)."""

import threading
from collections import Counter

import pytest
from django.db import connection

from devtools.simulator import HOME, FaultConfig, SimulatorServer
from sandboxes import models as m
from sandboxes.providers.base import SandboxState
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.reconciler.passes import run_pass
from tests import factories as f

N = 200
FILES = {"README.md": b"# task\n"}


@pytest.fixture
def simulator():
    with SimulatorServer(seed=3, config=FaultConfig(transition_seconds=0.0)) as srv:
        yield srv


def seed_sandboxes(srv, n):
    ids = []
    with srv.sim.lock:
        for i in range(n):
            sid = srv.sim.create({"name": f"race-{i}"})["id"]
            sb = srv.sim.sandboxes[sid]
            sb.dirs.add(f"{HOME}/workspace")
            sb.files[f"{HOME}/workspace/README.md"] = FILES["README.md"]
            sb.state = "stopped"
            ids.append(sid)
    return ids


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_reconcilers_never_destroy_a_sandbox_twice(simulator):
    env = f.EnvironmentFactory(
        provider="daytona", api_url=simulator.url, name="race", max_retirements_per_pass=N
    )
    for sid in seed_sandboxes(simulator, N):
        lease = f.EnvironmentLeaseFactory(
            environment=env,
            provider_lease_id=sid,
            status=m.LeaseStatus.FAILED,
            execution_workspace__saved_manifest=f.manifest_for(FILES),
        )
        f.stop_receipt(lease)
    simulator.sim.calls.clear()

    barrier = threading.Barrier(2)
    passes, failures = [], []

    def worker(name):
        client = DaytonaProvider(
            simulator.url,
            api_key="unused",
            budget_seconds=20,
            poll_interval=0.005,
            backoff_base=0.005,
            backoff_cap=0.05,
        )
        try:
            barrier.wait()
            passes.append(run_pass(worker=name, provider_for=lambda env: client))
        except BaseException as exc:  # surfaced below
            failures.append(exc)
        finally:
            client.close()
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures

    deletes = Counter(c["sandbox_id"] for c in simulator.sim.calls if c["method"] == "DELETE")
    assert len(deletes) == N
    assert max(deletes.values()) == 1
    assert m.Retirement.objects.filter(stage=m.Stage.RETIRED).count() == N
    assert m.Receipt.objects.filter(kind=m.ReceiptKind.RETIREMENT).count() == N
    assert m.Retirement.objects.count() == N
    # Both workers did real work: each claims one record at a time, so they
    # interleave over the whole fleet instead of one idling behind a batch.
    assert sum(p.retired for p in passes) == N
    assert all(p.retired > N // 10 for p in passes), [p.retired for p in passes]
    assert not m.Retirement.objects.exclude(attempt_id=None).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_destroy_under_way_is_awaited_by_reading_not_sent_again(at_checkpoint):
    """A worker died right after its DELETE was received: the next one finds the
    sandbox `destroying` and confirms by reads; there is one DELETE, not two."""
    with SimulatorServer(seed=5, config=FaultConfig(transition_seconds=0.8)) as srv:
        env = f.EnvironmentFactory(provider="daytona", api_url=srv.url, name="await")
        (sid,) = seed_sandboxes(srv, 1)
        lease = f.EnvironmentLeaseFactory(
            environment=env,
            provider_lease_id=sid,
            status=m.LeaseStatus.FAILED,
            execution_workspace__saved_manifest=f.manifest_for(FILES),
        )
        f.stop_receipt(lease)
        client = DaytonaProvider(srv.url, api_key="unused", budget_seconds=10, poll_interval=0.05)

        class Died(BaseException):
            pass

        def die(name):
            if name == "compare:after_receipt":
                raise Died

        survive = at_checkpoint(die)
        try:
            with pytest.raises(Died):
                run_pass(worker="dead", provider_for=lambda env: client)
        finally:
            survive()
        # The dead worker's DELETE reached the provider; its claim then expired.
        import httpx

        httpx.delete(f"{srv.url}/sandbox/{sid}", headers={"X-Request-Id": "dead-worker"})
        # Daytona's soft delete: desiredState `destroyed` at once, then `destroying`.
        assert srv.sim.sandboxes[sid].desired_state == "destroyed"
        assert client.get(sid).state == SandboxState.DESTROYING
        m.Retirement.objects.update(claimed_until=None, attempt_id=None)
        run_pass(worker="next", provider_for=lambda env: client)
        client.close()
        r = m.Retirement.objects.get(lease=lease)
        assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
        deletes = [c for c in srv.sim.calls if c["method"] == "DELETE"]
        assert [c["request_id"] for c in deletes] == ["dead-worker"]
        assert r.receipts.filter(kind=m.ReceiptKind.RETIREMENT).count() == 1
