"""manage.py create_user USER reviewer|operator|admin [--email A] [--company ID…]:
a user with one console role (limited to the given companies, README company
scope) and no password yet; prints (or mails) a set-password link."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sandboxes import audit, people
from sandboxes.roles import ROLES, ensure_roles, grant_role


class Command(BaseCommand):
    help = "Create a user with one console role and print a set-password link; audited."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", choices=list(ROLES))
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--company",
            action="append",
            default=[],
            metavar="ID",
            help="limit the user to this company (repeat for several; none: every company)",
        )
        parser.add_argument("--reason", default="created with manage.py create_user")

    def handle(self, *args, username, role, email, reason, company, **options):
        ensure_roles()
        try:
            people.parse_company_ids(company)
        except people.ActionRefused as exc:
            raise CommandError(f"--company: {exc}") from None
        User = get_user_model()
        if User.objects.filter(username__iexact=username).exists():
            raise CommandError(
                f"{username!r} exists; give it a role with `manage.py grant_role {username} {role}`"
            )
        user = User(username=username, email=email)
        user.set_unusable_password()
        try:
            user.full_clean(exclude=["password"])
        except Exception as exc:  # ValidationError: the field and why
            raise CommandError(f"cannot create {username!r}: {exc}") from None
        user.save()
        audit.record(
            actor=None,
            action="user.create",
            obj=user,
            reason=reason,
            after={"username": username, "email": email or None, "role": None},
        )
        grant_role(user, role, reason=reason)
        if company:
            people.set_companies(user.pk, actor=None, company_ids=company, reason=reason)
        link = people.deliver_link(user)
        if link.sent_to:
            self.stdout.write(f"{username} ({role}) created; a set-password link went to {email}.")
        else:
            self.stdout.write(f"{username} ({role}) created. Set-password link:\n{link.url}")
        if company:
            self.stderr.write(f"{username} sees only {len(set(company))} company(ies).")
