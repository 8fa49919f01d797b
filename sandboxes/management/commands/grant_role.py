"""manage.py grant_role USER reviewer|operator|admin (or --none), and/or a company
limit (--company ID…, or --every-company): roles without a shell."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sandboxes.roles import ROLE_WORDS, ROLES, ensure_roles, grant_role


class Command(BaseCommand):
    help = "Give a user exactly one console role (reviewer, operator or admin); audited."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", nargs="?", choices=list(ROLES))
        parser.add_argument("--none", action="store_true", help="remove every console role")
        parser.add_argument("--reason", default="granted with manage.py grant_role")
        parser.add_argument(
            "--company",
            action="append",
            default=[],
            metavar="ID",
            help="limit the user to this company (repeat for several; README, company scope)",
        )
        parser.add_argument(
            "--every-company", action="store_true", help="lift the user's company limit"
        )

    def handle(self, *args, username, role, none, reason, company, every_company, **options):
        limit = bool(company) or every_company
        if company and every_company:
            raise CommandError("--company and --every-company: give one of them")
        if role and none or not (role or none or limit):
            raise CommandError("give a role (reviewer, operator or admin) or --none")
        ensure_roles()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(
                f"no user named {username!r}. Create it first: an admin adds it on the"
                f" console's Users page, or from a shell run"
                f" `manage.py create_user {username} {role or 'reviewer'} --email ADDRESS`,"
                " which prints a set-password link."
            )
        if limit:
            self._limit(user, company, reason)
            if not (role or none):
                return
        old, new = grant_role(user, role or "", reason=reason)
        if old == new:
            self.stdout.write(f"{username} already has {new or 'no'} role; nothing changed.")
            return
        words = f"{new}: {ROLE_WORDS[new]}" if new else "no role: sees nothing"
        self.stdout.write(f"{username}: {old or 'no role'} → {words}")

    def _limit(self, user, company: list[str], reason: str) -> None:
        from sandboxes import people

        try:
            _, new = people.set_companies(user.pk, actor=None, company_ids=company, reason=reason)
        except people.ActionRefused as exc:
            raise CommandError(str(exc)) from None
        words = f"{len(new)} company(ies)" if new else "every company"
        self.stdout.write(f"{user.get_username()} now sees {words}.")
