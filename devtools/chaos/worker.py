"""A reconciler worker for chaos waves: `manage.py reconcile`, with a trace on stdout.

    python -m devtools.chaos.worker [--once] [--interval S]

Runs the real command. The only addition is a line per claim and per step
(`CLAIM <attempt_id> <retirement_id>`, `STEP <retirement_id> <action>`, `DONE …`), flushed
before the work starts, so the supervisor knows which process owns which
claim and what it is doing when it SIGKILLs it.
"""

from __future__ import annotations

import argparse
import os
import sys


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def instrument() -> None:
    from sandboxes.reconciler import claims, machine

    claim_next = claims.claim_next

    def traced_claim_next(*args, **kwargs):
        claim = claim_next(*args, **kwargs)
        if claim is not None:
            _say(f"CLAIM {claim.attempt_id} {claim.retirement_id}")
        return claim

    claims.claim_next = traced_claim_next

    def traced(action, step):
        def run(plan, attempt_id, worker):
            _say(f"STEP {plan.retirement_id} {action} {attempt_id}")
            try:
                return step(plan, attempt_id, worker)
            finally:
                _say(f"DONE {plan.retirement_id} {action}")

        return run

    for action, step in list(machine.STEPS.items()):
        machine.STEPS[action] = traced(action, step)


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
