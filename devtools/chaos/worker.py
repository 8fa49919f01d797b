"""A reconciler worker for chaos waves: `manage.py reconcile`, with a trace on stdout.

    python -m devtools.chaos.worker [--once] [--interval S]

Runs the real command. The only addition is a line per claim and per step
(`CLAIM <attempt_id> <retirement_id>`, `STEP <retirement_id> <action>`, `DONE …`), flushed
before the work starts, so the supervisor knows which process owns which
claim and what it is doing when it SIGKILLs it. The lines come from receivers
of the reconciler's signals (`sandboxes/reconciler/signals.py`); nothing in
the reconciler is replaced.
"""

from __future__ import annotations

import argparse
import os
import sys


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _on_claimed(sender, claim, **kwargs) -> None:
    _say(f"CLAIM {claim.attempt_id} {claim.retirement_id}")


def _on_step_started(sender, plan, attempt_id, **kwargs) -> None:
    _say(f"STEP {plan.retirement_id} {plan.action} {attempt_id}")


def _on_step_finished(sender, plan, attempt_id, **kwargs) -> None:
    _say(f"DONE {plan.retirement_id} {plan.action}")


def instrument() -> None:
    """Trace through the reconciler's own signals (sandboxes/reconciler/signals.py)."""
    from sandboxes.reconciler import signals

    signals.claimed.connect(_on_claimed, dispatch_uid="chaos-worker-claimed")
    signals.step_started.connect(_on_step_started, dispatch_uid="chaos-worker-step-started")
    signals.step_finished.connect(_on_step_finished, dispatch_uid="chaos-worker-step-finished")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.settings")
    import django

    django.setup()
    instrument()
    from django.core.management import call_command

    _say(f"READY {os.getpid()}")
    call_command("reconcile", once=args.once, interval=args.interval)


if __name__ == "__main__":
    main()
