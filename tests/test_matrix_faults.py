"""The matrix under faults: Ctrl-C, a killed parent, killed workers, bad results-store slots, a read-only store,
an edited store entry, the umask, and an empty models file."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import templates
from tests.test_matrix_store import BASE, OTHER, options_for, run
from tito_audit.matrix import store as results_cache
from tito_audit.matrix.row import AUDIT_ERROR, base_row
from tito_audit.matrix.store import digest_of
from tito_audit.matrix.worker_pool import WorkerPool
from tito_audit.outputs import WriteFailed

SLOW = "{%- for i in range(10000) -%}{%- for j in range(1000) -%}{%- endfor -%}{%- endfor -%}" + templates.GOOD
"""About half a second per render, far under the render limit: an audit of it takes minutes."""
ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture
def mirror(tmp_path, tiny_model_dir) -> Path:
    """Two quick models (their own pairs) and two whose audit takes minutes."""
    root = tmp_path / "mirror"
    for name, source in (
        ("a-quick", templates.GOOD),
        ("b-quick", templates.MULTILINE_EMPTY_THINK),
        ("y-slow", SLOW),
        ("z-slow", SLOW + " "),
    ):
        folder = root / f"acme--{name}"
        shutil.copytree(tiny_model_dir, folder)
        (folder / "chat_template.jinja").write_text(source, encoding="utf-8")
    return root


def _matrix(mirror: Path, tmp_path: Path, *models: str) -> subprocess.Popen:
    command = ["matrix", "--mirror", str(mirror), "--no-hub", "-n", "4", "-j", "2"]
    command += ["--results-cache", str(tmp_path / "store"), "--out", str(tmp_path / "out"), *models]
    return subprocess.Popen(
        [sys.executable, "-m", "tito_audit.cli", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,  # a process group of its own, as a shell gives a command
        preexec_fn=_as_in_a_terminal,
    )


def _as_in_a_terminal() -> None:
    """Ctrl-C's default action, as an interactive shell gives a command: a suite started in the background of a
    non-interactive shell (``make test &``) has SIGINT ignored, and a child would inherit that (and rightly ignore
    the test's Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(parent: int) -> list[int]:
    """Worker processes of ``parent`` (spawned by multiprocessing)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def _threads(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")), 0)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _wait_for(condition, timeout: float, what: str) -> None:
    ends = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > ends:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(0.1)


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find worker processes")


@needs_proc
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_matrix_within_seconds_and_keeps_what_finished(mirror, tmp_path, signum):
    """Ctrl-C to the process group, or SIGTERM (what CI time-outs, docker and Kubernetes send) alike."""
    matrix = _matrix(mirror, tmp_path, "acme/a-quick", "acme/b-quick", "acme/z-slow")
    try:
        store = tmp_path / "store"
        _wait_for(lambda: len(list(store.rglob("*.json"))) == 2 or matrix.poll() is not None, 240, "two results stored")
        assert matrix.poll() is None, matrix.communicate()
        workers = _children(matrix.pid)
        started = time.monotonic()
        os.killpg(matrix.pid, signum)  # what Ctrl-C in a terminal does (SIGINT), or a CI time-out (SIGTERM)
        _, err = matrix.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        if matrix.poll() is None:
            os.killpg(matrix.pid, signal.SIGKILL)
    assert took < 5, f"the interrupted matrix took {took:.1f}s to exit"
    assert matrix.returncode == 130, err
    assert err.strip().splitlines()[-1] == "2 of 3 results stored; run again to resume", err
    assert "Traceback" not in err and "Error" not in err, err
    assert workers and all(_gone(pid) for pid in workers), "a worker outlived the interrupted matrix"
    command = ["matrix", "--mirror", str(mirror), "--no-hub", "-n", "4", "-j", "2", "--results-cache", str(store)]
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tito_audit.cli",
            *command,
            "--out",
            str(tmp_path / "again"),
            "acme/a-quick",
            "acme/b-quick",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert "0 audited in this run, 2 from stored results" in again.stdout


@needs_proc
def test_workers_exit_when_the_matrix_is_killed(mirror, tmp_path):
    matrix = _matrix(mirror, tmp_path, "acme/y-slow", "acme/z-slow")
    try:
        _wait_for(lambda: len(_children(matrix.pid)) == 2 or matrix.poll() is not None, 120, "two workers")
        workers = _children(matrix.pid)
        # a worker past its start has a second thread (it watches its parent) and is auditing (for minutes)
        _wait_for(lambda: all(_threads(pid) >= 2 for pid in workers) or matrix.poll() is not None, 120, "auditing")
        assert matrix.poll() is None, matrix.communicate()
        matrix.kill()  # kill -9, as an OOM killer or a CI timeout does
        matrix.wait(timeout=30)
        _wait_for(lambda: all(_gone(pid) for pid in workers), 20, "the orphaned workers to exit")
    finally:
        for pid in _children(matrix.pid):
            os.kill(pid, signal.SIGKILL)


def dies(key: str, markers: str, events) -> str:
    """A task for the pool test: kills its own worker the first time (``always``: every time)."""
    marker = Path(markers) / key
    if key == "always" or not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    events.put((key, "ran"))
    return f"{key}: done"


def test_a_killed_worker_is_retried_once_on_a_fresh_worker(tmp_path):
    (tmp_path / "steady").touch()
    done, failed, events = {}, {}, []
    pool = WorkerPool(2, dies)
    pool.run(
        [(key, (key, str(tmp_path))) for key in ("steady", "once", "always")],
        on_done=done.__setitem__,
        on_failed=failed.__setitem__,
        on_event=events.append,
    )
    assert done == {"steady": "steady: done", "once": "once: done"}
    assert list(failed) == ["always"] and "died twice (killed by SIGKILL)" in failed["always"]
    assert pool.lost == 3 and sorted(events) == [("once", "ran"), ("steady", "ran")]


def test_failed_rows_give_their_own_exit_code(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app
    from tito_audit.matrix import run as matrix_command
    from tito_audit.matrix.run import MatrixRun

    rows = [base_row("acme/fine", "not audited: not reachable", "nowhere"), base_row("acme/bad", AUDIT_ERROR, "why")]
    monkeypatch.setattr(matrix_command, "run_matrix", lambda models, options, on_event=None: MatrixRun(rows, 2))
    result = CliRunner().invoke(app, ["matrix", "--out", str(tmp_path / "out"), "acme/fine", "acme/bad"])
    assert result.exit_code == 3, result.output
    assert "1 rows failed (not audited: audit error: acme/bad)" in result.output


def test_a_kept_row_gives_the_failed_rows_exit_code(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app
    from tito_audit.matrix import run as matrix_command
    from tito_audit.matrix.publish import kept_note
    from tito_audit.matrix.run import MatrixRun

    kept = base_row("acme/kept", "audited")
    kept["reason"] = kept_note(base_row("acme/kept", AUDIT_ERROR, "worker failed: its audit ran past the limit"))
    monkeypatch.setattr(matrix_command, "run_matrix", lambda models, options, on_event=None: MatrixRun([kept], 1))
    result = CliRunner().invoke(app, ["matrix", "--out", str(tmp_path / "out"), "acme/kept"])
    assert result.exit_code == 3, result.output
    assert "1 rows failed (kept from the previous run: acme/kept)" in result.output


def test_an_empty_models_file_is_refused(tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app

    models = tmp_path / "models.txt"
    models.write_text("# nothing here yet\n\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["matrix", "--models-file", str(models)], standalone_mode=False)
    assert isinstance(result.exception, Exception) and f"no model ids in {models}" in str(result.exception)


def _entry(store: Path) -> Path:
    (entry,) = store.rglob("*.json")
    return entry


def test_a_bad_store_slot_is_a_miss_for_that_pair_only(mirror, tmp_path):
    store = tmp_path / "store"
    first = run([BASE], options_for(_acme(mirror), tmp_path / "a", store))
    entry = _entry(store)
    entry.unlink()
    entry.mkdir()  # the slot of the pair is a folder
    again = run([BASE, OTHER], options_for(_acme(mirror), tmp_path / "b", store))
    assert again.audited == 2 and [row["verdict"] for row in again.rows] == ["ready", "broken"]
    assert again.rows[0]["verdict"] == first.rows[0]["verdict"]
    assert any("cannot read" in note and "is a folder" in note for note in again.notes), again.notes
    assert any("cannot write" in note for note in again.notes), again.notes
    assert len(list(store.rglob("*.json"))) == 2, "the other pair was stored (the folder still counts as one)"


def test_a_read_only_store_runs_uncached_and_says_so_once(mirror, tmp_path, monkeypatch):
    def read_only(path, data):
        raise WriteFailed(path, "read-only file system", errno.EROFS)

    monkeypatch.setattr(results_cache, "write_atomically", read_only)
    result = run([BASE, OTHER], options_for(_acme(mirror), tmp_path / "out", tmp_path / "store"))
    assert [row["verdict"] for row in result.rows] == ["ready", "broken"]
    assert result.store.written == 0
    assert len(result.notes) == 1 and "cannot be written (read-only file system)" in result.notes[0]


def test_a_row_verdict_is_derived_from_its_variants(mirror, tmp_path):
    """An edited entry whose digest was recomputed cannot make a row say ``ready`` while its variants say
    ``broken``: the report's verdict is not stored; it is derived from the variants on reading."""
    store = tmp_path / "store"
    run([OTHER], options_for(_acme(mirror), tmp_path / "a", store))
    entry = _entry(store)
    document = json.loads(entry.read_text())
    assert "verdict" not in document["payload"]["report"], "the derived verdict was stored"
    document["payload"]["report"]["verdict"] = "ready"
    document["payload_sha256"] = digest_of(document["payload"])
    entry.write_text(json.dumps(document))
    again = run([OTHER], options_for(_acme(mirror), tmp_path / "b", store))
    assert again.audited == 0
    assert again.rows[0]["verdict"] == "broken"
    assert json.loads((tmp_path / "b" / "models" / "acme--other.json").read_text())["verdict"] == "broken"


def test_written_files_honour_the_umask(mirror, tmp_path):
    previous = os.umask(0o027)
    try:
        run([BASE], options_for(_acme(mirror), tmp_path / "out", tmp_path / "store"))
    finally:
        os.umask(previous)
    files = [p for folder in ("out", "store") for p in (tmp_path / folder).rglob("*") if p.is_file()]
    assert len(files) >= 8
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o640)}


def _acme(mirror: Path) -> Path:
    """``acme/base`` and ``acme/other`` (the store tests' models) beside the quick and slow ones."""
    for name, source in (("base", templates.GOOD), ("other", templates.MULTILINE_EMPTY_THINK)):
        folder = mirror / f"acme--{name}"
        if not folder.exists():
            shutil.copytree(mirror / "acme--a-quick", folder)
            (folder / "chat_template.jinja").write_text(source, encoding="utf-8")
    return mirror


def stuck(key: str, events) -> str:
    """A task for the pool tests: ``stuck`` computes forever (as an audit of a template no render limit reaches
    would); ``slow`` waits longer than the limit without computing (an honest audit on a busy machine)."""
    while key == "stuck":
        sum(range(10_000))
    if key == "slow":
        time.sleep(3)
    return f"{key}: done"


def test_a_worker_past_the_audit_limit_is_replaced_and_its_row_says_why():
    done, failed = {}, {}
    pool = WorkerPool(1, stuck, task_cpu_seconds=1)
    finished = threading.Event()

    def run() -> None:
        tasks = [(key, (key,)) for key in ("stuck", "slow", "after")]
        pool.run(tasks, on_done=done.__setitem__, on_failed=failed.__setitem__)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    assert finished.wait(timeout=120), "the pool waited for the stuck task"
    assert done == {"slow": "slow: done", "after": "after: done"}, "the tasks after it ran on a fresh worker"
    assert list(failed) == ["stuck"]
    assert "ran past the limit of 1 CPU seconds per audit (--audit-seconds)" in failed["stuck"]


def test_the_audit_limit_is_cpu_time_not_the_wall_clock():
    """A task that waits three seconds (a busy machine's honest audit) is not ended by a limit of one second of CPU
    time: the limit measures the work the task does."""
    done, failed = {}, {}
    WorkerPool(1, stuck, task_cpu_seconds=1).run(
        [("slow", ("slow",))], on_done=done.__setitem__, on_failed=failed.__setitem__
    )
    assert done == {"slow": "slow: done"} and not failed


def _fail_audits_of(model_id: str, monkeypatch) -> None:
    """Make every audit of ``model_id`` raise, as an audit error does (the others run as they are)."""
    from tito_audit.audit import service

    real = service.audit

    def audit(loaded, options=None, progress=None):
        if loaded.resolved.model_id == model_id:
            raise RuntimeError("forced for the test")
        return real(loaded, options, progress)

    monkeypatch.setattr(service, "audit", audit)


def _published(out: Path, stem: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((out / "models").glob(f"{stem}.*"))}


@pytest.mark.parametrize("store_kept", [True, False], ids=["result-stored", "store-cleared"])
def test_a_failed_audit_keeps_the_published_result(mirror, tmp_path, monkeypatch, store_kept):
    """A row whose audit fails never takes away what was published: the row and its pages stay as they were (rebuilt
    from the stored result, or as published when the store no longer holds it), with a reason naming the failure and
    how to retry; a model published for the first time gets the failure row."""
    from tito_audit.matrix.row import KEPT

    out, store = tmp_path / "out", tmp_path / "store"
    first = run([BASE, OTHER], options_for(_acme(mirror), out, store))
    before_pages = _published(out, "acme--other")
    assert before_pages
    if not store_kept:
        shutil.rmtree(store)
    _fail_audits_of(OTHER, monkeypatch)
    # another count: another results key, so both pairs are audited again
    again = run([BASE, OTHER, "acme/a-quick"], options_for(_acme(mirror), out, store, count=5))
    rows = {row["model_id"]: row for row in again.rows}
    kept, earlier = rows[OTHER], {row["model_id"]: row for row in first.rows}[OTHER]
    assert kept["status"] == "audited" and kept["verdict"] == earlier["verdict"] == "broken"
    assert kept["results_key"] == earlier["results_key"], "the row names the result it shows"
    assert kept["reason"].startswith(KEPT) and "forced for the test" in kept["reason"] and "again" in kept["reason"]
    assert _published(out, "acme--other") == before_pages, "the model's pages were removed or changed"
    published = {row["model_id"]: row for row in json.loads((out / "matrix.json").read_text())}
    assert published[OTHER]["reason"] == kept["reason"] and published[OTHER]["verdict"] == "broken"
    assert KEPT in (out / "matrix.md").read_text() and KEPT in (out / "index.html").read_text()
    assert rows[BASE]["status"] == "audited" and not rows[BASE]["reason"], "the other pair was audited"
    assert rows["acme/a-quick"]["status"] == "audited", "a model published for the first time is audited"

    _fail_audits_of("acme/a-quick", monkeypatch)
    fresh = run(["acme/a-quick"], options_for(_acme(mirror), tmp_path / "new", store, count=4))
    assert fresh.rows[0]["status"] == AUDIT_ERROR, "a model never published gets the failure row"


def test_a_row_past_the_audit_limit_keeps_the_published_result(mirror, tmp_path, monkeypatch):
    """A pair whose worker ran past ``--audit-seconds`` (the pool's failure, as it reports it) keeps its published row,
    its model pages and its way-out pages; the reason names the limit and says to retry with a higher one."""
    from tito_audit.matrix import backends
    from tito_audit.matrix.row import KEPT

    out, store = tmp_path / "out", tmp_path / "store"
    first = run([BASE, OTHER], options_for(_acme(mirror), out, store))
    before = {folder: sorted(path.name for path in (out / folder).iterdir()) for folder in ("models", "fixes")}
    before_pages = _published(out, "acme--other")
    assert before_pages
    real = backends.LocalBackend.audit

    def past_the_limit(self, model_ids, options, on_outcome, on_event):
        """OTHER's worker ended past the limit, as the pool reports it; the others audited as they are."""
        over = f"its audit ran past the limit of {options.audit_seconds:g} CPU seconds per audit (--audit-seconds)"
        for model_id in model_ids:
            if model_id == OTHER:
                on_outcome(backends._worker_failed(model_id, f"{over}; its worker was ended and replaced"))
            else:
                real(self, [model_id], options, on_outcome, on_event)

    monkeypatch.setattr(backends.LocalBackend, "audit", past_the_limit)
    again = run([BASE, OTHER], options_for(_acme(mirror), out, store, count=5))
    kept = {row["model_id"]: row for row in again.rows}[OTHER]
    earlier = {row["model_id"]: row for row in first.rows}[OTHER]
    assert kept["status"] == earlier["status"] == "audited" and kept["verdict"] == earlier["verdict"]
    assert kept["report"] == earlier["report"] and kept["fix_report"] == earlier["fix_report"]
    assert kept["reason"].startswith(KEPT) and "--audit-seconds" in kept["reason"] and "higher" in kept["reason"]
    after = {folder: sorted(path.name for path in (out / folder).iterdir()) for folder in ("models", "fixes")}
    assert after == before, "a published file was removed"
    assert _published(out, "acme--other") == before_pages, "the model's pages changed"
