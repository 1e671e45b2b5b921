"""The documentation's marked code blocks run as written (see tests/docs_blocks.py for the markers), so the docs
cannot go stale: a documented command that fails, exits otherwise, or prints something else fails here.

The Getting-started page's blocks are the newcomer check: they run in a fresh folder beside ../shared, as a new
user runs them after `make install`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.docs_blocks import SHARED, Block, all_blocks, commands, console_steps, matches, sandbox, shell

BLOCKS = all_blocks()


def test_the_docs_have_runnable_blocks():
    pages = {block.page for block in BLOCKS}
    assert "docs/getting-started.md" in pages, "the Getting-started page must have runnable blocks"
    assert {block.kind for block in BLOCKS} == {"output", "run", "python"}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_documented_block_runs(block: Block, tmp_path):
    if block.needs_shared and not SHARED.is_dir():
        pytest.skip(f"{block.id} needs ../shared (the corpus beside the project), which is absent")
    project = sandbox(tmp_path)
    if block.kind == "python":
        script = project / "example.py"
        script.write_text(block.text)
        done = subprocess.run(
            [sys.executable, script.name], cwd=project, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{block.id}: the example failed:\n{done.stderr[-3000:]}"
        return
    if block.kind == "run":
        for command in commands(block.text):
            done = shell(command, project)
            assert done.returncode == block.exit_code, (
                f"{block.id}: `{command}` exited {done.returncode}:\n{done.stdout[-3000:]}"
            )
        return
    steps = console_steps(block.text)
    assert steps, f"{block.id}: a console block without a `$ command` line"
    for command, expected in steps:
        done = shell(command, project)
        actual = [line.rstrip() for line in done.stdout.splitlines()]
        assert done.returncode == block.exit_code, f"{block.id}: `{command}` exited {done.returncode}:\n{done.stdout}"
        assert matches(expected, actual), (
            f"{block.id}: `{command}` no longer prints what the docs say.\n--- documented\n"
            + "\n".join(expected)
            + "\n--- printed\n"
            + "\n".join(actual)
        )
