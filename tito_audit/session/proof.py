"""Which steps a session may bridge without rendering the history: the proof, once per template setting.

``bridge="auto"`` takes a tool step's bridge from a short local render (:mod:`tito_audit.session.local_bridge`). That
is the template's own bridge exactly when the template writes the step the same after any history: a property of
the template, proved here the audit's way, over its conversations rather than one. For the session's template setting
(its keyword arguments, stop tokens and renderer) the proof walks the conversations an audit of that variant walks
(the seeded grid of :func:`tito_audit.conversations.generate.generate`: every reasoning form the variant's prompt
admits, parallel calls, the harness shapes, the built-in tools) plus :data:`LONG_CONVERSATIONS` long ones (up to
:data:`LONG_TURNS` turns, for templates whose writing changes as a conversation grows), through the audit's own
simulated rollout (:mod:`tito_audit.audit.checks.trace`), and compares, at every tool step, the local bridge with
the real one (``R`` after the buffer), token for token: the audit's bridge check (:mod:`tito_audit.audit.checks.bridge`)
applied to the construction the session uses. (The bridge check's own stand-in, a synthetic call before the results
as verl and SkyRL build it, can differ where this one does not: gpt-oss writes a tool result after the call it
answers, and the local render writes the step's real call.)

What it covers is a set of step shapes: a tool step (tool results only), by the reasoning form of the assistant turn
before it (absent, empty, present) and by one tool result or several. A shape is covered when the grid holds steps of
it whose local bridge equals the real one, and no step of it was either not followed by the buffer (text or seam) or
given a local bridge that differs. User and system steps are never covered, nor is a shape the grid did not show; the
session renders the whole conversation for those. Whether the session declares tools is part of the setting: the
proof runs with the built-in tools, or with none when the session has none.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tito_audit.audit.public import (
    AuditOptions,
    CheckSetup,
    RolloutContext,
    VariantAudit,
    conversation_source,
    trace_of,
)
from tito_audit.conversations.conversation import TOOL, Conversation, Message
from tito_audit.conversations.generate import generate_conversation
from tito_audit.conversations.reasoning_forms import reasoning_form
from tito_audit.errors import AuditError
from tito_audit.model.load_folder import codec_for
from tito_audit.model.render import DEFAULT_CLOCK, Renderer, RenderError, frozen_clock
from tito_audit.model.render_budget import deadline
from tito_audit.model.variants import Variant
from tito_audit.session.local_bridge import hard_stops, local_bridge
from tito_audit.session.machinery import Machinery

Shape = tuple[str, bool]
"""A tool step's shape: the reasoning form of the assistant turn before it, and whether it appends several results."""
LONG_CONVERSATIONS = 6
LONG_TURNS = 16
"""The long conversations the proof walks beside the audit's grid (seeded apart from it)."""


def shape_of(assistant: Message, appended: Sequence[Message]) -> Shape:
    """The shape of a tool step appending ``appended`` after ``assistant``."""
    return reasoning_form(assistant), len(appended) > 1


def describe_shape(shape: Shape) -> str:
    form, several = shape
    return f"{form}, {'several results' if several else 'one result'}"


@dataclass(frozen=True)
class BridgeProof:
    """What the proof found for one template setting (with or without tools)."""

    covered: frozenset[Shape]
    """The tool-step shapes a session may bridge with the local render."""
    failed: frozenset[Shape]
    """Shapes the grid showed and the proof could not cover (a step not followed, a bridge that differs)."""
    steps: int
    """Tool steps the proof walked."""
    conversations: int
    seconds: float
    with_tools: bool
    hard_stops: frozenset[int] = frozenset()
    """The stop ids after which the local bridge is tokenized on its own
    (:func:`~tito_audit.session.local_bridge.hard_stops`); a completion ending on another is rendered in full."""
    reason: str = ""
    """Why nothing is covered, when nothing is."""

    def covers(self, shape: Shape, stop_id: int) -> bool:
        """Whether a tool step of ``shape`` after a completion that ended on ``stop_id`` may take the local bridge."""
        return shape in self.covered and stop_id in self.hard_stops

    def describe(self) -> str:
        """One line: what is covered and on what evidence."""
        tools = "with tools" if self.with_tools else "without tools"
        if not self.covered or not self.hard_stops:
            return f"no step shape proved history-free ({tools}): {self.reason}"
        shapes = "; ".join(describe_shape(s) for s in sorted(self.covered))
        line = (
            f"tool steps proved history-free ({tools}) over {self.steps} tool steps of {self.conversations} "
            f"conversations in {self.seconds:.2f} s: {shapes}"
        )
        if self.failed:
            line += f" (not: {'; '.join(describe_shape(s) for s in sorted(self.failed))})"
        return line


def refused_proof(with_tools: bool, reason: str) -> BridgeProof:
    return BridgeProof(frozenset(), frozenset(), 0, 0, 0.0, with_tools, reason=reason)


def proof_for(machinery: Machinery, with_tools: bool) -> BridgeProof:
    """The proof for ``machinery``'s template setting, made on first use and kept with the machinery and, for the
    machineries of the same loaded model and setting (sessions opened with ``from_loaded`` again and again), in a
    small table of the process. It is made without the model's lock (with its own codec and renderer), under the
    machinery's proof lock: a thread that asks while another makes it waits for that one; the model's other
    sessions render meanwhile. Call it without the model's lock, or it holds them too."""
    found = made_proof(machinery, with_tools)
    if found is not None:
        return found
    with machinery.proof_lock:
        return _made_here(machinery, with_tools)


def proof_if_free(machinery: Machinery, with_tools: bool) -> BridgeProof | None:
    """The proof when it is made; made here when no other thread is making it; None while another thread makes it
    (the caller renders its step whole meanwhile, as ``bridge="template"`` does)."""
    found = made_proof(machinery, with_tools)
    if found is not None:
        return found
    if not machinery.proof_lock.acquire(blocking=False):
        return None
    try:
        return _made_here(machinery, with_tools)
    finally:
        machinery.proof_lock.release()


def made_proof(machinery: Machinery, with_tools: bool) -> BridgeProof | None:
    """The proof if it is made already (by this machinery or one of the same loaded model and setting), else None."""
    found = machinery.proofs.get(with_tools)
    if found is not None:
        return found
    with _KEPT_LOCK:
        kept = _KEPT.get(_setting_key(machinery, with_tools))
    proof = kept[1] if kept is not None and kept[0]() is machinery.loaded else None
    if proof is not None:
        machinery.proofs[with_tools] = proof
    return proof


def _made_here(machinery: Machinery, with_tools: bool) -> BridgeProof:
    """Make the proof (under the machinery's proof lock) unless a thread made it while this one waited."""
    proof = made_proof(machinery, with_tools)
    if proof is None:
        proof = prove(machinery, with_tools)
        with _KEPT_LOCK:
            if len(_KEPT) >= MAX_KEPT:
                _KEPT.clear()
            # the loaded model is referred to weakly: the table keeps no model alive (an id reused after it is gone
            # is told apart by the reference, which is dead then)
            _KEPT[_setting_key(machinery, with_tools)] = (weakref.ref(machinery.loaded), proof)
        machinery.proofs[with_tools] = proof
    return proof


_KEPT: dict[tuple, tuple[Any, BridgeProof]] = {}
_KEPT_LOCK = threading.Lock()
"""Guards :data:`_KEPT`; never held while a proof is made."""
MAX_KEPT = 64
PROOF_SECONDS = 60.0
"""A proof still walking its conversations after this long stops and covers nothing (every step is then rendered
whole): a template slow enough for that would make each session wait on it."""


def _setting_key(machinery: Machinery, with_tools: bool) -> tuple:
    """What a proof depends on: the loaded model (its tokenizer and template), the template's keyword arguments, the
    stop tokens, the render limits, and whether tools are declared."""
    kwargs = json.dumps(machinery.renderer.kwargs, sort_keys=True, default=str)
    limits = machinery.renderer.limits
    return (
        id(machinery.loaded),
        kwargs,
        tuple(sorted(machinery.stop_ids)),
        limits.max_chars,
        limits.max_seconds,
        with_tools,
    )


def prove(machinery: Machinery, with_tools: bool) -> BridgeProof:
    """The proof for ``machinery``'s template setting (see the module docstring). It renders and tokenizes with a
    codec and renderer of its own, so the machinery's sessions need not wait for it (their caches are theirs)."""
    loaded = machinery.loaded
    if loaded.template_source is None:
        return refused_proof(with_tools, f"{loaded.backend} renders without a Jinja template")
    codec = codec_for(loaded)
    if codec.piecewise:
        return refused_proof(with_tools, "the tokenizer encodes message by message (no single-string encoding)")
    started = time.perf_counter()
    kwargs = dict(machinery.renderer.kwargs)
    setup = CheckSetup.create(
        Renderer(loaded, codec, kwargs, machinery.renderer.limits), codec, sorted(machinery.stop_ids), 0
    )
    options = AuditOptions(clock=DEFAULT_CLOCK)
    variant_audit = VariantAudit(loaded, codec, Variant("session", kwargs), options)
    tally: dict[Shape, list[int]] = {}
    walked = 0
    try:
        # the bound holds inside every render too: a slow template's long conversation cannot carry the proof (and
        # the model's lock it holds) far past it
        with frozen_clock(loaded.template_source, DEFAULT_CLOCK), deadline(PROOF_SECONDS):
            profile = variant_audit.profile
            grid = list(conversation_source(options)(profile))
            grid += [generate_conversation(i, 1, LONG_TURNS, profile) for i in range(LONG_CONVERSATIONS)]
            for conversation in grid:
                if not any(m.get("role") == TOOL for m in conversation.messages):
                    continue  # no tool step to walk
                if _past_bound(started):
                    return _bound_reached(with_tools)
                walked += _walk(
                    setup, variant_audit, conversation if with_tools else without_tools(conversation), tally
                )
        if _past_bound(started):  # a render cut at the bound reads as refused
            return _bound_reached(with_tools)
    except (RenderError, AuditError) as exc:
        if _past_bound(started):  # cut at the bound, not refused by the template
            return _bound_reached(with_tools)
        return refused_proof(with_tools, f"the proof could not render its conversations ({exc})")
    except RecursionError:
        return refused_proof(with_tools, "the proof's renders recursed too deeply")
    except Exception as exc:  # whatever fails in the proof, every step is rendered whole: safe
        if _past_bound(started):  # cut at the bound (a render timed out)
            return _bound_reached(with_tools)
        return refused_proof(with_tools, f"the proof failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
    covered = frozenset(shape for shape, (_, bad, equal) in tally.items() if equal and not bad)
    failed = frozenset(shape for shape, (_, bad, _) in tally.items() if bad)
    steps = sum(steps for steps, _, _ in tally.values())
    if not steps:
        reason = "the template rendered no tool step of the proof's conversations"
    elif not covered:
        reason = "every step shape the proof met has a step the buffer cannot follow or a local bridge that differs"
    else:
        reason = ""
    stops = hard_stops(codec, machinery.stop_ids)
    if covered and not stops:
        reason = "no stop token is an added token the tokenizer cuts text at (the local bridge has no seam to check)"
    seconds = time.perf_counter() - started
    return BridgeProof(covered, failed, steps, walked, seconds, with_tools, stops, reason)


def _past_bound(started: float) -> bool:
    return time.perf_counter() - started > PROOF_SECONDS


def _bound_reached(with_tools: bool) -> BridgeProof:
    return refused_proof(with_tools, f"the proof took longer than {PROOF_SECONDS:g} s")


def without_tools(conversation: Conversation) -> Conversation:
    return replace(conversation, tools=None)


def _walk(setup: CheckSetup, variant_audit: VariantAudit, conversation: Conversation, tally: dict) -> int:
    """Add the tool steps of one conversation to ``tally`` (shape -> [steps, steps that fail, local bridges equal to
    the real one]); 1 when the template accepted the conversation."""
    accepted, renders, _ = variant_audit.accept(conversation)
    if accepted is None or renders is None:
        return 0
    realized = variant_audit.realize(accepted, renders)
    context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
    messages, tools = realized.conversation.messages, realized.conversation.tools
    for step in trace_of(context).steps:
        if step.kind != TOOL:
            continue
        previous = step.previous
        assistant, appended = messages[previous.turn], messages[previous.turn + 1 : step.turn]
        counts = tally.setdefault(shape_of(assistant, appended), [0, 0, 0])
        counts[0] += 1
        if not step.followed:
            counts[1] += 1
            continue
        if not previous.stopped or not previous.ids:
            continue  # a session renders such a step in full
        local = local_bridge(setup.renderer, setup.codec, tools, assistant, appended, previous.text, previous.ids[-1])
        if local is not None:
            counts[1 if local[0] != step.bridge else 2] += 1
    return 1
