"""The test run's guards (:mod:`tests.run_guard`, :mod:`tests.watched`), tried on a small suite run by a pytest of its
own: a test whose process dies is one failed test, what it had started does not outlive it, each process's current
test is written where ``.ci/run`` reads it, and a test past its time limit fails alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.watched import alive

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guards use Linux's /proc and prctl")

DIES = """
import os, signal, subprocess
from pathlib import Path

from tests.watched import popen


def test_a_worker_that_dies_leaves_a_server_behind():
    plain = subprocess.Popen(["sleep", "300"])  # started as most tests start a server
    guarded = popen(["sleep", "300"])
    (Path(os.environ["GUARD_OUT"]) / "children").write_text(f"{plain.pid} {guarded.pid}")
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before any finally runs
"""
HANGS = """
import time

import pytest


@pytest.mark.timeout(2)
def test_a_test_that_hangs():
    time.sleep(120)


def test_a_test_that_passes():
    time.sleep(1)
"""


def test_a_dead_worker_is_one_failed_test_and_nothing_it_started_outlives_the_run(tmp_path):
    (tmp_path / "test_dies.py").write_text(textwrap.dedent(DIES), encoding="utf-8")
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(HANGS), encoding="utf-8")
    status = tmp_path / "status"
    env = dict(os.environ, GUARD_OUT=str(tmp_path), TITO_AUDIT_TEST_STATUS=str(status), PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.run_guard"]
    # no replacement worker: xdist would run the dead worker's file again on it, and die again
    command += ["-n", "2", "--dist", "worksteal", "--max-worker-restart", "0"]
    command += ["--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-600:]
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 failed, 1 passed" in summary, summary
    assert "crashed while running 'test_dies.py::test_a_worker_that_dies_leaves_a_server_behind'" in done.stdout
    assert "Timeout (>2.0s)" in done.stdout, done.stdout[-2000:]
    assert time.monotonic() - started < 200
    children = [int(pid) for pid in (tmp_path / "children").read_text().split()]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children):
        assert time.monotonic() < deadline, f"outlived their dead worker: {[p for p in children if alive(p)]}"
        time.sleep(0.1)
    # each worker wrote where it stood: the dead one names the test it died in
    written = {path.name: path.read_text() for path in status.iterdir() if not path.name.startswith(".")}
    assert written and all(name.startswith("gw") for name in written), written
    assert any(
        "since" in text and "test_a_worker_that_dies_leaves_a_server_behind" in text for text in written.values()
    )
    assert any("between tests, after" in text and "test_a_test_that_passes" in text for text in written.values())
