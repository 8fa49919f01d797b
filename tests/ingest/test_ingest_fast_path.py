"""The batch-level fast path (`fast_validate_body`, `fast_validate_lines`) must
accept only what the detailed path (`decode_json` + `validate_batch`) accepts,
with the same values; anything else falls back to the detailed path, whose
answers are the contract (issue 16 item 4)."""

import json

import pytest

from devtools.events import event, graph, uid
from sandboxes.ingest import schemas as s

from .test_ingest_bulk import batch_of


def slow(body: bytes):
    return s.validate_batch(s.decode_json(body), max_events=1000)


def same(a: list[s.Event], b: list[s.Event]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.index, x.id, x.type, x.occurred_at) == (y.index, y.id, y.type, y.occurred_at)
        assert s.SCHEMA_OF[type(y.data)] is type(x.data)
        assert x.data.model_fields_set == y.data.model_fields_set
        # The fast path keeps ids as the canonical strings the detailed path's
        # UUIDs print as.
        assert x.data.model_dump(mode="json") == y.data.model_dump(mode="json")
    # What the fold is given from either path (`plain_ids`) is the very same.
    for x, y in zip(s.plain_ids(a), s.plain_ids(b), strict=True):
        assert type(x.data) is type(y.data)
        assert x.data.model_fields_set == y.data.model_fields_set
        assert x.data.model_dump() == y.data.model_dump()


def test_every_event_type_validates_to_the_same_values_on_both_paths():
    events = batch_of(200)
    ids, more = graph(sandbox=f"sbx-{uid()[:8]}")
    more[-1]["data"]["metadata"] = {"remoteCwd": "work", "extra": {"a": [1, 2.5, None]}}
    events += more
    body = json.dumps({"events": events}).encode()
    batch, errors = slow(body)
    assert not errors
    same(batch, s.fast_validate_body(body, max_events=1000))
    same(batch, s.fast_validate_lines([json.dumps(e) for e in events]))


def run(**data):
    return event("run.upserted", {"run_id": uid(), "issue_id": uid(), "status": "failed", **data})


@pytest.mark.parametrize(
    "text",
    [
        # What json.loads refuses but pydantic's JSON parser reads.
        '{"events": [%s], "x": NaN}',
        '{"events": [%s], "x": 1e400}',
        '{"events": [%s], "x": ' + "[" * 70 + "]" * 70 + "}",
        # Unknown keys (their values are never looked at by the fast path).
        '{"events": [%s], "x": 1}',
        # Text PostgreSQL cannot store.
        '{"events": [%s], "x": "\\u0000"}',
    ],
)
def test_what_the_fast_path_cannot_vouch_for_goes_to_the_detailed_path(text):
    body = (text % json.dumps(run())).encode()
    assert s.fast_validate_body(body, max_events=1000) is None


def test_free_form_values_are_checked_like_the_whole_body():
    deep: dict = {}
    for _ in range(70):
        deep = {"a": deep}
    e = event(
        "recovery_action.upserted",
        {"action_id": uid(), "issue_id": uid(), "kind": "k", "status": "active"},
    )
    e["data"]["evidence"] = {"fine": [1, {"b": 2}]}
    assert s.fast_validate_lines([json.dumps(e)]) is not None
    for evidence in ({"n": float("nan")}, deep):
        e["data"]["evidence"] = evidence
        assert s.fast_validate_lines([json.dumps(e)]) is None
        with pytest.raises(ValueError):  # the detailed path refuses it
            slow(json.dumps({"events": [e]}).encode())


def test_an_id_in_another_spelling_goes_the_detailed_path_and_is_folded_alike():
    e = run()
    e["data"]["run_id"] = e["data"]["run_id"].upper()
    body = json.dumps({"events": [e]}).encode()
    assert s.fast_validate_body(body, max_events=1000) is None
    [plain] = s.plain_ids(slow(body)[0])
    assert plain.data.run_id == e["data"]["run_id"].lower()


def test_lines_are_validated_one_by_one():
    # Joined, these two bad lines would read as two good events.
    one, two = json.dumps(run()), json.dumps(run())
    assert s.fast_validate_lines([one + ", " + two[:-1], two[-1:]]) is None
