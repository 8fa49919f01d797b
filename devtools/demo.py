"""A demo fleet, described as Paperclip events (devtools/events.py) so that it
enters the console through the same ingest path as a real runtime's rows.

With the local provider every lease names a real sandbox on this machine
(created idempotently through the provider's `create`, holding files; some
unsaved against the workspace's saved manifest), and the fleet covers every
candidate kind and every hold, so a newcomer watches retirements happen and
holds explained within a pass or two.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from devtools.events import Events, manifest

DEMO_NAMESPACE = uuid.UUID("6f4740dc-32bc-5cce-8000-000000000000")


def _id(*parts: str) -> str:
    return str(uuid.uuid5(DEMO_NAMESPACE, "/".join(parts)))


def _events(now: datetime) -> Events:
    """Stable event ids (a second load is all duplicates), stamped `now`."""
    return Events(ids=lambda n, type_: _id("event", type_, str(n)), at=now)


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    issue_status: str = "in_progress"
    run_status: str = "succeeded"
    lease_status: str = "released"
    policy: str = "reuse_by_environment"
    bound: bool = True  # the task is bound to this lease's workspace
    receipt: str | None = "termination"  # stop receipt kind, or None
    released_hours: float | None = 2
    running: bool = False  # the sandbox is still started
    unsaved: bool = False  # files differ from the saved manifest
    env: str = "local-demo"
    disposition: str = "stop_and_retain"
    failure_reason: str = ""
    extra: tuple = field(default_factory=tuple)


SCENARIOS = [
    # Candidate kinds (docs/rules.md, candidate kinds).
    Scenario(
        "PAP-101",
        "Retry moved the task to a new workspace (unsaved files)",
        run_status="failed",
        bound=False,
        unsaved=True,
    ),
    Scenario(
        "PAP-102", "Warm lease still resumable (kept, not a candidate)", issue_status="in_review"
    ),
    Scenario(
        "PAP-103",
        "Failed warm lease with a confirmed stop",
        issue_status="todo",
        run_status="failed",
        lease_status="failed",
    ),
    Scenario(
        "PAP-104",
        "Done task, warm sandbox suspended two days",
        issue_status="done",
        released_hours=48,
    ),
    Scenario(
        "PAP-105",
        "Superseded but still running",
        lease_status="retained",
        bound=False,
        receipt=None,
        released_hours=None,
        running=True,
    ),
    Scenario(
        "PAP-106",
        "Restore source whose recovery the Retry closed",
        run_status="failed",
        lease_status="failed",
        policy="retain_on_failure",
        bound=False,  # the Retry bound the task to a fresh workspace
        extra=("recovery_resolved",),
    ),
    Scenario(
        "PAP-107",
        "Sandbox that would not resume, replaced",
        lease_status="pending_cleanup",
        failure_reason="resume_failed",
        extra=("replacement",),
    ),
    Scenario(
        "PAP-108",
        "Failed run kept running (must stop and retain)",
        run_status="failed",
        lease_status="retained",
        disposition="keep_running",
        receipt=None,
        released_hours=None,
        running=True,
    ),
    # One hold each (docs/rules.md, holds).
    Scenario(
        "PAP-110", "Hold: the lease's own run is live", run_status="running", lease_status="failed"
    ),
    Scenario(
        "PAP-111",
        "Hold: another run on the task is live",
        lease_status="failed",
        extra=("live_run",),
    ),
    Scenario(
        "PAP-112",
        "Hold: a recovery action is open",
        lease_status="failed",
        extra=("recovery_open",),
    ),
    Scenario(
        "PAP-113",
        "Hold: a native export is pending",
        lease_status="failed",
        extra=("export_pending",),
    ),
    Scenario(
        "PAP-114",
        "Hold: a restore intent is pending",
        lease_status="failed",
        extra=("intent_pending",),
    ),
    Scenario(
        "PAP-115",
        "Hold: another lease shares the sandbox",
        lease_status="failed",
        extra=("shared",),
    ),
    Scenario(
        "PAP-116",
        "Hold: a newer lease row names the sandbox",
        lease_status="failed",
        extra=("newer",),
    ),
    Scenario("PAP-117", "Hold: no confirmed stop receipt", lease_status="failed", receipt=None),
    Scenario(
        "PAP-118",
        "Hold: the task can still resume it (an interrupted run's stop still goes ahead)",
        run_status="interrupted",
        lease_status="retained",
        disposition="keep_running",
        receipt=None,
        released_hours=None,
        running=True,
    ),
    Scenario(
        "PAP-119",
        "Hold: the workspace writer is not settled",
        lease_status="failed",
        extra=("writer",),
    ),
    Scenario(
        "PAP-120", "Hold: inside the warm retention window", issue_status="done", released_hours=2
    ),
    Scenario(
        "PAP-121", "Hold: no release time to date it by", issue_status="done", released_hours=None
    ),
    Scenario(
        "PAP-122",
        "Hold: an operator put it on hold",
        lease_status="failed",
        extra=("operator_hold",),
    ),
    Scenario(
        "PAP-123",
        "Hold: an e2b sandbox the console cannot drive",
        lease_status="failed",
        env="e2b-demo",
    ),
    Scenario(
        "PAP-124",
        "Hold: outside the environment's retirement window",
        lease_status="failed",
        env="local-demo-office",
    ),
    # Manual mode: salvage, then wait in the approvals queue.
    Scenario(
        "PAP-130",
        "Manual environment: exported, awaiting approval",
        lease_status="failed",
        unsaved=True,
        env="local-demo-manual",
    ),
    # Seed 003: a cancelled run's files behind the writer hold become recovery work.
    Scenario(
        "PAP-140",
        "Cancelled run: files preserved as recovery work",
        run_status="cancelled",
        receipt="stop_and_retain",
        extra=("writer",),
    ),
]

ENVIRONMENTS = {
    "local-demo": "auto",
    "local-demo-manual": "manual",
    "e2b-demo": "auto",
    # Destroys only inside its retirement window (set_demo_window).
    "local-demo-office": "auto",
}
WINDOW_ENVIRONMENT = "local-demo-office"
# The demo's price table (per vCPU-hour, GiB-hour of memory, GiB-month of
# disk; a stopped sandbox pays for its disk only), so a fresh `make run` shows
# money. The e2b environment has no client, so its sizes are never read and
# its cost stays unknown: the one true "unknown" on the dashboard.
DEMO_PRICES = {
    "price_vcpu_hour_running": Decimal("0.0504"),
    "price_memory_gib_hour_running": Decimal("0.0162"),
    "price_disk_gib_month_running": Decimal("0.08"),
    "price_vcpu_hour_stopped": Decimal(0),
    "price_memory_gib_hour_stopped": Decimal(0),
    "price_disk_gib_month_stopped": Decimal("0.08"),
}
# What each demo sandbox is created with (the local provider reports them back).
DEMO_SIZES = {"cpu": 2, "memory_gib": 4}

# The people (docs/rules.md, the people around a sandbox): two companies, their
# users (better-auth's text ids) and an agent each. Scenarios take turns with
# the ways a task has an owner: an assignee user, an agent with its creator, a
# creator alone.
COMPANIES = {"acme": "Acme Robotics", "globex": "Globex"}
USERS = {
    "dana": ("Dana Scully", "dana@acme.example"),
    "erik": ("Erik Lehnsherr", "erik@acme.example"),
    "mia": ("Mia Wallace", "mia@globex.example"),
}
AGENTS = {"acme": "acme-coder", "globex": "globex-coder"}
PEOPLE = (
    ("acme", {"assignee_user_id": "demo-dana", "created_by_user_id": "demo-erik"}),
    ("acme", {"assignee_agent_id": "acme", "created_by_user_id": "demo-erik"}),
    ("globex", {"assignee_agent_id": "globex", "created_by_user_id": "demo-mia"}),
    ("globex", {"created_by_user_id": "demo-mia"}),
)


def people_events(ev: Events) -> list[dict]:
    """The companies, users and agents the demo's tasks name."""
    events = [ev.company(_id("company", key), name) for key, name in COMPANIES.items()]
    events += [ev.user(f"demo-{key}", name, email) for key, (name, email) in USERS.items()]
    events += [
        ev.agent(_id("agent", key), name, company_id=_id("company", key))
        for key, name in AGENTS.items()
    ]
    return events


def issue_people(n: int) -> dict[str, str]:
    """The n-th scenario's company and people, as `issue.upserted` fields."""
    company, people = PEOPLE[n % len(PEOPLE)]
    fields = {"company_id": _id("company", company), **people}
    if "assignee_agent_id" in fields:
        fields["assignee_agent_id"] = _id("agent", people["assignee_agent_id"])
    return fields


def _provider(env: str) -> str:
    """The demo's environments are local, but for one of a provider the console
    has no client for: listed and held `provider_unsupported` (docs/architecture.md, the rooms)."""
    return "e2b" if env.startswith("e2b") else "local"


def saved_files(key: str) -> dict[str, bytes]:
    return {
        "README.md": f"# {key}\n".encode(),
        "src/main.py": f"print('{key} saved')\n".encode(),
        "notes/plan.md": b"- step one\n- step two\n",
    }


def sandbox_files(s: Scenario) -> dict[str, bytes]:
    files = saved_files(s.key)
    if s.unsaved:
        files["src/main.py"] = f"print('{s.key} edited after the last save')\n".encode()
        files["src/new_module.py"] = b"def added():\n    return 'unsaved'\n"
        del files["notes/plan.md"]
    return files


def sandbox_name(key: str) -> str:
    return f"demo-{key.lower()}"


def demo_events(sandbox_ids: dict[str, str] | None = None, now: datetime | None = None):
    """Events for the demo fleet. `sandbox_ids` maps a scenario key (and
    `<key>/replacement`) to its sandbox id; absent keys use a stable name."""
    now = now or timezone.now()
    ids = sandbox_ids or {}
    ev = _events(now)
    events: list[dict] = []
    add = events.append

    for name, mode in ENVIRONMENTS.items():
        add(
            ev.environment(
                _id("env", name),
                name,
                _provider(name),
                driver="sandbox",
                retirement_mode=mode,
                warm_retention_hours=24,
            )
        )
    events.extend(people_events(ev))
    for n, s in enumerate(SCENARIOS):
        issue, ws, run, lease = (_id(s.key, part) for part in ("issue", "ws", "run", "lease"))
        newer_ws = _id(s.key, "ws-new")
        sandbox = ids.get(s.key, sandbox_name(s.key))
        released = now - timedelta(hours=s.released_hours or 2)
        acquired = released - timedelta(hours=1)
        writer = "writer" in s.extra
        add(
            ev.issue(
                issue,
                s.issue_status,
                key=s.key,
                title=s.title,
                bound_workspace_id=ws if s.bound else newer_ws,
                **issue_people(n),
            )
        )
        add(ev.run(run, issue, s.run_status, started_at=acquired, finished_at=released))
        add(
            ev.workspace(
                ws,
                issue,
                saved_at=released,
                saved_manifest=manifest(saved_files(s.key)),
                writer_run_id=run if writer else None,
                # Paperclip replaces a sandbox that would not resume only after a
                # committed save with its final checkpoint (seed 004), the proof the
                # console re-checks before retiring the old one.
                final_checkpoint_at=released if "replacement" in s.extra else None,
            )
        )
        if not s.bound:
            add(ev.workspace(newer_ws, issue, saved_at=now))
        add(
            ev.lease(
                lease,
                environment_id=_id("env", s.env),
                provider=_provider(s.env),
                provider_lease_id=sandbox,
                status=s.lease_status,
                lease_policy=s.policy,
                acquired_at=acquired,
                released_at=released if s.released_hours is not None else None,
                # Paperclip settles a lease it stopped: cleanup done
                # (remote-execution-termination.ts @ 555fcfc, lines 29-30).
                cleanup_status="success" if s.receipt else None,
                issue_id=issue,
                workspace_id=ws,
                run_id=run,
                disposition=s.disposition,
                failure_reason=s.failure_reason or None,
                metadata={"remoteCwd": "workspace"},
                at=acquired,
            )
        )
        if s.receipt:
            stop = {"run_id": run, "provider_lease_id": sandbox, "confirmed_at": released}
            add(ev.receipt(lease, **stop))
            if s.receipt == "stop_and_retain":
                add(
                    ev.receipt(
                        lease, kind="stop_and_retain", request_id=f"demo-sar-{lease}", **stop
                    )
                )
        if "recovery_resolved" in s.extra or "recovery_open" in s.extra:
            resolved = "recovery_resolved" in s.extra
            add(
                ev.recovery_action(
                    _id(s.key, "recovery"),
                    issue,
                    "resolved" if resolved else "active",
                    lease_id=lease if resolved else None,
                )
            )
        if "live_run" in s.extra:
            add(ev.run(_id(s.key, "run-2"), issue, "running"))
        if "export_pending" in s.extra:
            add(ev.export(_id(s.key, "export"), lease, "pending"))
        if "intent_pending" in s.extra:
            add(ev.intent(_id(s.key, "intent"), lease, "restore", "pending"))
        if "shared" in s.extra or "replacement" in s.extra:
            other = "shared" in s.extra
            add(
                ev.lease(
                    _id(s.key, "lease-2"),
                    environment_id=_id("env", s.env),
                    provider="local",
                    provider_lease_id=sandbox
                    if other
                    else ids.get(f"{s.key}/replacement", sandbox_name(s.key) + "-new"),
                    status="active",
                    lease_policy=s.policy,
                    # A shared sandbox's other lease is older, so this row stays the newest.
                    acquired_at=acquired - timedelta(hours=1) if other else now,
                    issue_id=issue,
                    workspace_id=ws,
                    run_id=_id(s.key, "run-2") if other else run,
                )
            )
    return events


def newer_lease_events(sandbox_ids: dict[str, str] | None = None, now: datetime | None = None):
    """A newer lease row on PAP-116's sandbox, sent after the first listing so the
    record already exists and shows the `newer_lease` hold."""
    now = now or timezone.now()
    s = next(s for s in SCENARIOS if "newer" in s.extra)
    sandbox = (sandbox_ids or {}).get(s.key, sandbox_name(s.key))
    return [
        _events(now).lease(
            _id(s.key, "lease-newer"),
            environment_id=_id("env", s.env),
            provider=_provider(s.env),
            provider_lease_id=sandbox,
            status="released",
            lease_policy="reuse_by_environment",
            acquired_at=now,
            released_at=now,
            issue_id=_id(s.key, "issue"),
            workspace_id=_id(s.key, "ws"),
            run_id=_id(s.key, "run"),
            id=_id("event", "newer-lease", s.key),
        )
    ]


def ensure_sandboxes(provider) -> dict[str, str]:
    """Create each scenario's real sandbox once (found again by its `demo` label)
    and return {scenario key: sandbox id}. A sandbox the reconciler already
    retired is not recreated: its lease row keeps naming the old id."""
    from sandboxes.models import EnvironmentLease

    wanted = [(s.key, s, _id(s.key, "lease")) for s in SCENARIOS] + [
        (f"{s.key}/replacement", None, _id(s.key, "lease-2"))
        for s in SCENARIOS
        if "replacement" in s.extra
    ]
    known = {
        str(pk): sandbox
        for pk, sandbox in EnvironmentLease.objects.filter(
            pk__in=[lease for _, _, lease in wanted], placeholder=False
        ).values_list("pk", "provider_lease_id")
    }
    labels = {"app": "paperclip-demo"}
    existing = {info.labels.get("demo"): info.id for info in provider.list(labels)}
    ids: dict[str, str] = {}
    for key, s, lease_id in wanted:
        if lease_id in known:
            ids[key] = known[lease_id]
            continue
        if key in existing:
            ids[key] = existing[key]
            continue
        files = sandbox_files(s) if s is not None else saved_files(key.split("/")[0])
        info = provider.create(
            sandbox_name(key.replace("/", "-")),
            labels | {"demo": key},
            files=files,
            root="workspace",
            **DEMO_SIZES,
        )
        if s is not None and not s.running:
            provider.stop(info.id)
        ids[key] = info.id
    return ids


def set_demo_window(now: datetime | None = None) -> int:
    """Give the demo's office environment a retirement window where it has none
    (an admin's own is kept): 09:00–17:00 Europe/Berlin on the weekday three days
    from today, so it is closed whenever the demo is loaded and its sandbox shows
    the window's hold. Returns how many environments got one."""
    from datetime import time

    from sandboxes.models import Environment
    from sandboxes.rules.window import DAYS

    day = DAYS[((now or timezone.now()).weekday() + 3) % 7]
    return Environment.objects.filter(name=WINDOW_ENVIRONMENT, time_zone="").update(
        time_zone="Europe/Berlin", window_days=day, window_start=time(9), window_end=time(17)
    )


def set_demo_prices() -> int:
    """Give the demo environments the demo price table where they have none yet
    (an admin's own prices are kept); returns how many were priced."""
    from django.db.models import Q

    from sandboxes.models import Environment

    unpriced = Q()
    for name in DEMO_PRICES:
        unpriced &= Q(**{f"{name}__isnull": True})
    return Environment.objects.filter(unpriced, name__in=list(ENVIRONMENTS)).update(**DEMO_PRICES)
