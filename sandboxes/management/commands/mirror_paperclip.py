"""manage.py mirror_paperclip --dsn URL [--once | --follow]: mirror a Paperclip database."""

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sandboxes.mirror.sync import MirrorReport, follow, mirror_once


class Command(BaseCommand):
    help = (
        "Mirror a Paperclip database into the console, read-only and incrementally by "
        "updated_at. It reads Paperclip's own columns: environments (provider = "
        "config.provider, else the driver); issues (identifier, status, "
        "execution_workspace_id); execution_workspaces (task = source_issue_id, writer "
        "hold = metadata.writerRunId); heartbeat_runs (task = native_issue_id, else "
        "context_snapshot->>'issueId'); environment_leases of every provider, with the "
        "receipts in metadata (remoteExecutionTermination, sandboxStopAndRetainReceipt), "
        "pending intents (sandboxStopAndRetain, nativeWorkspaceExportResume: pending while "
        "the key is present, settled when it disappears), the restore-source marker "
        "(workspaceRestoreRecovery, kept in the lease's metadata) and remoteCwd; "
        "work_folder_runs "
        "(a durable save only with manifest.finalCheckpointAt: the baselines' files under "
        "their scope, matched to the sandbox by manifest.leaseId, else sandboxKey); "
        "issue_recovery_actions (the leases evidence.workspaceRestoreRecovery.leaseIds "
        "names). Every row keeps its company_id, and each receipt the companyId it "
        "names. Tables and columns are looked up first: a missing one is skipped with a "
        "warning, never an abort. Each iteration prints one summary line: rows mirrored "
        "per table, leases that are not a sandbox (a local or ssh lease with no "
        "provider_lease_id: read, counted apart, never skipped), skipped by reason (a row "
        "it could not read, e.g. an unknown status a newer Paperclip wrote), quarantined "
        "by reason (unreadable lease metadata), and tables missing."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dsn",
            default=os.environ.get("PAPERCLIP_DATABASE_URL", ""),
            help="Paperclip's PostgreSQL URL (default: $PAPERCLIP_DATABASE_URL). The "
            "connection is read-only whatever the user's rights.",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="One iteration, then exit (default).")
        mode.add_argument("--follow", action="store_true", help="Keep mirroring changes.")
        parser.add_argument(
            "--interval",
            type=float,
            default=settings.MIRROR_INTERVAL_SECONDS,
            help="Seconds between --follow iterations (default: MIRROR_INTERVAL_SECONDS).",
        )
        parser.add_argument(
            "--max-iterations",
            type=int,
            default=None,
            help="Stop --follow after this many iterations (default: never).",
        )
        parser.add_argument(
            "--full",
            action="store_true",
            help="Ignore the stored cursors and re-read every row (idempotent).",
        )

    def handle(self, *args, **options):
        dsn = options["dsn"]
        if not dsn:
            raise CommandError("--dsn (or PAPERCLIP_DATABASE_URL) is required")
        if options["follow"]:
            follow(
                dsn,
                interval=options["interval"],
                max_iterations=options["max_iterations"],
                full=options["full"],
                on_report=self._report,
            )
            return
        try:
            report = mirror_once(dsn, full=options["full"])
        except Exception as exc:
            raise CommandError(f"mirror failed: {type(exc).__name__}: {exc}") from exc
        self._report(report)

    def _report(self, report: MirrorReport) -> None:
        for problem in report.problems:
            self.stderr.write(
                f"{problem.action}: {problem.table} {problem.row_id}: {problem.reason}"
            )
        self.stdout.write(report.summary())
