"""Outputs of ``tito-audit check`` for CI systems: JUnit XML, GitHub Actions annotations, JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree

from tito_audit.audit.engine_result import EngineVerdict
from tito_audit.gate.policy import RequirementResult
from tito_audit.outputs import write_atomically


def to_junit(model_id: str, results: Sequence[RequirementResult], duration: float) -> str:
    suite = ElementTree.Element(
        "testsuite",
        name=f"tito-audit {model_id}",
        tests=str(len(results)),
        failures=str(sum(not r.passed for r in results)),
        errors="0",
        time=f"{duration:.3f}",
    )
    for result in results:
        case = ElementTree.SubElement(suite, "testcase", classname=f"tito-audit.{model_id}", name=result.requirement)
        if not result.passed:
            failure = ElementTree.SubElement(case, "failure", message=result.reason)
            failure.text = "\n".join(result.examples) or result.reason
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _escape_annotation(text: str) -> str:
    """GitHub workflow commands need %, CR and LF escaped in the message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def to_github_annotations(model_id: str, results: Sequence[RequirementResult], file: str | None = None) -> str:
    """``::error`` lines for failed requirements (nothing when all pass)."""
    where = f"file={file}," if file else ""
    return "".join(
        f"::error {where}title=tito-audit {result.requirement}::{_escape_annotation(f'{model_id}: {result.reason}')}\n"
        for result in results
        if not result.passed
    )


def to_json(
    model_id: str,
    results: Sequence[RequirementResult],
    verdict: str,
    baseline: str | None,
    parsers: Sequence[EngineVerdict] = (),
) -> str:
    """``check --json``: the perfect-inverse verdict, the verdict with each engine's parser audited (engine, parser,
    verdict) and each requirement's result."""
    document = {
        "model_id": model_id,
        "verdict": verdict,
        "parsers": [{"engine": p.engine, "parser": p.parser, "verdict": p.verdict} for p in parsers],
        "baseline": baseline,
        "passed": all(r.passed for r in results),
        "requirements": [
            {
                "requirement": r.requirement,
                "passed": r.passed,
                "reason": r.reason,
                "failures": r.failures,
                "examples": r.examples,
            }
            for r in results
        ],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def write(path: Path, text: str) -> None:
    """``text`` written to ``path`` atomically."""
    write_atomically(path, text)
