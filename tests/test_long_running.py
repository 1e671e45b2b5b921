"""A trainer's process runs for days: caches stay bounded and never lose what they hand out, and a session's first
renders (the probes that find its stop tokens) are under the same time limit as every later one."""

from __future__ import annotations

import sys
import threading

import pytest

from tests import templates
from tito_audit import TitoSession
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model import render_budget, render_direct, segments
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
    original = render_budget.Budget.expired

    def counted(self):
        expired.append(self)
        return original(self)

    monkeypatch.setattr(render_budget.Budget, "expired", counted)
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


def _held(cache: dict) -> int:
    """What the piece cache's entries take, measured object by object (ids past 256 are objects of their own)."""
    return sum(
        sys.getsizeof(piece)
        + sys.getsizeof(ids)
        + (sum(sys.getsizeof(i) for i in ids if i > 256) if type(ids) is tuple else 0)
        for piece, ids in cache.items()
    )


def test_the_shared_caches_stay_within_their_bytes(tiny_model_dir, write_template, monkeypatch):
    """Sessions each with a new message of 60,000 characters: the model's piece cache and its prepared messages stay
    within their byte bounds (on main only their counts were bounded: 200,000 pieces of any size)."""
    monkeypatch.setattr(segments, "MAX_CACHED_BYTES", 2 << 20, raising=False)
    monkeypatch.setattr(render_direct.DirectTemplate, "MAX_PREPARED_CHARS", 500_000)
    session = TitoSession.from_model(str(tiny_model_dir), template=write_template("good-bytes", templates.GOOD))
    machinery_of = session._settings.machinery
    for turn in range(30):
        text = f"turn {turn}: " + " ".join(f"w{turn}x{i}" for i in range(7_500))
        prompt = session.spawn().start([{"role": "user", "content": text}])
        assert prompt[-3:] == session.codec.encode("<|im_start|>assistant\n")[-3:]
        assert _held(machinery_of.codec._segments._cache) <= 2 << 20, turn
        prepared = machinery_of.renderer._fast._prepared
        assert sum(len(message.get("content") or "") for message, *_ in prepared.values()) <= 500_000, turn


def test_forget_drops_what_the_caches_keep_for_a_session(tiny_model_dir, write_template):
    session = TitoSession.from_model(str(tiny_model_dir), template=write_template("good-forget", templates.GOOD))
    long_text = "forget me " * 3_000  # one piece of 30,000 characters
    prompt = session.start([{"role": "user", "content": long_text}])
    codec, renderer = session.codec, session._settings.machinery.renderer
    cache = codec._segments._cache
    assert any(long_text in piece for piece in cache) and len(renderer._fast._prepared) >= 1
    kept = [id(m) for m in session.shared_messages()]
    session.forget()
    assert not any(long_text in piece for piece in cache)
    assert not set(kept) & set(renderer._fast._prepared)
    answer = {"role": "assistant", "content": "ok"}
    follow = session.extend(codec.encode("ok<|im_end|>"), answer, [{"role": "user", "content": "again"}])
    assert follow[: len(prompt)] == prompt  # still usable: its next render prepares and tokenizes again
