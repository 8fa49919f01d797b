"""What a reconciler worker announces as it works, for whoever watches it
(the chaos harness traces claims and steps with these; the product itself
connects nothing). Django signals, sent synchronously in the worker:

    claimed        a record was claimed          kwargs: claim (claims.Claim)
    step_started   a step is about to run        kwargs: plan (steps.Plan), attempt_id
    step_finished  the step returned or raised   kwargs: plan, attempt_id
    checkpoint     a named point inside a step   kwargs: name ("compare:before_receipt"…)

`sender` is the module that sends. A receiver runs inside the worker, before
the work it announces (after it, for step_finished): it must be quick and
must not raise, except that a `checkpoint` receiver may raise to stop the
worker at that point, as a worker that dies there would (the crash tests do,
with a BaseException nothing in the worker catches).
"""

from django.dispatch import Signal

claimed = Signal()
step_started = Signal()
step_finished = Signal()
checkpoint = Signal()
