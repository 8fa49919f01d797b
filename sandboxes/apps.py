from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SandboxesConfig(AppConfig):
    name = "sandboxes"
    verbose_name = "Kept sandboxes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from sandboxes.roles import ensure_roles_after_migrate

        post_migrate.connect(ensure_roles_after_migrate, sender=self)
