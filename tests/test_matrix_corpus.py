"""``tito-audit matrix --corpus``: a template corpus audited and published, entry problems said in one line each
while the run goes on, template errors named with their line, and the look-up finding any id of a template."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tito_audit.errors import BadInputError
from tito_audit.matrix.corpus import MISSING, SHA_MISMATCH, read_corpus, stage
from tito_audit.matrix.corpus_publish import lookup_data
from tito_audit.matrix.corpus_run import run_corpus
from tito_audit.matrix.matrix_options import MatrixOptions

CHATML = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
RAISE_LINE = 3
RAISES_ON_TOOL = (
    "{%- for m in messages %}\n"
    "<|im_start|>{{ m.role }}\n"
    '{%- if m.role == "tool" %}{{ m.content.no_such_method() }}{%- endif %}\n'
    "{{ m.content }}<|im_end|>\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}\n"
)
"""Renders until a tool message arrives, then raises at line ``RAISE_LINE`` (the ``m.content.no_such_method()``)."""


def _corpus(root: Path, entries: list[tuple[str, str | None, list[str], str | None]]) -> Path:
    """A corpus folder: (name, repo, aliases, template source or None for a missing file) per entry; an entry
    named ``*-wrong-sha`` gets an index sha256 that is not its file's."""
    folder = root / "corpus"
    (folder / "templates").mkdir(parents=True)
    index = []
    for downloads, (name, repo, aliases, source) in enumerate(entries):
        digest = hashlib.sha256((source or "").encode("utf-8")).hexdigest()
        if source is not None:
            (folder / "templates" / f"{name}.jinja").write_text(source, encoding="utf-8")
        if name.endswith("-wrong-sha"):
            digest = hashlib.sha256(b"something else").hexdigest()
        index.append(
            {"name": name, "origin": "huggingface", "repo": repo, "downloads": 10 * downloads, "aliases": aliases}
            | {"sha256": digest}
        )
    (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    folder = _corpus(
        root,
        [
            ("acme-chat", "acme/chat", ["fans/Chat-FT", "other/chat-merge"], CHATML),
            ("acme-raises", "acme/raises", [], RAISES_ON_TOOL),
            ("acme-missing", "acme/missing", ["x/missing-ft"], None),
            ("acme-wrong-sha", "acme/wrong", [], CHATML + "{# edited #}"),
            ("acme-syntax", "acme/syntax", [], "{%- for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}"),
        ],
    )
    problems: list[str] = []
    options = MatrixOptions(out_dir=root / "out", allow_hub=False, count=4, jobs=1, examples_per_group=1)
    run = run_corpus(folder, options, root / "stage", on_problem=problems.append)
    return run, problems, root / "out"


def test_a_missing_file_and_a_wrong_sha256_are_one_line_each_and_the_run_goes_on(published):
    run, problems, _ = published
    assert problems == run.problems and len(problems) == 2
    missing, wrong = problems
    assert missing.startswith("corpus entry acme-missing: templates/acme-missing.jinja is missing")
    assert wrong.startswith("corpus entry acme-wrong-sha: templates/acme-wrong-sha.jinja has sha256 ")
    assert all("\n" not in line for line in problems)
    by_name = {row["name"]: row for row in run.rows}
    assert list(by_name) == ["acme-chat", "acme-raises", "acme-missing", "acme-wrong-sha", "acme-syntax"]  # none lost
    assert (by_name["acme-missing"]["status"], by_name["acme-wrong-sha"]["status"]) == (MISSING, SHA_MISMATCH)
    assert by_name["acme-chat"]["status"] == "audited" and by_name["acme-chat"]["verdict"]
    assert by_name["acme-chat"]["level"] == "text"


def test_a_template_that_raises_mid_render_is_a_refusal_named_with_its_line(published):
    run, _, out = published
    row = next(row for row in run.rows if row["name"] == "acme-raises")
    assert row["status"] == "audited" and row["verdict"] == "unsupported"
    assert "no_such_method" in row["refused"] and row["refused"].endswith(f"(template line {RAISE_LINE})")
    assert (out / row["page"]).is_file()
    syntax = next(row for row in run.rows if row["name"] == "acme-syntax")
    assert syntax["status"] == "not audited: failed to load" and "not valid Jinja: line 3: " in syntax["reason"]


def test_any_id_shipping_a_template_and_its_sha256_find_its_row(published):
    run, _, out = published
    lookup = lookup_data(run.rows)
    chat = [row["name"] for row in run.rows].index("acme-chat")
    for query in ("acme/chat", "fans/chat-ft", "other/chat-merge", hashlib.sha256(CHATML.encode()).hexdigest()):
        assert lookup["ids"][query.lower()] == chat, query
    assert lookup["rows"][chat][0] == "acme-chat" and lookup["rows"][chat][6] == "templates/acme-chat.html"
    assert lookup["ids"]["x/missing-ft"] == [row["name"] for row in run.rows].index("acme-missing")
    assert "nobody/else" not in lookup["ids"]
    published_lookup = (out / "lookup.js").read_text(encoding="utf-8")
    assert json.loads(published_lookup.removeprefix("window.CORPUS = ").rstrip(";\n")) == lookup


def test_the_corpus_is_published_as_index_csv_parquet_and_pages(published):
    run, _, out = published
    index = json.loads((out / "index.json").read_text(encoding="utf-8"))
    assert [entry["name"] for entry in index] == [row["name"] for row in run.rows]
    chat = index[0]
    assert chat["aliases"] == ["fans/Chat-FT", "other/chat-merge"] and chat["model_ids"] == 3
    assert "sglang_verdict" not in chat  # only when the audit row carries one
    assert sorted(p.name for p in (out / "templates").iterdir()) == ["acme-chat.html", "acme-raises.html"]
    page = (out / "templates" / "acme-chat.html").read_text(encoding="utf-8")
    assert '<link rel="stylesheet" href="../style.css">' in page and "<style>" not in page
    assert "acme-chat" in (out / "corpus.csv").read_text(encoding="utf-8")
    assert (out / "corpus.parquet").stat().st_size > 0
    front = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="lookup"' in front and '<script src="lookup.js">' in front


def test_a_warm_run_audits_nothing_and_rewrites_nothing(tmp_path):
    folder = _corpus(tmp_path, [("acme-chat", "acme/chat", [], CHATML)])
    options = MatrixOptions(
        out_dir=tmp_path / "out", allow_hub=False, count=4, jobs=1, results_cache=tmp_path / "results"
    )
    cold = run_corpus(folder, options, tmp_path / "stage")
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*") if p.is_file()}
    warm = run_corpus(folder, options, tmp_path / "stage")
    assert (cold.audited, warm.audited, warm.from_store) == (1, 0, 1)
    assert warm.rows == cold.rows
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*") if p.is_file()} == before


def test_token_level_only_for_a_vocabulary_folder_named_exactly_after_a_shipping_id(tmp_path):
    mirror = tmp_path / "mirror"
    for name, files in (
        ("acme--chat-base", ("tokenizer.json",)),
        ("acme--chat-base-v2", ("tokenizer.json",)),
        ("mistralish--tekken-model", ("tekken.json",)),
        ("acme--template-only", ("chat_template.jinja",)),
    ):
        (mirror / name).mkdir(parents=True)
        for file in files:
            (mirror / name / file).write_text("{}", encoding="utf-8")
    folder = _corpus(
        tmp_path,
        [
            ("by-alias", "fans/chat-ft", ["acme/chat-base"], CHATML),
            ("near-miss", "acme/chat-base-v3", ["acme/Chat-Base-V2-ft"], CHATML + " "),
            ("tekken", "mistralish/tekken-model", [], CHATML + "  "),
            ("no-vocabulary", "acme/template-only", [], CHATML + "   "),
        ],
    )
    corpus = read_corpus(folder, [mirror])
    found = {entry.name: (entry.tokenizer_id, entry.model_id) for entry in corpus.entries}
    staged = stage(corpus.entries[0], tmp_path / "stage")
    assert staged.name == "acme--chat-base" and staged.parent.name == "by-alias"
    assert (staged / "chat_template.jinja").read_text(encoding="utf-8") == CHATML
    assert (staged / "tokenizer.json").resolve() == (mirror / "acme--chat-base" / "tokenizer.json").resolve()
    assert found == {
        "by-alias": ("acme/chat-base", "acme/chat-base"),
        "near-miss": ("", "acme/chat-base-v3"),
        "tekken": ("", "mistralish/tekken-model"),
        "no-vocabulary": ("", "acme/template-only"),
    }


def test_a_corpus_without_an_index_is_refused_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app

    result = CliRunner().invoke(
        app, ["matrix", "--corpus", str(tmp_path), "--out", str(tmp_path / "out")], standalone_mode=False
    )
    assert isinstance(result.exception, BadInputError)
    assert str(result.exception) == f"--corpus {tmp_path}: no index.json in {tmp_path}"
    result = CliRunner().invoke(app, ["matrix", "--corpus", str(tmp_path), "acme/chat"], standalone_mode=False)
    assert isinstance(result.exception, BadInputError) and "--corpus audits the corpus's templates" in str(
        result.exception
    )


def test_the_way_out_budget_counts_variant_audits_and_refuses_the_one_past_it():
    from types import SimpleNamespace

    from tito_audit.matrix.tasks import WayOutOverBudget, budgeted

    calls = []
    report = SimpleNamespace(variants=["default", "enable_thinking=false"])
    run = budgeted(lambda loaded, settings: calls.append(settings) or "report", report, MatrixOptions(Path("o")))
    assert [run(None, n) for n in range(9)] == ["report"] * 9  # no budget: no limit
    calls.clear()
    run = budgeted(
        lambda loaded, settings: calls.append(settings) or "report", report, MatrixOptions(Path("o"), way_out_budget=5)
    )
    assert run(None, 1) == run(None, 2) == "report"  # 2 variants each: 4 of 5 spent
    with pytest.raises(WayOutOverBudget, match="budget of 5 variant audits \\(2 variants per candidate fix\\)"):
        run(None, 3)
    assert calls == [1, 2]


def test_the_command_publishes_in_out_corpus_and_says_each_entry_problem_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app

    folder = _corpus(tmp_path, [("acme-chat", "acme/chat", [], CHATML), ("acme-gone", "acme/gone", [], None)])
    out = tmp_path / "reports"
    command = ["matrix", "--corpus", str(folder), "--out", str(out), "--no-hub", "--jobs", "1", "--count", "4"]
    command += ["--no-results-cache", "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "corpus entry acme-gone: templates/acme-gone.jinja is missing; not audited" in result.output
    assert "1 of 2 corpus templates audited" in " ".join(result.output.split())
    index = json.loads((out / "corpus" / "index.json").read_text(encoding="utf-8"))
    assert [row["status"] for row in index] == ["audited", MISSING]
    assert not (out / "index.html").exists()  # the curated matrix's front page is never touched
    assert json.loads((out / "corpus" / "settings.json").read_text(encoding="utf-8"))["count"] == 4


def test_a_git_symlink_stub_in_a_vocabulary_folder_is_staged_as_its_target(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "acme--base").mkdir(parents=True)
    (mirror / "acme--base" / "vocab.json").write_text('{"a": 0}', encoding="utf-8")
    (mirror / "acme--chat").mkdir()
    (mirror / "acme--chat" / "vocab.json").write_text("../acme--base/vocab.json", encoding="utf-8")  # the stub
    folder = _corpus(tmp_path, [("acme-chat", "acme/chat", [], CHATML)])
    (entry,) = read_corpus(folder, [mirror]).entries
    staged = stage(entry, tmp_path / "stage")
    assert (staged / "vocab.json").read_text(encoding="utf-8") == '{"a": 0}'


def test_verdict_shares_are_weighted_by_downloads():
    from tito_audit.matrix.corpus_site import corpus_front_page, shares

    rows = [
        {"status": "audited", "verdict": "ready", "downloads": 600},
        {"status": "audited", "verdict": "broken", "downloads": 300},
        {"status": "audited", "verdict": "broken", "downloads": 0},
        {"status": MISSING, "verdict": "", "downloads": 100},
    ]
    assert shares(rows) == [
        ("ready", 1, 600),
        ("ready-tool-only", 0, 0),
        ("broken", 2, 300),
        ("unsupported", 0, 0),
        ("not audited", 1, 100),
    ]
    named = [{**row, "name": f"t{i}", "repo": f"o/t{i}", "aliases": [], "page": ""} for i, row in enumerate(rows)]
    assert "60.0% of downloads are ready</strong>" in corpus_front_page(named, {"seed": 0, "count": 4})


def test_the_verdict_with_the_engines_parser_is_published_when_the_audit_row_has_one(tmp_path, monkeypatch):
    from tito_audit.matrix import corpus_publish

    plain = corpus_publish.row_from_report

    def with_parser(*args, **kwargs):  # an audit row that carries SGLang's parser verdict (issue 25 adds it)
        return {**plain(*args, **kwargs), "sglang_verdict": "broken"}

    monkeypatch.setattr(corpus_publish, "row_from_report", with_parser)
    folder = _corpus(tmp_path, [("acme-chat", "acme/chat", [], CHATML)])
    run_corpus(folder, MatrixOptions(out_dir=tmp_path / "out", allow_hub=False, count=4, jobs=1), tmp_path / "stage")
    (row,) = json.loads((tmp_path / "out" / "index.json").read_text(encoding="utf-8"))
    assert row["sglang_verdict"] == "broken" and row["verdict"] != ""
    assert "sglang_verdict" in (tmp_path / "out" / "corpus.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "with SGLang's parser: broken" in (tmp_path / "out" / "lookup.js").read_text(encoding="utf-8")


def test_the_look_up_finds_a_template_by_any_id_in_a_browser(published):
    from selenium.webdriver.common.by import By

    from tests.browser import chromium, console_errors

    run, _, out = published
    browser = chromium(1200, 800)
    try:
        browser.get((out / "index.html").as_uri() + "?q=FANS/Chat-FT")  # as the curated front page's form sends it
        found = browser.find_element(By.ID, "found").text
        assert "Template acme-chat (acme/chat, shipped by 3 hub ids)" in found, found
        box = browser.find_element(By.ID, "lookup")
        box.clear()
        box.send_keys(next(row["sha256"] for row in run.rows if row["name"] == "acme-raises"))
        assert "Template acme-raises" in browser.find_element(By.ID, "found").text
        box.clear()
        box.send_keys("nobody/else")
        assert browser.find_element(By.ID, "found").text.startswith("No template of the corpus is shipped by")
        assert console_errors(browser) == []
    finally:
        browser.quit()


def test_an_index_entry_that_is_not_a_template_entry_is_one_line_and_skipped(tmp_path):
    folder = _corpus(tmp_path, [("acme-chat", "acme/chat", [], CHATML)])
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    index += [{**index[0], "name": "../escape"}, {**index[0], "name": "nul\x00byte"}, "not an object"]
    (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    corpus = read_corpus(folder, [])
    assert [entry.name for entry in corpus.entries] == ["acme-chat"]
    assert [line.split(": ", 1)[1] for line in corpus.problems] == [
        "name '../escape' is not a file stem (letters, digits, . _ - @ +); skipped",
        "name 'nul\\x00byte' is not a file stem (letters, digits, . _ - @ +); skipped",
        "not an object; skipped",
    ]


def test_an_index_too_deep_or_too_big_and_an_endless_template_are_one_line(tmp_path):
    """The corpus is read like every file the user names: bounded, and JSON too deep to read is named."""
    from tito_audit.matrix.corpus import read_corpus

    (tmp_path / "index.json").write_text("[" * 100_000)
    with pytest.raises(BadInputError, match="nested too deeply"):
        read_corpus(tmp_path, [])
    (tmp_path / "index.json").write_bytes(b" " * (17 << 20))
    with pytest.raises(BadInputError, match="larger than 16 MiB"):
        read_corpus(tmp_path, [])
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "endless.jinja").symlink_to("/dev/zero")
    entry = {"name": "endless", "origin": "huggingface", "repo": "acme/endless", "downloads": 1, "aliases": []}
    (tmp_path / "index.json").write_text(json.dumps([{**entry, "sha256": "0" * 64}]))
    corpus = read_corpus(tmp_path, [])
    expected = "corpus entry endless: templates/endless.jinja cannot be read (larger than 4 MiB, or endless)"
    assert corpus.problems == [expected]
