from django.core.management.base import BaseCommand

from sandboxes.models import ApiToken
from sandboxes.models.choices import TokenScope


class Command(BaseCommand):
    help = (
        "Create an API token. Prints the new token alone on its last line; only its hash is stored."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--scope", required=True, choices=TokenScope.values)

    def handle(self, *args, name, scope, **options):
        token, raw = ApiToken.issue(name, scope)
        self.stderr.write(
            f"Created {scope} token {token.name!r} ({token.prefix}…). "
            "Keep it now: it is not shown again."
        )
        self.stdout.write(raw)
