from django.urls import path

from sandboxes.api import ingest, kept_sandboxes

urlpatterns = [
    path("events", ingest.events, name="api-events"),
    path("kept-sandboxes", kept_sandboxes.kept_sandboxes, name="api-kept-sandboxes"),
    path(
        "kept-sandboxes/<str:sandbox_id>",
        kept_sandboxes.kept_sandbox,
        name="api-kept-sandbox",
    ),
    path(
        "kept-sandboxes/<str:sandbox_id>/<str:action>",
        kept_sandboxes.act,
        name="api-kept-sandbox-action",
    ),
]
