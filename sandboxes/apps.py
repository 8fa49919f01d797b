from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SandboxesConfig(AppConfig):
    name = "sandboxes"
    verbose_name = "Kept sandboxes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from sandboxes import checks  # noqa: F401 -- registers the deploy checks
        from sandboxes.metrics import install_provider_hooks
        from sandboxes.roles import ensure_roles_after_migrate

        install_provider_hooks()  # provider call latency and errors for /metrics

        post_migrate.connect(ensure_roles_after_migrate, sender=self)
