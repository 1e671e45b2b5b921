"""A break is diagnosed in a few renders, whatever the number of messages a step appends: the message whose rendering
changed is searched by halves past the first prefixes, not found by one render (and tokenization) per message."""

from __future__ import annotations

import threading
import warnings

from tests import templates
from tests.helpers import load
from tito_audit import TitoBreakWarning, TitoSession
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.audit.realization.realize import SCANNED, owner_of
from tito_audit.session.machinery import build_machinery

BUDGET = 60.0
"""Seconds for what takes about one (a fixed budget, not a speed test: 2,000 calls took 221 s)."""

SORTED_ARGUMENTS = templates.build(
    calls="{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }} "
    "{{ c.function.arguments | tojson(sort_keys=True) }}</tool_call>{%- endfor -%}"
)
"""Writes every call's arguments with sorted keys: what a model samples in its own key order is rewritten."""

QUESTION = [{"role": "user", "content": "Weather in many cities?"}]


def parallel_calls(count: int) -> tuple[dict, list[dict]]:
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "weather", "arguments": {"unit": "c", "city": f"C{i}"}},
        }
        for i in range(count)
    ]
    results = [{"role": "tool", "content": f"sunny {i}", "tool_call_id": f"c{i}"} for i in range(count)]
    return {"role": "assistant", "content": "", "tool_calls": calls}, results


def test_a_step_of_2000_parallel_calls_is_diagnosed_within_a_budget(tiny_model_dir, write_template):
    sampled_by = build_machinery(load(tiny_model_dir, write_template("good", templates.GOOD)))
    machinery = build_machinery(load(tiny_model_dir, write_template("sorted", SORTED_ARGUMENTS)))
    outcome: dict[str, object] = {}

    def step(count: int) -> None:
        assistant, results = parallel_calls(count)
        session = TitoSession(machinery, on_break="warn")
        session.start(QUESTION)
        # the model wrote its arguments in its own key order (as the template without sort_keys writes them)
        prompt = sampled_by.renderer.text(QUESTION, None, True)
        completion = sampled_by.renderer.text([*QUESTION, assistant], None, False)[len(prompt) :]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TitoBreakWarning)
            session.extend(session.codec.encode(completion), assistant, results)
        outcome[count] = [str(w.message).splitlines()[0] for w in caught]

    for count in (3, 2000):
        worker = threading.Thread(target=step, args=(count,), daemon=True)
        worker.start()
        worker.join(timeout=BUDGET)
        assert not worker.is_alive(), f"the diagnosis of {count} parallel calls took more than {BUDGET:g}s"
    few, many = outcome[3], outcome[2000]
    assert len(few) == len(many) == 1
    assert few[0].split("): ", 1)[1] == many[0].split("): ", 1)[1], "the same diagnosis, whatever the count"
    assert "tool-call-reformatted" in many[0]


def test_past_the_first_prefixes_the_owner_is_found_in_a_few_renders():
    """A template whose prefix renders grow with their messages: the owner found by halves is the one found by
    trying every prefix, in at most a few renders past the scanned ones."""
    messages = [{"role": "tool", "content": f"result {i}"} for i in range(1000)]
    rendered = ["".join(f"<{m['content']}>" for m in messages[:k]) for k in range(len(messages) + 1)]
    for changed in (0, 10, SCANNED + 5, 400, 999):
        text = rendered[-1][: len(rendered[changed])] + "X" + rendered[-1][len(rendered[changed]) + 1 :]
        index = common_prefix_length(text, rendered[-1])
        asked: list[int] = []

        def prefix_text(k: int, asked: list[int] = asked) -> str:
            asked.append(k)
            return rendered[k]

        owner = owner_of(rendered[-1], index, prefix_text, len(messages), lambda m: False, messages, text)
        expected = next(
            k for k in range(1, len(messages) + 1) if common_prefix_length(rendered[k], rendered[-1]) > index
        )
        assert owner is not None and owner.index == expected - 1
        assert len(asked) <= SCANNED + 12, f"{len(asked)} renders to find message {changed}"
