import time
from dataclasses import dataclass, field
from itertools import islice

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from sandboxes.ingest import apply_events, validate_batch
from sandboxes.ingest.apply import BatchRejected
from sandboxes.ingest.pause import collection_paused
from sandboxes.ingest.schemas import decode_json, fast_validate_lines, may_hold_unstorable_text
from sandboxes.read_ahead import read_ahead

# Errors kept for the report: a file of garbage must not fill memory with messages.
MAX_ERRORS = 100


class Command(BaseCommand):
    help = (
        "Load Paperclip events from a JSON-lines file, one event per line, with the same "
        "validation as POST /api/v1/events. The file is streamed in batches (constant "
        "memory, a progress line on stderr) inside one transaction: the whole file is "
        "applied or nothing is."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--source", default="cli", help="Idempotency namespace for event ids (default: cli)."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=settings.INGEST_MAX_EVENTS,
            help="Events per batch (default: the API's limit, %(default)s).",
        )
        parser.add_argument(
            "--progress-every",
            type=float,
            default=5.0,
            help="Seconds between progress lines on stderr (default: %(default)s).",
        )

    def handle(self, *args, file, source, batch_size, progress_every, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            fh = open(file, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        self.errors: list[str] = []
        self.error_count = 0
        warnings: list[str] = []
        warning_count = 0
        accepted = duplicates = lines = 0
        started = last = time.monotonic()
        with fh:
            try:
                with transaction.atomic():
                    for checked in _checked_ahead(_batches(fh, batch_size), batch_size):
                        lines, batch, line_of = checked.lines, checked.batch, checked.line_of
                        for lineno, message in checked.errors:
                            self._error(lineno, message)
                        if self.error_count:
                            continue  # nothing will be loaded; keep naming bad lines
                        try:
                            with collection_paused():
                                result = apply_events(source, batch)
                        except BatchRejected as rejected:
                            for e in rejected.errors:
                                lineno = line_of[e.index] if e.index is not None else None
                                self._error(lineno, f"{e.path}: {e.message}")
                            continue
                        accepted += result.accepted
                        duplicates += result.duplicates
                        for w in result.warnings:
                            warning_count += 1
                            if len(warnings) < MAX_ERRORS:
                                lineno = line_of[w.index] if w.index is not None else "?"
                                warnings.append(f"warning: line {lineno}: {w.path}: {w.message}")
                        if time.monotonic() - last >= progress_every:
                            last = time.monotonic()
                            self._progress(lines, accepted, duplicates, started)
                    if self.error_count:
                        raise CommandError(self._report())
            except UnicodeDecodeError as exc:
                raise CommandError(f"nothing loaded: {file} is not UTF-8: {exc}") from exc
        for w in warnings:
            self.stderr.write(w)
        if warning_count > len(warnings):
            self.stderr.write(f"… and {warning_count - len(warnings)} more warning(s)")
        self._progress(lines, accepted, duplicates, started)
        self.stdout.write(f"accepted {accepted}, duplicates {duplicates}")

    def _error(self, lineno, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"line {lineno if lineno is not None else '?'}: {message}")

    def _report(self) -> str:
        more = self.error_count - len(self.errors)
        tail = [f"… and {more} more error(s)"] if more else []
        return "nothing loaded:\n" + "\n".join([*self.errors, *tail])

    def _progress(self, lines, accepted, duplicates, started) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        done = accepted + duplicates
        self.stderr.write(
            f"… line {lines:,}: {accepted:,} accepted, {duplicates:,} duplicates, "
            f"{done / elapsed:,.0f} events/s"
        )


@dataclass
class _Checked:
    """One batch of lines validated: its events, each event's line, and what
    was wrong with the lines (line number, message)."""

    lines: int  # the batch's last line number
    batch: list
    line_of: list[int]
    errors: list[tuple[int | None, str]] = field(default_factory=list)


def _checked_ahead(chunks, size: int):
    """Each batch validated, the next one read and validated while this one is
    applied (`sandboxes.read_ahead`); only that thread reads the file."""

    def check():
        chunk = next(chunks, None)
        if chunk is None:
            return None
        with collection_paused():
            return _check(chunk, size)

    return read_ahead(check, name="load-events-check")


def _check(chunk: list[tuple[int, str]], size: int) -> _Checked:
    lines = chunk[-1][0]
    fast = fast_validate_lines([line for _, line in chunk])
    if fast is not None:
        return _Checked(lines, fast, [lineno for lineno, _ in chunk])
    # Something is amiss: the detailed path names every bad line.
    errors: list[tuple[int | None, str]] = []
    decoded = []
    for lineno, line in chunk:
        try:
            decoded.append((lineno, decode_json(line)))
        except ValueError as exc:
            errors.append((lineno, f"not valid JSON: {exc}"))
    check_text = any(may_hold_unstorable_text(line) for _, line in chunk)
    batch, bad = validate_batch(
        {"events": [e for _, e in decoded]}, max_events=size, check_text=check_text
    )
    # An event's index is its place in `decoded`: map it back to its line.
    for e in bad:
        lineno = decoded[e.index][0] if e.index is not None else None
        errors.append((lineno, f"{e.path}: {e.message}"))
    return _Checked(lines, batch, [lineno for lineno, _ in decoded], errors)


def _batches(fh, size: int):
    """(line number, text) of the non-blank lines, `size` at a time."""
    numbered = ((n, line) for n, line in enumerate(fh, start=1) if line.strip())
    while chunk := list(islice(numbered, size)):
        yield chunk
