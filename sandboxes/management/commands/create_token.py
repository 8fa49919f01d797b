from django.core.management.base import BaseCommand, CommandError

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
        if not name.strip() or len(name) > ApiToken.NAME_MAX or "\x00" in name:
            raise CommandError(f"name: 1 to {ApiToken.NAME_MAX} characters, no NUL")
        token, raw = ApiToken.issue(name, scope)
        self.stderr.write(
            f"Created {scope} token {token.name!r} ({token.prefix}…). "
            "Keep it now: it is not shown again."
        )
        self.stdout.write(raw)
