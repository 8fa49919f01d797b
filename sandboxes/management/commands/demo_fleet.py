import io
import json
import tempfile

from django.core.management import call_command
from django.core.management.base import BaseCommand

from sandboxes.demo import demo_events


class Command(BaseCommand):
    help = "Load the demo fleet through the ingest path (load_events); repeated runs are no-ops."

    def add_arguments(self, parser):
        parser.add_argument("--quiet", action="store_true")

    def handle(self, *args, quiet, **options):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
            for event in demo_events():
                fh.write(json.dumps(event) + "\n")
        out = io.StringIO() if quiet else self.stdout
        call_command("load_events", fh.name, source="demo", stdout=out)
