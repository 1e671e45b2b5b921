"""CI policy: which properties a model must have, which causes are tolerated, and what is new since a baseline.

Requirements (``--require``, or ``require`` under ``[tool.tito-audit]`` in ``pyproject.toml``):

- ``verdict:<verdict>``: the verdict is at least this good (``ready`` > ``ready-tool-only`` > ``broken``
  > ``unsupported``); ``ready`` and ``ready-tool-only`` alone mean the same;
- ``rollout:<kind>``: appended steps of this kind (``tool``, ``user``, ``system``, ``assistant``) are text-
  and seam-stable; ``tool-append`` is ``rollout:tool``, ``user-append`` is ``rollout:user``;
- ``append:<role>``: appending a message of this role keeps the render a prefix (message level);
- ``bridge``: the history-free stand-in suffix equals the real bridge;
- ``roundtrip``: no decode/re-encode finding besides non-canonical splits (which every BPE model shows).

The verdict and the rollout requirements judge the loops that decide an audit's exit code
(:mod:`tito_audit.audit.deciding`, the one rule): with engines' parsers audited, the rollout walked with each
engine's parser (the verdict: the worst of them; a rollout requirement holds when it holds with each); without one,
the template's. ``append``, ``bridge`` and ``roundtrip`` are properties of the template alone.

Any requirement can name one variant: ``rollout:tool@enable_thinking=false``; without it, every variant
must pass. Failures whose causes are all allowed (``--allow-cause``) do not count. With a baseline
report, only failures the baseline does not have count (a regression gate).

A baseline compares like with like: its report records the settings that produced it (``-n``, ``--seed``,
``--max-turns``, ``--kwarg``, ``--clock``, ``--stop-token``, the conversation sources, the tools generated
conversations call (``--tools``), the variants, and the parsers, one per engine). Failures are matched by
conversation and turn, so a run with other settings would count failures of other conversations as new:
:func:`check_baseline_settings` refuses it (one line, exit 2).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit import inputs
from tito_audit.audit.core.causes import CAUSES, quiet_only
from tito_audit.audit.deciding import TEMPLATE, VariantLoop, variant_loop, variant_loops
from tito_audit.audit.results import VERDICT_ORDER, AuditReport, Failure, VariantResult
from tito_audit.conversations.conversation import STEP_KINDS
from tito_audit.errors import BadInputError

ALIASES = {
    "tool-append": "rollout:tool",
    "user-append": "rollout:user",
    "system-append": "rollout:system",
    "ready": "verdict:ready",
    "ready-tool-only": "verdict:ready-tool-only",
}
KINDS = ("verdict", "rollout", "append", "bridge", "roundtrip")
DEFAULT_REQUIREMENTS = ("rollout:tool",)


@dataclass(frozen=True)
class Requirement:
    text: str
    kind: str
    target: str | None = None
    variant: str | None = None


@dataclass
class Policy:
    requirements: list[Requirement]
    allowed_causes: frozenset[str] = frozenset()
    baseline: dict[str, Any] | None = None
    baseline_path: str | None = None


@dataclass
class RequirementResult:
    requirement: str
    passed: bool
    reason: str
    failures: int = 0
    examples: list[str] = field(default_factory=list)


def parse_requirement(text: str) -> Requirement:
    """``rollout:tool@enable_thinking=false`` -> Requirement(kind='rollout', target='tool', variant=...).

    >>> parse_requirement("tool-append")
    Requirement(text='tool-append', kind='rollout', target='tool', variant=None)
    """
    spec, _, variant = text.strip().partition("@")
    spec = ALIASES.get(spec, spec)
    kind, _, target = spec.partition(":")
    if kind not in KINDS:
        raise BadInputError(f"unknown requirement '{text}' (kinds: {', '.join(KINDS)}; aliases: {', '.join(ALIASES)})")
    if kind in ("rollout", "append") and target not in STEP_KINDS:
        raise BadInputError(f"requirement '{text}': {kind} needs one of {', '.join(STEP_KINDS)}")
    if kind == "verdict" and target not in VERDICT_ORDER:
        raise BadInputError(f"requirement '{text}': verdict needs one of {', '.join(VERDICT_ORDER)}")
    if kind in ("bridge", "roundtrip") and target:
        raise BadInputError(f"requirement '{text}': {kind} takes no ':' part")
    return Requirement(text=text.strip(), kind=kind, target=target or None, variant=variant or None)


def check_causes(causes: Iterable[str]) -> frozenset[str]:
    unknown = sorted(set(causes) - set(CAUSES))
    if unknown:
        raise BadInputError(f"unknown cause label(s): {', '.join(unknown)} (see docs/audited.md, 'Cause labels')")
    return frozenset(causes)


def load_baseline(path: Path) -> dict[str, Any]:
    """A JSON report (``audit --json``, ``check --report``) to compare with, checked: its schema version, its model
    and the shape of every part :func:`evaluate` reads (one line naming what is wrong)."""
    document = inputs.parse_json(
        inputs.read_text(path, "--baseline", inputs.MAX_REPORT_BYTES), path, "--baseline", "JSON report"
    )
    problem = _baseline_problem(document)
    if problem is not None:
        raise BadInputError(f"--baseline {path}: {problem}")
    return document


_FAILURE_FIELDS = {
    "check": (str, "text"),
    "aspect": (str, "text"),
    "category": (str, "text"),
    "conversation_id": (str, "text"),
    "turn": (int, "an integer"),
}
"""What the comparison with a baseline reads of each failure."""


def _baseline_problem(document: Any) -> str | None:
    from tito_audit.audit.service import SCHEMA_VERSION

    if not isinstance(document, dict) or "schema_version" not in document:
        return "not a tito-audit JSON report (no schema_version)"
    if document["schema_version"] != SCHEMA_VERSION:
        return f"schema version {document['schema_version']!r}; this tool reads version {SCHEMA_VERSION}"
    model = document.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("model_id"), str):
        return "model.model_id is missing: not a tito-audit JSON report"
    variants = document.get("variants")
    if not isinstance(variants, list):
        return f"variants is {_kind(variants)}, not a list"
    for v, variant in enumerate(variants):
        if not isinstance(variant, dict) or not isinstance(variant.get("name"), str):
            return f"variants[{v}] has no name"
        failures = variant.get("failures")
        if not isinstance(failures, list):
            return f"variants[{v}].failures is {_kind(failures)}, not a list"
        for f, failure in enumerate(failures):
            where = f"variants[{v}].failures[{f}]"
            if not isinstance(failure, dict):
                return f"{where} is {_kind(failure)}, not an object"
            for name, (kind, said) in _FAILURE_FIELDS.items():
                value = failure.get(name)
                if not isinstance(value, kind) or isinstance(value, bool):
                    return f"{where}.{name} is {_kind(value)}, not {said}"
            causes = failure.get("causes")
            if not isinstance(causes, list) or not all(isinstance(c, str) for c in causes):
                return f"{where}.causes is not a list of cause labels"
    return None


def _kind(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"


def check_baseline_model(policy: Policy, model_id: str) -> None:
    """A baseline of another model compares nothing: refused."""
    if policy.baseline is None:
        return
    baseline_model = policy.baseline["model"]["model_id"]
    if baseline_model != model_id:
        raise BadInputError(f"--baseline {policy.baseline_path}: a report of {baseline_model}, not of {model_id}")


SETTINGS_COMPARED = {
    "count": "-n",
    "seed": "--seed",
    "max_turns": "--max-turns",
    "pinned_kwargs": "--kwarg",
    "clock": "--clock",
    "extra_stop_tokens": "--stop-token",
    "conversations_source": "--conversations",
    "datasets": "--conversations",
    "parsers": "--parser",
    "tool_schemas": "--tools",
}
"""The settings of a report that decide which failures it can have, and the option that sets each."""


def check_baseline_settings(policy: Policy, ours: dict[str, Any], *, complete: bool = True) -> None:
    """A baseline made with other settings compares other conversations: refused in one line (exit 2) naming what
    differs, so that its failures are never counted as new ones. ``ours``: the settings of this run as a report
    records them (:func:`report_settings`); ``complete=False`` compares only those given (known before the audit
    runs: the seed, the kwargs, the clock), so that a mismatch is found before the audit, not after it."""
    if policy.baseline is None:
        return
    recorded = policy.baseline.get("settings")
    theirs = {**(recorded if isinstance(recorded, dict) else {})}
    theirs["variants"] = [v.get("name") for v in policy.baseline.get("variants", [])]
    differences = []
    for name, option in [*SETTINGS_COMPARED.items(), ("variants", "variants")]:
        if (name not in ours and name not in theirs) or (not complete and name not in ours):
            continue
        if _comparable(ours.get(name)) != _comparable(theirs.get(name)):
            shown = "" if name == "datasets" else f": {_shown(theirs.get(name))} there, {_shown(ours.get(name))} here"
            differences.append(f"{option}{shown}")
    if differences:
        raise BadInputError(
            f"--baseline {policy.baseline_path}: made with other settings ({'; '.join(dict.fromkeys(differences))}); "
            "check with the baseline's settings, or write a new baseline with --report"
        )


def report_settings(report: AuditReport) -> dict[str, Any]:
    """The compared settings of ``report`` as its JSON has them (with its variants' names)."""
    return {**dataclasses.asdict(report.settings), "variants": [v.name for v in report.variants]}


def _comparable(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def read_pyproject_policy(path: Path) -> dict[str, Any]:
    """The ``[tool.tito-audit]`` table of a pyproject.toml ({} when absent)."""
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10 has no tomllib: its backport, a dependency on 3.10 only
        import tomli as tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: invalid TOML ({exc})") from exc
    table = data.get("tool", {}).get("tito-audit", {})
    if not isinstance(table, dict):
        raise BadInputError(f"{path}: [tool.tito-audit] must be a table")
    return table


def build_policy(
    table: dict[str, Any], require: Sequence[str], allow_cause: Sequence[str], baseline: Path | None
) -> Policy:
    """The policy from the command line, completed by a ``[tool.tito-audit]`` table: the command line's
    requirements and baseline win; allowed causes add up."""
    requirements = [parse_requirement(r) for r in (require or table.get("require") or DEFAULT_REQUIREMENTS)]
    allowed = check_causes([*allow_cause, *table.get("allow-causes", [])])
    baseline_path = baseline or (Path(table["baseline"]) if table.get("baseline") else None)
    return Policy(
        requirements=requirements,
        allowed_causes=allowed,
        baseline=load_baseline(baseline_path) if baseline_path else None,
        baseline_path=str(baseline_path) if baseline_path else None,
    )


def _failure_key(variant: str, failure: Failure | dict[str, Any], loop: str = TEMPLATE) -> tuple:
    """A failing step as a baseline matches it: its variant, the loop it failed in (``template``, or the parsers'
    name: each engine's walk fails on its own steps) and where and why it failed."""
    get: Callable[[str], Any] = failure.get if isinstance(failure, dict) else lambda k: getattr(failure, k)
    return (
        variant,
        loop,
        get("check"),
        get("aspect"),
        get("category"),
        tuple(get("causes")),
        get("conversation_id"),
        get("turn"),
    )


def _baseline_keys(baseline: dict[str, Any]) -> set[tuple]:
    """The baseline's failing steps: the template's checks', and each engine's walk's when it was made with their
    parsers (``parses``; a version 1 report's one ``parse``)."""
    keys = set()
    for variant in baseline.get("variants", []):
        keys |= {_failure_key(variant["name"], failure) for failure in variant.get("failures", [])}
        parses = variant.get("parses") or ([variant["parse"]] if isinstance(variant.get("parse"), dict) else [])
        for parse in parses:
            if not isinstance(parse, dict):
                continue
            failures = [failure for failure in parse.get("failures", []) if isinstance(failure, dict)]
            keys |= {_failure_key(variant["name"], failure, str(parse.get("parser"))) for failure in failures}
    return keys


def _loops(requirement: Requirement, variant: VariantResult) -> list[VariantLoop]:
    """The loops ``requirement`` is judged in: each engine's walk for a rollout requirement (the template's without
    one), the template's alone for the others."""
    if requirement.kind == "rollout":
        return variant_loops(variant)
    failures = [failure for failure in variant.failures if failure.check == "rollout"]
    return [VariantLoop(TEMPLATE, variant.verdict, variant.verdict_reason, failures, None)]


def _failures(requirement: Requirement, variant: VariantResult, loop: VariantLoop) -> list[Failure]:
    """The failures ``requirement`` counts in ``variant``: the rollout's in ``loop``, the others' in the template's
    checks."""
    if requirement.kind != "rollout":
        return [failure for failure in variant.failures if _selects(requirement, failure)]
    return [
        failure
        for failure in loop.rollout_failures
        if failure.category == requirement.target and (loop.parse is not None or failure.aspect in ("text", "seam"))
    ]


def _selects(requirement: Requirement, failure: Failure) -> bool:
    if requirement.kind == "append":
        return failure.check == "append" and failure.category.startswith(f"{requirement.target} after ")
    if requirement.kind == "bridge":
        return failure.check == "bridge"
    if requirement.kind == "roundtrip":
        return failure.check == "roundtrip" and not quiet_only(failure.causes)
    return False


def _cases(requirement: Requirement, variant: VariantResult, loop: VariantLoop) -> int:
    check = {"rollout": "rollout", "append": "append", "bridge": "bridge", "roundtrip": "roundtrip"}[requirement.kind]
    rows = loop.parse.check.rows if check == "rollout" and loop.parse is not None else variant.checks[check].rows
    if requirement.kind == "rollout":
        rows = [r for r in rows if r.category == requirement.target]
    elif requirement.kind == "append":
        rows = [r for r in rows if r.category.startswith(f"{requirement.target} after ")]
    return sum(r.cases - r.refused for r in rows)


def evaluate(report: AuditReport, policy: Policy) -> list[RequirementResult]:
    """One result per requirement, derived from the failures the audit located."""
    baseline = _baseline_keys(policy.baseline) if policy.baseline is not None else None
    results = []
    for requirement in policy.requirements:
        variants = [v for v in report.variants if requirement.variant in (None, v.name)]
        if not variants:
            names = ", ".join(v.name for v in report.variants)
            raise BadInputError(
                f"requirement '{requirement.text}': no variant '{requirement.variant}' (variants: {names})"
            )
        if requirement.kind == "verdict":
            results.append(_verdict_result(requirement, variants))
            continue
        counted: list[tuple[str, str, Failure]] = []
        cases_by_loop: dict[str, int] = {}
        for variant in variants:
            for loop in _loops(requirement, variant):
                cases_by_loop[loop.loop] = cases_by_loop.get(loop.loop, 0) + _cases(requirement, variant, loop)
                for failure in _failures(requirement, variant, loop):
                    if set(failure.causes) <= policy.allowed_causes:
                        continue
                    if baseline is not None and _failure_key(variant.name, failure, loop.loop) in baseline:
                        continue
                    counted.append((variant.name, loop.loop, failure))
        cases = sum(cases_by_loop.values())
        under = _under(cases_by_loop)
        if cases == 0:
            results.append(RequirementResult(requirement.text, False, "no case could be audited (all refused)"))
            continue
        if not counted:
            scope = "new " if baseline is not None else ""
            results.append(RequirementResult(requirement.text, True, f"no {scope}failure in {cases} cases{under}"))
            continue
        causes: dict[str, int] = {}
        for _, _, failure in counted:
            for cause in failure.causes:
                causes[cause] = causes.get(cause, 0) + 1
        summary = ", ".join(f"{c} ×{n}" for c, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))
        new = "new " if baseline is not None else ""
        several = len(cases_by_loop) > 1
        examples = [
            f"{v}{f' with {loop}' if several else ''}: {f.conversation_id} message {f.turn} ({', '.join(f.causes)})"
            for v, loop, f in counted[:3]
        ]
        results.append(
            RequirementResult(
                requirement.text,
                False,
                f"{len(counted)} {new}failures in {cases} cases{under} ({summary}); e.g. {examples[0]}",
                failures=len(counted),
                examples=examples,
            )
        )
    return results


def _under(cases_by_loop: dict[str, int]) -> str:
    """Which loops the cases were walked in: nothing for the template's alone, `` with sglang qwen25`` for one
    engine's, `` (17 with sglang qwen25, 17 with vllm hermes)`` for several."""
    parsers = {loop: cases for loop, cases in cases_by_loop.items() if loop != TEMPLATE}
    if not parsers:
        return ""
    if len(parsers) == 1:
        return f" with {next(iter(parsers))}"
    return " (" + ", ".join(f"{cases} with {loop}" for loop, cases in parsers.items()) + ")"


def _verdict_result(requirement: Requirement, variants: Sequence[VariantResult]) -> RequirementResult:
    """Each variant's deciding verdict (:func:`~tito_audit.audit.deciding.variant_loop`: the worst with the engines'
    parsers audited, else the template's) against the required one."""
    limit = VERDICT_ORDER.index(requirement.target or "ready")
    loops = [(variant, variant_loop(variant)) for variant in variants]
    worst, loop = max(loops, key=lambda pair: VERDICT_ORDER.index(pair[1].verdict))
    under = f" with {loop.loop}" if loop.parse is not None else ""
    if VERDICT_ORDER.index(loop.verdict) <= limit:
        return RequirementResult(requirement.text, True, f"verdict {loop.verdict}{under}")
    return RequirementResult(
        requirement.text, False, f"variant {worst.name} is {loop.verdict}{under}: {loop.reason}", failures=1
    )
