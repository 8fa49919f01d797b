"""One chaos wave: fleet → workers under faults (K1–K7) → calm → converge → verdict.

Runs against a scratch PostgreSQL database created beside the one DATABASE_URL
names (dropped afterwards unless kept), the simulator in a child process, and
the real ingest API served on loopback from this process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devtools.chaos import invariants as inv
from devtools.chaos import liars
from devtools.chaos.fleet import KEPT, RETIRE_KINDS, RETIRED, STOPPED, Fleet, build_fleet
from devtools.chaos.fleet import case_events as fleet_case_events
from devtools.chaos.fleet import workspace_root as fleet_root
from devtools.chaos.supervisor import Supervisor
from devtools.simulator import FaultConfig

SCENARIOS = (
    "abandoned_warm",
    "superseded_running_warm",
    "closed_restore_source",
    "done_task_warm",
    "resume_failed",
    "unsuccessful_run_stopped",
    "kept_until_allowed",
    "unsaved_files_exported",
    "k1_worker_killed",
    "k2_provider_faults",
    "k3_db_dropped",
    "k4_workers_race",
    "k5_budget_outlasted",
    "k6_lease_repointed",
    "k7_toolbox_lies",
    "rule_shapes",
)
KILL_POINTS = ("compare", "export", "retire")
_STAGE_OF = {"compare": "comparing", "export": "exporting", "retire": "retiring"}
# K1 needs each kill point to last long enough to land in: the first provider
# call of that kind (hash files, bulk download, DELETE) answers 503 a couple of
# times, so the client's jittered backoff (0.5 s doubling) keeps the worker
# inside that step for ~1–2 s. Re-armed until a kill has landed in each step.
K1_SLOW_RULES = {
    "compare": {"operation": "execute", "status": 503, "times": 2, "k1": "compare"},
    "export": {"operation": "bulk_download", "status": 503, "times": 2, "k1": "export"},
    "retire": {"operation": "destroy", "status": 503, "times": 2, "k1": "retire"},
}


@dataclass
class WaveOptions:
    seed: int = 1
    scenarios: tuple[str, ...] = SCENARIOS
    workers: int = 2
    kill_points: tuple[str, ...] = KILL_POINTS
    converge_timeout: float = 150.0
    fault_seconds: float = 12.0
    scale: int = 1
    report: str = ""
    keep_db: bool = False
    step_budget: int = 20
    # "s3": salvaged files in a bucket on moto's server, shut mid-wave (K8).
    storage: str = "filesystem"


@dataclass
class WaveResult:
    report: dict
    ok: bool


@dataclass
class _State:
    faults: dict = field(default_factory=dict)
    k1: list = field(default_factory=list)
    k3: list = field(default_factory=list)
    racers: int = 0
    k5: list = field(default_factory=list)
    clock_skips: int = 0
    approvals: int = 0
    k6: list = field(default_factory=list)  # re-pointed leases: {case, record}
    phases: dict = field(default_factory=dict)


class Wave:
    def __init__(self, options: WaveOptions, say=print):
        self.o = options
        self.say = say
        self.rng = random.Random(options.seed * 7919 + 17)
        self.state = _State()
        self.t0 = time.monotonic()
        self.bucket = None
        self._k8_checked = 0.0

    def log(self, message: str) -> None:
        self.say(f"[{time.monotonic() - self.t0:6.1f}s] {message}")

    # --- scratch database ------------------------------------------------------

    def _scratch_db(self) -> str:
        import psycopg
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        db = settings.DATABASES["default"]
        if "postgresql" not in db["ENGINE"]:
            raise RuntimeError("a chaos wave needs PostgreSQL (set DATABASE_URL)")
        self.base_db = dict(db)
        name = f"{db['NAME']}_chaos_{os.getpid()}"[:63]
        self.db_name = name
        auth = db.get("USER") or ""
        if db.get("PASSWORD"):
            auth += f":{db['PASSWORD']}"
        host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
        self.server_url = f"postgres://{auth + '@' if auth else ''}{host}"
        with psycopg.connect(f"{self.server_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        connections.close_all()
        db["NAME"] = name
        connections["default"].settings_dict["NAME"] = name
        call_command("migrate", verbosity=0)
        return f"{self.server_url}/{name}"

    def _drop_db(self) -> None:
        import psycopg
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{self.server_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    # --- ingest over HTTP --------------------------------------------------------

    def _serve_ingest(self) -> str:
        from django.conf import settings
        from django.core.handlers.wsgi import WSGIHandler
        from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args):
                pass

        if "127.0.0.1" not in settings.ALLOWED_HOSTS and "*" not in settings.ALLOWED_HOSTS:
            settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]
        self.httpd = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=True)
        self.httpd.set_app(WSGIHandler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def ingest(self, events: list[dict]) -> None:
        for start in range(0, len(events), 500):
            batch = events[start : start + 500]
            response = httpx.post(
                f"{self.ingest_url}/api/v1/events",
                json={"events": batch},
                headers={
                    "Authorization": f"Bearer {self.ingest_token}",
                    "X-Forwarded-Proto": "https",
                },
                timeout=60,
            )
            if response.status_code != 200:
                raise RuntimeError(f"ingest answered {response.status_code}: {response.text[:500]}")

    # --- the run -------------------------------------------------------------------

    def run(self) -> WaveResult:
        from devtools.simulator import SimulatorProcess

        self.workdir = Path(tempfile.mkdtemp(prefix=f"chaos-wave-{self.o.seed}-"))
        self.media = self.workdir / "media"
        self.log(f"wave seed={self.o.seed} workers={self.o.workers} dir={self.workdir}")
        db_url = self._scratch_db()
        self.log(f"scratch database {self.db_name} migrated")
        sup = None
        try:
            if self.o.storage == "s3":
                from devtools.chaos.bucket import Bucket

                self.bucket = Bucket().start()
                self.log(f"salvaged files in an S3 bucket at {self.bucket.door.url}")
            with SimulatorProcess(seed=self.o.seed) as sim:
                self.sim = sim
                self.ingest_url = self._serve_ingest()
                fleet = self._build(sim.url)
                env = {
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": "paperclip_console.settings",
                    "DATABASE_URL": db_url,
                    "SECRET_KEY": "chaos-wave-not-a-secret",
                    "DEBUG": "0",
                    "ALLOWED_HOSTS": "127.0.0.1,localhost",
                    "MEDIA_ROOT": str(self.media),
                    "CONSOLE_VAR_DIR": str(self.workdir / "var"),
                    "DAYTONA_API_URL": sim.url,
                    "DAYTONA_API_KEY": "chaos",
                    "PROVIDER_STEP_BUDGET_SECONDS": str(self.o.step_budget),
                    "LOG_LEVEL": "ERROR",
                    "CONN_MAX_AGE": "0",
                    **(self.bucket.env() if self.bucket else {}),
                }
                sup = Supervisor(env, say=self.log)
                self.sup = sup
                self._faults(fleet, sup)
                converged_in = self._calm(fleet, sup)
                sup.stop_all()
                stable = self._final_pass(fleet, sup)
                report = self._verdict(fleet, sup, converged_in, stable)
        finally:
            if sup is not None:
                sup.stop_all()
            if hasattr(self, "httpd"):
                self.httpd.shutdown()
            if self.bucket is not None:
                self.bucket.stop()
            if not self.o.keep_db:
                self._drop_db()
                shutil.rmtree(self.workdir, ignore_errors=True)
        if self.o.report:
            Path(self.o.report).write_text(json.dumps(report, indent=2, default=str))
        return WaveResult(report=report, ok=report["ok"])

    # --- phase 1: the fleet --------------------------------------------------------

    def _build(self, sim_url: str) -> Fleet:
        from devtools.simulator import SimulatorControl
        from sandboxes import actions
        from sandboxes.models import ApiToken, Retirement
        from sandboxes.providers.daytona import DaytonaProvider
        from sandboxes.reconciler.listing import sync_retirements

        started = time.monotonic()
        fleet = build_fleet(self.o.seed, scale=self.o.scale)
        provider = DaytonaProvider(sim_url, api_key="chaos", poll_interval=0.02, budget_seconds=60)
        control = SimulatorControl(sim_url)
        for case in fleet.cases:
            info = provider.create(
                f"chaos-{self.o.seed}-{case.name}",
                {"chaos": str(self.o.seed), "case": case.name},
                files=case.files,
                root=fleet_root(fleet, case),
            )
            case.sandbox_id = info.id
            if not case.started:
                control.sandbox(info.id, state="stopped")
        provider.close()
        _, self.ingest_token = ApiToken.issue("chaos-wave", "ingest")
        self.operator, _ = ApiToken.issue("chaos-operator", "operator")
        events = list(fleet.events)
        for case in fleet.cases:
            events.extend(fleet_case_events(fleet, case))
        self.ingest(events)
        sync_retirements()
        held = fleet.named("hold-operator_hold")
        record = Retirement.objects.get(provider_lease_id=held.sandbox_id)
        # An operator's hold has an end (at most 90 days): a week, past any wave.
        from datetime import timedelta

        from django.utils import timezone

        until = timezone.now() + timedelta(days=7)
        actions.hold(
            record.pk, actor=self.operator, reason="chaos wave: keep this one", until=until
        )
        self.ingest([e for c in fleet.cases for e in c.post_listing_events])
        n_events = len(events)
        self.state.phases["fleet_seconds"] = round(time.monotonic() - started, 2)
        self.log(
            f"fleet: {len(fleet.cases)} sandboxes seeded, {n_events} events ingested, "
            f"{Retirement.objects.count()} listed"
        )
        self.fleet = fleet
        return fleet

    # --- phase 2: faults -------------------------------------------------------------

    def _on(self, name: str) -> bool:
        return name in self.o.scenarios

    def _k2_settings(self) -> dict:
        rng = self.rng
        return {
            "latency": round(rng.uniform(0.08, 0.15), 3),
            "latency_jitter": round(rng.uniform(0.05, 0.15), 3),
            "error_rate": round(rng.uniform(0.04, 0.08), 3),
            "error_status": rng.choice([500, 502, 503]),
            "rate_limit_rate": round(rng.uniform(0.03, 0.06), 3),
            "retry_after": round(rng.uniform(0.2, 0.6), 2),
            "drop_rate": round(rng.uniform(0.02, 0.04), 3),
            "conflict_rate": round(rng.uniform(0.03, 0.06), 3),
            "conflict_seconds": round(rng.uniform(0.3, 1.0), 2),
            "transition_seconds": round(rng.uniform(0.2, 0.6), 2),
        }

    def _faults(self, fleet: Fleet, sup: Supervisor) -> None:
        from devtools.simulator import SimulatorControl

        control = SimulatorControl(self.sim.url)
        started = time.monotonic()
        if self._on("k2_provider_faults"):
            glob = self._k2_settings()
        else:
            glob = {"latency": 0.12, "transition_seconds": 0.3}  # K1 needs steps that last
        self.state.faults["k2"] = {**glob, "stuck": False}
        control.faults(**glob)
        stuck = False
        self.k1_points = list(self.o.kill_points) if self._on("k1_worker_killed") else []
        self.k2_script: list[dict] = []
        if self._on("k2_provider_faults"):
            # Scripted faults make sure every kind shows up once, whatever the rates draw.
            self.k2_script = [
                {"operation": "start", "status": 409, "times": 2},
                {"operation": "stop", "status": 409, "times": 1},
                {"operation": "get", "drop": True, "times": 2},
                {"operation": "get", "status": 429, "retry_after": 0.3, "times": 2},
                {"operation": "destroy", "drop": True, "times": 2},
                {"operation": "execute", "status": 503, "times": 2},
            ]
            stuck = True
        control.faults(script=self.k2_script + self._k1_rules())
        self._k5_start(fleet, control, started)
        self.k7 = liars.Liars(
            fleet,
            control,
            on=self._on("k7_toolbox_lies"),
            deadline=started + self.o.fault_seconds + self.o.converge_timeout / 2,
            say=self.log,
        )
        self.k7.arm()
        self.k1_armed_at = time.monotonic()
        self.log(f"faults on: {glob}")
        for _ in range(self.o.workers):
            sup.start()
        self.log(f"{self.o.workers} workers started")
        # The fault timeline starts once the workers are up: on a loaded machine
        # a worker's Django start takes many seconds, and K2's windows and K3's
        # drops would otherwise pass while no worker is connected or working.
        ready_by = time.monotonic() + 120
        while time.monotonic() < ready_by and not all(
            any(line.startswith("READY") for line in w.log) for w in sup.live()
        ):
            time.sleep(0.1)
        waited = time.monotonic() - started
        started = time.monotonic()
        self.log(f"workers ready after {waited:.1f}s; fault timeline starts")
        stuck_at, unstuck_at = started + 2.5, started + 6.0
        late_at = started + 3.0
        k3_at = [started + 4.0, started + 8.0] if self._on("k3_db_dropped") else []
        k4_at = started + 2.0 if self._on("k4_workers_race") else None
        points = self.k1_points
        deadline = started + max(self.o.fault_seconds, 5.0)
        last_line = 0.0
        while True:
            now = time.monotonic()
            if stuck is True and now >= stuck_at:
                control.faults(stuck=True)  # every transition started now sticks a while
                stuck = "on"
                self.log("K2: transitional states stick")
            if stuck == "on" and now >= unstuck_at:
                control.faults(stuck=False)
                stuck = False
                self.log("K2: stuck transitions released")
            if late_at and now >= late_at:
                self.ingest([e for c in fleet.cases for e in c.late_events])
                late_at = 0
                self.log("late events ingested (a task resumed its workspace)")
            if k4_at and now >= k4_at:
                for _ in range(2):
                    sup.start(once=True)
                self.state.racers += 2
                k4_at = None
                self.log("K4: two extra `reconcile --once` racers started at once")
            if k3_at and now >= k3_at[0]:
                k3_at.pop(0)
                self._drop_db_connections(sup)
            if points:
                self._try_kill(points, sup)
            self._k8(sup)
            sup.reap(self.o.workers)
            self._k5_release(control)
            self.k7.release()
            self._housekeeping()
            if now - last_line >= 1.0:
                last_line = now
                self.log("faults: " + self._progress())
            if points:
                self._rearm_k1(control)
            # Kill points still pending are watched on through the calm phase.
            if now >= deadline and not k3_at and not stuck and not self._s3_down():
                break
            time.sleep(0.02)
        self.state.phases["fault_seconds"] = round(time.monotonic() - started, 2)

    def _s3_down(self) -> bool:
        return self.bucket is not None and self.bucket.is_down

    def _k8(self, sup: Supervisor) -> None:
        """K8: the S3 endpoint goes down once exports begin (a worker in an export
        step, or a compare that found unsaved files, so its export is next) and
        stays down for most of a fault window: exports in flight and those
        after it fail, and retry once it is back."""
        if self.bucket is None or self.bucket.opened_at is not None:
            return
        from sandboxes.models import Receipt

        now = time.monotonic()
        exporting = any(w.step and w.step[1] == "export" for w in sup.live())
        if not exporting and self.bucket.closed_at is None and now - self._k8_checked >= 0.2:
            self._k8_checked = now
            exporting = Receipt.objects.filter(
                kind="salvage_compare", payload__clean=False
            ).exists()
        self.bucket.tick(
            now,
            exporting=exporting,
            latest=float("inf"),
            seconds=max(self.o.fault_seconds * 0.75, 6.0),
            say=self.log,
        )

    # --- K5: a provider fault that outlasts a step's budget ----------------------------

    def _k5_start(self, fleet: Fleet, control, started: float) -> None:
        """The `outlast` cases' sandboxes sit in a transition (`stopping`) for
        longer than a worker's step budget: every start, stop and delete answers
        409 "state change in progress" until then. Their step fails for real
        (budget exhausted), the record waits out its real backoff (the harness
        does not skip it for these), retries and converges."""
        self.k5_cases = [c for c in fleet.cases if c.shape == "outlast"]
        self.k5_pending: set[str] = set()
        self.k5_claimed: dict[str, float] = {}
        if not self._on("k5_budget_outlasted") or not self.k5_cases:
            return
        for case in self.k5_cases:
            control.sandbox(case.sandbox_id, state="stopping", stuck=True)
            self.k5_pending.add(case.sandbox_id)
        self.k5_deadline = started + self.o.fault_seconds + self.o.converge_timeout / 2
        self.log(
            f"K5: {len(self.k5_cases)} sandboxes stuck in a transition until a step on each "
            f"has run out its budget ({self.o.step_budget}s)"
        )

    def _k5_release(self, control) -> None:
        """A stuck sandbox settles once its record's step has failed for real (a
        `retirement.failed` audit row naming the exhausted budget). A step that
        somehow outlives two budgets after its first claim, or a record never
        claimed before the converge timeout, settles anyway (the verdict says
        so). Timed from the first claim, not the wave's start: on a loaded
        machine a record may wait long before a worker reaches it."""
        if not self.k5_pending:
            return
        from sandboxes.models import AuditEvent, Retirement

        pending = list(self.k5_pending)
        failed = set(
            AuditEvent.objects.filter(
                sandbox_id__in=pending, action="retirement.failed"
            ).values_list("sandbox_id", flat=True)
        )
        now = time.monotonic()
        for sid in Retirement.objects.filter(
            provider_lease_id__in=pending, attempt_id__isnull=False
        ).values_list("provider_lease_id", flat=True):
            self.k5_claimed.setdefault(sid, now)
        for sid in sorted(pending):
            first = self.k5_claimed.get(sid)
            late = now >= self.k5_deadline or (
                first is not None and now >= first + 2 * self.o.step_budget + 10
            )
            if sid in failed or late:
                with contextlib.suppress(httpx.HTTPStatusError):
                    control.sandbox(sid, stuck=None)  # it settles `stopped`
                self.k5_pending.discard(sid)
                self.log(f"K5: {sid} settles ({'its step failed' if sid in failed else 'late'})")

    def _k5_problems(self, fleet: Fleet, alive: dict) -> list[str]:
        from sandboxes.models import AuditEvent, Receipt
        from sandboxes.reconciler.failures import BACKOFF_FIRST

        problems = []
        for case in self.k5_cases:
            problems += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
            failures = list(
                AuditEvent.objects.filter(
                    sandbox_id=case.sandbox_id, action="retirement.failed"
                ).order_by("at")
            )
            if not failures:
                problems.append(f"{case.name}: no step failed (the fault did not outlast it)")
                continue
            if not any("budget" in (f.reason or "") for f in failures):
                problems.append(f"{case.name}: no failure names the exhausted budget")
            retired = Receipt.objects.filter(
                provider_lease_id=case.sandbox_id, kind="retirement"
            ).first()
            if retired is not None:
                waited = (retired.created_at - failures[0].at).total_seconds()
                if waited < BACKOFF_FIRST:
                    problems.append(
                        f"{case.name}: retried {waited:.0f}s after failing, before its backoff"
                    )
                self.state.k5.append(
                    {"case": case.name, "failures": len(failures), "converged_after": waited}
                )
        return problems

    def _try_kill(self, points: list[str], sup: Supervisor) -> None:
        from django.utils import timezone

        from sandboxes.models import Retirement

        rows = (
            Retirement.objects.filter(
                stage__in=[_STAGE_OF[p] for p in points], claimed_until__gt=timezone.now()
            )
            # K5's steps must run out their budget, not be cut short by a kill.
            .exclude(provider_lease_id__in=[c.sandbox_id for c in getattr(self, "k5_cases", ())])
            .values_list("pk", "attempt_id", "stage")
        )
        for pk, attempt, stage in rows:
            point = next(p for p in points if _STAGE_OF[p] == stage)
            owner = sup.owner_of(str(attempt))
            if owner is None or not owner.alive() or owner.once:
                continue
            with sup.lock:
                step = owner.step
            if step != (str(pk), point):
                continue
            time.sleep(self.rng.uniform(0.0, 0.15))  # land somewhere inside the step
            with sup.lock:
                still = owner.step == (str(pk), point)
            sup.kill(owner, f"K1 in the middle of {point}")
            self.state.k1.append(
                {"point": point, "retirement": str(pk), "worker": owner.number, "in_step": still}
            )
            self.log(f"K1: SIGKILLed worker {owner.number} in the middle of {point} ({pk})")
            expired = sup.expire_claims_of_dead()
            sup.start()
            sup.restarts += 1
            self.log(f"K1: replacement started; {expired} dead claim(s) ended")
            points.remove(point)
            return

    def _k1_rules(self) -> list[dict]:
        return [dict(K1_SLOW_RULES[p]) for p in getattr(self, "k1_points", [])]

    def _rearm_k1(self, control) -> None:
        """Once a second: a pending kill point whose slow rule was used up (by a
        step nobody could kill in, e.g. a `--once` racer's) gets a fresh one."""
        if time.monotonic() - self.k1_armed_at < 1.0:
            return
        self.k1_armed_at = time.monotonic()
        script = control.faults()["script"]
        live = {r.get("k1") for r in script if r.get("k1") and r.get("times", 1) > 0}
        missing = [p for p in self.k1_points if p not in live]
        if missing:
            kept = [r for r in script if r.get("times", 1) > 0]
            control.faults(script=kept + [dict(K1_SLOW_RULES[p]) for p in missing])

    def _drop_db_connections(self, sup: Supervisor) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name LIKE %s",
                ["chaos-worker-%"],
            )
            n = sum(1 for (ok,) in cur.fetchall() if ok)
        busy = sum(1 for w in sup.live() if w.step)
        self.state.k3.append({"terminated": n, "workers_mid_step": busy})
        self.log(f"K3: terminated {n} worker database connection(s); {busy} worker(s) mid-step")

    def _housekeeping(self) -> None:
        """Stand in for the clock (retry backoff) and the operator (manual approvals)."""
        from django.db.models import Q
        from django.utils import timezone

        from sandboxes import actions
        from sandboxes.models import Retirement

        now = timezone.now()
        unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
        # Retry backoff is 30 s doubling to 30 min; a wave skips the wait, except
        # for K5's cases, which wait it out for real.
        real = [c.sandbox_id for c in getattr(self, "k5_cases", ())]
        self.state.clock_skips += (
            Retirement.objects.filter(unclaimed, stage="failed", next_attempt_at__gt=now)
            .exclude(provider_lease_id__in=real)
            .update(next_attempt_at=now)
        )
        for pk, sandbox_id in Retirement.objects.filter(
            stage="awaiting_approval", environment__retirement_mode="manual"
        ).values_list("pk", "provider_lease_id"):
            with contextlib.suppress(actions.ActionRefused):
                self._approve(pk, sandbox_id)

    def _approve(self, pk, sandbox_id: str) -> None:
        """The operator's approval; for K6's case, in the same transaction, the
        lease re-pointed to another sandbox and a new lease taking this one, so no
        worker can destroy between the two (the attack: approved, then moved)."""
        from django.db import transaction

        from sandboxes import actions
        from sandboxes.ingest import apply_events, validate_batch

        case = self.fleet.by_sandbox().get(sandbox_id)
        # The fleet always holds K6's cases: their events go with the approval
        # whether or not the wave judges the scenario.
        moved = case is not None and bool(case.on_approval_events)
        with transaction.atomic():
            actions.approve(pk, actor=self.operator, reason="chaos wave: proof reviewed")
            if moved:
                batch, errors = validate_batch({"events": case.on_approval_events}, max_events=1000)
                if errors:
                    raise RuntimeError(f"K6 events refused: {errors}")
                apply_events("chaos-k6", batch)
        self.state.approvals += 1
        if moved:
            self.state.k6.append({"case": case.name, "record": str(pk)})
            case.on_approval_events = []
            self.log(f"K6: {case.name} approved, and its lease re-pointed in the same transaction")

    def _progress(self) -> str:
        from django.db.models import Count

        from sandboxes.models import Retirement

        stages = dict(
            Retirement.objects.values_list("stage").annotate(n=Count("id")).order_by("stage")
        )
        live = len(self.sup.live())
        return f"workers {live} live; " + ", ".join(f"{k}={v}" for k, v in sorted(stages.items()))

    # --- phase 3: calm ------------------------------------------------------------------

    def _calm(self, fleet: Fleet, sup: Supervisor) -> float | None:
        from devtools.simulator import SimulatorControl

        control = SimulatorControl(self.sim.url)
        # Not /_sim/reset: it would clear the call log the verdict reads.
        defaults = dataclasses.asdict(FaultConfig())
        # Faults off — except the K1 slow-step rules of kill points still pending.
        control.faults(
            script=self._k1_rules() + self.k7.live_rules(),
            **{k: defaults[k] for k in self.state.faults["k2"]},
        )
        self.k1_armed_at = time.monotonic()
        alive = self._alive()
        outlasting = set(self.k5_pending)
        for case in fleet.cases:
            if case.sandbox_id in alive and case.sandbox_id not in outlasting:
                # A sandbox destroyed since the listing answers 404.
                with contextlib.suppress(httpx.HTTPStatusError):
                    control.sandbox(case.sandbox_id, stuck=None, transition_seconds=None)
        started = time.monotonic()
        self.log("faults off; waiting for the fleet to converge")
        last_line = 0.0
        last_check = 0.0
        while time.monotonic() - started < self.o.converge_timeout:
            self._k8(sup)
            if self.k1_points:
                # Still watching for kill points: poll fast, check convergence less often.
                self._try_kill(self.k1_points, sup)
                if self.k1_points:
                    self._rearm_k1(control)
                if time.monotonic() - last_check < 0.25:
                    time.sleep(0.02)
                    continue
            last_check = time.monotonic()
            sup.reap(self.o.workers)
            self._k5_release(control)
            self.k7.release()
            self._housekeeping()
            # No convergence while the bucket is down.
            missing = ["the S3 endpoint is down"] if self._s3_down() else self._unconverged(fleet)
            if not missing:
                control.faults(script=[])
                if self.k1_points:
                    self.log(f"K1: converged before a kill landed in {self.k1_points}")
                    self.k1_points.clear()
                took = round(time.monotonic() - started, 2)
                self.log(f"converged in {took}s after the faults stopped")
                return took
            if time.monotonic() - last_line >= 1.0:
                last_line = time.monotonic()
                self.log(f"calm: {self._progress()}; waiting for {missing[:2]}")
            time.sleep(0.02 if self.k1_points else 0.25)
        self.unconverged = self._unconverged(fleet)
        self.log(f"did not converge within {self.o.converge_timeout:g}s: {self.unconverged[:5]}")
        return None

    def _alive(self) -> dict[str, str]:
        out, cursor = {}, None
        while True:
            params = {"limit": 500}
            if cursor:
                params["cursor"] = cursor
            body = httpx.get(
                f"{self.sim.url}/sandbox",
                params=params,
                headers={"Authorization": "Bearer chaos"},
                timeout=30,
            ).json()
            for item in body["items"]:
                out[item["id"]] = item["state"]
            cursor = body.get("nextCursor")
            if not cursor:
                return out

    def _unconverged(self, fleet: Fleet) -> list[str]:
        from django.db.models import Q
        from django.utils import timezone

        from sandboxes.models import Retirement

        now = timezone.now()
        if Retirement.objects.filter(claimed_until__gt=now).exists():
            return ["claims still live"]
        stages, errors = {}, {}
        for sid, stage, error in Retirement.objects.order_by("listed_at").values_list(
            "provider_lease_id", "stage", "last_error"
        ):
            stages[sid] = stage
            errors[sid] = error
        alive = self._alive()
        missing = []
        for case in fleet.cases:
            stage = stages.get(case.sandbox_id)
            if case.expect == RETIRED and stage != "retired":
                # A failing record says why, so an unconverged wave can be read.
                why = f" ({errors[case.sandbox_id][:200]})" if stage == "failed" else ""
                missing.append(f"{case.name}: {stage}{why}")
            elif case.expect in (KEPT, STOPPED) and stage != case.final_stage:
                missing.append(f"{case.name}: {stage} (want {case.final_stage})")
            elif case.expect == STOPPED and alive.get(case.sandbox_id) != "stopped":
                missing.append(f"{case.name}: sandbox {alive.get(case.sandbox_id)}")
        due = Retirement.objects.filter(
            Q(next_attempt_at__lte=now),
            stage__in=["listed", "comparing", "exporting", "retiring", "failed"],
        ).exclude(environment__retirement_mode="observe")
        missing.extend(f"due: {pk}" for pk in due.values_list("pk", flat=True))
        return missing

    # --- phase 4: a further pass changes nothing ----------------------------------------

    def _snapshot(self) -> dict:
        from sandboxes.models import EnvironmentLease, Receipt, Retirement

        calls = self.sim.control.calls()
        return {
            "records": sorted(
                (str(pk), stage, tuple(holds or []))
                for pk, stage, holds in Retirement.objects.values_list("pk", "stage", "holds")
            ),
            "receipts": Receipt.objects.count(),
            "leases": sorted(
                (str(pk), status)
                for pk, status in EnvironmentLease.objects.values_list("pk", "status")
            ),
            "provider_changes": sum(
                1 for c in calls if c["operation"] in inv.MUTATING and inv.ok(c["status"])
            ),
        }

    def _final_pass(self, fleet: Fleet, sup: Supervisor) -> dict:
        before = self._snapshot()
        w = sup.run_once()
        after = self._snapshot()
        changed = [k for k in before if before[k] != after[k]]
        self.log(
            "further pass: "
            + ("nothing changed" if not changed else f"changed {changed}")
            + f" (exit {w.process.returncode})"
        )
        return {"changed": changed, "exit": w.process.returncode}

    # --- verdict ------------------------------------------------------------------------------

    def _verdict(self, fleet: Fleet, sup: Supervisor, converged_in, stable) -> dict:
        from django.db.models import Count

        from sandboxes.models import Receipt, ReconcilerPass, Retirement

        calls = self.sim.control.calls()
        alive = self._alive()
        gone = {c.sandbox_id for c in fleet.cases if c.sandbox_id not in alive}
        for case in fleet.cases:
            if case.sandbox_id in gone:
                # Lost files are judged by what the sandbox held when it went.
                case.held = liars.held_files(self.sim.control, fleet, case)
        unsafe = inv.unsafe_destroys(fleet, calls)
        dupes = inv.duplicate_destroys(fleet, calls)
        lost, unrecorded = inv.lost_files(
            fleet, gone, self.media, self.bucket.stored_sha if self.bucket else None
        )
        storage = self.bucket.report() if self.bucket else {"backend": "filesystem"}
        lost += storage.get("missing_or_wrong", [])
        orphans = inv.orphans(fleet, alive)
        kept = inv.kept_violations(fleet, calls, alive)
        running = inv.left_running(fleet, alive)
        left_started = inv.left_started_by_inspection(calls, alive)
        repeated = inv.repeated_compares(sup.compares)
        statuses = {}
        for c in calls:
            statuses[str(c["status"])] = statuses.get(str(c["status"]), 0) + 1
        converged = converged_in is not None and not stable["changed"]
        safe = not (unsafe or dupes or lost or orphans or running or left_started)

        results: dict[str, dict] = {}

        def verdict(name, problems):
            if name in self.o.scenarios:
                results[name] = {"passed": not problems, "problems": problems[:20]}

        for kind in RETIRE_KINDS:
            problems = []
            for case in fleet.cases:
                if case.kind == kind and case.expect == RETIRED:
                    problems += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
                    if kind == "superseded_running_warm":
                        problems += self._stopped_first(case, calls)
            verdict(kind, problems)
        verdict(
            "unsuccessful_run_stopped",
            [
                f"{k['case']}: {p}"
                for k in kept
                if k["case"].startswith("unsuccessful")
                for p in k["problems"]
            ],
        )
        keep_problems = [
            f"{k['case']}: {p}"
            for k in kept
            if not k["case"].startswith("unsuccessful")
            for p in k["problems"]
        ]
        for case in fleet.cases:
            if case.env == "manual" and case.expect == RETIRED:
                keep_problems += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
                if not Receipt.objects.filter(
                    provider_lease_id=case.sandbox_id, kind="approval"
                ).exists():
                    keep_problems.append(f"{case.name}: retired without an approval receipt")
        keep_problems += [f"unsafe: {u}" for u in unsafe]
        verdict("kept_until_allowed", keep_problems)
        dirty = [c for c in fleet.cases if c.expect == RETIRED and (c.unsaved or c.deleted)]
        verdict(
            "unsaved_files_exported",
            [f"lost {x['case']}:{x['path']}" for x in lost]
            + [f"deleted path not recorded {x['case']}:{x['path']}" for x in unrecorded]
            + ([] if dirty else ["no dirty sandbox in the fleet"]),
        )
        k1_problems = []
        for point in self.o.kill_points:
            hits = [k for k in self.state.k1 if k["point"] == point]
            if not hits:
                k1_problems.append(f"no worker was killed in the middle of {point}")
            for k in hits:
                r = Retirement.objects.get(pk=k["retirement"])
                case = fleet.by_sandbox().get(r.provider_lease_id)
                if case and case.expect == RETIRED:
                    k1_problems += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
        if not converged:
            k1_problems.append("the fleet did not converge")
        verdict("k1_worker_killed", k1_problems)
        k2_problems = []
        if self._on("k2_provider_faults"):
            for label, test in (
                ("5xx", lambda s: s.isdigit() and int(s) >= 500),
                ("409", lambda s: s == "409"),
                ("429", lambda s: s == "429"),
                ("dropped connection", lambda s: s == "0"),
            ):
                if not any(test(s) for s in statuses):
                    k2_problems.append(f"no {label} was injected")
        if not converged:
            k2_problems.append("the fleet did not converge")
        if not safe:
            k2_problems.append("a safety invariant failed")
        verdict("k2_provider_faults", k2_problems)
        verdict(
            "k5_budget_outlasted",
            self._k5_problems(fleet, alive) if self._on("k5_budget_outlasted") else [],
        )
        k7_problems, k7_facts = self.k7.problems(len(self.state.k1) + len(self.state.k3))
        for case in self.k7.cases:
            k7_problems += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
        k7_problems += [f"more than one compare in a claim: {r}" for r in repeated]
        k7_problems += [f"left started by an inspection: {x}" for x in left_started]
        if not converged:
            k7_problems.append("the fleet did not converge")
        verdict("k7_toolbox_lies", k7_problems)
        rules = []
        for case in fleet.cases:
            if not case.shape or case.shape in ("outlast", *liars.SHAPES):
                continue
            if case.expect == RETIRED:
                rules += [f"{case.name}: {p}" for p in inv.retired_ok(case, alive)]
        rules += [
            f"{k['case']}: {p}" for k in kept if fleet.named(k["case"]).shape for p in k["problems"]
        ]
        verdict("rule_shapes", rules)
        verdict(
            "k6_lease_repointed",
            self._k6_problems(fleet, calls) if self._on("k6_lease_repointed") else [],
        )
        k3_problems = []
        if not any(k["terminated"] for k in self.state.k3):
            k3_problems.append("no worker database connection was terminated")
        # A reconcile loop reconnects after a dropped connection; it must not die.
        k3_problems += [
            f"worker {c['worker']} exited with {c['code']}: {c['tail'][-1:] or ''}"
            for c in sup.crashes
        ]
        if not converged:
            k3_problems.append("the fleet did not converge")
        verdict("k3_db_dropped", k3_problems)
        passes = list(
            ReconcilerPass.objects.filter(advanced__gt=0, finished_at__isnull=False).values(
                "worker", "started_at", "finished_at"
            )
        )
        overlaps = sum(
            1
            for i, a in enumerate(passes)
            for b in passes[i + 1 :]
            if a["worker"] != b["worker"]
            and a["started_at"] < b["finished_at"]
            and b["started_at"] < a["finished_at"]
        )
        k4_problems = [] if overlaps else ["no two workers advanced records at the same time"]
        k4_problems += [f"duplicate: {d}" for d in dupes]
        verdict("k4_workers_race", k4_problems)

        if self.bucket is not None:
            k8 = [f"not in the bucket with its hash: {x}" for x in storage["missing_or_wrong"]]
            if not storage["failed_attempts_naming_the_endpoint"]:
                k8.append("no export failed while the S3 endpoint was down")
            if not storage["exported_files_checked"]:
                k8.append("no file was exported to the bucket")
            if not converged:
                k8.append("the fleet did not converge")
            results["k8_object_store_down"] = {"passed": not k8, "problems": k8[:20]}
        passed = sum(1 for r in results.values() if r["passed"])
        report = {
            "seed": self.o.seed,
            "ok": passed == len(results) and safe and converged,
            "scenarios_passed": passed,
            "scenarios_total": len(results),
            "scenarios": results,
            "orphans": orphans,
            "left_running": running,
            "left_started_by_inspection": left_started,
            "repeated_compares": repeated,
            "unsafe_destroys": unsafe,
            "lost_files": lost,
            "storage": storage,
            "duplicate_destroys": dupes,
            "kept": {
                "expected": sum(1 for c in fleet.cases if c.expect != RETIRED),
                "kept": sum(1 for c in fleet.cases if c.expect != RETIRED)
                - len({k["case"] for k in kept}),
                "violations": kept,
            },
            "converged": converged,
            "time_to_converge_s": converged_in,
            "unconverged": getattr(self, "unconverged", [])[:30],
            "further_pass": stable,
            "fleet": {
                "sandboxes": len(fleet.cases),
                "retired": sum(1 for c in fleet.cases if c.sandbox_id in gone),
                "by_expectation": {
                    e: sum(1 for c in fleet.cases if c.expect == e)
                    for e in (RETIRED, STOPPED, KEPT)
                },
                "unsaved_files": sum(len(c.unsaved) for c in fleet.cases),
            },
            "faults": {
                "k1_kills": self.state.k1,
                "k2": self.state.faults,
                "k2_statuses": statuses,
                "k3_drops": self.state.k3,
                "k4_racers": self.state.racers,
                "k4_overlapping_passes": overlaps,
                "k5_outlasted": self.state.k5,
                "k6_repointed": self.state.k6,
                "k7_toolbox_lies": k7_facts,
            },
            "workers": {
                "started": sup.started,
                "killed": len(sup.kills),
                "crashed": sup.crashes,
                "restarts": sup.restarts,
            },
            "clock_skips": self.state.clock_skips,
            "approvals": self.state.approvals,
            # What the harness does that production would not, to converge fast.
            # Neither touches the safety invariants, which are judged from the
            # simulator's call log and the receipts alone.
            "harness_shortcuts": {
                "dead_worker_claims_ended": sup.claims_ended,
                "retry_backoffs_skipped": self.state.clock_skips,
            },
            "stages": dict(
                Retirement.objects.values_list("stage").annotate(n=Count("id")).order_by("stage")
            ),
            "provider_calls": len(calls),
            "phases": self.state.phases,
            "wall_seconds": round(time.monotonic() - self.t0, 2),
        }
        return report

    def _k6_problems(self, fleet: Fleet, calls: list[dict]) -> list[str]:
        """A re-pointed lease never destroys the sandbox it named: that record closes
        `dismissed` (the lease names another sandbox), the move is audited, and the
        sandbox it names now is listed on its own."""
        from sandboxes.models import AuditEvent, Retirement
        from sandboxes.rules.listing import LEASE_MOVED

        problems = [] if self.state.k6 else ["no lease was re-pointed after an approval"]
        source, target = fleet.named("repoint-from"), fleet.named("repoint-to")
        if inv.deletes(calls).get(source.sandbox_id):
            problems.append("the sandbox the lease named before the move was DELETEd")
        if self.state.k6:
            record = Retirement.objects.get(pk=self.state.k6[0]["record"])
            if (record.stage, record.closed_reason) != ("dismissed", LEASE_MOVED):
                problems.append(f"its record is {record.stage} ({record.closed_reason!r})")
            if not AuditEvent.objects.filter(action="lease.sandbox_moved").exists():
                problems.append("the move is not in the audit trail")
            if not Retirement.objects.filter(provider_lease_id=target.sandbox_id).exists():
                problems.append("the sandbox the lease names now was never listed")
        return problems

    def _stopped_first(self, case, calls) -> list[str]:
        stops = [
            c["at"]
            for c in calls
            if c["sandbox_id"] == case.sandbox_id
            and c["operation"] == "stop"
            and inv.ok(c["status"])
        ]
        dels = [
            c["at"]
            for c in calls
            if c["sandbox_id"] == case.sandbox_id
            and c["operation"] == "destroy"
            and inv.ok(c["status"])
        ]
        if not stops:
            return [f"{case.name}: never stopped before its retirement"]
        if dels and min(dels) < min(stops):
            return [f"{case.name}: destroyed before the stop-only step"]
        return []


def format_report(report: dict) -> str:
    lines = [
        f"chaos wave seed {report['seed']}: {'PASS' if report['ok'] else 'FAIL'}",
        f"  scenarios passed: {report['scenarios_passed']}/{report['scenarios_total']}",
    ]
    for name, r in report["scenarios"].items():
        mark = "ok  " if r["passed"] else "FAIL"
        lines.append(f"    {mark} {name}" + (f": {r['problems'][:3]}" if r["problems"] else ""))
    kept = report["kept"]
    lines += [
        f"  orphans: {len(report['orphans'])}",
        f"  left running that must stop: {len(report.get('left_running', []))}",
        f"  left started by an inspection: {len(report.get('left_started_by_inspection', []))}",
        f"  claims that compared more than once: {len(report.get('repeated_compares', []))}",
        f"  unsafe destroys: {len(report['unsafe_destroys'])}",
        f"  lost files: {len(report['lost_files'])}",
        *_storage_lines(report.get("storage", {})),
        f"  duplicate destroys: {len(report['duplicate_destroys'])}",
        f"  had to be kept and were: {kept['kept']}/{kept['expected']}",
        f"  time to converge: {report['time_to_converge_s']}s"
        f" (further pass changed: {report['further_pass']['changed'] or 'nothing'})",
        f"  fleet: {report['fleet']}",
        f"  K1 kills: {[(k['point'], k['in_step']) for k in report['faults']['k1_kills']]}; "
        f"K3 drops: {report['faults']['k3_drops']}; "
        f"K4 overlapping passes: {report['faults']['k4_overlapping_passes']}; "
        f"K5 outlasted a step budget: {report['faults'].get('k5_outlasted', [])}; "
        f"K7 lying toolboxes: {report['faults'].get('k7_toolbox_lies', [])}",
        f"  workers: {report['workers']['started']} started, {report['workers']['killed']} killed,"
        f" {len(report['workers']['crashed'])} crashed",
        f"  harness shortcuts (not production behaviour): "
        f"{report['harness_shortcuts']['dead_worker_claims_ended']} dead workers' claims ended "
        f"instead of waiting out 15 min; {report['harness_shortcuts']['retry_backoffs_skipped']} "
        f"retry backoffs skipped; safety is judged from the call log and receipts regardless",
        f"  wall time: {report['wall_seconds']}s",
    ]
    return "\n".join(lines)


def _storage_lines(storage: dict) -> list[str]:
    if storage.get("backend") != "s3":
        return []
    return [
        f"  S3 bucket {storage['bucket']}: {storage['objects']} objects, "
        f"{storage['exported_files_checked']} exported files checked, "
        f"{len(storage['missing_or_wrong'])} missing or wrong; endpoint down "
        f"{storage['outage'].get('down_seconds')}s, "
        f"{storage['failed_attempts_naming_the_endpoint']} failed attempts named it"
    ]
