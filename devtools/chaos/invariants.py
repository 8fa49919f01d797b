"""Invariants of a wave, judged from the simulator's call log and the database.

Definitions (what each number in the report counts):

- unsafe destroy: a DELETE answered 2xx for a sandbox whose retirement had no
  proof receipt (sandboxes.proof) created before that DELETE was received —
  or, in a manual environment, no approval before it — or a DELETE of any
  sandbox the fleet says must be kept.
- duplicate destroy: a sandbox with more than one `retirement` receipt, or
  with two destroy operations (distinct X-Request-Id values that each got a
  2xx DELETE), whether they overlap or follow each other. Retries inside one
  operation share its request id; a retry that got 404 is not a 2xx. A worker
  that finds a destroy under way (`destroying`, its owner killed) waits for it
  by reading and sends no DELETE of its own, so any second operation counts.
  The harness's shortcuts (ending a dead worker's claim early, skipping retry
  backoff) cannot hide one: this is judged from the provider's call log.
- lost file: an added or changed file seeded on a sandbox that was destroyed
  and is not in a verified `salvage_export` with the same sha256 whose stored
  bytes still hash to it (with `--storage s3`: read from the bucket; and every
  file of every verified export must be in the bucket with its hash).
- left running: a sandbox still `started` at the end that the rules say must
  stop (a correction's, or one that had to be retired).
- orphan: a sandbox alive at the provider that nothing will retire: no lease
  names it, its newest lease says `expired`, its record says `retired`, or it
  had to be retired and its record was closed without retiring it.
- left started by an inspection: a sandbox still `started` at the end that the
  console started (a 2xx start in the call log: it starts a sandbox only to
  compare or export it), or a record still flagged `started_for_salvage`
  (DOMAIN §2.3: inspection never leaves a sandbox running).
- repeated compare: a claim (one worker's turn on one record) that ran more
  than one compare step: a pass compares a record at most once, so a toolbox
  that contradicts itself cannot loop inside a pass.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from devtools.chaos.fleet import KEPT, RETIRED, STOPPED, Case, Fleet
from sandboxes.models import EnvironmentLease, Receipt, Retirement
from sandboxes.proof import replaced_workspace
from sandboxes.rules.proof import proof_from_receipts

MUTATING = ("start", "stop", "archive", "destroy")


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def ok(status) -> bool:
    return isinstance(status, int) and 200 <= status < 300


def deletes(calls: list[dict]) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for c in calls:
        if c["operation"] == "destroy" and c["method"] == "DELETE" and ok(c["status"]):
            out[c["sandbox_id"]].append(c)
    return out


def unsafe_destroys(fleet: Fleet, calls: list[dict]) -> list[dict]:
    cases = fleet.by_sandbox()
    found = []
    receipts_by_sandbox = defaultdict(list)
    for r in Receipt.objects.filter(provider_lease_id__in=list(cases)).select_related(None):
        receipts_by_sandbox[r.provider_lease_id].append(r)
    records = defaultdict(list)
    for r in Retirement.objects.filter(provider_lease_id__in=list(cases)).select_related(
        "environment"
    ):
        records[r.provider_lease_id].append(r)
    for sandbox_id, calls_ in deletes(calls).items():
        case = cases.get(sandbox_id)
        for call in calls_:
            at = _at(call["at"])
            why = None
            if case is None or case.expect != RETIRED:
                why = f"{case.name if case else 'unknown sandbox'} had to be kept"
            else:
                before = [x for x in receipts_by_sandbox[sandbox_id] if x.created_at < at]
                proven = [
                    r
                    for r in records[sandbox_id]
                    if proof_from_receipts(r, before, workspace=replaced_workspace(r))
                ]
                if not proven:
                    why = "no proof receipt before the DELETE"
                elif case.env == "manual" and not any(
                    x.kind == "approval" and x.retirement_id in {r.pk for r in proven}
                    for x in before
                ):
                    why = "manual environment: no approval before the DELETE"
            if why:
                found.append({"sandbox": sandbox_id, "at": call["at"], "why": why})
    return found


def duplicate_destroys(fleet: Fleet, calls: list[dict]) -> list[dict]:
    found = []
    counts = defaultdict(int)
    for sid in Receipt.objects.filter(kind="retirement").values_list(
        "provider_lease_id", flat=True
    ):
        counts[sid] += 1
    for sid, n in counts.items():
        if n > 1:
            found.append({"sandbox": sid, "why": f"{n} retirement receipts"})
    for sid, calls_ in deletes(calls).items():
        operations = sorted({c["request_id"] for c in calls_})
        if len(operations) > 1:
            found.append(
                {
                    "sandbox": sid,
                    "why": f"{len(operations)} destroy operations answered 2xx: "
                    + ", ".join(op[:8] for op in operations),
                }
            )
    return found


def _stored_sha(media_root: Path, name: str) -> str | None:
    path = media_root / name
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lost_files(
    fleet: Fleet,
    gone: set[str],
    media_root: Path,
    stored_sha: Callable[[str], str | None] | None = None,
) -> tuple[list[dict], list[dict]]:
    """(lost files, deleted paths the export did not record) of destroyed sandboxes.
    `stored_sha` reads a stored name's sha256 (a bucket's); the default reads media_root."""
    read = stored_sha or (lambda name: _stored_sha(media_root, name))
    lost, unrecorded = [], []
    for case in fleet.cases:
        if case.sandbox_id not in gone:
            continue
        exports = Receipt.objects.filter(provider_lease_id=case.sandbox_id, kind="salvage_export")
        verified = [x.payload for x in exports if x.payload.get("verified") is True]
        saved = {
            (f.get("path"), f.get("sha256")): f.get("storage") for p in verified for f in p["files"]
        }
        for path, digest in sorted(case.unsaved.items()):
            storage = saved.get((path, digest))
            if storage is None:
                lost.append({"sandbox": case.sandbox_id, "case": case.name, "path": path})
            elif read(storage) != digest:
                lost.append(
                    {
                        "sandbox": case.sandbox_id,
                        "case": case.name,
                        "path": path,
                        "why": "stored bytes do not verify",
                    }
                )
        recorded = {p for x in verified for p in x.get("deleted", [])}
        for path in case.deleted:
            if path not in recorded:
                unrecorded.append({"sandbox": case.sandbox_id, "case": case.name, "path": path})
    return lost, unrecorded


def orphans(fleet: Fleet, alive: dict[str, str]) -> list[dict]:
    cases = fleet.by_sandbox()
    found = []
    for sid in sorted(alive):
        case = cases.get(sid)
        leases = list(
            EnvironmentLease.objects.filter(provider_lease_id=sid).order_by("acquired_at", "id")
        )
        records = list(Retirement.objects.filter(provider_lease_id=sid).order_by("listed_at"))
        why = None
        if not leases:
            why = "no lease names it"
        elif leases[-1].status == "expired":
            why = "its newest lease says expired"
        elif any(r.stage == "retired" for r in records):
            why = "its record says retired"
        elif case is not None and case.expect == RETIRED:
            why = f"had to be retired; record is {records[-1].stage if records else 'missing'}"
        if why:
            found.append({"sandbox": sid, "case": case.name if case else "", "why": why})
    return found


def kept_violations(fleet: Fleet, calls: list[dict], alive: dict[str, str]) -> list[dict]:
    """Cases that had to be kept (or only stopped) and were not, or were touched."""
    by_sandbox = defaultdict(list)
    for c in calls:
        if c["operation"] in MUTATING and ok(c["status"]):
            by_sandbox[c["sandbox_id"]].append(c["operation"])
    out = []
    for case in fleet.cases:
        if case.expect == RETIRED:
            continue
        ops = by_sandbox.get(case.sandbox_id, [])
        record = (
            Retirement.objects.filter(provider_lease_id=case.sandbox_id)
            .order_by("listed_at")
            .last()
        )
        problems = []
        if case.sandbox_id not in alive:
            problems.append("the sandbox is gone")
        if "destroy" in ops:
            problems.append("it was DELETEd")
        if case.expect == KEPT and set(ops) - set(case.allowed_ops):
            problems.append(f"provider calls {sorted(set(ops))}")
        if case.expect == STOPPED:
            if set(ops) - {"stop"}:
                problems.append(f"calls beyond a stop: {sorted(set(ops))}")
            if alive.get(case.sandbox_id) != "stopped":
                problems.append(f"state {alive.get(case.sandbox_id)}, not stopped")
            if not Receipt.objects.filter(
                provider_lease_id=case.sandbox_id, kind="stop_and_retain"
            ).exists():
                problems.append("no stop_and_retain receipt")
        if record is None:
            if case.final_stage is not None:
                problems.append("never listed")
        elif case.final_stage is None:
            problems.append(f"listed ({record.kind}, {record.stage}) although no candidate")
        else:
            if case.final_stage and record.stage != case.final_stage:
                problems.append(f"stage {record.stage}, expected {case.final_stage}")
            if case.hold and case.final_stage == "held" and case.hold not in (record.holds or []):
                problems.append(f"hold {case.hold} not shown (holds {record.holds})")
        if problems:
            out.append({"case": case.name, "sandbox": case.sandbox_id, "problems": problems})
    return out


def retired_ok(case: Case, alive: dict[str, str]) -> list[str]:
    """Why a RETIRED case is not properly retired (empty when it is)."""
    problems = []
    record = Retirement.objects.filter(provider_lease_id=case.sandbox_id, stage="retired").first()
    if record is None:
        last = Retirement.objects.filter(provider_lease_id=case.sandbox_id).order_by("listed_at")
        stage = last.last().stage if last.exists() else "unlisted"
        problems.append(f"not retired (stage {stage})")
    if case.sandbox_id in alive:
        problems.append(f"still alive ({alive[case.sandbox_id]})")
    n = Receipt.objects.filter(provider_lease_id=case.sandbox_id, kind="retirement").count()
    if n != 1:
        problems.append(f"{n} retirement receipts")
    lease = EnvironmentLease.objects.filter(pk=case.ids.get("lease")).first()
    if lease is not None and (lease.status, lease.cleanup_status) != ("expired", "success"):
        problems.append(f"lease {lease.status}/{lease.cleanup_status}")
    return problems


def left_running(fleet: Fleet, alive: dict[str, str]) -> list[dict]:
    """Sandboxes still running at the end that the rules say must stop: a
    correction (an unsuccessful run kept running, seed 002) or a sandbox that
    had to be retired (a superseded warm one is stopped first, seed 001)."""
    return [
        {"sandbox": c.sandbox_id, "case": c.name, "state": alive[c.sandbox_id]}
        for c in fleet.cases
        if c.expect in (STOPPED, RETIRED) and alive.get(c.sandbox_id) == "started"
    ]


def left_started_by_inspection(calls: list[dict], alive: dict[str, str]) -> list[dict]:
    """Sandboxes the console started and left running, and records that still say so."""
    started = {c["sandbox_id"] for c in calls if c["operation"] == "start" and ok(c["status"])}
    found = [
        {"sandbox": sid, "why": "the console started it and it is still started"}
        for sid in sorted(started)
        if alive.get(sid) == "started"
    ]
    for sid, stage in Retirement.objects.filter(started_for_salvage=True).values_list(
        "provider_lease_id", "stage"
    ):
        found.append({"sandbox": sid, "why": f"its record ({stage}) still says it started it"})
    return found


def repeated_compares(compares: dict) -> list[dict]:
    """Claims that ran more than one compare step (from the workers' trace)."""
    return [
        {"retirement": rid, "attempt": attempt, "compares": n}
        for (rid, attempt), n in sorted(compares.items())
        if n > 1
    ]
