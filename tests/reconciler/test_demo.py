"""The demo fleet covers every candidate kind and every hold with real local
sandboxes, and a newcomer sees retirements happen within two passes."""

import io
import logging

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
    assert len(sandboxes) == 26  # 25 scenarios and one replacement
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
    assert alive == 26 - m.Retirement.objects.filter(stage=m.Stage.RETIRED).count()
    call_command("demo_fleet", stdout=io.StringIO())
    assert len(list(provider.list({"app": "paperclip-demo"}))) == alive


@pytest.mark.django_db
def test_a_fresh_demo_shows_money_on_the_dashboard(local_root, client):
    """Cost that reads true (the demo sets prices, the local provider reports
    sizes): money before the first pass; unknown only where a size is truly
    missing (the e2b environment has no client), never $0.00 beside
    "storage unknown"."""
    import re

    from django.urls import reverse

    from sandboxes.roles import REVIEWERS
    from tests.factories import UserFactory

    call_command("demo_fleet", quiet=True)
    client.force_login(UserFactory(groups=[REVIEWERS]))
    body = client.get(reverse("dashboard")).content.decode()
    cost = re.search(r'data-tile="cost">([^<]+)<', body).group(1)
    storage = re.search(r'data-tile="storage">([^<]+)<', body).group(1)
    assert re.fullmatch(r"\$\d+\.\d\d", cost) and cost != "$0.00", cost
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB)", storage), storage
    local = re.search(r'data-cost-env="local-demo">([^<]+)<', body).group(1)
    assert re.fullmatch(r"(< )?\$\d+\.\d\d", local.strip()), local
    e2b = re.search(r'data-cost-env="e2b-demo">([^<]+)<', body).group(1)
    assert e2b.strip() == "unknown"
    assert "0.0000" not in body  # no raw float of GiB anywhere
    running = m.Retirement.objects.filter(environment__name="local-demo", reported_cpu=2).first()
    assert running is not None and running.reported_memory_gib == 4
    detail = client.get(reverse("sandbox-detail", kwargs={"pk": running.pk})).content.decode()
    assert "2 vCPU · 4 GiB memory · " in detail and "/day" in detail


@pytest.mark.django_db
def test_the_demo_keeps_an_admins_own_prices(local_root):
    from decimal import Decimal

    from devtools.demo import set_demo_prices
    from sandboxes.models.mirror import PRICE_FIELDS

    call_command("demo_fleet", quiet=True)
    none = dict.fromkeys(PRICE_FIELDS)
    m.Environment.objects.filter(name="local-demo").update(**none | {"price_vcpu_hour_running": 9})
    m.Environment.objects.filter(name="local-demo-manual").update(**none)
    assert set_demo_prices() == 1  # only the one without any price
    own = m.Environment.objects.get(name="local-demo")
    assert own.price_vcpu_hour_running == Decimal("9") and own.price_disk_gib_month_stopped is None
    assert m.Environment.objects.get(name="local-demo-manual").price_disk_gib_month_stopped


def test_the_demo_reads_no_sizes_of_a_provider_without_a_client(db, caplog):
    # Regression: the demo's e2b environment has prices but no client, and
    # each size read logged "ValueError: unknown provider 'e2b'" to make run's
    # terminal (tests/deploy/test_run_script.py's noise check caught it).
    from sandboxes.models import Retirement
    from sandboxes.reconciler.sizes import refresh_sizes
    from sandboxes.reconciler.worker import Worker

    call_command("demo_fleet", quiet=True)
    assert Retirement.objects.open().filter(provider="e2b").exists()
    with caplog.at_level(logging.INFO, logger="sandboxes.reconciler.sizes"):
        refresh_sizes(Worker())
    assert "unknown provider" not in caplog.text
