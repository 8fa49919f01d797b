from django.urls import path

import sandboxes.converters  # registers <sandbox_id:…> (i11's converter)
from sandboxes.views import (
    admin_pages,
    approvals,
    audit,
    dashboard,
    notifications,
    salvage,
    sandboxes,
)

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("sandboxes/", sandboxes.sandbox_list, name="sandbox-list"),
    path("sandboxes/<uuid:pk>/", sandboxes.sandbox_detail, name="sandbox-detail"),
    path(
        "sandboxes/<uuid:pk>/provider-state/",
        sandboxes.provider_state,
        name="sandbox-provider-state",
    ),
    path("sandboxes/<uuid:pk>/approve/", sandboxes.approve, name="sandbox-approve"),
    path("sandboxes/<uuid:pk>/retry/", sandboxes.retry, name="sandbox-retry"),
    path("sandboxes/<uuid:pk>/hold/", sandboxes.hold, name="sandbox-hold"),
    path("sandboxes/<uuid:pk>/release-hold/", sandboxes.release_hold, name="sandbox-release-hold"),
    path("sandboxes/<uuid:pk>/attest/", sandboxes.attest, name="sandbox-attest"),
    path("sandboxes/<uuid:pk>/salvage.zip", salvage.salvage_zip, name="sandbox-salvage"),
    # Last among sandboxes/…: any provider sandbox id, slashes included (i11's converter).
    path("sandboxes/<sandbox_id:sandbox_id>/", sandboxes.sandbox_by_id, name="sandbox-by-id"),
    path("tasks/<uuid:pk>/", sandboxes.task_detail, name="task"),
    path("attachments/<uuid:pk>/", sandboxes.attachment_download, name="attachment"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/approve/", approvals.bulk_approve, name="approvals-bulk"),
    path("audit/", audit.audit, name="audit"),
    path("audit/export.csv", audit.export_csv, name="audit-export-csv"),
    path("audit/export.json", audit.export_json, name="audit-export-json"),
    path("passes/", admin_pages.passes, name="passes"),
    path("environments/", admin_pages.environments, name="environments"),
    path("environments/<uuid:pk>/policy/", admin_pages.edit_policy, name="environment-policy"),
    path("environments/<uuid:pk>/prices/", admin_pages.edit_prices, name="environment-prices"),
    path("environments/<uuid:pk>/channels/", notifications.channels, name="channels"),
    path(
        "environments/<uuid:pk>/channels/new/",
        notifications.channel_create,
        name="channel-create",
    ),
    path("channels/<uuid:pk>/", notifications.channel_detail, name="channel-detail"),
    path("channels/<uuid:pk>/edit/", notifications.channel_update, name="channel-update"),
    path("channels/<uuid:pk>/rotate/", notifications.channel_rotate, name="channel-rotate"),
    path("channels/<uuid:pk>/test/", notifications.channel_test, name="channel-test"),
    path("channels/<uuid:pk>/delete/", notifications.channel_delete, name="channel-delete"),
    path("users/", admin_pages.users, name="users"),
    path("users/<int:pk>/role/", admin_pages.assign_role, name="user-role"),
    path("tokens/", admin_pages.tokens, name="tokens"),
    path("tokens/new/", admin_pages.create_token, name="token-create"),
    path("tokens/<uuid:pk>/revoke/", admin_pages.revoke_token, name="token-revoke"),
]
