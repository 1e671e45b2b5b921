"""The render time limit and the frozen clock work in any thread and touch no process-wide state; a template that
runs past the limit once is refused for the rest of the audit."""

from __future__ import annotations

import signal
import threading
from datetime import datetime

import pytest

from tests import templates
from tests.helpers import load
from tito_audit import TitoSession
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model import render_budget
from tito_audit.model.load_folder import codec_for
from tito_audit.model.render import Renderer, RenderError, RenderLimits, frozen_clock
from tito_audit.session import machinery

NESTED_RANGES = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
SLOW_ON_HELLO = "{%- if messages[0].content == 'Hello' -%}" + NESTED_RANGES + "{%- endif -%}" + templates.GOOD
HELLO = [{"role": "user", "content": "Hello"}]


def test_a_pathological_template_times_out_in_a_worker_thread(tiny_model_dir, write_template):
    loaded = load(tiny_model_dir, write_template("slow", NESTED_RANGES))
    renderer = Renderer(loaded, codec_for(loaded), limits=RenderLimits(max_seconds=0.3, refuse_after_timeout=False))
    outcome: list[BaseException] = []

    def render() -> None:
        try:
            renderer.text(HELLO, None, True)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the render in a worker thread was not stopped"
    assert len(outcome) == 1 and isinstance(outcome[0], RenderError), outcome
    assert "rendering took longer than 0.3s" in str(outcome[0])


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers on this platform")
def test_a_callers_own_timer_survives_a_render(tiny_model_dir, write_template):
    loaded = load(tiny_model_dir, write_template("good", templates.GOOD))
    renderer = Renderer(loaded, codec_for(loaded))
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 300)
    try:
        renderer.text(HELLO, None, True)
        renderer.prefixes(HELLO, None, [(1, True), (1, False)])
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert remaining > 0, "the caller's ITIMER_REAL was cancelled by a render"
    assert handler is not previous and callable(handler) and not fired


def test_clocks_are_per_thread(tiny_model_dir, write_template):
    loaded = load(tiny_model_dir, write_template("dated", "{{ strftime_now('%Y') }}" + templates.GOOD))
    renderer_a = Renderer(loaded, codec_for(loaded))
    renderer_b = Renderer(loaded, codec_for(loaded))
    both_inside = threading.Barrier(2, timeout=30)
    seen: dict[str, str] = {}

    def render(name: str, renderer: Renderer, year: int) -> None:
        with frozen_clock(loaded.template_source, datetime(year, 6, 1)):
            both_inside.wait()  # each thread's clock is set before either renders
            seen[name] = renderer.text(HELLO, None, True)[:4]

    threads = [
        threading.Thread(target=render, args=("a", renderer_a, 2001)),
        threading.Thread(target=render, args=("b", renderer_b, 2002)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert seen == {"a": "2001", "b": "2002"}


def test_a_stuck_render_holds_up_no_session_of_another_model(tiny_model_dir, write_template, monkeypatch):
    """A worker thread opens a session on a model whose template is stuck (until its limit) on the probes that find
    its stop tokens; meanwhile the main thread opens a session of another model and runs a whole step."""
    monkeypatch.setattr(machinery, "SESSION_LIMITS", RenderLimits(max_seconds=3, refuse_after_timeout=False))
    building = threading.Event()
    real_build = machinery.build_machinery

    def build(*args, **kwargs):
        building.set()
        return real_build(*args, **kwargs)

    monkeypatch.setattr(machinery, "build_machinery", build)
    slow_template = write_template("slow-on-hello", SLOW_ON_HELLO)
    refused: list[BaseException] = []

    def open_slow() -> None:
        try:
            TitoSession.from_model(str(tiny_model_dir), template=slow_template)
        except TemplateTimeoutError as exc:
            refused.append(exc)

    worker = threading.Thread(target=open_slow, daemon=True)
    worker.start()
    assert building.wait(timeout=60)
    other = TitoSession.from_model(str(tiny_model_dir), template=write_template("good", templates.GOOD))
    prompt = other.start([{"role": "user", "content": "Hi"}])
    completion = other.codec.encode("Hi.<|im_end|>")
    other.extend(completion, {"role": "assistant", "content": "Hi."}, [{"role": "user", "content": "Again"}])
    assert worker.is_alive(), "the other model's session waited for the stuck render"
    assert len(other.buffer) > len(prompt)
    worker.join(timeout=120)
    assert not worker.is_alive() and len(refused) == 1, "the stuck probe did not refuse the session at its limit"


def test_after_one_timeout_the_template_is_refused_for_the_rest_of_the_audit(
    tiny_model_dir, write_template, monkeypatch
):
    expired = []
    original = render_budget.Budget.expired

    def counted(self):
        expired.append(self)
        return original(self)

    monkeypatch.setattr(render_budget.Budget, "expired", counted)
    loaded = load(tiny_model_dir, write_template("slow", NESTED_RANGES))
    with pytest.raises(TemplateTimeoutError, match=r"took longer than 0\.2s: the template is refused"):
        audit(loaded, AuditOptions(count=4, limits=RenderLimits(max_seconds=0.2)))
    assert len(expired) == 1, "only the first render ran until the limit"
