"""Screenshots of every console page at 1440 px and 390 px, from a throwaway
database holding the demo fleet after two reconciler passes:

    DJANGO_SETTINGS_MODULE=paperclip_console.test_settings \\
        .venv/bin/python manage.py console_screenshots [--out artifacts/screenshots/pages]

It prints each page's scrollWidth beside its clientWidth and exits 1 when a page
scrolls sideways. Needs Debian's chromium (/usr/bin/chromium).
"""

import os
import secrets
import tempfile
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import override_settings, setup_test_environment, teardown_test_environment
from django.utils import timezone

from devtools import screenshots


def _enrich() -> None:
    """What two passes over the demo fleet cannot show by themselves: a price
    table and reported sizes (the local provider reports none), a failing record
    and a reviewer. Demo data, in the throwaway database only."""
    from sandboxes.models import Environment, Retirement
    from sandboxes.models.choices import STAGES_CLOSED, Stage

    for i, env in enumerate(Environment.objects.order_by("name")):
        env.price_vcpu_hour_running = Decimal("0.0504")
        env.price_memory_gib_hour_running = Decimal("0.0162")
        env.price_disk_gib_month_running = Decimal("0.10")
        env.price_vcpu_hour_stopped = Decimal(0)
        env.price_memory_gib_hour_stopped = Decimal(0)
        env.price_disk_gib_month_stopped = Decimal("0.10") if i % 2 == 0 else None
        env.save()
    now = timezone.now()
    for i, r in enumerate(Retirement.objects.order_by("listed_at")):
        if i % 4 == 3:
            continue  # some sizes stay unknown
        Retirement.objects.filter(pk=r.pk).update(
            reported_cpu=1 + i % 4,
            reported_memory_gib=2 ** (i % 3),
            reported_disk_gib=3 + i * 2,
            reported_at=now,
        )
    r = Retirement.objects.exclude(stage__in=STAGES_CLOSED).exclude(stage=Stage.HELD).first()
    if r is not None:
        Retirement.objects.filter(pk=r.pk).update(
            stage=Stage.FAILED,
            attempts=2,
            failing_since=now - timedelta(minutes=42),
            next_attempt_at=now + timedelta(minutes=1),
            last_error="TransientProviderError: 503 Service Unavailable from the provider "
            "(GET /sandbox/…/toolbox/files): retrying inside the 90 s step budget",
        )


class Command(BaseCommand):
    help = "Screenshot every console page at 1440 px and 390 px; fail if one overflows."

    def add_arguments(self, parser):
        parser.add_argument("--out", default="artifacts/screenshots/pages")
        parser.add_argument("--keep-going", action="store_true", help="exit 0 on overflow")

    def handle(self, *args, out, keep_going, **options):
        from django.contrib.auth import get_user_model
        from django.contrib.staticfiles.handlers import StaticFilesHandler
        from django.test.testcases import LiveServerThread
        from playwright.sync_api import sync_playwright

        from sandboxes.reconciler.passes import run_pass
        from sandboxes.roles import grant_role

        out_dir = Path(out).resolve()
        setup_test_environment()
        old_name = connection.settings_dict["NAME"]
        connection.settings_dict.setdefault("TEST", {})["NAME"] = f"screens_{old_name}"
        connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
        scratch = tempfile.TemporaryDirectory(prefix="console-screens-")
        server = None
        try:
            with override_settings(
                LOCAL_SANDBOX_ROOT=Path(scratch.name) / "sandboxes",
                MEDIA_ROOT=Path(scratch.name) / "media",
                ALLOWED_HOSTS=["127.0.0.1", "localhost"],
            ):
                self.stdout.write("Loading the demo fleet and running two passes …")
                call_command("demo_fleet", quiet=True)
                run_pass()
                run_pass()
                _enrich()
                password = secrets.token_urlsafe(16)
                users = get_user_model().objects
                admin = users.create_user("screens-admin", password=password)
                grant_role(admin, "admin", reason="screenshots")
                users.create_user("screens-nobody", password=password)
                users.create_user("rita-reviewer", password=password)
                pages = screenshots.console_pages()

                server = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
                server.daemon = True
                server.start()
                server.is_ready.wait()
                if server.error:
                    raise CommandError(f"could not serve the console: {server.error}")
                base_url = f"http://127.0.0.1:{server.port}"
                os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
                with sync_playwright() as p:
                    browser = screenshots.launch(p)
                    try:
                        shots = screenshots.capture(
                            browser,
                            base_url,
                            out_dir,
                            pages,
                            username="screens-admin",
                            password=password,
                            no_role=("screens-nobody", password),
                        )
                    finally:
                        browser.close()
        finally:
            if server is not None:
                server.terminate()
            scratch.cleanup()
            connection.creation.destroy_test_db(old_name, verbosity=0)
            teardown_test_environment()
        self.stdout.write(screenshots.report(shots))
        bad = [s for s in shots if s.overflows]
        self.stdout.write(f"\n{len(shots)} screenshots in {out_dir}; {len(bad)} overflow sideways.")
        if bad and not keep_going:
            raise CommandError("pages overflow: " + ", ".join(f"{s.name}@{s.width}" for s in bad))
