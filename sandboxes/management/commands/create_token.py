from django.core.management.base import BaseCommand, CommandError

from sandboxes import people
from sandboxes.models import ApiToken
from sandboxes.models.choices import TokenScope


class Command(BaseCommand):
    help = (
        "Create an API token. Prints the new token alone on its last line; only its hash is stored."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--scope", required=True, choices=TokenScope.values)
        parser.add_argument(
            "--company",
            action="append",
            default=[],
            metavar="ID",
            help="limit a reviewer or operator token to this company (repeat for several)",
        )

    def handle(self, *args, name, scope, company, **options):
        if not name.strip() or len(name) > ApiToken.NAME_MAX or "\x00" in name:
            raise CommandError(f"name: 1 to {ApiToken.NAME_MAX} characters, no NUL")
        if company and scope == TokenScope.INGEST:
            raise CommandError(
                "--company: an ingest token writes any company's rows; it has no limit"
            )
        try:
            companies = people.parse_company_ids(company)
        except people.ActionRefused as exc:
            raise CommandError(f"--company: {exc}") from None
        token, raw = ApiToken.issue(name, scope, companies=companies)
        self.stderr.write(
            f"Created {scope} token {token.name!r} ({token.prefix}…). "
            "Keep it now: it is not shown again."
        )
        self.stdout.write(raw)
