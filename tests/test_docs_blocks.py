"""The documentation's marked code blocks run as written (see tests/docs_blocks.py for the markers), so the docs
cannot go stale: a documented command that fails, exits otherwise, or prints something else fails here.

The Getting-started page's blocks are the newcomer check: they run in a fresh folder beside ../shared, as a new
user runs them after `make install` (CI's .ci/run runs this from a fresh clone with a fresh .venv)."""

from __future__ import annotations

import pytest

from tests.docs_blocks import SHARED, Block, all_blocks, blocks, matches, run_block, sandbox

BLOCKS = all_blocks()


def test_the_docs_have_runnable_blocks():
    pages = {block.page for block in BLOCKS}
    assert "docs/getting-started.md" in pages, "the Getting-started page must have runnable blocks"
    assert "README.md" in pages, "the README's session example must run"
    assert {block.kind for block in BLOCKS} == {"output", "run", "python"}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_documented_block_runs(block: Block, tmp_path):
    if block.needs_shared and not SHARED.is_dir():
        pytest.skip(f"{block.id} needs ../shared (the corpus beside the project), which is absent")
    problem = run_block(block, sandbox(tmp_path))
    assert problem is None, problem


def test_a_stale_block_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- test: output -->\n```console\n$ echo one; echo two\none\nthree\n```\n\n"
        "<!-- test: output exit=1 -->\n```console\n$ echo one\none\n```\n\n"
        "<!-- test: run -->\n```bash\nfalse  # documented as working\n```\n\n"
        "<!-- test: python -->\n```python\nassert 1 + 1 == 3\n```\n\n"
        "```console\n$ not marked, never run\n```\n"
    )
    stale = blocks(page, root=tmp_path)
    assert [b.kind for b in stale] == ["output", "output", "run", "python"]
    project = tmp_path / "project"
    project.mkdir()
    problems = [run_block(b, project) for b in stale]
    assert "no longer prints what the docs say" in problems[0] and "three" in problems[0]
    assert "exited 0, not 1" in problems[1]
    assert "exited 1, not 0" in problems[2]
    assert "the example failed" in problems[3] and "AssertionError" in problems[3]


def test_ellipsis_lines_match_any_lines():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a"], ["a", "b"])
