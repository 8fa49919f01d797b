"""/metrics: Prometheus exposition, protected by a token, read from the database."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from sandboxes import metrics
from sandboxes.models import HoldCode, RetirementKind, Stage
from sandboxes.providers import base as provider_base
from sandboxes.providers.base import observed
from tests import factories as f

pytestmark = pytest.mark.django_db


def scrape(client, token):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def fleet():
    held = f.RetirementFactory(stage=Stage.HELD, holds=[HoldCode.RUN_ACTIVE, HoldCode.RETENTION])
    f.RetirementFactory(stage=Stage.HELD, holds=[HoldCode.RETENTION])
    f.RetirementFactory(
        stage=Stage.FAILED, kind=RetirementKind.CLOSED_RESTORE_SOURCE, needs_attention=True
    )
    f.RetirementFactory(stage=Stage.RETIRED, kind=RetirementKind.DONE_TASK_WARM)
    f.RetirementFactory(stage=Stage.RETIRED, kind=RetirementKind.DONE_TASK_WARM)
    f.RetirementFactory(stage=Stage.DISMISSED, holds=[HoldCode.RUN_ACTIVE])
    now = timezone.now()
    f.ReconcilerPassFactory(
        started_at=now - timedelta(minutes=10), finished_at=now - timedelta(minutes=9)
    )
    f.ReconcilerPassFactory(
        started_at=now - timedelta(seconds=12.5), finished_at=now, candidates=6, retired=2
    )
    f.ReconcilerPassFactory(started_at=now, finished_at=None)  # still running
    return held


def test_it_refuses_an_unauthenticated_scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_refuses_an_unknown_token(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_it_refuses_an_ingest_token(client, ingest_token):
    _, raw = ingest_token
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 403


def test_it_rejects_post(client, operator_token):
    _, raw = operator_token
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 405


@override_settings(METRICS_TOKEN="scraper-secret-" + "s" * 40)
def test_it_accepts_the_metrics_token(client):
    scrape(client, "scraper-secret-" + "s" * 40)
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scraper-secret").status_code == 401


@override_settings(METRICS_TOKEN="")
def test_an_empty_metrics_token_never_matches(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_fleet_gauges(client, operator_token, fleet):
    _, raw = operator_token
    s = scrape(client, raw)
    kept = "paperclip_console_kept_sandboxes"
    assert value(s, kept, stage="held", kind="abandoned_warm") == 2
    assert value(s, kept, stage="failed", kind="closed_restore_source") == 1
    assert value(s, kept, stage="retired", kind="done_task_warm") is None
    assert value(s, "paperclip_console_needs_attention") == 1
    assert value(s, "paperclip_console_retirements_total", kind="done_task_warm") == 2
    assert value(s, "paperclip_console_dismissals_total", kind="abandoned_warm") == 1
    # Holds count open records only; every code is exported, zero included.
    assert value(s, "paperclip_console_holds", code="retention") == 2
    assert value(s, "paperclip_console_holds", code="run_active") == 1
    assert value(s, "paperclip_console_holds", code="operator_hold") == 0
    # The latest finished pass, not the one still running.
    assert value(s, "paperclip_console_reconciler_pass_duration_seconds") == pytest.approx(12.5)
    assert value(s, "paperclip_console_reconciler_pass_records", count="candidates") == 6
    assert value(s, "paperclip_console_reconciler_pass_records", count="retired") == 2
    assert value(s, "paperclip_console_reconciler_pass_finished_timestamp_seconds") > 0


def test_an_empty_fleet_scrapes_cleanly(client, operator_token):
    _, raw = operator_token
    s = scrape(client, raw)
    assert value(s, "paperclip_console_needs_attention") == 0
    assert value(s, "paperclip_console_reconciler_pass_duration_seconds") is None


def test_a_scrape_costs_the_same_queries_at_any_size(
    client, operator_token, fleet, django_assert_num_queries
):
    _, raw = operator_token
    # token lookup + three fleet queries
    with django_assert_num_queries(4):
        client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {raw}")
    for _ in range(20):
        f.RetirementFactory(stage=Stage.HELD, holds=[HoldCode.WRITER_ACTIVE])
    with django_assert_num_queries(4):
        client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_provider_calls_are_timed_and_errors_counted(client, operator_token):
    _, raw = operator_token
    assert metrics.record_provider_call in provider_base.CALL_HOOKS  # installed by the app
    metrics.install_provider_hooks()
    assert provider_base.CALL_HOOKS.count(metrics.record_provider_call) == 1

    before = scrape(client, raw)
    with observed("daytona", "metrics_test_stop"):
        pass
    with (
        pytest.raises(provider_base.TransientProviderError),
        observed("daytona", "metrics_test_stop"),
    ):
        raise provider_base.TransientProviderError("409")
    after = scrape(client, raw)

    def delta(name, **labels):
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    labels = {"provider": "daytona", "operation": "metrics_test_stop"}
    assert delta("paperclip_console_provider_call_seconds_count", **labels) == 2
    assert delta("paperclip_console_provider_call_seconds_bucket", le="+Inf", **labels) == 2
    assert (
        delta(
            "paperclip_console_provider_call_errors_total",
            error="TransientProviderError",
            **labels,
        )
        == 1
    )


@pytest.mark.slow
def test_provider_calls_in_another_process_reach_the_scrape(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR shared, the web server's scrape includes
    calls a q cluster worker made (here: another process)."""
    import subprocess
    import sys

    from .helpers import ROOT, production_env

    env = production_env(PROMETHEUS_MULTIPROC_DIR=tmp_path, DATABASE_URL="sqlite:///:memory:")
    worker = (
        "import django; django.setup()\n"
        "from sandboxes.providers.base import observed\n"
        "with observed('daytona', 'destroy'):\n"
        "    pass\n"
    )
    scraper = (
        "import django; django.setup()\n"
        "from prometheus_client import generate_latest\n"
        "from sandboxes.metrics import _process_registry\n"
        "print(generate_latest(_process_registry()).decode())\n"
    )
    for code in (worker, worker):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-c", scraper], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(done.stdout)
        for s in family.samples
    }
    key = (
        "paperclip_console_provider_call_seconds_count",
        (("operation", "destroy"), ("provider", "daytona")),
    )
    assert samples[key] == 2
