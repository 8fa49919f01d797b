from django.urls import path

from sandboxes.api import ingest

urlpatterns = [
    path("events", ingest.events, name="api-events"),
]
