"""``bridge="auto"``: steps bridged from a short local render, and the full check that covers them later.

A tool step whose shape the template's proof covers (:mod:`tito_audit.session.proof`) is bridged from the local
render (:mod:`tito_audit.session.local_bridge`) without rendering the history: its cost does not grow with the
conversation. The step is kept as *pending*, with where it sits in the buffer and in the text. The next render of the
whole conversation covers every pending step at once: a step the proof does not cover (a user turn, a shape the grid
did not show, a completion cut without its stop token, ...), every ``check_every``-th step when asked for, and
:meth:`finish` (one render per rollout). That render is the per-turn check of its step, so a pending step whose
divergence is still in the template's prompt there is found: the session then walks the pending steps again in order,
each against the template's render of the conversation as it was at that step, exactly as the per-turn check would
have met them, and reports the first that breaks, with the same labels and evidence, plus where it was found
(:attr:`~tito_audit.session.breaks.SessionBreak.found_at`). A pending step whose appended bridge is not the template's
bridge there is a break too (``history-dependent-suffix``, aspect ``suffix``): the buffer holds what the model saw.

The policy is applied where the break is found: ``raise`` raises it (the session as it was before the call);
``warn`` records it and keeps the buffer as sampled (it is append-only: the model saw it); ``rerender`` continues
from the template's render of the conversation as it is when the break is found. Later steps are bridged as before:
under ``warn`` the template's view of the buffer (what the per-turn check compares) and the buffer part where the
break kept the sampled text, and a step's local bridge is appended to both; the positions a pending step keeps are
those of the view's text and of the buffer's ids.
"""

from __future__ import annotations

import dataclasses
import warnings

from tito_audit.audit.public import join
from tito_audit.conversations.conversation import TOOL, Message
from tito_audit.session.breaks import SessionBreak, TitoBreak, TitoBreakWarning, diagnose, suffix_break
from tito_audit.session.buffer_logprobs import Logprobs
from tito_audit.session.local_bridge import local_bridge, stand_in_prompt
from tito_audit.session.proof import BridgeProof, made_proof, proof_for, proof_if_free, shape_of
from tito_audit.session.settings import SessionSettings
from tito_audit.session.shared_list import as_list
from tito_audit.session.state import PendingStep, SessionState
from tito_audit.session.steps import BufferSteps
from tito_audit.session.turn_records import PendingTurn


@dataclasses.dataclass(frozen=True)
class FullCheck:
    """The last render of the whole conversation that covered pending steps: where it ran and what it found."""

    at: str
    """``step N``, ``finish`` or ``check``."""
    steps: tuple[int, ...]
    """The pending steps it covered."""
    broke: SessionBreak | None
    """The first of them that breaks (None: none does)."""


class DeferredChecks:
    """The ``bridge="auto"`` steps of a session and the later check of the whole conversation (see the module
    docstring), on the :class:`~tito_audit.session.state.SessionState` each call is handed, with the session's
    :class:`~tito_audit.session.steps.BufferSteps`; the session's settings are read, never written. Keeps what the
    session reports of its checks (:attr:`last_check`) and the local render's stand-in prompt."""

    def __init__(
        self,
        settings: SessionSettings,
        steps: BufferSteps,
        last_check: FullCheck | None = None,
        stand_in: str | None = None,
    ) -> None:
        self.settings = settings
        self.steps = steps
        self.last_check = last_check
        """The last render of the whole conversation that covered steps bridged without it, and what it found."""
        self.stand_in_prompt = stand_in
        """The local render's generation prompt after its stand-in user message (``""``: the template refuses it)."""

    def copy_for(self, settings: SessionSettings, steps: BufferSteps) -> DeferredChecks:
        """The same checks for a fork (its own settings and steps): what this session reported so far goes with it."""
        return DeferredChecks(settings, steps, self.last_check, self.stand_in_prompt)

    # -- a step of extend() ---------------------------------------------------------------------------------------
    def step(
        self,
        state: SessionState,
        completion: list[int] | None,
        assistant: Message,
        appended: list[Message],
        logprobs: Logprobs | None,
    ) -> SessionBreak | None:
        """Append one step by the session's bridge: the stand-in suffix (``history-free``), the local bridge where the
        proof covers the step (``auto``), else the template's render of the whole conversation; returns the break
        recorded (``raise`` raises it, the state as it was)."""
        machinery = self.settings.machinery
        self.prepare_proof(completion, appended)
        # one step at a time per model (the renderer and the tokenization cache are shared by the sessions of a
        # process), and every render of the step, diagnosis included, sees the session's clock
        with machinery.lock, machinery.rendering(self.settings.clock):
            if self.settings.bridge == "history-free":
                self.steps.history_free(state, completion, assistant, appended, logprobs)
                return None
            if self.local_step(state, completion, assistant, appended, logprobs):
                return None
            return self.advance(state, completion, assistant, appended, logprobs)

    def check_now(self, state: SessionState, at: str) -> SessionBreak | None:
        """:meth:`~tito_audit.session.TitoSession.check` (``at`` names where it runs: ``check`` or ``finish``)."""
        if not state.pending:
            return None
        machinery = self.settings.machinery
        with machinery.lock, machinery.rendering(self.settings.clock):
            return self.check_pending(state, at)

    # -- the fast step --------------------------------------------------------------------------------------------
    @property
    def bridge_proof(self) -> BridgeProof:
        """The proof of which steps this session may bridge without rendering the history (made on first use, once
        per model, template setting and whether tools are declared; see :mod:`tito_audit.session.proof`)."""
        return proof_for(self.settings.machinery, bool(self.settings.tools))

    def prepare_proof(self, completion: list[int] | None, appended: list[Message]) -> None:
        """Before the model's lock is taken: make the proof when this step could be bridged locally and no other
        thread is making it (this session waits for it, the model's other sessions do not). While another thread
        makes it, the step is rendered whole."""
        if self.settings.bridge == "auto" and completion and all(m.get("role") == TOOL for m in appended):
            proof_if_free(self.settings.machinery, bool(self.settings.tools))

    def local_step(
        self,
        state: SessionState,
        completion: list[int] | None,
        assistant: Message,
        appended: list[Message],
        logprobs: Logprobs | None,
    ) -> bool:
        """Append the step with the local bridge when the proof covers it (see the module docstring); False when the
        step must be rendered in full. Called under the machinery's lock and the session's clock."""
        if self.settings.bridge != "auto" or not completion:
            return False
        if self.settings.check_every and len(state.pending) >= self.settings.check_every:
            return False
        if any(m.get("role") != TOOL for m in appended):
            return False
        proof = made_proof(self.settings.machinery, bool(self.settings.tools))
        if proof is None or not proof.covers(shape_of(assistant, appended), completion[-1]):
            return False
        machinery = self.settings.machinery
        if self.stand_in_prompt is None:  # the same for every step of the session: its tools, clock and settings
            self.stand_in_prompt = stand_in_prompt(machinery.renderer, self.settings.tools) or ""
        if not self.stand_in_prompt:
            return False
        piece = self.steps.decode_in_context(state, completion)
        made = local_bridge(
            machinery.renderer,
            machinery.codec,
            self.settings.tools,
            assistant,
            appended,
            piece,
            completion[-1],
            self.stand_in_prompt,
        )
        if made is None:
            return False
        bridge, text = made
        pending = PendingTurn(
            len(state.messages), completion, len(state.buffer), self.settings.machinery.stop_ids, assistant, logprobs
        )
        start, text_start = len(state.buffer), len(state.view_text)
        end = start + len(completion)
        # in place: the cost of a step is what it appends (fork() copies the lists a server tries a step on)
        state.buffer += completion
        state.buffer += bridge
        state.mask += [1] * len(completion)
        state.mask += [0] * len(bridge)
        state.logprobs += pending.sampled_logprobs
        state.logprobs += [None] * len(bridge)
        state.view_ids += completion
        state.view_ids += bridge
        text_end = text_start + len(piece)
        state.view_text += piece + text  # one copy of the text (a string is not grown in place)
        state.messages.append(assistant)
        state.messages += appended
        state.sampled_spans.append(pending.span)
        state.steps += 1
        state.turns.append(pending.done((end, len(state.buffer)), bridged="local"))
        state.pending.append(
            PendingStep(
                state.steps,
                pending.message_index,
                len(state.messages),
                text_start,
                text_end,
                start,
                end,
                len(state.buffer),
            )
        )
        return True

    # -- a step rendered whole ------------------------------------------------------------------------------------
    def advance(
        self,
        state: SessionState,
        completion: list[int] | None,
        assistant: Message,
        appended: list[Message],
        logprobs: Logprobs | None,
    ) -> SessionBreak | None:
        """A step rendered whole: append, render, join, and on a break apply the policy."""
        step = state.steps + 1
        messages = [*state.messages, assistant, *appended]
        roles = [str(m.get("role")) for m in appended]
        buffer, mask, view_ids, view_text = state.buffer, state.mask, state.view_ids, state.view_text
        pending = PendingTurn(
            len(state.messages), completion, len(buffer), self.settings.machinery.stop_ids, assistant, logprobs
        )
        if completion is not None:
            piece = self.steps.decode_in_context(state, completion)
            buffer, mask = buffer + completion, mask + [1] * len(completion)
            view_ids, view_text = view_ids + completion, view_text + piece
        prompt = self.steps.render(messages, step=step, roles=roles)
        joined = self.steps.join(state, view_text, completion, prompt)
        if joined.followed:
            bridge = joined.bridge or []
            state.steps = step
            self.steps.commit(
                state, messages, buffer + bridge, mask + [0] * len(bridge), list(prompt.ids), prompt.text, pending
            )
            state.turns.append(pending.done((len(buffer), len(buffer) + len(bridge))))
            self.covered(state, f"step {step}")
            return None
        # steps bridged from the local render since the last full render are walked first: the first that breaks is
        # the break the per-turn check would have found
        details = self.first_pending_break(state, f"step {step}") or diagnose(
            self.settings.machinery.setup,
            messages,
            self.settings.tools,
            step=step,
            roles=roles,
            joined=joined,
            buffer=as_list(view_ids),
            buffer_text=view_text,
            last_prompt_text=state.view_text if completion is not None else None,
        )
        if self.settings.on_break == "raise":
            details.handled = f"raised at step {step}" if details.found_at else "raised"
            raise TitoBreak(details)
        state.steps = step
        kept = self.settings.on_break == "warn" and self.steps.keep_buffer(
            state, details, messages, appended, buffer, mask, prompt, pending
        )
        if not kept:
            self.steps.rerender(state, details, messages, buffer, mask, prompt, pending)
        self.mark_late(state, details)
        state.breaks.append(details)
        return details

    # -- the full check of pending steps --------------------------------------------------------------------------
    def covered(self, state: SessionState, at: str) -> None:
        """A render of the whole conversation followed the buffer: the pending steps are covered."""
        if state.pending:
            self.last_check = FullCheck(at, tuple(p.step for p in state.pending), None)
            state.pending = []

    def first_pending_break(self, state: SessionState, at: str) -> SessionBreak | None:
        """Walk the pending steps again in order, each against the template's render of the conversation at that step
        (as the per-turn check would have); the first that breaks, found ``at``, or None."""
        for pending in state.pending:
            details = self.replayed(state, pending)
            if details is not None:
                details.found_at = at
                details.notes.append(
                    f"step {pending.step} was bridged without rendering the history (bridge='auto'); the render of "
                    f"the whole conversation at {at} found it"
                )
                self.last_check = FullCheck(at, tuple(p.step for p in state.pending), details)
                return details
        return None

    def replayed(self, state: SessionState, pending: PendingStep) -> SessionBreak | None:
        """The per-turn check of one pending step, against the conversation as it was then."""
        machinery = self.settings.machinery
        messages = state.messages[: pending.messages]
        roles = [str(m.get("role")) for m in messages[pending.assistant + 1 :]]
        prompt = self.steps.render(messages, step=pending.step, roles=roles)
        text = state.view_text[: pending.text_end]
        joined = join(machinery.codec, text, prompt)
        bridge = state.buffer[pending.completion_end : pending.bridge_end]
        if joined.followed:
            expected = joined.bridge or []
            if expected == bridge:
                return None
            ours = state.buffer[: pending.bridge_end]
            return suffix_break(
                pending.step,
                pending.messages,
                roles,
                (ours, pending.completion_end),
                (list(prompt.ids), len(prompt.ids) - len(expected)),
                machinery.setup.decode_one,
            )
        before = state.view_text[: pending.text_start]
        completion = state.buffer[pending.completion_start : pending.completion_end]
        return diagnose(
            machinery.setup,
            messages,
            self.settings.tools,
            step=pending.step,
            roles=roles,
            joined=joined,
            buffer=machinery.codec.encode(before) + completion,
            buffer_text=text,
            last_prompt_text=before,
        )

    def check_pending(self, state: SessionState, at: str) -> SessionBreak | None:
        """Cover the pending steps with one render of the whole conversation as it is (the per-turn check of the last
        of them); when it breaks, find the first that does and apply the policy (see the module docstring). Returns
        the break found (None: none). Called under the machinery's lock and the session's clock."""
        if not state.pending:
            return None
        last = state.pending[-1]
        if self.replayed(state, last) is None:
            self.covered(state, at)
            return None
        details = self.first_pending_break(state, at)
        assert details is not None  # the last pending step breaks, at least
        if self.settings.on_break == "raise":
            details.handled = f"raised at {at}"
            raise TitoBreak(details)
        if self.settings.on_break == "warn":
            details.handled = (
                f"warned at {at}; buffer kept as sampled (steps {details.step} to {last.step} were bridged from the "
                "short local render)"
            )
        else:
            self.steps.restart_from(state, self.steps.render(state.messages, step=last.step, roles=[]))
            details.handled = f"re-rendered from the template at {at}"
        self.record_late(state, details)
        return details

    def record_late(self, state: SessionState, details: SessionBreak) -> None:
        """Record a break found after its step (at ``finish`` or ``check``): in the breaks and on that step's turn."""
        self.mark_late(state, details)
        state.breaks.append(details)
        if self.settings.on_break == "warn":
            warnings.warn(TitoBreakWarning(details.describe()), stacklevel=4)

    def mark_late(self, state: SessionState, details: SessionBreak) -> None:
        """The turn of a break found later gets it too (the n-th ``extend`` is step n and turn n - 1); the pending
        steps are settled."""
        index = details.step - 1
        if details.found_at and 0 <= index < len(state.turns) and state.turns[index].bridged == "local":
            state.turns[index] = dataclasses.replace(state.turns[index], broke=details)
        state.pending = []
