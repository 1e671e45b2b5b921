"""Fault injection: every writer of the library against a full file system leaves nothing partial behind.

The file system is a small tmpfs filled to the last byte when this process may mount one (root, or a user
namespace that allows it); otherwise a writer whose file object raises ENOSPC half-way through stands in for it.
Each writer is given a target that already holds a previous version: after the failure the target is exactly as it
was, and no temporary file is left in its folder.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import templates
from tito_audit import outputs
from tito_audit.errors import OutputError
from tito_audit.outputs import WriteFailed, write_atomically, write_if_changed, write_outputs

OLD = "the previous version\n"


class FullDisk:
    """A folder on which writes fail with ENOSPC: ``arm()`` fills it (or starts failing) after the targets exist."""

    def __init__(self, folder: Path, arm: Callable[[], None]) -> None:
        self.folder = folder
        self.arm = arm

    def target(self, name: str, content: str = OLD) -> Path:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return path

    def leftovers(self) -> list[str]:
        """Files other than the targets and the filler: what a failed write left behind."""
        return sorted(p.name for p in self.folder.rglob("*") if p.is_file() and p.name.endswith(".tmp"))


def _mount_tmpfs(folder: Path) -> bool:
    if not shutil.which("mount") or not shutil.which("umount"):
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0777", "tmpfs", str(folder)], capture_output=True, check=False
    )
    return done.returncode == 0


def _fill(folder: Path) -> None:
    with contextlib.suppress(OSError), (folder / "filler").open("wb", buffering=0) as filler:
        while True:
            filler.write(b"\0" * 4096)
    with contextlib.suppress(OSError), (folder / "filler-tail").open("wb", buffering=0) as tail:
        while True:
            tail.write(b"\0")


class _HalfWrites(io.BufferedWriter):
    """A file object that writes half of what it is given, then fails as a full disk does."""

    def write(self, data) -> int:  # type: ignore[override]
        super().write(bytes(data)[: len(data) // 2])
        super().flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture(params=["tmpfs", "fake"])
def full_disk(request, tmp_path, monkeypatch) -> Iterator[FullDisk]:
    folder = tmp_path / "disk"
    folder.mkdir()
    if request.param == "tmpfs":
        if not _mount_tmpfs(folder):
            pytest.skip("cannot mount a tmpfs here (needs root or a user namespace); the fake full disk runs instead")
        try:
            yield FullDisk(folder, lambda: _fill(folder))
        finally:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
        return
    real_fdopen = os.fdopen

    def failing_fdopen(fd, mode="r", *args, **kwargs):
        return _HalfWrites(io.FileIO(fd, "wb")) if "w" in mode else real_fdopen(fd, mode, *args, **kwargs)

    yield FullDisk(folder, lambda: monkeypatch.setattr(outputs.os, "fdopen", failing_fdopen))


def _assert_untouched(disk: FullDisk, *targets: Path) -> None:
    for target in targets:
        assert target.read_text(encoding="utf-8") == OLD, f"{target.name} was changed"
    assert disk.leftovers() == [], "a temporary file was left behind"


def test_write_atomically(full_disk):
    target = full_disk.target("report.json")
    full_disk.arm()
    with pytest.raises(WriteFailed, match="no space left on device"):
        write_atomically(target, json.dumps({"big": "x" * 100_000}))
    _assert_untouched(full_disk, target)


def test_write_if_changed(full_disk):
    target = full_disk.target("matrix.md")
    full_disk.arm()
    with pytest.raises(WriteFailed):
        write_if_changed(target, "# a new matrix\n" * 5000)
    _assert_untouched(full_disk, target)


def test_a_new_file_is_not_created_half_written(full_disk):
    full_disk.arm()
    with pytest.raises(WriteFailed):
        write_atomically(full_disk.folder / "new.json", "x" * 100_000)
    assert not (full_disk.folder / "new.json").exists() and full_disk.leftovers() == []


def test_patch_outputs_are_written_together_or_not_at_all(full_disk):
    """What ``patch -o`` does: the template and its diff, the existing template untouched, no diff written."""
    template = full_disk.target("chat_template.jinja")
    full_disk.arm()
    with pytest.raises(OutputError, match=r"^(-o|--diff) .*: no space left on device$"):
        write_outputs(
            [("-o", template, templates.GOOD * 200), ("--diff", template.with_name("chat_template.jinja.diff"), "d")]
        )
    _assert_untouched(full_disk, template)
    assert not template.with_name("chat_template.jinja.diff").exists()


def test_report_formatters(full_disk, tiny_model_dir, write_template):
    from tests.helpers import run_audit
    from tito_audit.formatters import ci
    from tito_audit.formatters.json_report import write_json
    from tito_audit.formatters.markdown import write_markdown
    from tito_audit.gate.policy import RequirementResult

    report = run_audit(tiny_model_dir, write_template("good", templates.GOOD), count=4)
    json_target, md_target, junit_target = (full_disk.target(n) for n in ("r.json", "r.md", "junit.xml"))
    full_disk.arm()
    for write in (
        lambda: write_json(report, json_target),
        lambda: write_markdown(report, md_target),
        lambda: ci.write(junit_target, ci.to_junit("m", [RequirementResult("x", True, "ok")] * 500, 1.0)),
    ):
        with pytest.raises(WriteFailed):
            write()
    _assert_untouched(full_disk, json_target, md_target, junit_target)


def test_results_store_entry(full_disk):
    """A store that cannot be written is a note and a run without storing, never a half-written entry."""
    from tito_audit.matrix.store import PairKey, ResultsStore

    store = ResultsStore(full_disk.folder / "store")
    full_disk.arm()
    store.put(PairKey("ab" + "0" * 62, {}), {"report": "x" * 100_000})
    assert store.counts.written == 0 and store.notes, "the failure was not noted"
    assert not list((full_disk.folder / "store").rglob("*.json")) and full_disk.leftovers() == []


def test_audit_json_on_a_full_disk_exits_2_and_keeps_the_old_report(full_disk, request, tiny_model_dir, write_template):
    if request.node.callspec.params["full_disk"] != "tmpfs":
        pytest.skip("the command runs in a subprocess: only a real full file system reaches it")
    target = full_disk.target("r.json")
    full_disk.arm()
    template = write_template("good", templates.GOOD)
    command = ["audit", str(tiny_model_dir), "--template", str(template), "-n", "2", "-q", "--json", str(target)]
    done = subprocess.run(
        [sys.executable, "-m", "tito_audit.cli", *command],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: --json {target}: no space left on device"
    _assert_untouched(full_disk, target)
