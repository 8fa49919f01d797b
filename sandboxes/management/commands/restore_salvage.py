"""manage.py restore_salvage PROVIDER_LEASE_ID DIR — write what was salvaged from a
sandbox back under DIR (README, restore a salvage); `--from-zip FILE` restores a
downloaded salvage.zip without the console's database."""

import zipfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sandboxes import audit, salvage_restore
from sandboxes.models import Retirement
from sandboxes.salvage_restore import RestoreRefused, Selection


class Command(BaseCommand):
    help = (
        "Write the files salvaged from a sandbox back under DIR: the latest version of "
        "each path across its verified exports (or --export ID), each verified against "
        "its sha256. Refuses paths that leave DIR and never overwrites a different file "
        "without --force; when anything is refused nothing is written."
    )
    # --from-zip needs no database: no check may reach one.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument(
            "args",
            nargs="+",
            metavar="[PROVIDER_LEASE_ID] DIR",
            help="the sandbox id and the folder to write into (with --from-zip the id is optional)",
        )
        parser.add_argument(
            "--from-zip", metavar="FILE", help="a salvage.zip downloaded from the console"
        )
        parser.add_argument(
            "--export",
            metavar="ID",
            help="restore exactly this export (its receipt id, or 8+ leading characters)",
        )
        parser.add_argument(
            "--force", action="store_true", help="overwrite files in DIR whose content differs"
        )

    def handle(self, *args, from_zip=None, export=None, force=False, **options):
        if len(args) > 2 or (len(args) == 1 and not from_zip):
            raise CommandError(
                "give PROVIDER_LEASE_ID DIR (or --from-zip FILE [PROVIDER_LEASE_ID] DIR)"
            )
        sandbox_id, folder = (args[0], Path(args[1])) if len(args) == 2 else (None, Path(args[0]))
        if from_zip:
            done, selection = self._from_zip(Path(from_zip), sandbox_id, folder, export, force)
        else:
            done, selection = self._from_store(str(sandbox_id), folder, export, force)
        self._report(done, selection, folder)

    def _restore(self, selection: Selection, folder: Path, force: bool):
        try:
            return salvage_restore.restore(selection, folder, force=force)
        except RestoreRefused as exc:
            lines = "\n".join(f"  - {p}" for p in exc.problems)
            raise CommandError(f"refused, nothing was written into {folder}:\n{lines}") from None
        except OSError as exc:
            raise CommandError(f"could not write into {folder}: {exc}") from None

    def _from_store(self, sandbox_id: str, folder: Path, export, force: bool):
        r = Retirement.current_for_sandbox(
            sandbox_id, "environment", "lease__issue", "lease__heartbeat_run", actor=None
        )
        if r is None:
            raise CommandError(f"PROVIDER_LEASE_ID: the console keeps no record of {sandbox_id!r}")
        try:
            selection = salvage_restore.from_store(r, export)
        except RestoreRefused as exc:
            raise CommandError("; ".join(exc.problems)) from None
        if not selection.exports:
            raise CommandError(
                f"nothing was salvaged from sandbox {sandbox_id!r}: it has no verified export"
            )
        done = self._restore(selection, folder, force)
        audit.record(
            actor=None,
            action="salvage.restore",
            obj=r,
            reason=f"manage.py restore_salvage into {folder.resolve()}",
            after={
                "exports": selection.exports,
                "written": [s.path for s in done.written + done.overwritten],
                "unchanged": len(done.unchanged),
                "bytes": done.bytes,
            },
        )
        return done, selection

    def _from_zip(self, path: Path, sandbox_id, folder: Path, export, force: bool):
        try:
            archive = zipfile.ZipFile(path)
        except FileNotFoundError:
            raise CommandError(f"--from-zip: {path} does not exist") from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise CommandError(f"--from-zip: {path} is not a readable zip ({exc})") from None
        with archive:
            try:
                selection = salvage_restore.from_zip(archive, export)
            except RestoreRefused as exc:
                raise CommandError(f"--from-zip: {'; '.join(exc.problems)}") from None
            named = str(selection.sandbox.get("id"))
            if sandbox_id is not None and sandbox_id != named:
                raise CommandError(
                    f"PROVIDER_LEASE_ID: {path} is the salvage of sandbox {named!r}, "
                    f"not {sandbox_id!r}"
                )
            if not selection.exports:
                raise CommandError(f"--from-zip: {path} holds no export")
            try:
                return self._restore(selection, folder, force), selection
            except zipfile.BadZipFile as exc:
                raise CommandError(
                    f"--from-zip: {path} is damaged ({exc}); nothing was written"
                ) from None

    def _report(self, done, selection: Selection, folder: Path) -> None:
        for verb, items in (("wrote", done.written), ("overwrote", done.overwritten)):
            for s in items:
                self.stdout.write(f"{verb} {s.path} ({s.size} bytes, sha256 {s.sha256[:12]}…)")
        for s in done.unchanged:
            self.stdout.write(f"unchanged {s.path} (already there with the same sha256)")
        for path in done.deleted:
            self.stdout.write(f"deleted in the sandbox, not touched: {path}")
        sandbox = selection.sandbox
        exports = len(selection.exports)
        self.stdout.write(
            f"restored {len(done.written) + len(done.overwritten)} file(s), {done.bytes} bytes, "
            f"from {exports} export{'s' if exports != 1 else ''} of {sandbox.get('provider')} "
            f"sandbox {sandbox.get('id')} into {folder.resolve()}; {len(done.unchanged)} "
            f"unchanged, {len(done.deleted)} deleted path(s) not touched"
        )
