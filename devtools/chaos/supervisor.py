"""Reconciler worker processes for a wave: start, trace, SIGKILL, replace.

Each worker is `python -m devtools.chaos.worker` (the reconcile command plus a
claim/step trace). The supervisor reads the trace, so it knows which process
owns a claim and which step it is in. When a worker dies, its claims would
hold for 15 minutes; the supervisor ends them (`expire_claims_of_dead`),
standing in for that wait — the process is gone, so nobody else can be fenced
out wrongly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    number: int
    process: subprocess.Popen
    attempts: set[str] = field(default_factory=set)
    step: tuple[str, str] | None = None  # (retirement id, action) in progress
    steps: int = 0
    log: list[str] = field(default_factory=list)
    killed: bool = False
    claims_expired: bool = False
    once: bool = False
    reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


class Supervisor:
    def __init__(self, env: dict[str, str], *, interval: float = 0.5, say=print):
        self.env = env
        self.interval = interval
        self.say = say
        self.workers: list[WorkerProcess] = []
        self.lock = threading.Lock()
        self.started = 0
        self.restarts = 0
        self.crashes: list[dict] = []
        self.kills: list[dict] = []
        self.claims_ended = 0  # harness shortcut: dead workers' claims ended early
        # (retirement id, attempt id) -> compare steps run under that claim
        self.compares: Counter = Counter()

    # --- processes -------------------------------------------------------

    def start(self, *, once: bool = False) -> WorkerProcess:
        number = self.started
        self.started += 1
        env = dict(self.env)
        url = env["DATABASE_URL"]
        sep = "&" if "?" in url else "?"
        env["DATABASE_URL"] = f"{url}{sep}application_name=chaos-worker-{number}"
        args = [sys.executable, "-m", "devtools.chaos.worker", "--interval", str(self.interval)]
        if once:
            args.append("--once")
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        worker = WorkerProcess(number=number, process=process, once=once)
        with self.lock:
            self.workers.append(worker)
        worker.reader = threading.Thread(target=self._read, args=(worker,), daemon=True)
        worker.reader.start()
        return worker

    def _read(self, worker: WorkerProcess) -> None:
        for line in worker.process.stdout:
            line = line.rstrip("\n")
            parts = line.split()
            with self.lock:
                if parts[:1] == ["CLAIM"] and len(parts) >= 2:
                    worker.attempts.add(parts[1])
                elif parts[:1] == ["STEP"] and len(parts) >= 3:
                    worker.step = (parts[1], parts[2])
                    worker.steps += 1
                    if parts[2] == "compare" and len(parts) >= 4:
                        self.compares[(parts[1], parts[3])] += 1
                elif parts[:1] == ["DONE"]:
                    worker.step = None
                else:
                    worker.log.append(line)
                    del worker.log[:-200]

    def live(self) -> list[WorkerProcess]:
        with self.lock:
            return [w for w in self.workers if w.alive() and not w.once]

    def owner_of(self, attempt_id: str) -> WorkerProcess | None:
        with self.lock:
            for w in self.workers:
                if attempt_id in w.attempts:
                    return w
        return None

    def kill(self, worker: WorkerProcess, why: str) -> None:
        with self.lock:
            step = worker.step
        worker.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
        self.kills.append(
            {"worker": worker.number, "pid": worker.pid, "why": why, "step": list(step or [])}
        )

    def reap(self, keep: int) -> None:
        """Replace crashed workers (a process manager's job) and keep `keep` alive."""
        with self.lock:
            workers = list(self.workers)
        for w in workers:
            if not w.once and not w.alive() and not w.killed and not w.claims_expired:
                tail = [line for line in w.log[-30:] if line.strip()]
                self.crashes.append(
                    {"worker": w.number, "code": w.process.returncode, "tail": tail[-6:]}
                )
                self.say(f"  worker {w.number} exited with {w.process.returncode}; replacing it")
        self.expire_claims_of_dead()
        while len(self.live()) < keep:
            self.start()
            self.restarts += 1

    def expire_claims_of_dead(self) -> int:
        from django.db.models import Q
        from django.utils import timezone

        from sandboxes.models import Retirement

        with self.lock:
            dead = [w for w in self.workers if not w.alive() and not w.claims_expired]
        if not dead:
            return 0
        for w in dead:
            # The trace may still hold the dead worker's last CLAIM lines: read them all.
            if w.reader is not None:
                w.reader.join(timeout=10)
        with self.lock:
            attempts = set().union(*(w.attempts for w in dead))
        n = 0
        if attempts:
            now = timezone.now()
            n = Retirement.objects.filter(
                Q(attempt_id__in=list(attempts)), claimed_until__gt=now
            ).update(claimed_until=now)
        for w in dead:
            w.claims_expired = True
        self.claims_ended += n
        return n

    def stop_all(self, timeout: float = 10.0) -> None:
        with self.lock:
            workers = list(self.workers)
        for w in workers:
            if w.alive():
                w.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for w in workers:
            try:
                w.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait(timeout=5)

    def run_once(self, timeout: float = 120.0) -> WorkerProcess:
        """One `reconcile --once` pass in its own process, waited for."""
        w = self.start(once=True)
        w.process.wait(timeout=timeout)
        return w
