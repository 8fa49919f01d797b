"""manage.py grant_role USER reviewer|operator|admin (or --none): roles without a shell."""

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

    def handle(self, *args, username, role, none, reason, **options):
        if bool(role) == bool(none):
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
        old, new = grant_role(user, role or "", reason=reason)
        if old == new:
            self.stdout.write(f"{username} already has {new or 'no'} role; nothing changed.")
            return
        words = f"{new}: {ROLE_WORDS[new]}" if new else "no role: sees nothing"
        self.stdout.write(f"{username}: {old or 'no role'} → {words}")
