import logging
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from sandboxes.models import Environment
from sandboxes.reconciler import claims
from sandboxes.reconciler.passes import run_pass

log = logging.getLogger("sandboxes.reconciler.command")
BACKOFF_FIRST = 1.0
BACKOFF_CAP = 30.0


class Command(BaseCommand):
    help = (
        "Run reconciler passes: list kept sandboxes, explain holds, salvage then retire. "
        "--once runs one pass and exits 0 even when some candidates failed and will retry."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one pass and exit")
        parser.add_argument(
            "--dry-run", action="store_true", help="list and explain; no writes, no provider calls"
        )
        parser.add_argument("--environment", metavar="NAME", help="only this environment")
        parser.add_argument(
            "--interval", type=float, default=60.0, help="seconds between passes (default 60)"
        )

    def handle(self, *args, once, dry_run, environment, interval, **options):
        env = None
        if environment:
            env = Environment.objects.filter(name=environment).first()
            if env is None:
                raise CommandError(f"no environment named {environment!r}")
        failures = 0
        while True:
            try:
                record = run_pass(
                    environment=env,
                    dry_run=dry_run,
                    progress=lambda line: self.stdout.write(line),
                )
            except claims.DB_LOST as exc:
                # The database went away (restart, dropped connection). A loop
                # keeps going: reconnect on the next pass, after a short backoff.
                claims.reset_connection()
                if once or dry_run:
                    raise CommandError(f"the database is unreachable: {exc}") from exc
                failures += 1
                wait = max(0.1, min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (failures - 1), interval))
                log.warning("pass failed, database lost (%s in a row): %s", failures, exc)
                self.stderr.write(f"pass failed: database lost ({exc}); next try in {wait:g}s")
                time.sleep(wait)
                continue
            failures = 0
            for line in getattr(record, "would", ()):  # a dry run: what a pass would list
                self.stdout.write(f"would list {line}")
            self.stdout.write(self._summary(record))
            if once or dry_run:
                return
            # Between passes: drop a connection that broke or outlived CONN_MAX_AGE.
            close_old_connections()
            time.sleep(interval)

    def _summary(self, record) -> str:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(record.counts_by_kind.items())) or "none"
        stages = ", ".join(f"{k}={v}" for k, v in sorted(record.counts_by_stage.items())) or "none"
        if record.dry_run:  # not saved: no pass id
            head = f"dry run: nothing written, in {record.duration_seconds:.2f}s: "
        else:
            head = f"pass {record.pk} in {record.duration_seconds:.2f}s: "
        return (
            f"{head}"
            f"{record.candidates} candidates, {record.retired} retired, "
            f"{record.failed} failed (will retry), {len(record.errors)} errors; "
            f"kinds: {kinds}; stages: {stages}"
        )
