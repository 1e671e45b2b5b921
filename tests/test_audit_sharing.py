"""Work shared inside an audit never changes a result (issue 53): renders remembered by what the template reads, the
tokenizer's normalizer run in Python, and the parsers chosen while the template's rollout is walked."""

from __future__ import annotations

import json
import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import normalizers

from tests import templates
from tests.helpers import load
from tito_audit.audit import pending_plan
from tito_audit.audit.pending_plan import ParseSteps, PendingPlan
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.generate import generate
from tito_audit.formatters.json_report import VOLATILE_KEYS, report_to_dict, to_json
from tito_audit.model.normalizers import FastNormalizer
from tito_audit.model.render import ALTERNATE_CLOCK, DEFAULT_CLOCK, Renderer, frozen_clock
from tito_audit.model.tokens import TokenCodec

KEY_ORDER = (
    "{%- for message in messages -%}<{{ message.role }}>"
    "{%- for key, value in message.items() -%}{{ key }}={{ value }};{%- endfor -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<assistant>{%- endif -%}"
)
"""A template that writes every field of a message, in the order the message holds them."""


def test_remembered_renders_equal_fresh_renders(tiny_model_dir, write_template):
    """Every prefix of the same conversations, rendered twice through a renderer that remembers (the second time from
    equal copies of the messages: nothing rendered again) and once through one that does not, is the same text."""
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    codec = TokenCodec(model.tokenizer)
    remembering, fresh = Renderer(model, codec, remember=True), Renderer(model, codec)
    conversations = list(generate(8, seed=3))
    keys_of = {c.id: [(k, gp) for k in range(1, len(c.messages) + 1) for gp in (False, True)] for c in conversations}
    with frozen_clock(model.template_source, DEFAULT_CLOCK):
        first = [remembering.prefixes(c.messages, c.tools, keys_of[c.id]) for c in conversations]
        other = Renderer(model, codec, remember=True)  # another renderer of the model: the same memory
        fast = other._fast
        assert fast is not None
        rendered, render = [], fast.render
        fast.render = lambda *args: rendered.append(args) or render(*args)  # type: ignore[method-assign]
        copies = [other.prefixes([dict(m) for m in c.messages], c.tools, keys_of[c.id]) for c in conversations]
        assert not rendered, "equal messages were rendered again"
        expected = [fresh.prefixes(c.messages, c.tools, keys_of[c.id]) for c in conversations]
    assert first == copies == expected


def test_a_render_is_remembered_under_its_clock_only(tiny_model_dir, write_template):
    """A template that writes the date renders again under another frozen clock, and outside a frozen clock (where it
    reads the time) nothing is remembered."""
    model = load(tiny_model_dir, write_template("dated", "{{ strftime_now('%Y-%m-%d') }}" + templates.GOOD))
    renderer = Renderer(model, TokenCodec(model.tokenizer), remember=True)
    fast = renderer._fast
    assert fast is not None
    rendered, render = [], fast.render
    fast.render = lambda *args: rendered.append(args) or render(*args)  # type: ignore[method-assign]
    messages, last = [{"role": "user", "content": "hi"}], [(1, True)]
    with frozen_clock(model.template_source, DEFAULT_CLOCK):
        first = renderer.prefixes(messages, None, last)[last[0]].text
        renderer.prefixes(messages, None, last)
    assert len(rendered) == 1, "the same prefix under the same clock was rendered again"
    with frozen_clock(model.template_source, ALTERNATE_CLOCK):
        second = renderer.prefixes(messages, None, last)[last[0]].text
    assert first.startswith("2026-01-15") and second.startswith("2027-08-03")
    renderer.prefixes(messages, None, last)
    renderer.prefixes(messages, None, last)
    assert len(rendered) == 4, "a render outside a frozen clock was taken from the memory"


def test_a_render_is_remembered_by_key_order_and_types(tiny_model_dir, write_template):
    """Messages equal as JSON but not to the template (another key order, ``1`` against ``True``) are rendered each."""
    model = load(tiny_model_dir, write_template("order", KEY_ORDER))
    renderer = Renderer(model, TokenCodec(model.tokenizer), remember=True)
    last = [(1, False)]
    with frozen_clock(model.template_source, DEFAULT_CLOCK):
        one = renderer.prefixes([{"role": "user", "content": "hi", "n": 1}], None, last)[last[0]].text
        other = renderer.prefixes([{"content": "hi", "role": "user", "n": 1}], None, last)[last[0]].text
        flag = renderer.prefixes([{"role": "user", "content": "hi", "n": True}], None, last)[last[0]].text
    assert len({one, other, flag}) == 3


CHARACTERS = ["a", "b", " ", "\n", "\t", "e\u0301", "é", "ﬁ", "Å", "\u00a0", "東"]
texts = st.lists(st.sampled_from(CHARACTERS), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_python_normalizers_equal_the_tokenizers(text):
    for normalizer in (
        normalizers.NFC(),
        normalizers.NFKC(),
        normalizers.Replace(" ", "\u2581"),
        normalizers.Sequence([normalizers.NFD(), normalizers.Replace("a", "b")]),
        normalizers.Sequence([]),
    ):
        fast = FastNormalizer(normalizer)
        for _ in range(2):  # checked against the tokenizer's on the first calls, alone after
            fast._calls = FastNormalizer.VERIFY_FIRST + 1
            assert fast(text) == normalizer.normalize_str(text)


def test_a_python_normalizer_that_differs_switches_itself_off():
    normalizer = normalizers.Lowercase()
    fast = FastNormalizer(normalizer)
    fast._step = lambda text: text  # pretend lowercasing were the identity
    assert fast("ABC") == "abc" and fast._step is None


def _slow_choice(monkeypatch, seconds: float) -> None:
    """Choosing the parsers takes ``seconds`` (as vLLM's worker importing vLLM does)."""
    real = pending_plan.choose_parsers

    def choose(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(pending_plan, "choose_parsers", choose)


def test_the_report_is_the_same_whenever_the_parsers_are_known(tiny_model_dir, write_template, monkeypatch):
    """Parsers known at once, or only after every variant was walked: the same report, byte for byte (timing aside)."""
    model = load(tiny_model_dir, write_template("empty-think", templates.MULTILINE_EMPTY_THINK))
    options = AuditOptions(count=8, parser="qwen25,qwen3")
    at_once = audit(model, options)
    _slow_choice(monkeypatch, 3.0)
    later = audit(model, options)
    assert later.variants[0].parses, "the parser ran"

    def stable(report):
        return to_json(report).replace(report.generated_at, "").replace(str(report.duration_seconds), "")

    assert stable(at_once) == stable(later)


def test_parse_steps_kept_run_in_the_order_walked():
    """Steps kept until the plan is known run first, in order, then the step at hand; none runs twice."""
    done, release = [], threading.Event()
    plan = PendingPlan()
    steps = ParseSteps(plan, lambda: threading.Lock())
    for name in ("a", "b"):
        steps.add(lambda parsers, name=name: done.append(name))
    assert done == [], "a step ran before the parsers were known"
    threading.Thread(target=lambda: (release.wait(), plan._choose(lambda: pending_plan.ParserPlan(())))).start()
    release.set()
    plan._done.wait(5)
    steps.add(lambda parsers: done.append("c"))
    steps.finish()
    assert done == ["a", "b", "c"]


def test_a_difference_switches_the_template_off_for_every_renderer(tiny_model_dir, write_template, monkeypatch):
    """The direct path checked unlike ``apply_chat_template`` by one renderer: the texts it remembered are forgotten and
    the model's other renderers of the template, not checking that call themselves, render the slow way."""
    from tito_audit.model.render_direct import DirectTemplate

    monkeypatch.setattr(DirectTemplate, "VERIFY_FIRST", 1)  # only the first call of the template is checked
    monkeypatch.setattr(DirectTemplate, "VERIFY_EVERY", 10_000)
    model = load(tiny_model_dir, write_template("good", templates.GOOD))
    codec = TokenCodec(model.tokenizer)
    wrong = Renderer(model, codec, remember=True)
    fast = wrong._fast
    assert fast is not None
    render = fast.render
    fast.render = lambda *args: render(*args) + "<wrong>"  # type: ignore[method-assign]
    conversation = next(iter(generate(1, seed=5)))
    keys = [(k, False) for k in range(1, len(conversation.messages) + 1)]
    with frozen_clock(model.template_source, DEFAULT_CLOCK):
        checked = wrong.prefixes(conversation.messages, conversation.tools, keys)
        other = Renderer(model, codec, remember=True)
        unchecked = other.prefixes(conversation.messages, conversation.tools, keys)
        expected = Renderer(model, codec).prefixes(conversation.messages, conversation.tools, keys)
    assert wrong._fast is None and other._fast is None, "the direct path stayed on after a difference"
    assert checked == unchecked == expected
    assert not any("<wrong>" in text for text in model.renders._entries.values() if isinstance(text, str))


def _way_out_page(tiny_model_dir, write_template, name: str) -> str:
    from tito_audit.formatters import fix_report
    from tito_audit.repair.way_out import find_way_out

    options = AuditOptions(count=12)
    model = load(tiny_model_dir, write_template(name.lower(), getattr(templates, name)))  # a fresh memory
    before = audit(model, options)
    way = find_way_out(model, before, options, audit)
    after = report_to_dict(way.fix.after) if way.fix is not None and way.fix.after is not None else {}
    for key in VOLATILE_KEYS:
        after.pop(key, None)
    page = fix_report.to_markdown(before, fix_report.page_of(way, before), "fix.diff", "training.diff")
    diff = fix_report.publishable_diff(way.fix) if way.fix else ""
    return f"{way.kind}\n{way.summary}\n{page}\n{diff}\n{json.dumps(after, sort_keys=True)}"


def test_a_way_out_is_the_same_with_and_without_remembered_renders(tiny_model_dir, write_template, monkeypatch):
    """A way-out search (its proofs render what the audit rendered, and each other's prefixes) finds the same fix,
    proof and page with the memory of renders and without it."""
    from tito_audit.model.render_direct import DirectTemplate

    hits: list[object] = []
    real = DirectTemplate.remembered

    def counted(self, prepared, k, gp):
        outcome = real(self, prepared, k, gp)
        if outcome is not None:
            hits.append(outcome)
        return outcome

    for name in ("QWQ_LIKE", "TOOL_RESULTS_JOINED_IN_ONE_BLOCK"):
        hits.clear()
        with monkeypatch.context() as patch:
            patch.setattr(DirectTemplate, "remembered", counted)
            remembered = _way_out_page(tiny_model_dir, write_template, name)
        assert hits, f"{name}: the search took no render from the memory"
        with monkeypatch.context() as patch:
            patch.setattr(DirectTemplate, "remembered", lambda self, prepared, k, gp: None)
            patch.setattr(DirectTemplate, "remember", lambda self, prepared, k, gp, outcome: None)
            fresh = _way_out_page(tiny_model_dir, write_template, name)
        assert remembered == fresh, name
