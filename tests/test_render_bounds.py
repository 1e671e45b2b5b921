"""What runs between two of the sandbox's hooks is bounded too: an arithmetic operation, a sequence repeated, lipsum
and a loop whose body calls nothing stop at the render's limits, in any thread, and an output too long ends the audit
after one render (as a render past the time limit does)."""

from __future__ import annotations

import threading

import pytest

from tests import templates
from tests.helpers import load
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model.load_folder import codec_for
from tito_audit.model.render import Renderer, RenderError, RenderLimits, RenderTooLong
from tito_audit.model.render_budget import Budget

HELLO = [{"role": "user", "content": "Hello"}]
BUDGET = 30.0
"""Seconds a thread is given for what the guard stops in well under one (a fixed budget, not a speed test)."""

POWER = "{% set n = messages|length + 8 %}{{ n ** (n ** n) }}"
LOOPS = (
    "{% set xs = range(2000)|list %}{% for a in xs %}{% for b in xs %}{% for c in xs %}{% endfor %}{% endfor %}"
    "{% endfor %}"
)
REPEAT = "{{ 'a' * (messages|length * 1000000000) }}"
LIPSUM = "{{ lipsum(100000) }}"
CONSTANT_POWER = "{{ 9 ** (9 ** 9) }}"
CONSTANT_REPEAT = "{{ 'ab' * 1000000000 }}"
FORMAT = "{{ '%0' ~ (messages|length * 999999999) ~ 'd' }}{{ ('%0' ~ (messages|length * 999999999) ~ 'd') % 1 }}"
CONSTANT_FORMAT = "{{ '%0999999999d' % 1 }}"


def _render_in_thread(renderer: Renderer) -> list[BaseException]:
    outcome: list[BaseException] = []

    def render() -> None:
        try:
            renderer.text(HELLO, None, True)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    worker.join(timeout=BUDGET)
    assert not worker.is_alive(), f"the render was not stopped within {BUDGET:g}s"
    return outcome


@pytest.mark.parametrize(
    ("name", "source", "fragment"),
    [
        ("power", POWER, "bits"),
        ("loops", LOOPS, "rendering took longer than 0.5s"),
        ("repeat", REPEAT, "output longer than 100000 characters"),
        ("lipsum", LIPSUM, "output longer than 100000 characters"),
        ("constant-power", CONSTANT_POWER, "bits"),
        ("constant-repeat", CONSTANT_REPEAT, "output longer than 100000 characters"),
        ("format", FORMAT, "a % format field of 999999999 characters"),
        ("constant-format", CONSTANT_FORMAT, "a % format field of 999999999 characters"),
    ],
)
def test_expensive_operations_stop_in_a_worker_thread(tiny_model_dir, write_template, name, source, fragment):
    loaded = load(tiny_model_dir, write_template(name, source))
    limits = RenderLimits(max_chars=100_000, max_seconds=0.5, refuse_after_timeout=False)
    outcome = _render_in_thread(Renderer(loaded, codec_for(loaded), limits=limits))
    assert len(outcome) == 1 and isinstance(outcome[0], RenderError), outcome
    assert fragment in str(outcome[0]), str(outcome[0])


def test_renders_without_a_deadline_are_not_bounded(tiny_model_dir, write_template):
    """A trainer's own apply_chat_template on a guarded template: ``*`` and ``**`` compute as in plain Jinja."""
    source = "{{ 'ab' * 3 }}{{ 2 ** 70 }}{{ messages|length * 4 }}{{ '%03d' % 7 }}{{ 7 % 4 }}" + templates.GOOD
    loaded = load(tiny_model_dir, write_template("arithmetic", source))
    guarded = Renderer(loaded, codec_for(loaded)).text(HELLO, None, True)
    plain = loaded.tokenizer.apply_chat_template(
        HELLO, chat_template=source, tokenize=False, add_generation_prompt=True
    )
    assert guarded == plain and plain.startswith("ababab" + str(2**70) + "4" + "007" + "3")


def test_an_output_too_long_ends_the_audit_after_one_render(tiny_model_dir, write_template, monkeypatch):
    too_long: list[str] = []
    original = Budget.too_long

    def counted(self: Budget, what: str) -> RenderTooLong:
        too_long.append(what)
        return original(self, what)

    monkeypatch.setattr(Budget, "too_long", counted)
    huge = "{% for i in range(300) %}{{ 'x' * 1000 }}{% endfor %}" + templates.GOOD
    loaded = load(tiny_model_dir, write_template("huge", huge))
    with pytest.raises(TemplateTimeoutError, match=r"output longer than 100000 characters.*refused for the rest"):
        audit(loaded, AuditOptions(count=2, limits=RenderLimits(max_chars=100_000)))
    assert len(too_long) == 1, "only the first render was refused: the audit ended there"
