import json

import pytest


@pytest.fixture
def post_events(client, ingest_token):
    """POST a batch with a valid ingest token; returns the response."""
    _, raw = ingest_token

    def post(events, *, token=raw, content_type="application/json", body=None):
        payload = body if body is not None else json.dumps({"events": events})
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        return client.post("/api/v1/events", payload, content_type=content_type, **headers)

    return post
