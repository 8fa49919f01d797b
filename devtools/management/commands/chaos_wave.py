from django.core.management.base import BaseCommand, CommandError

from devtools.chaos.wave import KILL_POINTS, SCENARIOS, Wave, WaveOptions, format_report


def _names(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise CommandError(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
    return names


class Command(BaseCommand):
    help = (
        "Run one chaos wave: a seeded fleet through the ingest API, reconciler workers "
        "under faults (K1 SIGKILL mid-step, K2 provider faults, K3 database drops, "
        "K4 racing workers, K5 provider faults that outlast a step's budget, K6 a "
        "lease re-pointed to another sandbox after its approval, K7 a toolbox that "
        "lies, K8 with --storage s3 the object store down), then "
        "convergence and invariant checks. Uses a scratch "
        "database beside DATABASE_URL and the provider simulator on loopback. "
        "Exits 1 when any scenario or invariant fails."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--scenarios",
            default=",".join(SCENARIOS),
            help=f"comma-separated subset of: {', '.join(SCENARIOS)}",
        )
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument(
            "--kill-points",
            default=",".join(KILL_POINTS),
            help="steps a K1 kill must land in (compare, export, retire)",
        )
        parser.add_argument("--report", default="", help="write the JSON report here")
        parser.add_argument("--converge-timeout", type=float, default=150.0)
        parser.add_argument("--fault-seconds", type=float, default=12.0)
        parser.add_argument("--scale", type=int, default=1, help="multiply the retire cases")
        parser.add_argument("--keep-db", action="store_true", help="keep the scratch database")
        parser.add_argument(
            "--step-budget",
            type=int,
            default=20,
            help="the workers' per-step provider budget in seconds (k5 outlasts it)",
        )
        parser.add_argument(
            "--storage",
            choices=("filesystem", "s3"),
            default="filesystem",
            help="where salvaged files go; s3: a bucket on moto's server on loopback, "
            "its endpoint shut mid-wave (K8), every exported file checked in the bucket",
        )

    def handle(self, *args, **o):
        if o["workers"] < 2:
            raise CommandError("a wave needs at least 2 workers")
        options = WaveOptions(
            seed=o["seed"],
            scenarios=_names(o["scenarios"], SCENARIOS, "scenario"),
            workers=o["workers"],
            kill_points=_names(o["kill_points"], KILL_POINTS, "kill point"),
            converge_timeout=o["converge_timeout"],
            fault_seconds=o["fault_seconds"],
            scale=o["scale"],
            report=o["report"],
            keep_db=o["keep_db"],
            step_budget=o["step_budget"],
            storage=o["storage"],
        )
        result = Wave(options, say=lambda line: self.stdout.write(line)).run()
        self.stdout.write(format_report(result.report))
        if not result.ok:
            raise CommandError("the chaos wave failed")
