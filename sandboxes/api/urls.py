from django.urls import path

import sandboxes.converters  # noqa: F401  (registers <sandbox_id:…>, <segment:…>)
from sandboxes.api import ingest, kept_sandboxes

urlpatterns = [
    path("events", ingest.events, name="api-events"),
    path("kept-sandboxes", kept_sandboxes.kept_sandboxes, name="api-kept-sandboxes"),
    # Before the action route, which would read "salvage.zip" as a verb.
    path(
        "kept-sandboxes/<sandbox_id:sandbox_id>/salvage.zip",
        kept_sandboxes.salvage_zip,
        name="api-kept-sandbox-salvage",
    ),
    # A sandbox id may hold slashes (an SSH sandbox is "ssh://host/path"): the
    # action route comes first and its view reads a GET whose last segment is
    # not a verb as the whole id (see sandboxes/converters.py).
    path(
        "kept-sandboxes/<sandbox_id:sandbox_id>/<segment:action>",
        kept_sandboxes.act,
        name="api-kept-sandbox-action",
    ),
    path(
        "kept-sandboxes/<sandbox_id:sandbox_id>",
        kept_sandboxes.kept_sandbox,
        name="api-kept-sandbox",
    ),
]
