"""``tito-audit check MODEL``: the CI gate. Audit, then check the required properties (see docs/ci.md)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    ConversationInputs,
    GroupDefaults,
    HtmlOutOpt,
    ModelArg,
    ModelSource,
    Sampling,
    TemplateSettings,
    with_option_groups,
)
from tito_audit.cli.outcomes import finish
from tito_audit.outputs import check_outputs, write_outputs

RequireOpt = Annotated[
    list[str],
    typer.Option(
        "--require",
        metavar="REQUIREMENT",
        help="A required property (see docs/ci.md). Repeatable; default rollout:tool.",
    ),
]
AllowCauseOpt = Annotated[
    list[str],
    typer.Option("--allow-cause", metavar="CAUSE", help="A cause label whose failures do not count. Repeatable."),
]
BaselineOpt = Annotated[
    Path | None,
    typer.Option("--baseline", metavar="FILE", help="A JSON report to compare with: only new failures count."),
]
JunitOpt = Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML here.")]
GithubOpt = Annotated[bool, typer.Option("--github", help="Print GitHub Actions ::error annotations.")]
CheckJsonOpt = Annotated[
    Path | None, typer.Option("--json", metavar="FILE", help="Write the check result as JSON here.")
]
ReportOpt = Annotated[
    Path | None,
    typer.Option("--report", metavar="FILE", help="Also write the full audit report (JSON) here, e.g. a new baseline."),
]
ConfigOpt = Annotated[
    Path, typer.Option("--config", metavar="FILE", help="pyproject.toml whose [tool.tito-audit] holds a policy.")
]
SummaryOpt = Annotated[
    Path | None,
    typer.Option("--summary", metavar="FILE", help="Write a Markdown job summary here (verdicts and requirements)."),
]
PolicySampling = Annotated[Sampling, GroupDefaults(seed=None, count=None)]
"""Seed and count default to the policy's (else 0 and 96)."""


@app.command("check")
@with_option_groups
def check_command(
    model: ModelArg,
    source: ModelSource,
    sampling: PolicySampling,
    settings: TemplateSettings,
    inputs: ConversationInputs,
    require: RequireOpt = [],  # noqa: B006
    allow_cause: AllowCauseOpt = [],  # noqa: B006
    baseline: BaselineOpt = None,
    junit: JunitOpt = None,
    github: GithubOpt = False,
    json_path: CheckJsonOpt = None,
    report_path: ReportOpt = None,
    html_path: HtmlOutOpt = None,
    summary_path: SummaryOpt = None,
    config: ConfigOpt = Path("pyproject.toml"),
) -> None:
    """Gate a model or template in CI: audit it and check the required properties (exit 0 pass, 1 fail)."""
    from tito_audit.cli.wiring import (
        add_conversation_inputs,
        audit_options,
        audit_with_progress,
        fail_if_refused_everything,
        load,
    )
    from tito_audit.formatters import ci
    from tito_audit.formatters.ci_summary import to_summary
    from tito_audit.formatters.interface import FormatContext
    from tito_audit.formatters.registry import report_format
    from tito_audit.gate.policy import (
        build_policy,
        check_baseline_model,
        check_baseline_settings,
        evaluate,
        read_pyproject_policy,
        report_settings,
    )
    from tito_audit.repair.explanations import attach_explanations

    started = time.monotonic()
    outputs_given = [("--junit", junit), ("--json", json_path), ("--report", report_path), ("--html", html_path)]
    check_outputs([*outputs_given, ("--summary", summary_path)])
    table = read_pyproject_policy(config)
    policy = build_policy(table, require, allow_cause, baseline)
    if source.template is None and table.get("template"):
        source = replace(source, template=Path(table["template"]))
    options = audit_options(sampling, settings, defaults=table)
    add_conversation_inputs(options, inputs)
    early = {
        "seed": options.seed,
        "max_turns": options.max_turns,
        "pinned_kwargs": dict(options.pinned_kwargs),
        "clock": options.clock.isoformat(),
        "extra_stop_tokens": list(options.extra_stop_tokens),
    }
    check_baseline_settings(policy, early, complete=False)  # before the audit: what is known already
    loaded = load(model, source, options.parser)
    check_baseline_model(policy, loaded.resolved.model_id)
    console = Console()
    report = audit_with_progress(loaded, options, console, show=True)
    check_baseline_settings(policy, report_settings(report))
    if html_path is not None:
        attach_explanations(report, loaded)  # the page shows the template lines behind each break
    if report_path is not None:
        write_outputs([("--report", report_path, report_format("json").render(report, FormatContext()))])
    fail_if_refused_everything(report)
    results = evaluate(report, policy)
    model_id = report.model.model_id
    for result in results:
        mark = "[bold green]PASS[/bold green]" if result.passed else "[bold red]FAIL[/bold red]"
        console.print(f"{mark} {result.requirement}: {result.reason}", highlight=False, soft_wrap=True)
    outputs = []
    if junit is not None:
        outputs.append(("--junit", junit, ci.to_junit(model_id, results, time.monotonic() - started)))
    if json_path is not None:
        outputs.append(
            ("--json", json_path, ci.to_json(model_id, results, report.verdict, policy.baseline_path, report.parsers))
        )
    if html_path is not None:
        page_format = report_format("html")
        outputs.append((page_format.option, html_path, page_format.render(report, FormatContext())))
    if summary_path is not None:
        page = html_path.name if html_path is not None else None
        outputs.append(("--summary", summary_path, to_summary(report, results, page)))
    write_outputs(outputs)
    if github:
        template = str(source.template) if source.template else None
        sys.stdout.write(ci.to_github_annotations(model_id, results, template))
    raise finish(all(r.passed for r in results))
