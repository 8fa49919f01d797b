"""The wave's fleet: one case per kept sandbox, built from a seed.

Every candidate kind and every hold code gets at least one case, and some
cases hold unsaved files (added, changed and deleted against the workspace's
saved manifest). A case knows what must become of it (`expect`), so the
invariant checker can tell a correct outcome from a lucky one. Events come
from the one builder of ingest events (devtools/events.py); the sandboxes
are seeded in the simulator the way one seeds Daytona.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from devtools.events import Events, manifest, rfc3339

# What must become of a case once the fleet converges.
RETIRED = "retired"  # destroyed with proof, record `retired`
STOPPED = "stopped"  # a correction: stopped and retained, never destroyed
KEPT = "kept"  # held (or observed, or dismissed): never started, stopped or destroyed

HOLD_CODES = (
    "run_active",
    "issue_run_active",
    "recovery_open",
    "export_pending",
    "intent_pending",
    "sandbox_shared",
    "newer_lease",
    "no_stop_receipt",
    "task_can_resume",
    "writer_active",
    "retention",
    "unknown_age",
    "operator_hold",
    "provider_unsupported",
)
RETIRE_KINDS = (
    "abandoned_warm",
    "superseded_running_warm",
    "closed_restore_source",
    "done_task_warm",
    "resume_failed",
)


# One condition of Paperclip's hasRemoteTerminationReceipt broken per case
# (remote-execution-termination.ts @ 555fcfc, lines 24-35).
PROOF_BREAKS = (
    "cleanup_pending",  # line 29: cleanupStatus is not success
    "no_released_at",  # line 29: no releasedAt
    "other_run",  # line 32: the receipt names an earlier run
    "other_company",  # line 32: the receipt names another company
    "destroyed_state",  # a termination that says destroyed confirms no stop
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Case:
    name: str
    kind: str  # the candidate kind it should be listed as
    expect: str  # RETIRED | STOPPED | KEPT
    env: str  # environment key: auto | auto2 | manual | observe
    hold: str = ""  # the hold code this case exists to show
    # For KEPT/STOPPED: the record's stage at the end; None: never listed at all.
    final_stage: str | None = ""
    shape: str = ""  # a special shape of docs/rules.md's rules (see case_events)
    started: bool = False  # the sandbox is running at the start
    saved: dict[str, bytes] = field(default_factory=dict)  # the durable save
    files: dict[str, bytes] = field(default_factory=dict)  # what the sandbox holds
    ids: dict[str, str] = field(default_factory=dict)
    sandbox_id: str = ""
    late_events: list = field(default_factory=list)  # ingested mid-wave
    # Ingested in the same transaction as this case's approval (K6: the lease is
    # re-pointed to another sandbox between the approval and the destroy).
    on_approval_events: list = field(default_factory=list)
    # Provider calls a KEPT case may see (an inspection starts and stops it).
    allowed_ops: tuple = ()
    post_listing_events: list = field(default_factory=list)  # after the first listing
    # path → sha256 of what the sandbox held at the end (the simulator's word,
    # read by the verdict): a file that changed during the wave is judged by it.
    held: dict[str, str] | None = None

    @property
    def manifest(self) -> dict:
        return manifest(self.saved)

    def _holds(self) -> dict[str, str]:
        if self.held is not None:
            return self.held
        return {p: sha(b) for p, b in self.files.items()}

    @property
    def unsaved(self) -> dict[str, str]:
        """path → sha256 of every added or changed file (what a destroy could lose)."""
        saved = self.manifest
        return {p: d for p, d in self._holds().items() if saved.get(p, {}).get("sha256") != d}

    @property
    def deleted(self) -> list[str]:
        holds = self._holds()
        return sorted(p for p in self.saved if p not in holds)


@dataclass
class Fleet:
    seed: int
    cases: list[Case]
    environments: dict[str, dict]
    events: list[dict] = field(default_factory=list)

    def by_sandbox(self) -> dict[str, Case]:
        return {c.sandbox_id: c for c in self.cases}

    def named(self, name: str) -> Case:
        return next(c for c in self.cases if c.name == name)


class _Events(Events):
    """Events with ids unique per wave (`chaos-<seed>-<n>`), stamped when built,
    and uuids drawn from the fleet's seeded random source."""

    def __init__(self, seed: int, rng: random.Random):
        super().__init__(ids=lambda n, _type: f"chaos-{seed}-{n + 1}", at=lambda: datetime.now(UTC))
        self.rng = rng

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _files(rng: random.Random, case_name: str, dirty: str) -> tuple[dict, dict]:
    """(saved, on_sandbox). `dirty` is a subset of "acd": added, changed, deleted."""
    n = rng.randint(2, 4)
    saved = {
        f"src/mod_{i}.py": f"# {case_name} {i}\n".encode() + rng.randbytes(rng.randint(16, 400))
        for i in range(n)
    }
    saved["README.md"] = f"# {case_name}\n".encode()
    files = dict(saved)
    if "a" in dirty:
        for i in range(rng.randint(1, 3)):
            files[f"notes/new file {i}.txt"] = rng.randbytes(rng.randint(1, 2000))
        files["out/empty.log"] = b""
    if "c" in dirty:
        files["src/mod_0.py"] = saved["src/mod_0.py"] + b"\n# unsaved edit\n"
    if "d" in dirty:
        files.pop("src/mod_1.py")
    return saved, files


def build_fleet(seed: int, *, scale: int = 1) -> Fleet:
    """The cases for one wave. `scale` multiplies the retire cases (more races)."""
    rng = random.Random(seed)
    ev = _Events(seed, rng)
    now = datetime.now(UTC)
    envs = {
        key: {
            "environment_id": ev.uid(),
            "name": f"chaos-{seed}-{key}",
            "provider": "daytona",
            "driver": "sandbox",
            "retirement_mode": mode,
            "warm_retention_hours": 24,
            "max_retirements_per_pass": 50,
        }
        for key, mode in (
            ("auto", "auto"),
            ("auto2", "auto"),
            ("manual", "manual"),
            ("observe", "observe"),
            ("e2b", "auto"),
        )
    }
    # A provider the console has no client for: listed and held, never touched.
    envs["e2b"]["provider"] = "e2b"
    envs["auto2"]["workspace_root"] = "work"

    cases: list[Case] = []

    def add(
        name,
        kind,
        expect,
        *,
        env="auto",
        hold="",
        final_stage="",
        dirty="",
        started=False,
        shape="",
    ):
        saved, files = _files(rng, name, dirty)
        case = Case(
            name=name,
            kind=kind,
            expect=expect,
            env=env,
            hold=hold,
            final_stage=final_stage,
            started=started,
            saved=saved,
            files=files,
            shape=shape,
        )
        cases.append(case)
        return case

    dirt = ["", "a", "c", "d", "acd", "ac", "cd"]
    for k in range(scale):
        for kind in RETIRE_KINDS:
            for j in range(2):
                env = "auto2" if (k + j) % 2 else "auto"
                dirty = rng.choice(dirt) if j else rng.choice(["acd", "ac", "a", "cd"])
                if kind == "resume_failed":
                    dirty = ""  # replaced only when nothing lived only on it (seed 004)
                add(
                    f"{kind}-{k}-{j}",
                    kind,
                    RETIRED,
                    env=env,
                    dirty=dirty,
                    started=kind == "superseded_running_warm",
                )
    add("manual-clean", "abandoned_warm", RETIRED, env="manual")
    add("manual-dirty", "abandoned_warm", RETIRED, env="manual", dirty="acd")
    for policy_run in ("failed", "timed_out", "interrupted"):
        add(
            f"unsuccessful-{policy_run}",
            "stop_after_unsuccessful_run",
            STOPPED,
            final_stage="corrected",
            started=True,
            dirty="a",
        )
    for code in HOLD_CODES:
        kind = "abandoned_warm"
        if code in ("retention", "unknown_age"):
            kind = "done_task_warm"
        env = "e2b" if code == "provider_unsupported" else "auto"
        add(
            f"hold-{code}",
            kind,
            KEPT,
            env=env,
            hold=code,
            final_stage="held",
            dirty=rng.choice(dirt),
        )
    add("observe", "abandoned_warm", KEPT, env="observe", final_stage="listed", dirty="ac")
    add("resumed", "abandoned_warm", KEPT, hold="intent_pending", final_stage="dismissed")

    # The rules' special shapes (docs/rules.md), each a case that must be kept or converge.
    corrected = {"final_stage": "corrected", "started": True, "dirty": "a"}
    # A keep_running release recorded as sent, arriving before the run's final
    # status (mid-wave): the correction still fires.
    add(
        "witness-release-first",
        "stop_after_unsuccessful_run",
        STOPPED,
        shape="release_first",
        **corrected,
    )
    # retain_on_failure + cancelled + keep_running: retained, corrected (not lost as expired).
    add(
        "witness-cancelled-restore",
        "stop_after_unsuccessful_run",
        STOPPED,
        shape="cancelled_restore",
        **corrected,
    )
    # A succeeded keep_running release is retained; the task moved: stopped, then retired.
    add(
        "witness-superseded",
        "superseded_running_warm",
        RETIRED,
        started=True,
        dirty="c",
        shape="released_keep",
    )
    # Every hold blocks the stop-only steps too.
    add(
        "stop-held-export",
        "stop_after_unsuccessful_run",
        KEPT,
        hold="export_pending",
        final_stage="held",
        started=True,
    )
    add(
        "stop-held-intent",
        "superseded_running_warm",
        KEPT,
        hold="intent_pending",
        final_stage="held",
        started=True,
    )
    add(
        "stop-held-shared",
        "stop_after_unsuccessful_run",
        KEPT,
        hold="sandbox_shared",
        final_stage="held",
        started=True,
    )
    # A restore source with no recovery action yet: restore recovery owns it.
    add(
        "restore-no-recovery",
        "closed_restore_source",
        KEPT,
        final_stage=None,
        dirty="a",
        shape="no_recovery",
    )
    # Seed 003: a cancelled run's files behind the writer hold; kept while it is
    # on, salvaged once Paperclip clears it.
    add(
        "preserved",
        "abandoned_warm",
        KEPT,
        hold="writer_active",
        final_stage="held",
        dirty="a",
        shape="preserved",
    )
    add("preserved-cleared", "abandoned_warm", RETIRED, dirty="ac", shape="preserved_cleared")
    # Faults that outlast a step's budget: failed -> backoff -> retry -> converge.
    add("outlast-abandoned", "abandoned_warm", RETIRED, dirty="ac", shape="outlast")
    add("outlast-resume-failed", "resume_failed", RETIRED, shape="outlast")
    # Paperclip's own predicates (docs/rules.md, proof): a termination receipt
    # that fails one condition of hasRemoteTerminationReceipt confirms no stop,
    # so the sandbox is held no_stop_receipt and never started or destroyed.
    for condition in PROOF_BREAKS:
        add(
            f"proof-{condition}",
            "abandoned_warm",
            KEPT,
            hold="no_stop_receipt",
            final_stage="held",
            dirty="a",
            shape=f"proof_{condition}",
        )
    # K6: sandbox A is compared and approved; in the approval's transaction its
    # lease is re-sent naming sandbox B and a new active lease with a running run
    # and a writer takes A. A is never destroyed (its record is dismissed: the
    # lease names another sandbox); B is listed on its own and held by the live run.
    repoint = add("repoint-from", "abandoned_warm", KEPT, env="manual", final_stage="dismissed")
    repoint.shape, repoint.allowed_ops = "repoint_from", ("start", "stop")
    add(
        "repoint-to",
        "abandoned_warm",
        KEPT,
        hold="issue_run_active",
        final_stage="held",
        shape="repoint_to",
    )
    # K7 (devtools/chaos/liars.py): a toolbox whose downloads contradict its hash
    # listing, and a file that changes on every start; both converge, retired.
    add("liar-download", "abandoned_warm", RETIRED, dirty="ac", shape="lies")
    add("liar-flap", "abandoned_warm", RETIRED, dirty="a", shape="flaps")

    events = [ev.environment(**e) for e in envs.values()]
    fleet = Fleet(seed=seed, cases=cases, environments=envs, events=events)
    fleet._ev = ev  # events for the sandboxes come once their ids are known
    fleet._now = now
    return fleet


def case_events(fleet: Fleet, case: Case) -> list[dict]:
    """The events that put `case` in the console (its sandbox id must be known)."""
    ev: _Events = fleet._ev
    now: datetime = fleet._now
    env_id = fleet.environments[case.env]["environment_id"]
    ids = case.ids = {k: ev.uid() for k in ("issue", "ws", "other_ws", "run", "lease", "run2")}
    out: list[dict] = []
    if case.shape == "repoint_to":
        return out  # named only by repoint-from's re-pointed lease
    kind, hold = case.kind, case.hold
    issue_status = "done" if kind == "done_task_warm" else "in_progress"
    shape = case.shape
    bound = ids["ws"]
    if kind in ("abandoned_warm", "superseded_running_warm", "closed_restore_source"):
        # A Retry bound the task to a fresh workspace (a restore source's task
        # must have moved on too, docs/rules.md, candidate kinds).
        bound = ids["other_ws"]
    run_status = "failed"
    if kind == "stop_after_unsuccessful_run" and case.name.startswith("unsuccessful-"):
        run_status = case.name.split("-", 1)[1]
    if kind in ("done_task_warm", "superseded_running_warm", "closed_restore_source"):
        run_status = "succeeded"
    if hold == "run_active":
        run_status = "running"
    if shape in ("cancelled_restore", "preserved", "preserved_cleared"):
        run_status = "cancelled"
    if shape == "release_first":
        run_status = "running"  # its final status arrives after the release
    lease = {
        "lease_id": ids["lease"],
        "environment_id": env_id,
        "provider": fleet.environments[case.env]["provider"],
        "provider_lease_id": case.sandbox_id,
        "acquired_at": rfc3339(now - timedelta(days=3)),
        "issue_id": ids["issue"],
        "workspace_id": ids["ws"],
        "run_id": ids["run"],
        "metadata": {},
    }
    status, policy, receipt = "released", "reuse_by_environment", True
    if kind == "abandoned_warm":
        status = "released" if hold in ("run_active", "resumed", "intent_pending") else "failed"
        if case.name == "resumed":
            status = "released"
    elif kind == "superseded_running_warm":
        status, receipt = "retained", False
        lease["disposition"] = "keep_running"
    elif kind == "closed_restore_source":
        policy = "retain_on_failure"
        status = "released" if hold == "task_can_resume" else "failed"
    elif kind == "done_task_warm":
        lease["released_at"] = rfc3339(
            now - (timedelta(hours=1) if hold == "retention" else timedelta(days=2))
        )
        if hold == "unknown_age":
            del lease["released_at"]
    elif kind == "resume_failed":
        status, receipt = "pending_cleanup", False
        lease["failure_reason"] = "resume_failed"
        lease["cleanup_status"] = "pending"
    elif kind == "stop_after_unsuccessful_run":
        status, policy, receipt = "retained", "reuse_by_execution_workspace", False
        lease["disposition"] = "keep_running"
    released = None  # a lease.released event, recorded as sent (docs/rules.md, candidate kinds)
    if shape in ("release_first", "cancelled_restore", "released_keep"):
        status, released = "active", {"lease_id": ids["lease"], "disposition": "keep_running"}
        lease.pop("disposition", None)
        if shape == "cancelled_restore":
            policy = "retain_on_failure"
    if shape in ("preserved", "preserved_cleared"):
        status = "released"
    if hold == "no_stop_receipt":
        receipt = False
    if case.env == "auto2":
        lease["metadata"] = {"remoteCwd": "work"}
    if shape == "proof_cleanup_pending":
        lease["cleanup_status"] = "pending"
    if shape == "proof_other_company":
        lease["company_id"] = ev.uid()
    if receipt or shape in ("preserved", "preserved_cleared"):
        # Paperclip settles the lease it stopped: cleanup done, released when the
        # stop was confirmed (remote-execution-termination.ts @ 555fcfc lines
        # 29-30; sandbox-stop-and-retain.ts @ c5df623 lines 34-35). A case held
        # unknown_age keeps no released_at: its stop cannot be confirmed either.
        lease.setdefault("cleanup_status", "success")
        if hold != "unknown_age" and shape != "proof_no_released_at":
            lease.setdefault("released_at", rfc3339(now - timedelta(days=2)))
    lease["status"], lease["lease_policy"] = status, policy

    out.append(
        ev.issue(
            ids["issue"],
            issue_status,
            key=f"CHAOS-{case.name}",
            title=case.name,
            bound_workspace_id=bound,
        )
    )
    ws = {
        "saved_at": rfc3339(now - timedelta(days=2)),
        "final_checkpoint_at": rfc3339(now - timedelta(days=2)),
        "saved_manifest": case.manifest,
    }
    if hold == "writer_active" or shape == "preserved_cleared":
        ws["writer_run_id"] = ids["run"]
    out.append(ev.run(ids["run"], ids["issue"], run_status))
    out.append(ev.workspace(ids["ws"], ids["issue"], **ws))
    if bound == ids["other_ws"]:
        out.append(ev.workspace(ids["other_ws"], ids["issue"]))
    if hold == "issue_run_active":
        out.append(ev.run(ids["run2"], ids["issue"], "running"))
    if hold == "sandbox_shared":
        older = dict(lease, lease_id=ev.uid(), status="active", lease_policy="ephemeral")
        older["acquired_at"] = rfc3339(now - timedelta(days=5))
        older.pop("released_at", None)
        out.append(ev.lease(**older))
    out.append(ev.lease(**lease))
    if hold == "task_can_resume":
        # An older row on the same sandbox (its host's clock ran behind) whose
        # task is still bound to its workspace: it protects the sandbox (docs/rules.md, holds).
        older_issue, older_ws = ev.uid(), ev.uid()
        out.append(ev.issue(older_issue, "in_progress"))
        out.append(ev.workspace(older_ws, older_issue))
        out.append(ev.issue(older_issue, "in_progress", bound_workspace_id=older_ws))
        out.append(
            ev.lease(
                **dict(
                    lease,
                    lease_id=ev.uid(),
                    status="released",
                    issue_id=older_issue,
                    workspace_id=older_ws,
                    run_id=None,
                    acquired_at=rfc3339(now - timedelta(days=3, minutes=1)),
                )
            )
        )
    if released is not None and shape != "release_first":
        out.append(ev.released(**released))
    stopped = {
        "run_id": ids["run"],
        "provider_lease_id": case.sandbox_id,
        "confirmed_at": now - timedelta(days=2),
    }
    if shape in ("preserved", "preserved_cleared"):
        out.append(
            ev.receipt(
                ids["lease"],
                kind="stop_and_retain",
                request_id=f"paperclip-sar-{ids['lease']}",
                **stopped,
            )
        )
    if shape == "release_first":
        # Mid-wave: the release, then the run's final status.
        case.late_events = [
            ev.released(**released),
            ev.run(ids["run"], ids["issue"], "failed"),
        ]
    if shape == "preserved_cleared":
        # Mid-wave: Paperclip's recovery saved the files and cleared the writer hold.
        case.late_events = [ev.workspace(ids["ws"], ids["issue"], writer_run_id=None)]
    if receipt:
        out.extend(_stop_receipt(ev, case, ids, stopped))
    if kind == "closed_restore_source" and shape != "no_recovery":
        out.append(ev.recovery_action(ev.uid(), ids["issue"], "resolved", lease_id=ids["lease"]))
    if hold == "recovery_open":
        out.append(ev.recovery_action(ev.uid(), ids["issue"], "active"))
    if hold == "export_pending":
        out.append(ev.export(ev.uid(), ids["lease"], "pending"))
    if hold in ("intent_pending", "newer_lease"):
        ids["intent"] = ev.uid()
        out.append(ev.intent(ids["intent"], ids["lease"], "export_resume", "pending"))
    if hold == "newer_lease":
        # After the first listing: a newer, non-candidate row names the sandbox.
        newer = dict(lease, lease_id=ev.uid(), status="active", lease_policy="ephemeral")
        newer["acquired_at"] = rfc3339(now - timedelta(hours=1))
        newer["run_id"] = ids["run2"]
        case.post_listing_events = [
            ev.run(ids["run2"], ids["issue"], "succeeded"),
            ev.lease(**newer),
        ]
    if shape == "repoint_from":
        case.on_approval_events = _repointed(ev, now, case, lease, fleet.named("repoint-to"))
    if case.name == "resumed":
        # Mid-wave the task picks the workspace up again: the record is dismissed.
        case.late_events = [
            ev.issue(ids["issue"], "in_progress", bound_workspace_id=ids["ws"]),
            ev.intent(ids["intent"], ids["lease"], "export_resume", "confirmed"),
        ]
    return out


def _stop_receipt(ev: _Events, case: Case, ids: dict, stopped: dict) -> list[dict]:
    """The case's termination receipt, with the condition its shape breaks."""
    shape, out = case.shape, []
    stopped = dict(stopped)
    extra: dict = {}
    if shape == "proof_other_run":
        out.append(ev.run(ids["run2"], ids["issue"], "failed"))
        stopped["run_id"] = ids["run2"]
    if shape == "proof_other_company":
        extra["company_id"] = ev.uid()
    if shape == "proof_destroyed_state":
        extra["state"] = "destroyed"
    out.append(
        ev.receipt(ids["lease"], request_id=f"paperclip-stop-{ids['lease']}", **stopped, **extra)
    )
    return out


def _repointed(ev: _Events, now: datetime, case: Case, lease: dict, to: Case) -> list[dict]:
    """K6's events: the lease re-sent naming `to`'s sandbox (a newer report, with a
    stop receipt there), and a new active lease whose running run writes in a
    workspace of the same task taking this case's sandbox."""
    ids = case.ids
    run3, ws3 = ev.uid(), ev.uid()
    # A report newer than the lease row the console holds: only that may move it.
    later = datetime.now(UTC) + timedelta(seconds=1)
    return [
        ev.lease(**dict(lease, provider_lease_id=to.sandbox_id), at=later),
        ev.receipt(
            ids["lease"],
            run_id=ids["run"],
            provider_lease_id=to.sandbox_id,
            confirmed_at=now - timedelta(days=2),
            request_id=f"paperclip-stop-{ids['lease']}-moved",
        ),
        ev.run(run3, ids["issue"], "running"),
        ev.workspace(ws3, ids["issue"], "saving", writer_run_id=run3),
        ev.lease(
            **dict(
                lease,
                lease_id=ev.uid(),
                status="active",
                run_id=run3,
                workspace_id=ws3,
                acquired_at=rfc3339(now - timedelta(hours=1)),
            )
        ),
    ]


def workspace_root(fleet: Fleet, case: Case) -> str:
    return "work" if case.env == "auto2" else "workspace"
