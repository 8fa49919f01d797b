"""`manage.py provider_simulator --port N`: serve the Daytona simulator (README, commands)."""

from django.core.management.base import BaseCommand

from devtools import simulator


class Command(BaseCommand):
    help = "Serve a Daytona-compatible simulator with seeded fault injection on loopback."
    # It needs neither the database nor the URLconf: start even when those are broken.
    requires_system_checks = []

    def add_arguments(self, parser):
        simulator.add_arguments(parser)

    def handle(self, *args, **options):
        server = simulator.server_from_options(options)
        self.stdout.write(f"provider simulator listening on {server.url}")
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop_listening()
