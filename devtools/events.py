"""Paperclip's ingest events, built in one place.

The wire format `sandboxes/ingest/schemas.py` accepts (`POST /api/v1/events`,
`manage.py load_events`): an envelope `{id, type, occurred_at, data}` and one
data shape per event type. The demo fleet, the chaos fleet, the tests and the
benchmarks all build their events here, so the format is written down once.

    ev = Events()                                   # ids evt-<n>-<random>, time EPOCH
    ev.run(run_id, issue_id, "failed")              # {"id": …, "type": "run.upserted", …}
    ev = Events(ids=lambda n, type_: f"chaos-{n}", at=lambda: datetime.now(UTC))

Each builder takes the fields its schema requires, then any optional field as
a keyword, passed through as given (`None` included: Paperclip sends nulls);
a `datetime` anywhere in the data is written as RFC 3339.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

# The tests' and benchmarks' fixed time (a date inside every ingest window the
# tests use; the schema refuses times too far in the future).
EPOCH = "2026-11-01T00:00:00Z"

When = str | datetime


def uid() -> str:
    return str(uuid.uuid4())


def rfc3339(at: When) -> str:
    """A time as Paperclip sends it: RFC 3339 in UTC, `Z` for the offset."""
    if isinstance(at, str):
        return at
    if at.tzinfo is None:
        raise ValueError(f"{at!r} has no time zone: Paperclip's times always carry one")
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def manifest(files: dict[str, bytes]) -> dict[str, dict]:
    """A workspace's `saved_manifest`: path -> sha256 and size of what was saved."""
    return {
        path: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for path, data in files.items()
    }


def random_ids(n: int, type_: str) -> str:
    """The default event id: a sequence number and a random tail, unique per run."""
    return f"evt-{n}-{uid()[:8]}"


class Events:
    """Builds events in the wire format. Each gets its id from `ids(n, type)` (n
    counts the events this builder made, from 0) and its `occurred_at` from
    `at`: a fixed time, or a clock called per event; both can be given per event."""

    def __init__(
        self,
        *,
        ids: Callable[[int, str], str] = random_ids,
        at: When | Callable[[], When] = EPOCH,
    ):
        self.ids = ids
        self.at = at
        self.count = 0

    def event(
        self, type_: str, data: dict[str, Any], *, id: str | None = None, at: When | None = None
    ) -> dict[str, Any]:
        n = self.count
        self.count += 1
        if at is None:
            at = self.at() if callable(self.at) else self.at
        return {
            "id": id or self.ids(n, type_),
            "type": type_,
            "occurred_at": rfc3339(at),
            "data": data,
        }

    def _typed(
        self, type_: str, data: dict[str, Any], id: str | None, at: When | None
    ) -> dict[str, Any]:
        wire = {k: rfc3339(v) if isinstance(v, datetime) else v for k, v in data.items()}
        return self.event(type_, wire, id=id, at=at)

    # One builder per event type (sandboxes/ingest/schemas.py: EVENT_TYPES).

    def company(
        self, company_id: str, name: str, *, id: str | None = None, at: When | None = None
    ) -> dict[str, Any]:
        return self._typed("company.upserted", {"company_id": company_id, "name": name}, id, at)

    def user(
        self,
        user_id: str,
        name: str,
        email: str,
        *,
        id: str | None = None,
        at: When | None = None,
    ) -> dict[str, Any]:
        """A Paperclip user: better-auth's text id (not a uuid), name and e-mail."""
        data = {"user_id": user_id, "name": name, "email": email}
        return self._typed("user.upserted", data, id, at)

    def agent(
        self,
        agent_id: str,
        name: str,
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {"agent_id": agent_id, "name": name, **fields}
        return self._typed("agent.upserted", data, id, at)

    def environment(
        self,
        environment_id: str,
        name: str,
        provider: str,
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {"environment_id": environment_id, "name": name, "provider": provider, **fields}
        return self._typed("environment.upserted", data, id, at)

    def issue(
        self,
        issue_id: str,
        status: str,
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {"issue_id": issue_id, "status": status, **fields}
        return self._typed("issue.upserted", data, id, at)

    def workspace(
        self,
        workspace_id: str,
        issue_id: str,
        save_state: str = "saved",
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {
            "workspace_id": workspace_id,
            "issue_id": issue_id,
            "save_state": save_state,
            **fields,
        }
        return self._typed("workspace.upserted", data, id, at)

    def run(
        self,
        run_id: str,
        issue_id: str,
        status: str,
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {"run_id": run_id, "issue_id": issue_id, "status": status, **fields}
        return self._typed("run.upserted", data, id, at)

    def lease(
        self,
        lease_id: str,
        *,
        environment_id: str,
        provider: str,
        provider_lease_id: str,
        status: str,
        lease_policy: str,
        acquired_at: When,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {
            "lease_id": lease_id,
            "environment_id": environment_id,
            "provider": provider,
            "provider_lease_id": provider_lease_id,
            "status": status,
            "lease_policy": lease_policy,
            "acquired_at": acquired_at,
            **fields,
        }
        return self._typed("lease.upserted", data, id, at)

    def released(
        self,
        lease_id: str,
        disposition: str,
        *,
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """`lease.released`, recorded as sent (docs/rules.md)."""
        data = {"lease_id": lease_id, "disposition": disposition, **fields}
        return self._typed("lease.released", data, id, at)

    def receipt(
        self,
        lease_id: str,
        *,
        run_id: str,
        provider_lease_id: str,
        confirmed_at: When,
        kind: str = "termination",
        state: str | None = "stopped",
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """`receipt.recorded`: by default Paperclip's confirmed stop (`termination`, `stopped`)."""
        data = {
            "lease_id": lease_id,
            "kind": kind,
            "state": state,
            "run_id": run_id,
            "provider_lease_id": provider_lease_id,
            "confirmed_at": confirmed_at,
            **fields,
        }
        return self._typed("receipt.recorded", data, id, at)

    def intent(
        self,
        intent_id: str,
        lease_id: str,
        kind: str,
        state: str,
        *,
        id: str | None = None,
        at: When | None = None,
    ) -> dict[str, Any]:
        data = {"intent_id": intent_id, "lease_id": lease_id, "kind": kind, "state": state}
        return self._typed("intent.upserted", data, id, at)

    def export(
        self,
        export_id: str,
        lease_id: str,
        state: str,
        *,
        id: str | None = None,
        at: When | None = None,
    ) -> dict[str, Any]:
        data = {"export_id": export_id, "lease_id": lease_id, "state": state}
        return self._typed("export.upserted", data, id, at)

    def recovery_action(
        self,
        action_id: str,
        issue_id: str,
        status: str,
        *,
        kind: str = "workspace_restore",
        id: str | None = None,
        at: When | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        data = {"action_id": action_id, "issue_id": issue_id, "kind": kind, "status": status}
        return self._typed("recovery_action.upserted", data | fields, id, at)


# The tests' builder: ids unique across a test run, the fixed EPOCH time.
_tests = Events()


def event(
    type_: str, data: dict[str, Any], *, id: str | None = None, at: When = EPOCH
) -> dict[str, Any]:
    """One event of any type, data as given (the fuzzers send what the schema refuses)."""
    return _tests.event(type_, data, id=id, at=at)


def graph(
    *,
    lease_status: str = "active",
    policy: str = "reuse_by_environment",
    run_status: str = "running",
    provider: str = "daytona",
    sandbox: str = "sbx-1",
    ev: Events | None = None,
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A consistent set of ids (env, issue, ws, run, lease) and the five events
    that create them: an environment, a task bound to its workspace, a run and
    the run's lease on `sandbox`."""
    ev = ev or _tests
    ids = {k: uid() for k in ("env", "issue", "ws", "run", "lease")}
    events = [
        ev.environment(ids["env"], f"env-{ids['env'][:6]}", provider),
        ev.issue(
            ids["issue"],
            "in_progress",
            key="PAP-142",
            title="A task",
            bound_workspace_id=ids["ws"],
        ),
        ev.workspace(ids["ws"], ids["issue"]),
        ev.run(ids["run"], ids["issue"], run_status),
        ev.lease(
            ids["lease"],
            environment_id=ids["env"],
            provider=provider,
            provider_lease_id=sandbox,
            status=lease_status,
            lease_policy=policy,
            acquired_at=EPOCH,
            issue_id=ids["issue"],
            workspace_id=ids["ws"],
            run_id=ids["run"],
        ),
    ]
    return ids, events
