from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from sandboxes.ingest import apply_events, validate_batch
from sandboxes.ingest.apply import BatchRejected
from sandboxes.ingest.schemas import decode_json


class Command(BaseCommand):
    help = (
        "Load Paperclip events from a JSON-lines file, one event per line, with the same "
        "validation as POST /api/v1/events. The whole file is applied or nothing is."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--source", default="cli", help="Idempotency namespace for event ids (default: cli)."
        )

    def handle(self, *args, file, source, **options):
        raw_events, errors = [], []
        try:
            with open(file, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        raw_events.append((lineno, decode_json(line)))
                    except ValueError as exc:
                        errors.append(f"line {lineno}: not valid JSON: {exc}")
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc

        events = []
        size = settings.INGEST_MAX_EVENTS
        for start in range(0, len(raw_events), size):
            chunk = raw_events[start : start + size]
            batch, bad = validate_batch({"events": [e for _, e in chunk]}, max_events=size)
            errors.extend(
                f"line {chunk[e.index][0] if e.index is not None else '?'}: {e.path}: {e.message}"
                for e in bad
            )
            events.append(batch)
        if errors:
            raise CommandError("nothing loaded:\n" + "\n".join(errors))

        accepted = duplicates = 0
        warnings = []
        try:
            with transaction.atomic():
                for batch in events:
                    result = apply_events(source, batch)
                    accepted += result.accepted
                    duplicates += result.duplicates
                    warnings.extend(result.warnings)
        except BatchRejected as rejected:
            raise CommandError(
                "nothing loaded:\n"
                + "\n".join(f"event {e.index}: {e.path}: {e.message}" for e in rejected.errors)
            ) from rejected
        for w in warnings:
            self.stderr.write(f"warning: event {w.index}: {w.path}: {w.message}")
        self.stdout.write(f"accepted {accepted}, duplicates {duplicates}")
