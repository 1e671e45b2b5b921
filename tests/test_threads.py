"""The library in worker threads: sessions on different models opened from threads in a fresh process (the first
import of transformers included) all open, and a render's time limit holds per render however many renders run
beside it (no class-wide lock makes one thread's render wait for another's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import load
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.errors import TemplateTimeoutError
from tito_audit.model.render import RenderLimits
from tito_audit.session import TitoSession

MODELS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-4B",
    "meta-llama/Llama-3.2-3B-Instruct",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "microsoft/phi-4",
    "ibm-granite/granite-3.1-1b-a400m-instruct",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "deepseek-ai/DeepSeek-R1",
]
"""Eight models of the smaller vocabularies (the race is in the first imports, whatever the tokenizer's size: with
the import lock taken away, 6 of 6 processes fail on these)."""
OPEN_FROM_THREADS = textwrap.dedent(
    """
    import sys, threading

    failures = []

    def open_session(model):
        try:
            from tito_audit import TitoSession

            TitoSession.from_model(model, mirrors=[sys.argv[1]], allow_hub=False)
        except BaseException as exc:
            failures.append(f"{model}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=open_session, args=(model,)) for model in sys.argv[2:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("\\n".join(failures))
    sys.exit(1 if failures else 0)
    """
)


@requires_shared
@pytest.mark.shared
def test_sessions_on_eight_models_open_from_eight_threads_in_a_fresh_process():
    """Nothing is imported before the threads start: each process imports the library and transformers from eight
    threads at once (on main, 10 of 10 such processes had threads fail with ``cannot import name 'AutoTokenizer'``)."""
    pytest.importorskip("mistral_common", reason="Mistral-Nemo loads through mistral-common (the 'mistral' extra)")
    command = [sys.executable, "-c", OPEN_FROM_THREADS, str(SHARED_TOKENIZERS), *MODELS]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, out + err[-2000:]


HOSTILE = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
"""An empty-bodied nested loop (a comment after it makes each thread's template a template of its own)."""
LIMIT = 2.0


def _in_threads(count: int, work) -> list[float]:
    """Run ``work(index)`` in ``count`` threads at once; each thread's wall time, in seconds."""
    times: dict[int, float] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(count, timeout=60)

    def run(index: int) -> None:
        start.wait()
        began = time.monotonic()
        try:
            work(index)
        except BaseException as exc:  # reported below
            failures.append(exc)
        times[index] = time.monotonic() - began

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20 * LIMIT)
    assert not any(t.is_alive() for t in threads), "a render was not stopped"
    assert not failures, failures
    return [times[i] for i in range(count)]


@pytest.mark.parametrize("threads", [2, 4])
def test_the_render_limit_holds_per_render_beside_other_renders(tiny_model_dir, write_template, threads):
    """Hostile templates audited at once, each in its own thread, each stopped after one limit (on main the second
    of two waited for the first: 2 s, 4 s; the fourth of four ended after 8 s)."""
    models = [load(tiny_model_dir, write_template(f"hostile{i}", HOSTILE + f"{{# {i} #}}")) for i in range(threads)]
    options = AuditOptions(count=4, limits=RenderLimits(max_seconds=LIMIT))

    def audit_one(index: int) -> None:
        with pytest.raises(TemplateTimeoutError, match=f"longer than {LIMIT:g}s"):
            audit(models[index], options)

    times = _in_threads(threads, audit_one)
    assert max(times) < 1.6 * LIMIT, [round(t, 2) for t in times]


def test_sessions_on_hostile_templates_are_refused_after_one_limit_each(tiny_model_dir, write_template):
    threads = 4
    models = [load(tiny_model_dir, write_template(f"slow{i}", HOSTILE + f"{{# {i} #}}")) for i in range(threads)]
    limits = RenderLimits(max_seconds=LIMIT, refuse_after_timeout=False)

    def open_one(index: int) -> None:
        from tito_audit.session.machinery import build_machinery

        with pytest.raises(TemplateTimeoutError):
            TitoSession(build_machinery(models[index], limits=limits))

    times = _in_threads(threads, open_one)
    assert max(times) < 1.6 * LIMIT, [round(t, 2) for t in times]
