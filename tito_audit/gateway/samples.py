"""Each branch of a session's tree (:mod:`.branches`) as a training sample: its buffer, loss mask and
log-probabilities with the answers sampled on *this* branch in the loss, and those it carries from the branch it forked
from as context, so that every sampled id is in the loss of exactly one sample; what each sample counts
(``trainable``), who made it and its breaks (:mod:`.attribution`), and the record's list of them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.gateway.attribution import SIDE_REQUEST, loss_cause, made_by_break, made_by_harness, maker_of
from tito_audit.gateway.branches import PER_POSITION, Tree, path_to
from tito_audit.gateway.turn_steps import break_record, finished_view, turn_record, unchecked_view
from tito_audit.session import TitoSession


@dataclass
class Sample:
    """One branch as a training sample: its session with the last answer appended (``view``), the check of it, and
    which of its turns are in its loss (those sampled on this branch)."""

    branch: int
    parent: int | None
    view: TitoSession
    check: dict[str, Any]
    owned: list[bool]
    """Per turn of ``view``: whether its sampled ids are this sample's to train on."""
    made_by: dict[str, Any] | None

    @property
    def loss_mask(self) -> list[int]:
        """The view's loss mask with the turns sampled on other branches taken out (they are context here)."""
        mask = list(self.view.loss_mask)
        for turn, owned in zip(self.view.turns, self.owned, strict=True):
            if not owned:
                start, end = turn.completion
                mask[start:end] = [0] * (end - start)
        return mask

    def per_position(self, name: str) -> list[Any]:
        """A :data:`PER_POSITION` field of the sample: the loss mask as :attr:`loss_mask`, the log-probabilities only
        where it is 1, the rest as the view has them."""
        if name == "loss_mask":
            return self.loss_mask
        values = list(getattr(self.view, name))
        if name == "logprobs":
            return [v if m else None for v, m in zip(values, self.loss_mask, strict=True)]
        return values

    def counts(self) -> tuple[int, int, dict[str, int]]:
        """(sampled ids this branch owns, those of them in its loss, the others by cause)."""
        mask = self.view.loss_mask
        sampled = kept = 0
        for turn, owned in zip(self.view.turns, self.owned, strict=True):
            if owned and turn.sampled:
                start, end = turn.completion
                sampled += end - start
                kept += sum(mask[start:end])
        lost: dict[str, int] = {}
        if kept < sampled:  # the template re-rendered sampled ids (on_break rerender): its cause labels say why
            cause = next((b.cause for b in self.view.breaks), "unknown")
            lost[loss_cause(maker_of(cause), cause)] = sampled - kept
        return sampled, kept, lost

    def unsampled(self) -> list[int]:
        """The indices of the assistant messages in the sample the gateway never sampled (context, not loss)."""
        sampled = {turn.message_index for turn in self.view.turns if turn.sampled}
        return [i for i, m in enumerate(self.view.messages) if m.get("role") == "assistant" and i not in sampled]


def samples(tree: Tree, checked: bool = True) -> Iterator[Sample]:
    """Each branch of ``tree`` (a :func:`snapshot`) as a :class:`Sample`, in branch order (a branch's parent first);
    ``checked=False`` skips the check of the steps bridged without rendering the history (counts only)."""
    for number, (node, session) in sorted(tree.tips.items()):
        view, check = finished_view(session, node.pending) if checked else unchecked_view(session, node.pending)
        path = path_to(node)
        owners = [op[5] if op[1] is not None else None for step in path for op in step.ops if op[0] == "extend"]
        owned = [owner == number for owner in owners]
        if node.pending is not None:
            owned.append(True)
        made_by = next((step.made_by for step in reversed(path) if step.branch == number and step.made_by), None)
        if made_by is None and not node.tools and any(other.tools for other, _ in tree.tips.values()):
            made_by = made_by_harness(SIDE_REQUEST, None)  # a branch without tools beside the loop's, made before it
        yield Sample(number, tree.forks.get(number), view, check, owned, made_by)


def branch_records(tree: Tree) -> Iterator[dict[str, Any]]:
    """Each branch of ``tree`` (a :func:`snapshot`) as the record lists it, one at a time: the branch it forked from
    and where, who made it, the tokens it shares with that branch, its per-position fields (:data:`PER_POSITION`, the
    loss mask on the answers sampled on this branch only), turns (``in_loss``: whether the turn is this sample's),
    breaks (a count, and who made them), the assistant turns never sampled, its ``trainable`` counts and messages (its
    last answer included, as ``finish`` would append it). A branch's parent has a lower number: its view is there when
    the branch is read."""
    views: dict[int, TitoSession] = {}
    for sample in samples(tree):
        view = sample.view
        views[sample.branch] = view
        parent = sample.parent
        base = views[parent] if parent is not None else None
        record: dict[str, Any] = {
            "branch": sample.branch,
            "parent": parent,
            "made_by": sample.made_by,
            "shared_tokens": _shared(view.buffer, base.buffer) if base is not None else 0,
            "shared_messages": _shared(view.messages, base.messages) if base is not None else 0,
        }
        record.update({name: sample.per_position(name) for name in PER_POSITION})
        record["turns"] = [{**turn_record(t), "in_loss": o} for t, o in zip(view.turns, sample.owned, strict=True)]
        record["breaks"] = len(view.breaks)
        record["break_makers"] = [made_by_break(b.causes) for b in view.breaks]
        record["unsampled"] = sample.unsampled()
        sampled, kept, lost = sample.counts()
        record["trainable"] = {"sampled": sampled, "in_loss": kept, "lost": lost}
        record["check"] = sample.check
        record["messages"] = view.messages
        yield record


def active_sample(tree: Tree) -> Sample:
    """The branch the last request went on, as a :class:`Sample`."""
    return next(sample for sample in samples(tree) if sample.branch == tree.active)


def breaks_of(sample: Sample) -> list[dict[str, Any]]:
    """A sample's breaks as the record lists them, each with its maker."""
    return [{**break_record(b), "made_by": made_by_break(b.causes)} for b in sample.view.breaks]


def _shared(one: Sequence[object], other: Sequence[object]) -> int:
    count = 0
    for a, b in zip(one, other, strict=False):
        if a != b:
            break
        count += 1
    return count
