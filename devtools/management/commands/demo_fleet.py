import io
import json
import tempfile
from datetime import timedelta

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.utils import timezone

from devtools.demo import (
    demo_events,
    ensure_sandboxes,
    newer_lease_events,
    set_demo_prices,
    set_demo_window,
)
from sandboxes import audit
from sandboxes.models import Retirement
from sandboxes.providers.registry import get_provider
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.reconciler.sizes import refresh_sizes
from sandboxes.reconciler.worker import Worker

OPERATOR_HOLD_KEY = "PAP-122"


class Command(BaseCommand):
    help = (
        "Create the demo fleet's real local sandboxes (once) and load its events through "
        "the ingest path (load_events); repeated runs are no-ops."
    )

    def add_arguments(self, parser):
        parser.add_argument("--quiet", action="store_true")

    def _load(self, events, out):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
            for event in events:
                fh.write(json.dumps(event) + "\n")
        call_command("load_events", fh.name, source="demo", stdout=out)

    def handle(self, *args, quiet, **options):
        out = io.StringIO() if quiet else self.stdout
        ids = ensure_sandboxes(get_provider("local"))
        self._load(demo_events(ids), out)
        set_demo_window()  # the console's policy, before the first listing
        # List once, so the two holds that need an existing record can show:
        # a newer lease row arriving later, and an operator's hold.
        sync_retirements()
        self._load(newer_lease_events(ids), out)
        held = Retirement.objects.filter(
            lease__issue__key=OPERATOR_HOLD_KEY, operator_hold_reason=""
        ).exclude(stage__in=["retired", "dismissed"])
        for r in held:
            r.operator_hold_reason = "demo: waiting for the task owner to confirm"
            # Who, since when and until when: the list shows a timed hold's end.
            r.operator_hold_by, r.operator_hold_at = "alice", timezone.now()
            r.operator_hold_until = r.operator_hold_at + timedelta(days=3)
            r.save(
                update_fields=[
                    "operator_hold_reason",
                    "operator_hold_by",
                    "operator_hold_at",
                    "operator_hold_until",
                    "updated_at",
                ]
            )
            audit.record(actor=None, action="retirement.hold", obj=r, reason=r.operator_hold_reason)
        # Prices, then one read of the sizes, so the dashboard shows money at once
        # (each pass reads them again, sandboxes/reconciler/sizes.py).
        set_demo_prices()
        refresh_sizes(Worker(name="demo_fleet"))
        if not quiet:
            self.stdout.write(f"demo fleet: {len(ids)} local sandboxes")
