"""K7: a toolbox that lies (docs/rules.md, claims and failures: a download that
does not match the compare's listing).

Two cases of the fleet meet a toolbox that contradicts itself:

- `lies`: every download serves other bytes than the hash listing names. Each
  attempt must fail in words, stop the sandbox and back off; the lie lasts
  until the record needs attention (five failed attempts), or a deadline, and
  then the sandbox converges: exported as it is, retired.
- `flaps`: a file changes on every start (a log a boot script appends to),
  and the toolbox refuses its first bulk download (403), so the export after
  the failed attempt runs on a restarted sandbox whose file changed since the
  compare. Whatever the start count, what is exported must be what the
  sandbox held when it was destroyed (the simulator describes a destroyed
  sandbox).

The wave judges both with the general invariants (no sandbox left started by
an inspection, at most one compare a claim, no lost file judged by what the
sandbox held at the end) and with `problems` here.
"""

from __future__ import annotations

import contextlib
import time

import httpx

from devtools.chaos.fleet import Case, Fleet, workspace_root
from devtools.simulator import HOME

SHAPES = ("lies", "flaps")
CHANGED = "the files changed while they were read"
NEEDS_ATTENTION_AFTER = 5


def flap_path(fleet: Fleet, case: Case) -> str:
    return f"{workspace_root(fleet, case)}/logs/boot.log"


class Liars:
    """Arms the lies, ends each once its record needs attention, judges them."""

    def __init__(self, fleet: Fleet, control, *, on: bool, deadline: float, say=print):
        self.fleet = fleet
        self.control = control
        self.say = say
        self.deadline = deadline
        self.cases = [c for c in fleet.cases if c.shape in SHAPES] if on else []
        self.lying: set[str] = set()
        self.ended: dict[str, str] = {}  # sandbox id -> why the lie ended

    def arm(self) -> None:
        refusals = []
        for case in self.cases:
            if case.shape == "lies":
                self.control.sandbox(case.sandbox_id, lie_downloads=True)
                self.lying.add(case.sandbox_id)
            else:
                self.control.sandbox(case.sandbox_id, flap=flap_path(self.fleet, case))
                refusals.append(
                    {"operation": "bulk_download", "sandbox_id": case.sandbox_id, "k7": "flap"}
                    | {"status": 403, "times": 1}
                )
        if refusals:
            self.control.faults(script=self.control.faults()["script"] + refusals)
        if self.cases:
            self.say(
                f"K7: {len(self.lying)} toolbox(es) lie on every download, "
                f"{len(self.cases) - len(self.lying)} sandbox(es) change a file on every start"
            )

    def live_rules(self) -> list[dict]:
        """K7's scripted refusals not used yet (the calm keeps them)."""
        script = self.control.faults()["script"]
        return [r for r in script if r.get("k7") and r.get("times", 1) > 0]

    def release(self) -> None:
        """A lie ends once its record needs attention (or at the deadline)."""
        if not self.lying:
            return
        from sandboxes.models import Retirement

        attention = set(
            Retirement.objects.filter(
                provider_lease_id__in=list(self.lying), needs_attention=True
            ).values_list("provider_lease_id", flat=True)
        )
        late = time.monotonic() >= self.deadline
        for sid in sorted(self.lying):
            if sid in attention or late:
                with contextlib.suppress(httpx.HTTPStatusError):
                    self.control.sandbox(sid, lie_downloads=False)
                self.lying.discard(sid)
                self.ended[sid] = "needs attention" if sid in attention else "late"
                self.say(f"K7: {sid}'s toolbox tells the truth again ({self.ended[sid]})")

    def problems(self, interruptions: int = 0) -> tuple[list[str], list[dict]]:
        """(problems, per-case facts for the report). `interruptions`: kills and
        database drops, each of which may land between a stale receipt and the
        failure it is followed by."""
        from sandboxes.models import AuditEvent, Receipt

        problems, facts = [], []
        for case in self.cases:
            sid = case.sandbox_id
            held = self.control.describe(sid)
            failures = list(
                AuditEvent.objects.filter(
                    sandbox_id=sid,
                    action__in=["retirement.failed", "retirement.needs_attention"],
                ).order_by("at")
            )
            stale = Receipt.objects.filter(
                provider_lease_id=sid, kind="salvage_export", payload__stale=True
            ).count()
            worded = [f for f in failures if CHANGED in (f.reason or "")]
            fact = {
                "case": case.name,
                "starts": held["starts"],
                "lies": held["lies"],
                "failures": len(failures),
                "stale_exports": stale,
                "lie_ended": self.ended.get(sid, ""),
            }
            facts.append(fact)
            if case.shape == "lies":
                problems += [f"{case.name}: {p}" for p in _liar_problems(held, failures, worded)]
                if stale > len(failures) + interruptions:
                    problems.append(
                        f"{case.name}: {stale} stale exports, {len(failures)} failed attempts"
                    )
            else:
                if held["starts"] < 1:
                    problems.append(f"{case.name}: never started, the flap was not exercised")
                if not failures:
                    problems.append(f"{case.name}: no failed attempt (the 403 never came)")
        return problems, facts


def _liar_problems(held: dict, failures: list, worded: list) -> list[str]:
    out = []
    if held["lies"] < 1:
        out.append("the toolbox never lied (no download while it was armed)")
    if not worded:
        out.append(f"no failed attempt says {CHANGED!r}")
    fifth = [f for f in failures if (f.after or {}).get("attempts") == NEEDS_ATTENTION_AFTER]
    if fifth and fifth[0].action != "retirement.needs_attention":
        out.append("the 5th failed attempt did not turn the record to needs attention")
    early = [
        f
        for f in failures
        if f.action == "retirement.needs_attention"
        and (f.after or {}).get("attempts", 0) < NEEDS_ATTENTION_AFTER
    ]
    if early:
        out.append("needs attention before 5 failed attempts")
    return out


def held_files(control, fleet: Fleet, case: Case) -> dict[str, str]:
    """path (under the workspace root) -> sha256 of what the sandbox holds now, or
    held when it was destroyed: the simulator's word, not the fleet's plan."""
    prefix = f"{HOME}/{workspace_root(fleet, case)}/"
    files = control.describe(case.sandbox_id)["files"]
    return {p[len(prefix) :]: f["sha256"] for p, f in files.items() if p.startswith(prefix)}
