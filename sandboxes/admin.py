"""Admin: mirrored and append-only rows are read-only here; Paperclip and the
reconciler own them."""

from django.contrib import admin

from sandboxes import models as m


class ReadOnlyAdmin(admin.ModelAdmin):
    # Django's automatic select_related follows only non-null foreign keys:
    # every nullable one in a list_display is named in list_select_related, or
    # the changelist costs a query per row (tests/models/test_admin.py).

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(m.Environment)
class EnvironmentAdmin(ReadOnlyAdmin):
    list_display = ("name", "provider", "driver", "status", "retirement_mode", "placeholder")
    list_filter = ("provider", "status", "retirement_mode")
    search_fields = ("name", "id")


@admin.register(m.Issue)
class IssueAdmin(ReadOnlyAdmin):
    list_display = ("key", "title", "status", "bound_workspace", "placeholder")
    list_select_related = ("bound_workspace",)
    list_filter = ("status",)
    search_fields = ("key", "title", "id")


@admin.register(m.Company)
class CompanyAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "placeholder")
    search_fields = ("name", "id")


@admin.register(m.Agent)
class AgentAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "company_id", "placeholder")
    search_fields = ("name", "id")


@admin.register(m.PaperclipUser)
class PaperclipUserAdmin(ReadOnlyAdmin):
    list_display = ("name", "email", "id", "placeholder")
    search_fields = ("name", "email", "id")


@admin.register(m.ExecutionWorkspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    list_display = ("id", "issue", "save_state", "saved_at", "writer_run")
    list_select_related = ("issue", "writer_run")
    list_filter = ("save_state",)


@admin.register(m.HeartbeatRun)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "issue", "status", "started_at", "finished_at")
    list_select_related = ("issue",)
    list_filter = ("status",)


@admin.register(m.EnvironmentLease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = (
        "provider_lease_id",
        "provider",
        "status",
        "lease_policy",
        "environment",
        "acquired_at",
        "released_at",
    )
    list_select_related = ("environment",)
    list_filter = ("status", "lease_policy", "provider")
    search_fields = ("provider_lease_id", "id")


@admin.register(m.LeaseIntent)
class IntentAdmin(ReadOnlyAdmin):
    list_display = ("id", "lease", "kind", "state")
    list_filter = ("kind", "state")


@admin.register(m.PendingExport)
class PendingExportAdmin(ReadOnlyAdmin):
    list_display = ("id", "lease", "state")
    list_filter = ("state",)


@admin.register(m.RecoveryAction)
class RecoveryActionAdmin(ReadOnlyAdmin):
    list_display = ("id", "source_issue", "kind", "status", "outcome")
    list_filter = ("status", "kind")


@admin.register(m.Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ("kind", "provider_lease_id", "state", "confirmed_at", "request_id", "actor")
    list_filter = ("kind",)
    search_fields = ("provider_lease_id", "request_id")


@admin.register(m.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_label", "action", "object_type", "object_id", "reason")
    list_filter = ("action",)
    search_fields = ("object_id", "sandbox_id", "actor_label")


@admin.register(m.Retirement)
class RetirementAdmin(ReadOnlyAdmin):
    list_display = ("provider_lease_id", "kind", "stage", "attempts", "needs_attention")
    list_filter = ("stage", "kind", "needs_attention")
    search_fields = ("provider_lease_id",)


@admin.register(m.ReconcilerPass)
class ReconcilerPassAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "finished_at", "candidates", "advanced", "retired", "failed")


@admin.register(m.Attachment)
class AttachmentAdmin(ReadOnlyAdmin):
    list_display = ("path", "issue", "sha256", "size", "created_at")
    search_fields = ("sha256", "path")


@admin.register(m.ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    # Tokens are created and revoked on the console's tokens page (or with
    # `manage.py create_token`), where every change is audited; the admin site
    # only shows them, so nobody can un-revoke a token without an audit row.
    list_display = ("name", "scope", "prefix", "created_at", "last_used_at", "revoked_at")
