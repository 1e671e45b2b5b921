"""Progress and outcome lines of the long commands (``matrix``, the corpus): a line per model off a terminal, and what
a run wrote in its output folder."""

from __future__ import annotations

import time
from pathlib import Path

from tito_audit.cli.outcomes import err

FILES_SHOWN = 6
"""Files named in the line that says what a run wrote (the rest are counted)."""


class ProgressLines:
    """Progress off a terminal (CI logs, ``make matrix`` piped), on stderr: a line when the run starts, then one per
    model when it is done: ``[12/63] Qwen/Qwen3-4B: audited in 212s (1500s since the start)``, or instead of
    ``audited in``, ``from stored results``, ``the pair of org/name``, ``not audited: not reachable``."""

    def __init__(self, total: int | None, noun: str = "models") -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.audit_started: dict[str, float] = {}
        self.settled: dict[str, str] = {}
        err.print(f"{total or 'the'} {noun}: a line for each as it is done", highlight=False)

    def __call__(self, event: tuple[str, str, int, int]) -> None:
        from tito_audit.matrix.run import SETTLED

        model_id, stage, _, _ = event
        now = time.monotonic()
        if stage.startswith(SETTLED):
            self.settled[model_id] = stage.removeprefix(SETTLED)
            return
        if stage != "done":
            self.audit_started.setdefault(model_id, now)
            return
        self.done += 1
        began = self.audit_started.pop(model_id, None)
        what = self.settled.pop(model_id, "")
        if began is not None:
            what = f"audited in {now - began:.0f}s" + (f" ({what})" if what else "")
        count = f"{self.done}/{self.total}" if self.total else str(self.done)
        err.print(
            f"[{count}] {model_id}: {what or 'done'} ({now - self.started:.0f}s since the start)",
            highlight=False,
            soft_wrap=True,
        )


def folder_state(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its modification time in nanoseconds: the matrix rewrites a file only when
    its bytes change, so the files whose time moved are the ones a run wrote."""
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()
    }


def what_changed(folder: Path, before: dict[str, int], after: dict[str, int]) -> str:
    """One line: the files a run wrote and removed in ``folder``, or that it is unchanged."""
    wrote = sorted(name for name, mtime in after.items() if before.get(name) != mtime)
    removed = sorted(set(before) - set(after))
    if not wrote and not removed:
        return f"{folder}/ unchanged: every file already held these results"
    shown = ", ".join(wrote[:FILES_SHOWN]) + (
        f" and {len(wrote) - FILES_SHOWN} more" if len(wrote) > FILES_SHOWN else ""
    )
    parts = [f"wrote {len(wrote)} file{'s' if len(wrote) != 1 else ''} in {folder}/ ({shown})"] if wrote else []
    if removed:
        parts.append(
            f"removed {len(removed)} ({', '.join(removed[:FILES_SHOWN])}{', …' if len(removed) > FILES_SHOWN else ''})"
        )
    return "; ".join(parts)
