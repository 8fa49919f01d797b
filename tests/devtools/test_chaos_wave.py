"""The CI short wave: a few scenarios, one fault of each kind (K1–K7), must pass.

The wave runs in its own process against a scratch database beside the one
DATABASE_URL names, so it never touches the test database others share.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.chaos.fleet import HOLD_CODES, KEPT, RETIRE_KINDS, RETIRED, build_fleet

ROOT = Path(__file__).resolve().parents[2]
SHORT = (
    "abandoned_warm",
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


def test_the_fleet_covers_every_kind_and_hold():
    fleet = build_fleet(7)
    kinds = {c.kind for c in fleet.cases}
    assert set(RETIRE_KINDS) | {"stop_after_unsuccessful_run"} <= kinds
    assert set(HOLD_CODES) <= {c.hold for c in fleet.cases if c.expect == KEPT}
    dirty = [c for c in fleet.cases if c.expect == RETIRED and c.unsaved and c.deleted]
    assert dirty, "some retired sandboxes must hold added, changed and deleted files"


def test_the_fleet_is_the_same_for_the_same_seed():
    a, b = build_fleet(3), build_fleet(3)
    assert [(c.name, c.files) for c in a.cases] == [(c.name, c.files) for c in b.cases]
    assert [c.files for c in build_fleet(4).cases] != [c.files for c in a.cases]


@pytest.mark.slow
def test_a_short_wave_passes(tmp_path):
    report = tmp_path / "wave.json"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings",
        "DATABASE_URL": os.environ.get(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/paperclip_console"
        ),
    }
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "chaos_wave",
            "--seed",
            "11",
            "--scenarios",
            ",".join(SHORT),
            "--kill-points",
            "compare,export,retire",
            "--fault-seconds",
            "8",
            "--converge-timeout",
            "150",
            "--report",
            str(report),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(report.read_text())
    summary = done.stdout[-2500:]
    assert result["scenarios_passed"] == result["scenarios_total"] == len(SHORT), summary
    assert result["orphans"] == [], summary
    assert result["left_running"] == [], summary
    assert result["left_started_by_inspection"] == [], summary
    assert result["repeated_compares"] == [], summary
    assert result["unsafe_destroys"] == [], summary
    assert result["lost_files"] == [], summary
    assert result["duplicate_destroys"] == [], summary
    assert result["kept"]["kept"] == result["kept"]["expected"], summary
    assert result["converged"] and done.returncode == 0, summary
    # K1 landed in each step; K3 dropped connections and no worker died of it.
    assert {k["point"] for k in result["faults"]["k1_kills"]} == {"compare", "export", "retire"}
    # K5: each outlast case failed for real (budget exhausted), waited out its
    # real backoff, retried and converged (issue 10, "Done when").
    outlasted = result["faults"]["k5_outlasted"]
    assert {k["case"] for k in outlasted} == {"outlast-abandoned", "outlast-resume-failed"}
    assert all(k["failures"] >= 1 and k["converged_after"] >= 30 for k in outlasted)
    assert result["workers"]["crashed"] == [], summary
    # K7: the lying toolbox failed in words until its record needed attention,
    # then converged; the flapping sandbox failed once (a refused download), was
    # started again and exported as it held.
    liars = {k["case"]: k for k in result["faults"]["k7_toolbox_lies"]}
    assert set(liars) == {"liar-download", "liar-flap"}
    assert liars["liar-download"]["lies"] >= 1 and liars["liar-download"]["failures"] >= 5
    assert liars["liar-download"]["lie_ended"] == "needs attention"
    assert liars["liar-flap"]["starts"] >= 1 and liars["liar-flap"]["failures"] >= 1
    # The harness's shortcuts are reported, not hidden.
    assert set(result["harness_shortcuts"]) == {
        "dead_worker_claims_ended",
        "retry_backoffs_skipped",
    }
