"""A harness that resends a refused request unchanged: the cell's gateway tells the runner (its
:class:`~tito_audit.gateway.resends.Resends`), and the runner ends the rollout after :data:`RESENDS` resends, before
the last refusal is answered, instead of letting it loop until the rollout's time limit (opencode on
Qwen2.5-7B-Instruct: max_tokens 32,000 past the context, refused, compacted, resent, 181 to 341 times in 60 s)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests import templates
from tito_audit.gateway.resends import KEPT, Resends, Resent, body_digest
from tito_audit.harnesses.harness import CHAT, DEFAULT, PYPI, Command, Harness, RolloutContext
from tito_audit.harnesses.rows import row_of

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")

CONTEXT = 512
"""The context of the test's model (its config.json): the harness's prompt and its max_tokens of 500 pass it, so the
request is refused (400 ``context_length_exceeded``), as opencode's max_tokens of 32,000 is on Qwen2.5-7B-Instruct."""

RESENDER = textwrap.dedent(
    """
    import http.client, json, sys
    from urllib.parse import urlsplit

    url, log, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    where = urlsplit(url)
    for attempt in range(40):
        nonce = attempt if mode == "changing" else 0
        text = f"Hello {nonce}, what is in this folder? " * 8
        body = {"model": "m", "max_tokens": 500, "messages": [{"role": "user", "content": text}]}
        with open(log, "a") as sent:
            sent.write("sent\\n")
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        status = connection.getresponse().status
        connection.close()
        if status != 400:
            sys.exit(3)
    """
)
"""A harness's loop: the same refused request again and again (or, ``changing``, a different one each time)."""


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    """A gateway (fake engine) on the tiny tokenizer as a model of :data:`CONTEXT` tokens, running."""
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    folder = tmp_path_factory.mktemp("resends") / "tiny-org--small"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": CONTEXT}), encoding="utf-8")
    template = folder.parent / "good.jinja"
    template.write_text(templates.GOOD, encoding="utf-8")
    config = GatewayConfig(  # SGLang refuses such a request (vLLM 0.33 lowers its max_tokens and serves it)
        str(folder), template=str(template), allow_hub=False, parser="template", max_tokens=64, engine_api="sglang"
    )
    gateway = Gateway(config)
    with running(gateway) as url:
        yield url, gateway


def _rollout(served, tmp_path: Path, mode: str) -> tuple[dict, int]:
    """One rollout of the resending harness through the runner, watched by the gateway's resends; it and the number
    of requests the harness sent."""
    from tito_audit.harnesses.group import Runner, run_rollout
    from tito_audit.harnesses.isolation import ProxyTrap

    url, gateway = served
    script, log = tmp_path / "resender.py", tmp_path / "sent.log"
    script.write_text(RESENDER, encoding="utf-8")

    def command(context: RolloutContext, configuration) -> Command:
        return Command([sys.executable, str(script), context.gateway, str(log), mode])

    harness = Harness("resender", "resender", "0", PYPI, CHAT, False, command)
    context = RolloutContext(url, "m", tmp_path, tmp_path / "home", tmp_path, "task", 0)
    (tmp_path / "home").mkdir()
    trap = ProxyTrap()
    try:
        rollout = run_rollout(harness, DEFAULT, context, Runner(trap, resends=gateway.resends))
    finally:
        trap.close()
    return rollout, len(log.read_text().splitlines())


def test_a_harness_resending_a_refused_request_is_ended_after_three_resends(served, tmp_path):
    """It sends the refused request once and resends it three times; the fourth refusal is never answered (the
    harness is stopped first), so it sends nothing more; the rollout says what it resent, and so does its row. On main
    the runner had no word of refusals and it looped until the rollout's time limit."""
    started = time.monotonic()
    rollout, sent = _rollout(served, tmp_path, "same")
    assert sent == 4 and rollout["exit"] != 0 and time.monotonic() - started < 30, rollout
    resent = rollout["resent"]
    assert (resent["times"], resent["status"], resent["code"]) == (3, 400, "context_length_exceeded")
    assert "with max_tokens 500" in resent["message"] and f"context of {CONTEXT:,} tokens" in resent["message"]
    harness = Harness("resender", "resender", "0", PYPI, CHAT, False, lambda c, f: Command([]))
    row = row_of(harness, DEFAULT, "m", "sglang", {"planned": 1, "rollouts": [rollout], "sessions": []})
    assert row["failure"].startswith("resender resent a refused request 3 times (400 context_length_exceeded: ")
    assert row["failure"].endswith("); rollout ended") and row["finished"] == 0


def test_a_harness_sending_different_refused_requests_runs_on(served, tmp_path):
    """Refusals of requests that differ are no resend: the harness runs to its own end."""
    rollout, sent = _rollout(served, tmp_path, "changing")
    assert sent == 40 and rollout["exit"] == 0 and "resent" not in rollout, rollout


def test_resends_count_each_watch_and_only_refusals_the_same_bytes_get_again():
    resends = Resends()
    told: list[Resent] = []
    same, other = body_digest(b'{"a": 1}'), body_digest(b'{"a": 2}')
    resends.refused(same, 400, "bad", "before")  # before anyone watches: not counted
    with resends.watch(2, told.append) as watch:
        for status in (429, 409, 503, None):  # retried with reason, or a body never read
            for _ in range(5):
                resends.refused(same if status else None, status or 401, "busy", "x")
        resends.refused(other, 400, "bad", "other")
        resends.refused(same, 422, "bad", "another status")
        assert told == []
        for number in range(3):
            resends.refused(same, 400, "bad", f"refused {number}")
        resends.refused(same, 400, "bad", "once more")
    assert told == [Resent(2, 400, "bad", "refused 2")] and watch.resent == told[0]  # told once
    resends.refused(same, 400, "bad", "after")  # the watch ended: nothing counts
    assert told == [Resent(2, 400, "bad", "refused 2")]


def test_a_watch_keeps_a_bounded_count_and_watches_are_thread_safe():
    resends = Resends()
    told: list[Resent] = []
    with resends.watch(1, told.append) as watch:
        first = body_digest(b"first")
        resends.refused(first, 400, "bad", "first")
        for number in range(KEPT):  # the first is forgotten: its next refusal is a first send again
            resends.refused(body_digest(str(number).encode()), 400, "bad", "filler")
        resends.refused(first, 400, "bad", "first again")
        assert told == [] and len(watch._counts) == KEPT

        def refuse() -> None:
            for _ in range(200):
                resends.refused(body_digest(b"shared"), 400, "bad", "shared")

        threads = [threading.Thread(target=refuse) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert told == [Resent(1, 400, "bad", "shared")] and watch._counts[(body_digest(b"shared"), 400, "bad")] == 800
