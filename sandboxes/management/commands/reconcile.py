import time

from django.core.management.base import BaseCommand, CommandError

from sandboxes.models import Environment
from sandboxes.reconciler.passes import run_pass


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
        while True:
            record = run_pass(
                environment=env,
                dry_run=dry_run,
                progress=lambda line: self.stdout.write(line),
            )
            self.stdout.write(self._summary(record))
            if once or dry_run:
                return
            time.sleep(interval)

    def _summary(self, record) -> str:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(record.counts_by_kind.items())) or "none"
        stages = ", ".join(f"{k}={v}" for k, v in sorted(record.counts_by_stage.items())) or "none"
        prefix = "dry run: " if record.dry_run else ""
        return (
            f"{prefix}pass {record.pk} in {record.duration_seconds:.2f}s: "
            f"{record.candidates} candidates, {record.retired} retired, "
            f"{record.failed} failed (will retry), {len(record.errors)} errors; "
            f"kinds: {kinds}; stages: {stages}"
        )
