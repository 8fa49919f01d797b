"""The demo fleet covers every candidate kind and every hold with real local
sandboxes, and a newcomer sees retirements happen within two passes."""

import io

import pytest
from django.core.management import call_command

from sandboxes import models as m
from sandboxes.providers.local import LocalProvider
from sandboxes.reconciler.passes import run_pass


@pytest.fixture
def local_root(settings, tmp_path):
    settings.LOCAL_SANDBOX_ROOT = tmp_path / "sandboxes"
    from sandboxes.providers.registry import reset_providers

    reset_providers()
    yield settings.LOCAL_SANDBOX_ROOT
    reset_providers()


@pytest.mark.django_db
def test_demo_fleet_covers_every_kind_and_hold_and_retires(local_root, monkeypatch):
    call_command("demo_fleet", quiet=True)
    call_command("demo_fleet", quiet=True)  # idempotent
    provider = LocalProvider(root=local_root)
    sandboxes = list(provider.list({"app": "paperclip-demo"}))
    assert len(sandboxes) == 25  # 24 scenarios and one replacement
    ids = {s.id for s in sandboxes}
    assert set(m.EnvironmentLease.objects.values_list("provider_lease_id", flat=True)) == ids

    monkeypatch.setattr(
        "sandboxes.reconciler.worker.default_provider_for", lambda env, name="": provider
    )
    run_pass()
    records = m.Retirement.objects.all()
    kinds = set(records.values_list("kind", flat=True))
    assert kinds == {k.value for k in m.RetirementKind}
    run_pass()  # the superseded sandbox, stopped on the first pass, is retired now
    holds = {code for r in records for code in r.holds}
    assert holds == {c.value for c in m.HoldCode}
    assert records.filter(stage=m.Stage.RETIRED).count() >= 5
    # The replaced sandbox is retired on its replacement's proof (seed 004): the
    # demo's workspace carries the committed save Paperclip checked.
    replaced = records.get(kind=m.RetirementKind.RESUME_FAILED)
    assert replaced.stage == m.Stage.RETIRED, (replaced.stage, replaced.last_error)
    assert not records.filter(stage=m.Stage.FAILED).exists()
    assert records.filter(stage=m.Stage.AWAITING_APPROVAL).exists()
    exported = m.Receipt.objects.filter(kind=m.ReceiptKind.SALVAGE_EXPORT, payload__verified=True)
    assert exported.count() >= 2
    assert m.RecoveryAction.objects.filter(kind="file_recovery").count() == 1
    # Loading the demo again recreates nothing, not even what was retired.
    alive = len(list(provider.list({"app": "paperclip-demo"})))
    assert alive == 25 - m.Retirement.objects.filter(stage=m.Stage.RETIRED).count()
    call_command("demo_fleet", stdout=io.StringIO())
    assert len(list(provider.list({"app": "paperclip-demo"}))) == alive
