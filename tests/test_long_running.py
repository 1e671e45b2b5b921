"""A trainer's process runs for days: caches stay bounded and never lose what they hand out, and a session's first
renders (the probes that find its stop tokens) are under the same time limit as every later one."""

from __future__ import annotations

import threading

import pytest

from tests import templates
from tito_audit import TitoSession
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model import render_guard, segments
from tito_audit.model.render import RenderLimits
from tito_audit.session import machinery

BUDGET = 60.0


def test_sessions_run_past_the_piece_cache_bound(tiny_model_dir, write_template, monkeypatch):
    """Each session's user text is a new piece: the cache starts again many times (at 40 pieces, not 200,000),
    and every prompt is still what the tokenizer gives."""
    monkeypatch.setattr(segments, "MAX_CACHED_PIECES", 40)
    session = TitoSession.from_model(str(tiny_model_dir), template=write_template("good-cache", templates.GOOD))
    tokenizer = session.codec.tokenizer
    for turn in range(150):
        messages = [{"role": "user", "content": f"question {turn} of many"}]
        prompt = session.spawn().start(messages)
        expected = tokenizer.apply_chat_template(
            messages, chat_template=templates.GOOD, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert prompt == list(expected), turn


def test_from_model_is_refused_after_one_render_past_the_limit(tiny_model_dir, write_template, monkeypatch):
    """A template stuck on every render: opening a session costs one time limit, not one per probe."""
    expired: list[object] = []
    original = render_guard._Deadline.expired

    def counted(self):
        expired.append(self)
        return original(self)

    monkeypatch.setattr(render_guard._Deadline, "expired", counted)
    monkeypatch.setattr(machinery, "SESSION_LIMITS", RenderLimits(max_seconds=0.3, refuse_after_timeout=False))
    stuck = write_template("stuck", "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}")
    outcome: list[BaseException] = []

    def open_session() -> None:
        try:
            TitoSession.from_model(str(tiny_model_dir), template=stuck)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=open_session, daemon=True)
    worker.start()
    worker.join(timeout=BUDGET)
    assert not worker.is_alive(), "from_model was not stopped"
    assert len(outcome) == 1 and isinstance(outcome[0], TemplateTimeoutError), outcome
    assert "took longer than 0.3s" in str(outcome[0])
    assert len(expired) == 1, "only the first probe ran until the limit"


@pytest.fixture(autouse=True)
def _fresh_machinery():
    """Sessions opened here are not served from (or left in) the process's machinery cache."""
    machinery._BUILT.clear()
    machinery._LOADED.clear()
    yield
    machinery._BUILT.clear()
    machinery._LOADED.clear()
