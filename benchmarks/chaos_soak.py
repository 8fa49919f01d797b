"""Soak: 20 chaos waves with different seeds in one go (outside CI), then a summary.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paperclip_console \\
        .venv/bin/python benchmarks/chaos_soak.py [--waves 20] [--first-seed 100]

Each wave runs `manage.py chaos_wave` in its own process (own scratch database,
own simulator) and writes its JSON report under --out.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "var" / "chaos-soak"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ}
    env.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.test_settings")
    totals = {
        "orphans": 0,
        "unsafe_destroys": 0,
        "lost_files": 0,
        "duplicate_destroys": 0,
        "left_running": 0,  # running at the end although the rules say stop
        "left_started_by_inspection": 0,  # the console started it and left it running
        "repeated_compares": 0,  # a claim that compared more than once
    }
    shortcuts = {"dead_worker_claims_ended": 0, "retry_backoffs_skipped": 0}
    rows, passed_waves, converge = [], 0, []
    started = time.monotonic()
    for i in range(args.waves):
        seed = args.first_seed + i
        report = out / f"wave-{seed}.json"
        report.unlink(missing_ok=True)
        t = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "chaos_wave",
                "--seed",
                str(seed),
                "--workers",
                str(args.workers),
                "--report",
                str(report),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        (out / f"wave-{seed}.log").write_text(done.stdout + done.stderr)
        if not report.exists():
            rows.append(f"seed {seed}: no report (exit {done.returncode})")
            print(rows[-1], flush=True)
            continue
        r = json.loads(report.read_text())
        for key in totals:
            totals[key] += len(r.get(key, []))
        if r["ok"]:
            passed_waves += 1
        if r["time_to_converge_s"] is not None:
            converge.append(r["time_to_converge_s"])
        for key in shortcuts:
            shortcuts[key] += r.get("harness_shortcuts", {}).get(key, 0)
        kills = sorted({k["point"] for k in r["faults"]["k1_kills"]})
        k5 = [
            (k["case"], k["failures"], round(k["converged_after"]))
            for k in r["faults"].get("k5_outlasted", [])
        ]
        failed = [n for n, s in r["scenarios"].items() if not s["passed"]]
        rows.append(
            f"seed {seed}: {r['scenarios_passed']}/{r['scenarios_total']} scenarios, "
            f"orphans {len(r['orphans'])}, unsafe {len(r['unsafe_destroys'])}, "
            f"lost {len(r['lost_files'])}, duplicates {len(r['duplicate_destroys'])}, "
            f"left running {len(r.get('left_running', []))}, "
            f"left started {len(r.get('left_started_by_inspection', []))}, "
            f"K5 (case, failures, s to converge) {k5}, "
            f"kept {r['kept']['kept']}/{r['kept']['expected']}, "
            f"converged in {r['time_to_converge_s']}s, K1 in {'/'.join(kills) or 'none'}, "
            f"crashed {len(r['workers']['crashed'])}, wave {time.monotonic() - t:.0f}s"
            + (f"; FAILED {failed}" if failed else "")
        )
        print(rows[-1], flush=True)
    print()
    print(f"soak: {passed_waves}/{args.waves} waves passed with every scenario")
    print("totals: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in totals.items()))
    print(
        "harness shortcuts (not production behaviour): "
        f"{shortcuts['dead_worker_claims_ended']} dead workers' claims ended early, "
        f"{shortcuts['retry_backoffs_skipped']} retry backoffs skipped"
    )
    if converge:
        print(
            f"time to converge: min {min(converge):.1f}s, max {max(converge):.1f}s, "
            f"mean {sum(converge) / len(converge):.1f}s"
        )
    print(f"wall time: {time.monotonic() - started:.0f}s")
    return 0 if passed_waves == args.waves else 1


if __name__ == "__main__":
    sys.exit(main())
