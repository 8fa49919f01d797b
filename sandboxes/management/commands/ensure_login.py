import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from sandboxes.roles import ADMINS, ensure_roles


class Command(BaseCommand):
    help = (
        "Make sure the embedded console has an admin login; prints 'username / password'. "
        "The generated password is kept in var/login.txt (readable by its owner only)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username, **options):
        ensure_roles()
        secret_file = settings.VAR_DIR / "login.txt"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        password = secret_file.read_text().strip() if secret_file.exists() else ""
        if user is None or not password or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User(username=username, is_staff=True, is_superuser=True)
            user.set_password(password)
            user.save()
            settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
            secret_file.touch(mode=0o600)
            secret_file.write_text(password + "\n")
        user.groups.add(Group.objects.get(name=ADMINS))
        self.stdout.write(f"{username} / {password}")
