"""Training masks on the audit's own rollouts: the template's (its ``{% generation %}`` blocks) against what the model
sampled, and the session's loss mask against the template's.

Part 1, the mask check (SPEC "The checks", 5) of every model with generation blocks: SmolLM3 (its own vocabulary),
a training template a trainer ships given with ``--template`` (TRL's Qwen3 training template, the corpus's
``trl-internal-testing-tiny-Qwen3ForCausalLM``, on Qwen3's vocabulary) and, with ``--corpus``, every corpus template
with blocks (text level where the corpus has no vocabulary for it). Per model: the assistant turns judged, the turns
not written as sampled, and per label the turns that carry it, over every variant.

Part 2, the buffer's own mask, for each model of part 1 with a real vocabulary, under its default variant: every
generated conversation is driven through a :class:`~tito_audit.TitoSession` (what the gateway keeps per session too)
with the completions the audit's simulated rollout sampled (``extend`` per turn, ``finish`` on the last), and its
buffer and loss mask are compared with ``apply_chat_template(M, return_assistant_tokens_mask=True)`` of the same
conversation. Compared position by position: the conversations the session followed without a break (a template that
rewrites history makes it re-render, and its mask then keeps only what is still sampled) whose buffer is the start of
the template's ids (no BPE merge across a join; the render goes on with the text after the last stop token, which the
buffer never holds). Counted: tokens both masks train, tokens only the session trains (sampled, left out by the
template's mask: the stop token among them), tokens only the template's mask trains (text the template wrote).

Run: ``python benchmarks/bench_mask.py --mirror ../shared/tokenizers --corpus ../shared/template-corpus``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TRL_QWEN3 = ("Qwen/Qwen3-4B", "trl-internal-testing-tiny-Qwen3ForCausalLM.jinja")


@dataclass
class BufferMask:
    conversations: int = 0
    same_ids: int = 0
    tokens: int = 0
    both: int = 0
    session_only: int = 0
    template_only: int = 0
    stops_untrained: int = 0
    stops: int = 0
    skipped: int = 0
    """Conversations with two assistant turns in a row (a session appends at least one message between turns)."""
    broken: int = 0
    """Conversations the session could not follow (it re-rendered: its mask then keeps only what is still sampled)."""
    differing: list[str] = field(default_factory=list)


def mask_rates(loaded, count: int) -> str:
    """Part 1: the audit's mask check, summed over the variants."""
    from tito_audit.audit.mask_summary import mask_totals
    from tito_audit.audit.service import AuditOptions, audit
    from tito_audit.formatters.mask_lines import mask_cell

    report = audit(loaded, AuditOptions(count=count, parser="template"))
    totals = mask_totals(report)
    level = "text" if report.text_level_only else "token"
    return f"{level:5} {len(report.variants)} variants; not as sampled {totals.not_as_sampled}; {mask_cell(report)}"


def buffer_mask(loaded, count: int) -> BufferMask:
    """Part 2 (see the module docstring), default variant."""
    from tito_audit import TitoSession
    from tito_audit.audit.audit_options import conversation_source
    from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
    from tito_audit.audit.checks.trace import trace_of
    from tito_audit.audit.realization.stops import collect_stop_tokens, model_end_token
    from tito_audit.audit.service import AuditOptions, VariantAudit
    from tito_audit.model.assistant_mask import assistant_mask
    from tito_audit.model.load_folder import codec_for
    from tito_audit.model.render import frozen_clock
    from tito_audit.model.variants import template_inputs, variants_for

    options = AuditOptions(count=count, parser="template")
    codec = codec_for(loaded)
    variant = variants_for(template_inputs(loaded.template_source, loaded.tokenizer.special_tokens_map.keys()))[0]
    audit = VariantAudit(loaded, codec, variant, options)
    figures = BufferMask()
    with frozen_clock(loaded.template_source, options.clock):
        stops = collect_stop_tokens(
            audit.renderer, codec, loaded.generation_eos_ids, [], loaded.resolved.model_id, loaded.text_level_only
        )
        setup = CheckSetup.create(audit.renderer, codec, [s.id for s in stops], 0, False, model_end_token(stops))
        stop_ids = {s.id for s in stops}
        for conversation in conversation_source(options)(audit.profile):
            accepted, renders, _ = audit.accept(conversation)
            if accepted is None or renders is None:
                continue
            realized = audit.realize(accepted, renders)
            messages, tools = realized.conversation.messages, realized.conversation.tools
            context = RolloutContext(setup, realized.conversation, realized.renders, realized.alignments)
            sampled = {c.turn: c.ids for c in trace_of(context).completions}
            turns = realized.conversation.assistant_indices()
            if not turns or any(b == a + 1 for a, b in itertools.pairwise(turns)):
                figures.skipped += bool(turns)
                continue
            session = TitoSession.from_loaded(
                loaded, tools=tools, template_kwargs=variant.kwargs, on_break="rerender", clock=options.clock
            )
            session.start(messages[: turns[0]])
            for n, j in enumerate(turns[:-1]):
                session.extend(sampled[j], messages[j], messages[j + 1 : turns[n + 1]])
            session.finish(sampled[turns[-1]], messages[turns[-1]])
            template = assistant_mask(audit.renderer, messages[: turns[-1] + 1], tools)
            figures.conversations += 1
            buffer = session.buffer
            if session.breaks:
                figures.broken += 1
                continue
            if template.ids[: len(buffer)] != buffer:  # the render holds the text after the last stop token too
                figures.differing.append(realized.conversation.id)
                continue
            figures.same_ids += 1
            tail = template.mask[len(buffer) :]
            figures.tokens += len(tail)
            figures.template_only += sum(tail)
            for token, ours, theirs in zip(buffer, session.loss_mask, template.mask[: len(buffer)], strict=True):
                figures.tokens += 1
                figures.both += bool(ours and theirs)
                figures.session_only += bool(ours and not theirs)
                figures.template_only += bool(theirs and not ours)
                if ours and token in stop_ids:
                    figures.stops += 1
                    figures.stops_untrained += not theirs
    return figures


def models(args) -> list[tuple[str, object]]:
    """(label, loaded model) for every model with generation blocks."""
    from tito_audit.matrix.corpus import read_corpus, stage
    from tito_audit.model.assistant_mask import has_generation_blocks
    from tito_audit.model.load_by_id import load_by_id

    mirrors = [Path(m) for m in args.mirror]
    found = [("HuggingFaceTB/SmolLM3-3B", load_by_id("HuggingFaceTB/SmolLM3-3B", mirrors=mirrors, allow_hub=False))]
    corpus = Path(args.corpus) if args.corpus else SHARED / "template-corpus"
    model, name = TRL_QWEN3
    if (corpus / "templates" / name).is_file():
        loaded = load_by_id(model, mirrors=mirrors, allow_hub=False, template_file=corpus / "templates" / name)
        found.append((f"{model} --template {name}", loaded))
    if args.corpus:
        staged = Path(tempfile.mkdtemp(prefix="bench-mask-"))
        for entry in read_corpus(corpus, mirrors).entries:
            if entry.problem or not has_generation_blocks(entry.template.read_text(encoding="utf-8")):
                continue
            folder = stage(entry, staged)
            found.append((f"corpus {entry.name}", load_by_id(str(folder), allow_hub=False)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", action="append", default=[], help="Folder of <org>--<name>/ model folders.")
    parser.add_argument("--corpus", help="A template corpus (index.json + templates/): its templates with blocks too.")
    parser.add_argument("--count", type=int, default=32, help="Generated conversations per variant (default 32).")
    args = parser.parse_args()
    if not args.mirror:
        args.mirror = [str(SHARED / "tokenizers")]
    found = models(args)
    print("Part 1: the mask check (turns over every variant)")
    for label, loaded in found:
        started = time.perf_counter()
        print(f"  {label}: {mask_rates(loaded, args.count)} ({time.perf_counter() - started:.1f} s)", flush=True)
    print("\nPart 2: the session's loss mask against the template's (default variant, same rollouts)")
    for label, loaded in found:
        if loaded.text_level_only:
            continue
        figures = buffer_mask(loaded, args.count)
        print(
            f"  {label}: {figures.conversations} conversations ({figures.skipped} more left out: assistant turns in a "
            f"row), {figures.broken} the session could not follow, {figures.same_ids} followed with the template's "
            "ids; over their "
            f"{figures.tokens} tokens: both train {figures.both}, only the session {figures.session_only} (stop "
            f"tokens {figures.stops_untrained} of {figures.stops}), only the template's mask {figures.template_only}"
            + (f"; buffer differs from the render in {', '.join(figures.differing[:6])}" if figures.differing else ""),
            flush=True,
        )


if __name__ == "__main__":
    main()
