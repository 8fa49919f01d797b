"""A test run leaves no scratch folders behind (paperclip_console/test_settings.py
makes one `paperclip-console-tests-*` folder per process and removes it at exit)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
from django.conf import settings


def test_it_writes_into_the_scratch_folder(tmp_path_factory):
    root = settings.LOCAL_SANDBOX_ROOT.parent
    (root / "media").mkdir(parents=True, exist_ok=True)
    (root / "media" / "left.txt").write_text("x")
    (Path(__file__).parent / "seen.txt").write_text(str(root))
"""


def run_probe(tmp_path: Path, source: str) -> tuple[Path, Path]:
    """A pytest run of `source` in a temp directory of its own: (the probe's
    folder, that temp directory), once the run has passed and exited."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "test_probe.py").write_text(source)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), str(probe_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    return probe_dir, temp


@pytest.mark.slow
def test_it_leaves_no_scratch_folder_after_a_pytest_run(tmp_path):
    probe_dir, temp = run_probe(tmp_path, "from pathlib import Path\n" + PROBE)
    seen = Path((probe_dir / "seen.txt").read_text())
    # The run did make its folder in the temp directory it was given...
    assert seen.parent == temp and seen.name.startswith("paperclip-console-tests-")
    # ...and removed it, contents and all, when it exited.
    assert not seen.exists()
    assert not list(temp.glob("paperclip-console-tests-*"))


KILLED_CHILD = """
import os
import signal
import subprocess
import sys


def test_a_child_it_starts_dies_without_cleaning_up():
    # A child that loads the same settings (a manage.py the tests start, a
    # worker they kill on purpose) makes a scratch folder of its own, and
    # SIGKILL leaves it no atexit to remove it with.
    child = (
        "from django.conf import settings; print(settings.STATIC_ROOT, flush=True); "
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paperclip_console.test_settings"}
    run = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert "paperclip-console-tests-" in run.stdout
"""


@pytest.mark.slow
def test_a_killed_child_of_a_pytest_run_leaves_no_scratch_folder(tmp_path):
    _, temp = run_probe(tmp_path, KILLED_CHILD)
    # The child's folder was made inside the run's own, which the run removed.
    assert not list(temp.glob("paperclip-console-tests-*"))
