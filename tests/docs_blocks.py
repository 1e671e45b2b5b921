"""The code blocks of the documentation that run in the test suite, and how they run.

A block runs when the line just before its fence is a marker comment (invisible on the site and on GitHub):

- ``<!-- test: output -->`` before a ``console`` block: each ``$ command`` line runs in a shell and what it prints
  (stdout and stderr) must equal the lines below it, up to the next ``$`` line; a line ``...`` stands for any
  number of lines. ``exit=N`` (default 0) is the exit code each command must end with.
- ``<!-- test: run -->`` before a ``bash`` block: each line (comments stripped) runs and must exit with ``exit=N``.
- ``<!-- test: python -->`` before a ``python`` block: the block runs as a script and must exit 0 (its own
  ``assert`` lines say what must hold).

Every block runs in a fresh folder beside ``../shared`` (a temporary ``project/`` whose ``../shared`` is the real
corpus and whose ``reports`` is the project's), with ``tito-audit`` from this interpreter's environment and the
Hub off, so a documented command works from a fresh clone as written. A block that names ``../shared`` is skipped,
with the reason, when the corpus is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SHARED = ROOT.parent / "shared"
MARKER = re.compile(r"^<!--\s*test:\s*(output|run|python)((?:\s+\w+=\S+)*)\s*-->\s*$")
FENCE = re.compile(r"^(```+)\s*(\w*)")


@dataclass(frozen=True)
class Block:
    """One marked code block: where it is, how it runs, and its text."""

    page: str
    line: int
    kind: str
    exit_code: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs_shared(self) -> bool:
        return "../shared" in self.text


def blocks(page: Path, root: Path = ROOT) -> list[Block]:
    """The marked blocks of one Markdown page (named relative to ``root``)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    for i, line in enumerate(lines):
        marker = MARKER.match(line.strip())
        if not marker or i + 1 >= len(lines) or not (fence := FENCE.match(lines[i + 1])):
            continue
        options = dict(pair.split("=", 1) for pair in marker.group(2).split())
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith(fence.group(1)))
        text = "\n".join(lines[i + 2 : end]) + "\n"
        found.append(
            Block(page.relative_to(root).as_posix(), i + 2, marker.group(1), int(options.get("exit", 0)), text)
        )
    return found


def all_blocks() -> list[Block]:
    """Every marked block of README.md and docs/**/*.md."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return [block for page in pages for block in blocks(page)]


def sandbox(tmp: Path) -> Path:
    """A fresh project folder beside the corpus: ``tmp/project`` with ``../shared`` and ``reports`` linked."""
    project = tmp / "project"
    project.mkdir()
    if SHARED.is_dir():
        (tmp / "shared").symlink_to(SHARED, target_is_directory=True)
    (project / "reports").symlink_to(ROOT / "reports", target_is_directory=True)
    return project


def environment() -> dict[str, str]:
    """This interpreter's environment first on PATH (its ``tito-audit``), the Hub off, plain output."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(HF_HUB_OFFLINE="1", TERM="dumb", NO_COLOR="1", COLUMNS="120", PYTHONPATH=str(ROOT))
    return env


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one documented command (stdout and stderr together, as a reader sees them)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """``(command, expected lines)`` of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line.rstrip())
    return steps


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line equality, where an expected line ``...`` stands for any number of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def commands(text: str) -> list[str]:
    """The commands of a bash block: one a line, comments and blank lines left out."""
    found = []
    for line in text.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            found.append(command)
    return found


def run_block(block: Block, project: Path) -> str | None:
    """Run one block in ``project``; ``None`` when it does what the docs say, else why not."""
    if block.kind == "python":
        script = project / "example.py"
        script.write_text(block.text, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=project,
            env=environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        return None if done.returncode == 0 else f"{block.id}: the example failed:\n{done.stderr[-3000:]}"
    if block.kind == "run":
        for command in commands(block.text):
            ran = shell(command, project)
            if ran.returncode != block.exit_code:
                return f"{block.id}: `{command}` exited {ran.returncode}, not {block.exit_code}:\n{ran.stdout[-3000:]}"
        return None
    steps = console_steps(block.text)
    if not steps:
        return f"{block.id}: a console block without a `$ command` line"
    for command, expected in steps:
        ran = shell(command, project)
        actual = [line.rstrip() for line in ran.stdout.splitlines()]
        if ran.returncode != block.exit_code:
            return f"{block.id}: `{command}` exited {ran.returncode}, not {block.exit_code}:\n{ran.stdout[-3000:]}"
        if not matches(expected, actual):
            return (
                f"{block.id}: `{command}` no longer prints what the docs say.\n--- documented\n"
                + "\n".join(expected)
                + "\n--- printed\n"
                + "\n".join(actual)
            )
    return None
