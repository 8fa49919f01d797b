"""What kept sandboxes cost (issue 15 item 13): sizes from the provider's read,
prices from the environment's price table, unknown never shown as 0.

Sizes follow Daytona's Sandbox model (daytonaio/daytona
libs/api-client-python/daytona_api_client/models/sandbox.py: `cpu` vCPUs,
`memory` GiB, `disk` GiB)."""

from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.db.models import Q
from django.utils import timezone

from sandboxes.costs import daily_cost, daily_cost_expression, fleet_costs, money
from sandboxes.models import Retirement
from sandboxes.models.choices import Stage
from sandboxes.reconciler.sizes import record_sizes, reported_sizes
from tests.factories import EnvironmentFactory, RetirementFactory

pytestmark = pytest.mark.django_db

PRICES = {
    "price_vcpu_hour_running": Decimal("0.05"),
    "price_memory_gib_hour_running": Decimal("0.01"),
    "price_disk_gib_month_running": Decimal("0.10"),
    "price_vcpu_hour_stopped": Decimal("0"),
    "price_memory_gib_hour_stopped": Decimal("0"),
    "price_disk_gib_month_stopped": Decimal("0.0730"),
}


def _sql_cost(r):
    return (
        Retirement.objects.filter(pk=r.pk)
        .annotate(c=daily_cost_expression())
        .values_list("c", flat=True)
        .get()
    )


def test_a_started_sandbox_pays_for_cpu_memory_and_disk():
    env = EnvironmentFactory(**PRICES)
    r = RetirementFactory(
        lease__environment=env,
        provider_state="started",
        reported_cpu=2,
        reported_memory_gib=4,
        reported_disk_gib=10,
    )
    # 2 × 0.05 × 24 + 4 × 0.01 × 24 + 10 × 0.10 / (365/12)
    expected = Decimal("2.4") + Decimal("0.96") + Decimal("1.0") * 12 / 365
    assert daily_cost(r) == expected.quantize(Decimal("0.0001"))
    assert _sql_cost(r).quantize(Decimal("0.0001")) == daily_cost(r)


def test_a_stopped_sandbox_pays_for_disk_only_and_needs_no_cpu_size():
    env = EnvironmentFactory(**PRICES)
    r = RetirementFactory(lease__environment=env, provider_state="stopped", reported_disk_gib=10)
    assert daily_cost(r) == (Decimal("0.73") * 12 / 365).quantize(Decimal("0.0001"))
    assert _sql_cost(r).quantize(Decimal("0.0001")) == daily_cost(r)


def test_unknown_sizes_or_prices_are_unknown_never_zero():
    env = EnvironmentFactory(**PRICES)
    no_disk = RetirementFactory(lease__environment=env, provider_state="stopped")
    assert daily_cost(no_disk) is None and _sql_cost(no_disk) is None
    unpriced = RetirementFactory(provider_state="stopped", reported_disk_gib=10)
    assert daily_cost(unpriced) is None and _sql_cost(unpriced) is None
    assert money(None) == "unknown"


def test_the_fleet_total_counts_what_it_could_not_price():
    env = EnvironmentFactory(name="east", **PRICES)
    RetirementFactory(lease__environment=env, provider_state="stopped", reported_disk_gib=100)
    RetirementFactory(lease__environment=env, provider_state="stopped")
    RetirementFactory(lease__environment=env, stage=Stage.RETIRED, reported_disk_gib=100)
    fleet = fleet_costs(Q())
    assert fleet["by_environment"] == {"east": 2}
    assert fleet["unknown"] == 1
    assert fleet["cost_per_day"] == (Decimal("7.3") * 12 / 365).quantize(Decimal("0.0001"))


def test_sizes_come_from_the_typed_resources_or_daytonas_raw_fields():
    typed = SimpleNamespace(resources=SimpleNamespace(cpu=2, memory_gib=4, disk_gib=10), raw={})
    assert reported_sizes(typed) == {"cpu": 2.0, "memory_gib": 4.0, "disk_gib": 10.0}
    raw = SimpleNamespace(raw={"cpu": 1, "memory": 1, "disk": 3, "state": "stopped"})
    assert reported_sizes(raw) == {"cpu": 1.0, "memory_gib": 1.0, "disk_gib": 3.0}
    assert reported_sizes(SimpleNamespace(raw={"cpu": "many"})) is None
    r = RetirementFactory(reported_cpu=8)
    assert record_sizes(r.pk, SimpleNamespace(raw={})) is False
    r.refresh_from_db()
    # A read that reports nothing leaves no stale size behind, and is dated.
    assert r.reported_cpu is None and r.reported_at is not None


def test_a_local_sandbox_is_priced_by_its_measured_disk(tmp_path):
    from sandboxes.providers.local import LocalProvider

    local = LocalProvider(root=tmp_path / "sandboxes", budget_seconds=3)
    box = local.create("kept", {}, {"data.bin": b"x" * 100_000})
    local.stop(box.id)
    sizes = reported_sizes(local.get(box.id))
    assert sizes["cpu"] is None and sizes["memory_gib"] is None
    assert sizes["disk_gib"] > 0


def test_each_pass_reads_sizes_only_where_a_price_table_exists():
    from sandboxes.reconciler.sizes import refresh_sizes

    reads = []

    class Provider:
        def get(self, sandbox_id):
            reads.append(sandbox_id)
            return SimpleNamespace(raw={"cpu": 1, "memory": 2, "disk": 3})

    worker = SimpleNamespace(provider=lambda env, name: Provider())
    priced = RetirementFactory(lease__environment=EnvironmentFactory(**PRICES))
    unpriced = RetirementFactory()
    RetirementFactory(lease__environment=priced.environment, stage=Stage.RETIRED)
    assert refresh_sizes(worker) == 1
    assert reads == [priced.provider_lease_id]
    priced.refresh_from_db()
    assert (priced.reported_cpu, priced.reported_memory_gib, priced.reported_disk_gib) == (1, 2, 3)
    # Read once a day, not every pass.
    assert refresh_sizes(worker) == 0
    unpriced.refresh_from_db()
    assert unpriced.reported_at is None


def test_each_kept_sandbox_shows_its_cost_per_day_on_the_list_and_its_page(as_reviewer):
    from django.urls import reverse

    env = EnvironmentFactory(**PRICES)
    r = RetirementFactory(
        lease__environment=env,
        provider_state="stopped",
        reported_disk_gib=365,
        reported_at=timezone.now(),
        provider_lease_id="sbx-priced",
    )
    RetirementFactory(provider_lease_id="sbx-unpriced")
    listing = as_reviewer.get(reverse("sandbox-list")).content.decode()
    row = listing.split('data-sandbox="sbx-priced"', 1)[1].split("</tr>", 1)[0]
    assert '<td data-label="Cost/day" class="num">$0.88</td>' in row  # 365 × 0.073 × 12 / 365
    row = listing.split('data-sandbox="sbx-unpriced"', 1)[1].split("</tr>", 1)[0]
    assert '<td data-label="Cost/day" class="num">unknown</td>' in row
    page = as_reviewer.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).content.decode()
    assert "<dd data-cost>$0.88" in page
    assert "vCPU unknown · memory unknown · 365 GiB disk" in page
