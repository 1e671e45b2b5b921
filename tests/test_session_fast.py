"""``bridge="auto"``: steps the template's proof covers are bridged from a short local render, and a break they let
into the buffer is still reported, at its own step, no later than ``finish`` (at that very step under
``bridge="template"``); what the proof covers; forks that share their lists.

The templates here are history-free over the proof's conversations and change their writing only after a tool result
holding a mark no generated conversation holds, so the proof covers them and only the check of the whole conversation
can see what they do.
"""

from __future__ import annotations

import time
import warnings

import pytest

from tests import templates
from tests.helpers import load
from tests.test_session import CLOCK, TOOLS, call, sampled
from tito_audit import TitoBreak, TitoBreakWarning, TitoSession
from tito_audit.session.snapshot import change, fold, restore

ALERT = "ALERT-7f3a"
"""A tool result holding it makes the template redact every earlier tool result."""
COUNT = "COUNT-9c1e"
"""A tool result holding it makes the template number every later tool result's header."""
FIRST = (
    "{%- set ns = namespace(at=-1) -%}{%- for m in messages -%}"
    "{%- if m.role == 'tool' and ns.at < 0 and '{mark}' in (m.content or '') -%}{%- set ns.at = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
)
NL = templates.NL
REDACTS_AFTER_ALERT = templates.build(
    preamble=FIRST.replace("{mark}", ALERT),
    tool="<|im_start|>tool"
    + NL
    + "{{ '[redacted]' if 0 <= ns.at and loop.index0 < ns.at else m.content }}<|im_end|>"
    + NL,
)
NUMBERS_AFTER_COUNT = templates.build(
    preamble=FIRST.replace("{mark}", COUNT),
    tool="<|im_start|>tool{{ ' #' ~ loop.index0 if 0 <= ns.at < loop.index0 else '' }}"
    + NL
    + "{{ m.content }}<|im_end|>"
    + NL,
)
STEPS = 8
MARKED = 5
"""The step whose tool result holds the mark (its assistant turn is message 2 * MARKED - 1)."""


def loop_with(mark: str, steps: int = STEPS, at: int = MARKED) -> list[dict]:
    """user, then ``steps`` tool calls each answered by a tool result (step ``at``'s holding ``mark``), then an
    answer."""
    messages: list[dict] = [{"role": "user", "content": "Check every city."}]
    for n in range(1, steps + 1):
        content = f"Sunny, {n}C" + (f" {mark}" if n == at else "")
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call(f"City{n}")]},
            {"role": "tool", "content": content, "tool_call_id": f"call_City{n}"},
        ]
    messages.append({"role": "assistant", "content": "All sunny."})
    return messages


@pytest.fixture(scope="module")
def marked(tiny_model_dir, tmp_path_factory):
    """The two templates above, loaded with the tiny tokenizer: ``marked(name) -> LoadedModel``."""
    folder = tmp_path_factory.mktemp("fast-templates")
    loaded = {}
    for name, source in (("REDACTS_AFTER_ALERT", REDACTS_AFTER_ALERT), ("NUMBERS_AFTER_COUNT", NUMBERS_AFTER_COUNT)):
        path = folder / f"{name}.jinja"
        path.write_text(source, encoding="utf-8")
        loaded[name] = load(tiny_model_dir, path)
    return loaded.__getitem__


def run(session: TitoSession, model, messages: list[dict], until: int | None = None) -> dict[int, list[int]]:
    """Start, extend step by step (through step ``until``, default all), and finish when all were taken."""
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    used = {j: sampled(model, messages, j, session.stop_ids) for j in turns}
    session.start(messages[: turns[0]])
    for n, j in enumerate(turns[:-1]):
        if until is not None and n + 1 > until:
            return used
        session.extend(used[j], messages[j], messages[j + 1 : turns[n + 1]])
    if until is None:
        session.finish(used[turns[-1]], messages[turns[-1]])
    return used


def per_turn_break(model, messages: list[dict]) -> TitoBreak:
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, bridge="template")
    with pytest.raises(TitoBreak) as raised:
        run(session, model, messages)
    return raised.value


# -- a break let into the buffer is reported at its own step ---------------------------------------------------------
def test_a_break_at_turn_k_is_raised_at_k_per_turn_and_by_finish_when_bridged_locally(marked):
    model = marked("REDACTS_AFTER_ALERT")
    messages = loop_with(ALERT)
    expected = per_turn_break(model, messages).details
    assert (expected.step, expected.found_at) == (MARKED, "")  # per turn: at the step that appends the mark

    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)  # bridge="auto", the default
    assert session.bridge == "auto" and session.bridge_proof.covered
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    used = run(session, model, messages, until=STEPS)  # every step goes through: nothing renders the history
    assert [t.bridged for t in session.turns] == ["local"] * STEPS
    assert session.unchecked_steps == list(range(1, STEPS + 1))
    before = (session.buffer, session.loss_mask, session.messages)
    with pytest.raises(TitoBreak) as raised:
        session.finish(used[turns[-1]], messages[turns[-1]])
    details = raised.value.details
    assert details.found_at == "finish"
    # the break the per-turn check raises at that step, with the same labels, owner and evidence
    for name in ("step", "turn", "aspect", "causes", "message_index", "buffer_text", "template_text", "token_index"):
        assert getattr(details, name) == getattr(expected, name), name
    assert (session.buffer, session.loss_mask, session.messages) == before  # raise leaves the session as it was


def test_check_every_finds_the_break_at_the_next_full_render(marked):
    model = marked("REDACTS_AFTER_ALERT")
    messages = loop_with(ALERT)
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, check_every=2)
    with pytest.raises(TitoBreak) as raised:
        run(session, model, messages)
    details = raised.value.details
    # steps 1-2 local, 3 rendered whole, 4-5 local, 6 rendered whole: the step-5 break is found there
    assert (details.step, details.found_at) == (MARKED, "step 6")
    assert [t.bridged for t in session.turns] == ["local", "local", "template", "local", "local"]


def test_warn_and_rerender_apply_where_the_break_is_found(marked):
    model = marked("REDACTS_AFTER_ALERT")
    messages = loop_with(ALERT)
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, on_break="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = run(session, model, messages)
    assert [w.category for w in caught] == [TitoBreakWarning]
    (found,) = session.breaks
    assert (found.step, found.found_at) == (MARKED, "finish") and session.turns[MARKED - 1].broke is found
    for turn in session.turns:  # append-only: every completion as sampled, under the loss
        start, end = turn.completion
        assert session.buffer[start:end] == used[turn.message_index]
    assert "Sunny, 1C" in session.codec.decode(session.buffer)  # what the template would redact stays

    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, on_break="rerender")
    used = run(session, model, messages)
    (found,) = session.breaks
    assert (found.step, found.found_at) == (MARKED, "finish")
    last = len(messages) - 1
    prompt = session.template_ids(messages[:last], add_generation_prompt=True)
    assert session.buffer == prompt + used[last]  # continued from the template's render, at finish
    assert session.loss_mask[len(prompt) :] == [1] * len(used[last])


def test_a_local_bridge_the_template_writes_otherwise_is_a_suffix_break(marked):
    model = marked("NUMBERS_AFTER_COUNT")
    messages = loop_with(COUNT)
    per_turn = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, bridge="template")
    run(per_turn, model, messages)
    assert not per_turn.breaks  # the template's own bridge, numbered, is followed at every step

    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)
    with pytest.raises(TitoBreak) as raised:
        run(session, model, messages)
    details = raised.value.details
    assert (details.step, details.aspect, details.causes) == (MARKED + 1, "suffix", ["history-dependent-suffix"])
    assert details.found_at == "finish" and " #" in details.template_text and " #" not in details.buffer_text


def test_the_buffer_is_the_per_turn_buffer_where_nothing_breaks(marked, models):
    for model, messages in ((marked("REDACTS_AFTER_ALERT"), loop_with("no mark")), (models("GOOD")[0], None)):
        messages = messages or loop_with("no mark", steps=4)
        fast = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)
        slow = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, bridge="template")
        run(fast, model, messages)
        run(slow, model, messages)
        assert fast.buffer == slow.buffer and fast.loss_mask == slow.loss_mask and not fast.breaks
        assert fast.last_check is not None and fast.last_check.at == "finish" and fast.last_check.broke is None
        assert {t.bridged for t in fast.turns[:-1]} == {"local"} and {t.bridged for t in slow.turns} == {"template"}


# -- what the proof covers ---------------------------------------------------------------------------------------------
def test_the_proof_covers_what_the_grid_shows_followed(models):
    good = TitoSession.from_loaded(models("GOOD")[0], tools=TOOLS, clock=CLOCK).bridge_proof
    assert {form for form, _ in good.covered} == {"reasoning absent", "reasoning empty", "reasoning present"}
    assert good.with_tools and not good.failed and good.hard_stops
    # a header that counts messages: the local bridge differs from the real one at every step
    counts = TitoSession.from_loaded(models("TOOL_HEADER_COUNTS_MESSAGES")[0], tools=TOOLS).bridge_proof
    assert not counts.covered and counts.failed
    # an empty reasoning block the template drops once a tool result follows: that shape is rendered whole
    empty = TitoSession.from_loaded(models("EMPTY_THINK_ONLY_WHEN_LAST")[0], tools=TOOLS).bridge_proof
    assert all(form != "reasoning empty" for form, _ in empty.covered)
    assert any(form == "reasoning empty" for form, _ in empty.failed)
    # a session without tools gets the proof made without them
    assert not TitoSession.from_loaded(models("GOOD")[0], clock=CLOCK).bridge_proof.with_tools


def test_steps_the_proof_does_not_cover_are_rendered_whole(models):
    model, _ = models("EMPTY_THINK_ONLY_WHEN_LAST")
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK, on_break="rerender")
    messages: list[dict] = [{"role": "user", "content": "Weather?"}]
    for n, reasoning in enumerate(["Look.", "", "Again.", "More."]):
        assistant = {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [call(f"C{n}")]}
        messages += [assistant, {"role": "tool", "content": "Sunny", "tool_call_id": f"call_C{n}"}]
    messages += [{"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Bye."}]
    run(session, model, messages)
    bridged = [t.bridged for t in session.turns[:-1]]
    # present reasoning: local; empty (the shape the template breaks): whole, and local again after that break;
    # a step with a user turn: whole
    assert bridged == ["local", "template", "local", "template"]
    assert [b.step for b in session.breaks] == [2] and not session.breaks[0].found_at


# -- forks share their lists ------------------------------------------------------------------------------------------
def test_forks_share_their_lists_and_stay_independent(models):
    model, _ = models("GOOD")
    messages = loop_with("no mark", steps=4)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)
    used = run(session, model, messages, until=2)
    before = (session.buffer, session.loss_mask, session.logprobs)
    twin = session.fork()
    twin.extend(used[turns[2]], messages[turns[2]], messages[turns[2] + 1 : turns[3]])
    assert (session.buffer, session.loss_mask, session.logprobs) == before
    session.extend(used[turns[2]], messages[turns[2]], [{"role": "user", "content": "Stop."}])
    assert twin.buffer[: len(before[0])] == before[0] and twin.buffer != session.buffer
    again = twin.fork()
    again.finish(used[turns[3]], messages[turns[3]])
    assert again.buffer[: len(twin.buffer)] == twin.buffer and len(again.buffer) > len(twin.buffer)


def test_a_fork_keeps_its_own_settings_and_record_of_checks(models):
    """The session's settings and the parts that read them are its own: a fork's clock set, and a check run on the
    fork, leave the session as it was (its clock, its last check, its steps still to check)."""
    model, _ = models("GOOD")
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)
    run(session, model, loop_with("no mark", steps=4), until=2)
    assert session.unchecked_steps == [1, 2] and session.last_check is None
    twin = session.fork()
    twin.clock = CLOCK.replace(year=CLOCK.year + 1)
    assert twin.check() is None and not twin.unchecked_steps
    assert twin.last_check is not None and twin.last_check.steps == (1, 2)
    assert session.clock == CLOCK and session.last_check is None and session.unchecked_steps == [1, 2]


def test_pending_steps_survive_a_snapshot(marked):
    model = marked("REDACTS_AFTER_ALERT")
    messages = loop_with(ALERT)
    session = TitoSession.from_loaded(model, tools=TOOLS, clock=CLOCK)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    used = run(session, model, messages, until=STEPS)
    state = fold({}, change(None, session))
    again = restore(session.spawn(), state)
    assert again.unchecked_steps == session.unchecked_steps and again.buffer == session.buffer
    assert [t.bridged for t in again.turns] == ["local"] * STEPS
    with pytest.raises(TitoBreak) as raised:
        again.finish(used[turns[-1]], messages[turns[-1]])
    assert (raised.value.details.step, raised.value.details.found_at) == (MARKED, "finish")


def test_shared_lists_read_as_the_lists_they_copy(monkeypatch):
    """Random forks, appends and reads of :class:`AppendOnly` against plain lists (flattening every 3 copies)."""
    import random

    from tito_audit.session import shared_list
    from tito_audit.session.shared_list import INTS, OPTIONAL_FLOATS, AppendOnly

    monkeypatch.setattr(shared_list, "MAX_DEPTH", 3)
    rng = random.Random(11)
    for code, draw in ((INTS, lambda: rng.randrange(200_000)), (OPTIONAL_FLOATS, lambda: rng.choice([None, -0.25]))):
        kept = [([draw() for _ in range(5)], None)]  # (reference list, shared copy or None for a plain list)
        kept[0] = (kept[0][0], kept[0][0])
        for _ in range(300):
            reference, shared = rng.choice(kept)
            if rng.random() < 0.4:
                kept.append((list(reference), AppendOnly.of(shared, code)))
                continue
            if isinstance(shared, AppendOnly):
                added = [draw() for _ in range(rng.randrange(4))]
                shared += added
                reference += added
            a, b = sorted(rng.randrange(len(reference) + 1) for _ in range(2))
            assert shared[a:b] == reference[a:b] and shared[-3:] == reference[-3:]
            assert shared.count(None) == reference.count(None) and len(shared) == len(reference)
            if reference:
                assert shared[-1] == reference[-1] and shared[0] == reference[0]
        assert all(list(shared) == reference for reference, shared in kept)


SLOW = templates.build(
    preamble=templates.PREAMBLE + "{%- for i in range(3000) -%}{%- for j in range(3000) -%}{%- endfor -%}{%- endfor -%}"
)
"""The good template, made slow: every render walks an empty loop of 9,000,000 steps (legal, under any render limit)."""


def test_the_proof_stops_at_its_bound_inside_a_conversation(tiny_model_dir, tmp_path, monkeypatch):
    """The bound is checked in every render, not only between conversations: a slow template's conversation cannot
    carry the proof (and the model's lock it holds, which other sessions wait on) far past it (issue 56: a 60 s bound
    ran 71 s over)."""
    from tito_audit.session import proof

    path = tmp_path / "slow.jinja"
    path.write_text(SLOW, encoding="utf-8")
    session = TitoSession.from_loaded(load(tiny_model_dir, path), tools=TOOLS, clock=CLOCK)
    monkeypatch.setattr(proof, "PROOF_SECONDS", 1.0)
    started = time.monotonic()
    made = session.bridge_proof
    seconds = time.monotonic() - started
    assert not made.covered and "longer than 1 s" in made.reason, made.describe()
    assert seconds < 2.5, f"the proof ran {seconds:.1f} s against a bound of 1 s"


def test_while_the_proof_is_made_the_models_other_sessions_render_whole(tiny_model_dir, tmp_path, monkeypatch):
    """The proof is made without the model's lock: another session of the same model starts and takes a tool step
    (rendered whole, as ``bridge="template"`` would) while it runs, instead of waiting for it (it waited 69 s)."""
    import threading

    from tito_audit.session import proof
    from tito_audit.session.machinery import build_machinery

    path = tmp_path / "slow.jinja"
    path.write_text(SLOW.replace("range(3000)", "range(1000)"), encoding="utf-8")
    model = load(tiny_model_dir, path)
    machinery = build_machinery(model)
    monkeypatch.setattr(proof, "PROOF_SECONDS", 8.0)
    proving = threading.Thread(target=lambda: TitoSession(machinery, tools=TOOLS, clock=CLOCK).bridge_proof)
    proving.start()
    try:
        time.sleep(1.0)  # the proof is under way
        messages = loop_with("no mark", steps=1)
        other = TitoSession(machinery, tools=TOOLS, clock=CLOCK)
        run(other, model, messages)
        assert proving.is_alive(), "the other session waited for the proof"
        assert [t.bridged for t in other.turns[:-1]] == ["template"]
    finally:
        proving.join(timeout=60)
    assert machinery.proofs[True] is not None
