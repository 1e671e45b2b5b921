"""The HTML pages: the front page (``index.html``) and the page per model, their numbers against the JSON data,
escaping, determinism, size, ``audit --html``, the matrix writing them, and the pages in a headless browser."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests import templates
from tests.helpers import load
from tests.test_cli import run_cli
from tito_audit.audit.results import VERDICT_ORDER, AuditReport, Failure, TokenWindow
from tito_audit.audit.serialization import report_from_dict
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.formatters.json_report import to_json
from tito_audit.formatters.site import PageLinks, model_page
from tito_audit.formatters.site.examples import examples
from tito_audit.formatters.site.highlight import classes, diff_html
from tito_audit.formatters.site.markdown_lite import to_html as markdown_html
from tito_audit.formatters.site.tokens import first_difference, token_diff, visible
from tito_audit.matrix.front_page import front_page
from tito_audit.matrix.row import AUDITED, NOT_REACHABLE, VOLATILE_COLUMNS
from tito_audit.repair.explanations import attach_explanations

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
PUBLISHED_ROWS = REPORTS / "matrix.json"
EVIL = "<script>alert('x')</script><img src=x onerror=alert(1)>"


# -- data -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broken(tiny_model_dir, tmp_path_factory) -> AuditReport:
    """A small audit of a multi-line template that drops the empty think block from history, with explanations."""
    path = tmp_path_factory.mktemp("site-templates") / "broken.jinja"
    path.write_text(templates.MULTILINE_EMPTY_THINK, encoding="utf-8")
    loaded = load(tiny_model_dir, path)
    report = audit(loaded, AuditOptions(count=16, max_examples_per_group=2))
    attach_explanations(report, loaded)
    return report


@pytest.fixture(scope="module")
def published_rows() -> list[dict]:
    return json.loads(PUBLISHED_ROWS.read_text(encoding="utf-8"))


def published_report(name: str) -> AuditReport:
    return report_from_dict(json.loads((REPORTS / "models" / f"{name}.json").read_text(encoding="utf-8")))


class Elements(HTMLParser):
    """Every element's tag, attributes and text (its own and its descendants'), in document order."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.open: list[int] = []
        self.feed(page)

    VOID = frozenset({"meta", "col", "br", "img", "input", "link", "hr"})

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs), []))
        if tag not in self.VOID:
            self.open.append(len(self.found) - 1)

    def handle_endtag(self, tag):
        while self.open:
            if self.found[self.open.pop()][0] == tag:
                break

    def handle_data(self, data):
        for index in self.open:
            self.found[index][2].append(data)

    def select(self, tag: str | None = None, **wanted: str) -> list[tuple[dict[str, str | None], str]]:
        """``(attributes, text)`` of the elements with ``tag`` whose attributes hold ``wanted`` (``class_`` is a
        class name among the element's classes)."""
        out = []
        for name, attrs, text in self.found:
            if tag is not None and name != tag:
                continue
            ok = True
            for key, value in wanted.items():
                if key == "class_":
                    ok = ok and value in (attrs.get("class") or "").split()
                else:
                    ok = ok and attrs.get(key.replace("_", "-")) == value
            if ok:
                out.append((attrs, "".join(text)))
        return out


def numbers(text: str) -> set[str]:
    """Standalone numbers of ``text`` (not digits inside words or hashes)."""
    return set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])", text))


def visible_text(page: str) -> str:
    body = re.sub(r"<style>.*?</style>|<script>.*?</script>", " ", page, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", body))


# -- pieces -----------------------------------------------------------------------------------------------------
def test_token_diff_marks_the_first_differing_token_in_both_rows():
    failure = Failure(
        "rollout",
        "text",
        "tool",
        "c1",
        3,
        ["tool"],
        ["empty-think-dropped"],
        token_index=12,
        expected=TokenWindow(10, [1, 2, 3, 4], ["a", " b", "<think>", "\n"]),
        actual=TokenWindow(10, [1, 2, 5], ["a", " b", "<tool_call>"]),
    )
    assert first_difference(failure) == 2
    page = Elements(token_diff(failure, ("buffer as sampled", "template's next prompt")))
    first = page.select("td", class_="first")
    assert [text for _, text in first] == ["<think>", "<tool_call>"]
    assert [text for _, text in page.select("th", class_="first")] == ["▼ 12"]
    assert [a["data-id"] for a, _ in page.select("span", class_="special")][:2] == ["3", "5"]
    assert "·b" in "".join(t for _, t in page.select("td", class_="same"))  # a space drawn as ·
    assert next(t for _, t in page.select("td", class_="after")) == "⏎"
    assert [t for _, t in page.select("td", class_="none")] == ["–"]  # the shorter window ends


def test_jinja_lines_and_diffs_are_coloured_and_changes_marked():
    line = "{%- if loop.last and x == 'a' %}text{{ y | tojson }}"
    kinds = classes(line)
    assert kinds[line.index("if")] == "k" and kinds[line.index("'a'")] == "s" and kinds[line.index("text")] == "t"
    assert kinds[line.index("| tojson")] == "f" and kinds[0] == "d"
    diff = "--- a/t\n+++ b/t\n@@ -1,2 +1,2 @@\n ctx\n-{%- if loop.last %}\n+{%- if true %}\n"
    page = Elements(diff_html(diff))
    assert [a["class"] for a, _ in page.select("tr")] == ["file", "file", "hunk", "ctx", "del", "add"]
    marked = [text for _, text in page.select("mark")]
    assert "loop.last" in "".join(marked[:2]) and "true" in "".join(marked[2:])


def test_markdown_of_way_out_pages_becomes_tables_with_verdict_chips_and_no_unsafe_link():
    html = markdown_html(
        [
            "## Fix: keep the empty think block",
            "",
            "- `as-sampled`: earlier turns **as sampled**",
            "",
            "| variant | before | after | why |",
            "|---|---|---|---|",
            "| `default` | broken | ready | a \\| b |",
            "",
            "[x](javascript:alert(1)) [diff](a--b.diff) <b>raw</b>",
        ]
    )
    page = Elements(html)
    assert [a["data-verdict"] for a, _ in page.select("span", class_="v")] == ["broken", "ready"]
    assert [t for _, t in page.select("td")][-1] == "a | b"
    assert [a["href"] for a, _ in page.select("a")] == ["a--b.diff"]
    assert "<b>" not in html and "&lt;b&gt;raw" in html


# -- the model page ---------------------------------------------------------------------------------------------
def test_model_page_shows_verdict_variants_and_each_cause_with_its_template_lines(broken):
    page = model_page(broken)
    dom = Elements(page)
    assert broken.verdict == "broken"
    assert [a["data-verdict"] for a, _ in dom.select("a", class_="big")] == ["broken"]
    worst = next(v for v in broken.variants if v.verdict == broken.verdict)
    assert worst.verdict_reason in dom.select("p", id="reason")[0][1]
    shown = examples(broken)
    cards = dom.select("article", class_="example")
    assert [a["data-causes"] for a, _ in cards] == [" ".join(e.causes) for e in shown]
    assert "empty-think-dropped" in cards[0][0]["data-causes"]
    # the first example is a rollout step: the buffer as sampled against the template's next prompt
    first = shown[0]
    assert first.failure.check == "rollout" and first.explanation is not None
    assert "buffer as sampled" in cards[0][1] and "template's next prompt" in cards[0][1]
    # the template lines behind it: line 7 writes the empty block only for the last message
    assert "{{- '<think>\\n\\n</think>\\n\\n' }}" in unescape(cards[0][1])
    assert dom.select("tr", class_="accent")


def test_every_number_of_a_model_page_comes_from_its_json_report(broken):
    page = model_page(broken)
    dom = Elements(page)
    for variant in broken.variants:
        for name, check in variant.checks.items():
            for row in check.rows:
                (cells,) = [t for a, t in dom.select("tr", data_check=name, data_category=row.category)][:1] or [None]
                assert cells is not None, (name, row.category)
                assert cells.endswith(f"{row.cases}{row.passed}{row.failed}{row.refused}")
    chips = {a["data-variant"]: t for a, t in dom.select("span", class_="variant-chip")}
    assert chips == {v.name: f"{v.name}{v.verdict}" for v in broken.variants} or len(broken.variants) == 1
    # every number in the page's text is a number of the JSON report (or a token position in a shown window)
    document = to_json(broken)
    allowed = numbers(document)
    for example in examples(broken):
        for window in (example.failure.expected, example.failure.actual):
            if window is not None:
                allowed |= {str(window.start + i) for i in range(len(window.ids))}
    assert numbers(visible_text(page)) <= allowed, numbers(visible_text(page)) - allowed


def test_unsupported_model_page_lists_what_the_template_refuses():
    report = published_report("google--gemma-3-4b-it")
    assert report.verdict == "unsupported"
    dom = Elements(model_page(report))
    (section,) = dom.select("section", id="refused")
    counts = [int(t) for a, t in dom.select("td") if a.get("class") == "num" and t.strip().isdigit()]
    assert counts[: len(report.variants[0].refused)] == [r.count for r in report.variants[0].refused]
    assert report.variants[0].refused[0].reason in unescape(section[1])


def test_first_differing_token_on_the_page_is_the_json_reports(broken):
    document = json.loads(to_json(broken))
    page = Elements(model_page(broken))
    explanation = document["explanations"][0]
    failure = explanation["failure"]
    at = failure["token_index"] - failure["expected"]["start"]
    assert next(t for _, t in page.select("th", class_="first")) == f"▼ {failure['token_index']}"
    texts = [t for _, t in page.select("td", class_="first")][:2]
    assert texts == [visible(failure["expected"]["texts"][at]), visible(failure["actual"]["texts"][at])]
    chips = [a for a, _ in page.select("span", class_="tok")]
    marked = [int(a["data-id"]) for a in chips if a["title"].startswith(f"token {failure['token_index']} ")][:2]
    assert marked == [failure["expected"]["ids"][at], failure["actual"]["ids"][at]]


def test_model_page_escapes_message_and_template_text(broken):
    evil = replace(broken, model=replace(broken.model, model_id=f"acme/{EVIL}"), notes=[EVIL])
    variant = evil.variants[0]
    failure = variant.failures[0]
    assert failure.expected is not None
    texts = [EVIL, *failure.expected.texts[1:]]
    variant.failures[0] = replace(
        failure, expected_text=EVIL * 3, detail=EVIL, expected=replace(failure.expected, texts=texts)
    )
    evil.explanations = [{**e, "sides": [{"side": "earlier", "render": EVIL, "lines": [
        {"number": 1, "text": EVIL, "reads": [EVIL]}]}]} for e in broken.explanations]  # fmt: skip
    page = model_page(evil, links=PageLinks(index=EVIL))
    assert "<script>alert" not in page and "<img" not in page and "<script" not in page
    assert "&lt;script&gt;alert(" in page


def test_long_template_lines_are_not_quoted_whole(broken):
    from tito_audit.repair.explanations import clip_lines

    long = "{{- 'x' }}" * 100
    clipped = replace(broken, explanations=[json.loads(json.dumps(e)) for e in broken.explanations])
    with_sides = [e for e in clipped.explanations if e["sides"]]
    assert with_sides
    for explanation in with_sides:
        explanation["sides"][0]["lines"] = [{"number": 1, "text": long, "reads": []}]
    text = unescape(re.sub(r"<[^>]+>", "", model_page(clipped)))
    assert long not in text and f"{long[:240]} …" in text
    clip_lines(clipped, 50)  # what the matrix publishes
    assert all(len(line["text"]) <= 52 for e in clipped.explanations for side in e["sides"] for line in side["lines"])


def test_model_page_is_deterministic_and_the_same_from_the_json_report(broken):
    page = model_page(broken)
    assert model_page(broken) == page
    assert model_page(report_from_dict(json.loads(to_json(broken)))) == page


def test_pages_hold_no_timestamp_or_duration(broken, published_rows):
    """What lets the published-matrix test compare the pages whole: the volatile fields never reach them."""
    assert model_page(replace(broken, generated_at="1999-01-01T00:00:00", duration_seconds=1234.5)) == model_page(
        broken
    )
    moved = [{**row, **dict.fromkeys(VOLATILE_COLUMNS, "1999")} for row in published_rows]
    assert front_page(moved, {"seed": 0, "count": 96}) == front_page(published_rows, {"seed": 0, "count": 96})


def test_largest_published_report_gives_a_page_under_one_megabyte():
    largest = max((REPORTS / "models").glob("*.json"), key=lambda p: p.stat().st_size)
    page = model_page(report_from_dict(json.loads(largest.read_text(encoding="utf-8"))))
    assert len(page.encode("utf-8")) < 1_000_000, largest.name


def test_audit_writes_the_page_atomically_with_html(tiny_model_dir, write_template, tmp_path):
    template = str(write_template("broken", templates.MULTILINE_EMPTY_THINK))
    page, report = tmp_path / "page.html", tmp_path / "r.json"
    result = run_cli(
        "audit", str(tiny_model_dir), "--template", template, "-n", "12", "--html", str(page), "--json", str(report)
    )
    assert result.returncode == 1, result.stderr  # broken
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["explanations"], "audit attaches explanations"
    assert page.read_text(encoding="utf-8") == model_page(report_from_dict(data))
    (tmp_path / "folder.html").mkdir()
    failed = run_cli(
        "audit", str(tiny_model_dir), "--template", template, "-n", "4", "--html", str(tmp_path / "folder.html")
    )
    assert failed.returncode == 2 and "--html" in failed.stderr and "is a folder" in failed.stderr
    assert not list(tmp_path.glob(".*.tmp"))


# -- the front page ---------------------------------------------------------------------------------------------
def test_front_page_counts_come_from_the_rows(published_rows):
    page = front_page(published_rows, {"seed": 0, "count": 96})
    dom = Elements(page)
    audited = [r for r in published_rows if r["status"] == AUDITED]
    counts = Counter(r["verdict"] for r in audited)
    legend = {a["data-pick-verdict"]: int(a["data-count"]) for a, _ in dom.select("button") if a.get("data-count")}
    assert legend == {v: counts.get(v, 0) for v in VERDICT_ORDER}
    segments = {a["class"].split()[1]: int(t) for a, t in dom.select("div", class_="seg")}
    assert segments == {f"v-{v}": n for v, n in counts.items() if n}
    assert dom.select("div", id="verdicts")[0][0]["data-audited"] == str(len(audited))
    families = Counter(r["family"] or "other" for r in published_rows)
    for attrs, _ in dom.select("button"):
        if attrs.get("data-family-count"):
            assert int(attrs["data-family-count"]) == families[attrs["data-pick-family"]]
    shown = [a["data-model"] for a, _ in dom.select("tr", class_="model") if "unreachable" not in a["class"]]
    hidden = [a["data-model"] for a, _ in dom.select("tr", class_="unreachable")]
    assert sorted(hidden) == sorted(r["model_id"] for r in published_rows if r["status"] == NOT_REACHABLE)
    assert sorted(shown + hidden) == sorted(r["model_id"] for r in published_rows)
    links = {a["href"] for a, _ in dom.select("a") if (a.get("href") or "").startswith("models/")}
    assert links == {r["report"].replace(".md", ".html") for r in audited}


def test_front_page_escapes_rows_and_is_deterministic(published_rows):
    rows = [dict(published_rows[0], model_id=f"evil/{EVIL}", way_out=EVIL, main_causes=EVIL, family=EVIL)]
    rows.append(dict(published_rows[-1], status=NOT_REACHABLE, model_id=EVIL, reason=EVIL))
    page = front_page(rows, {"seed": EVIL, "count": 1})
    assert page.count("<script>") == 1 and "<img" not in page and "&lt;script&gt;alert(" in page
    assert front_page(published_rows, {"seed": 0, "count": 96}) == front_page(published_rows, {"seed": 0, "count": 96})


# -- the matrix writes them -------------------------------------------------------------------------------------
def test_matrix_writes_a_page_per_model_with_its_way_out(tiny_model_dir, tmp_path):
    import shutil

    from tito_audit.matrix.run import MatrixOptions, run_matrix
    from tito_audit.matrix.tables import write_matrix

    mirror = tmp_path / "mirror"
    for name, source in (("ready", templates.GOOD), ("broken", templates.MULTILINE_EMPTY_THINK)):
        shutil.copytree(tiny_model_dir, mirror / f"acme--{name}")
        (mirror / f"acme--{name}" / "chat_template.jinja").write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    (out / "models").mkdir(parents=True)
    (out / "models" / "gone--model.html").write_text("old", encoding="utf-8")
    options = MatrixOptions(out_dir=out, mirrors=[mirror], allow_hub=False, count=8, jobs=1)
    rows = run_matrix(["acme/ready", "acme/broken", "acme/missing"], options).rows
    write_matrix(rows, out, {"seed": 0, "count": 8})
    assert sorted(p.name for p in (out / "models").glob("*.html")) == ["acme--broken.html", "acme--ready.html"]
    page = (out / "models" / "acme--broken.html").read_text(encoding="utf-8")
    dom = Elements(page)
    data = json.loads((out / "models" / "acme--broken.json").read_text(encoding="utf-8"))
    assert data["explanations"], "the matrix explains each cause for its pages"
    assert dom.select("section", id="way-out") and dom.select("tr", class_="del") and dom.select("tr", class_="add")
    assert [a["href"] for a, _ in dom.select("a") if "fixes/" in (a.get("href") or "")] == [
        "../fixes/acme--broken.md",
        "../fixes/acme--broken.diff",
    ]
    # the way out says what its Markdown page and diff say (one FixPage behind all three)
    table = [t for _, t in dom.select("table", class_="plain") if "before" in t]
    assert table and "defaultbrokenready" in table[0].replace(" ", "")
    published = (out / "fixes" / "acme--broken.diff").read_text(encoding="utf-8").splitlines()
    assert [t for _, t in dom.select("td", class_="src")] == [line or " " for line in published]
    index = Elements((out / "index.html").read_text(encoding="utf-8"))
    assert {a["href"] for a, _ in index.select("a") if (a.get("href") or "").startswith("models/")} == {
        "models/acme--broken.html",
        "models/acme--ready.html",
    }


# -- in a browser -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    from tests.browser import chromium

    driver = chromium(1400, 900)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory, published_rows, broken) -> Path:
    """The front page of the published rows, and two model pages: the tiny broken audit, a published ready one."""
    out = tmp_path_factory.mktemp("site")
    (out / "index.html").write_text(front_page(published_rows, {"seed": 0, "count": 96}), encoding="utf-8")
    (out / "broken.html").write_text(model_page(broken), encoding="utf-8")
    ready = published_report("meta-llama--Llama-3.1-8B-Instruct")
    (out / "ready.html").write_text(model_page(ready), encoding="utf-8")
    return out


def _displayed(browser, selector: str) -> list[str]:
    """``data-model`` of the elements matching ``selector`` that are rendered (one round trip)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".filter((e) => e.checkVisibility()).map((e) => e.dataset.model);",
        selector,
    )


def test_front_page_fits_a_laptop_screen_and_folds_unreachable_rows(browser, site, published_rows):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from tests.browser import console_errors

    browser.get((site / "index.html").as_uri())
    inner, width, client = browser.execute_script(
        "const e = document.documentElement; return [window.innerWidth, e.scrollWidth, e.clientWidth]"
    )
    assert inner == 1400 and width <= client, f"a horizontal scrollbar at 1400×900 ({width} > {client})"
    unreachable = sorted(r["model_id"] for r in published_rows if r["status"] == NOT_REACHABLE)
    assert unreachable and _displayed(browser, "tr.unreachable") == []
    audited = [r["model_id"] for r in published_rows if r["status"] == AUDITED]
    assert sorted(_displayed(browser, "#matrix tr.model")) == sorted(audited)
    toggle = browser.find_element(By.CSS_SELECTOR, "#unreachable > summary")
    toggle.click()
    assert sorted(_displayed(browser, "tr.unreachable")) == unreachable
    toggle.send_keys(Keys.ENTER)  # the keyboard folds it again
    assert _displayed(browser, "tr.unreachable") == []
    assert console_errors(browser) == []


def test_front_page_filters_by_verdict_family_and_text(browser, site, published_rows):
    from selenium.webdriver.common.by import By

    from tests.browser import console_errors

    browser.get((site / "index.html").as_uri())
    audited = [r for r in published_rows if r["status"] == AUDITED]
    browser.find_element(By.CSS_SELECTOR, "button[data-pick-verdict='broken']").click()
    assert sorted(_displayed(browser, "#matrix tr.model")) == sorted(
        r["model_id"] for r in audited if r["verdict"] == "broken"
    )
    assert browser.find_element(By.ID, "shown").text.startswith(f"{sum(r['verdict'] == 'broken' for r in audited)} of")
    browser.find_element(By.CSS_SELECTOR, "button[data-pick-verdict='broken']").click()  # again: all verdicts
    browser.find_element(By.CSS_SELECTOR, "button[data-pick-family='Qwen3']").click()
    assert sorted(_displayed(browser, "#matrix tr.model")) == sorted(
        r["model_id"] for r in audited if r["family"] == "Qwen3"
    )
    browser.find_element(By.CSS_SELECTOR, "button[data-pick-family='Qwen3']").click()
    browser.find_element(By.ID, "filter").send_keys("closing-rewritten")
    assert sorted(_displayed(browser, "#matrix tr.model")) == sorted(
        r["model_id"] for r in audited if "closing-rewritten" in r["main_causes"]
    )
    way_out = browser.find_element(By.CSS_SELECTOR, "#matrix tr.model:not([hidden]) details.more")
    way_out.find_element(By.TAG_NAME, "summary").click()
    assert way_out.get_attribute("open") is not None
    assert console_errors(browser) == []


def test_model_page_draws_the_first_differing_token(browser, site, broken):
    from selenium.webdriver.common.by import By

    from tests.browser import console_errors

    browser.get((site / "broken.html").as_uri())
    first = examples(broken)[0].failure
    assert first.expected is not None and first.actual is not None and first.token_index is not None
    at = first.token_index - first.expected.start
    card = browser.find_element(By.ID, "example-1")
    marked = card.find_elements(By.CSS_SELECTOR, ".tokdiff td.first .tok")
    assert [int(e.get_attribute("data-id")) for e in marked] == [first.expected.ids[at], first.actual.ids[at]]
    style = browser.execute_script(
        "const s = getComputedStyle(arguments[0]); return [s.borderTopWidth, s.borderTopStyle, s.backgroundColor];",
        marked[0],
    )
    plain = card.find_element(By.CSS_SELECTOR, ".tokdiff td.same .tok")
    assert style[:2] == ["2px", "solid"] and style[2] != plain.value_of_css_property("background-color")
    header = card.find_element(By.CSS_SELECTOR, ".tokdiff th.first")
    assert header.text == f"▼ {first.token_index}"
    assert card.find_element(By.CSS_SELECTOR, ".lines .code").is_displayed()
    checks = browser.find_element(By.CSS_SELECTOR, "#checks details")
    assert not checks.find_element(By.TAG_NAME, "table").is_displayed()  # folded
    checks.find_element(By.TAG_NAME, "summary").click()
    assert checks.find_element(By.TAG_NAME, "table").is_displayed()
    assert console_errors(browser) == []


def test_pages_follow_the_dark_colour_scheme(browser, site):
    from selenium.webdriver.common.by import By

    from tests.browser import console_errors

    backgrounds = []
    for scheme in ("light", "dark"):
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
        )
        browser.get((site / "ready.html").as_uri())
        backgrounds.append(browser.find_element(By.TAG_NAME, "body").value_of_css_property("background-color"))
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert backgrounds[0] != backgrounds[1]
    luminance = [sum(int(v) for v in re.findall(r"\d+", b)[:3]) for b in backgrounds]
    assert luminance[0] > 600 and luminance[1] < 150
    assert browser.find_element(By.ID, "verdict").text == "ready"
    assert console_errors(browser) == []
