"""One parser verdict per engine (docs/contract.md "Engines differ"): ``auto`` audits with every engine whose documented
parsers are recorded and installed, naming one audits that one, and every output gives each engine's verdict.

The engines here are test entries of the engine registry (:mod:`tito_audit.parse.engines`) whose parsers are the
parse-step tests' own (:class:`tests.test_parse_step.ToyParser`): ``alpha`` gives every turn back as written, ``beta``
strips the content. Their verdicts come from the audit's tokens like any other: the same rollout, each completion
parsed by each engine's parser and the next prompt rendered from what it returned.
"""

from __future__ import annotations

import html
import json

import pytest
from typer.testing import CliRunner

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import load
from tests.test_parse_step import ToyParser
from tito_audit.audit.deciding import deciding_verdict, variant_loop
from tito_audit.audit.results import BROKEN, READY
from tito_audit.audit.serialization import report_from_dict
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.cli import app
from tito_audit.formatters.json_report import report_to_dict, to_json
from tito_audit.formatters.markdown import to_markdown
from tito_audit.formatters.site import model_page
from tito_audit.gate.policy import Policy, evaluate, parse_requirement
from tito_audit.matrix.row import row_from_report
from tito_audit.model.registry import RegistryParsers
from tito_audit.parse import engines
from tito_audit.parse.fields import CONTENT_WHITESPACE
from tito_audit.parse.interface import Engine
from tito_audit.parse.parser import ParserUnavailable


class ToyEngine(Engine):
    """An engine of the registry whose parsers are the parse-step tests' :class:`ToyParser`."""

    def __init__(self, name: str, *, installed: bool = True, **defects: bool) -> None:
        self.name, self.label = name, name.capitalize()
        self.module, self.install = f"{name}_parsers", f"pip install {name}-parsers"
        self._installed, self._defects = installed, defects

    def recorded(self, model_id):
        return RegistryParsers("toy", None, f"{self.name}'s documentation")

    def build(self, tool, reasoning, tokenizer, model_dir):
        if not self._installed:
            raise ParserUnavailable(f"--parser: {self.name} is not installed")
        parser = ToyParser(f"{self.name} {tool}", **self._defects)
        parser.engine, parser.tool = self.name, tool
        return parser

    def check(self, tool, reasoning):
        return None

    def available(self):
        return self._installed

    def installed(self):
        return self._installed

    def version(self):
        return "1.0" if self._installed else None


def use_engines(monkeypatch, registry: tuple) -> None:
    """Swap the engine registry for ``registry`` and declare its engines' matrix columns, as a real engine's are
    declared when the matrix's row module loads (``matrix/row.py``'s COLUMNS, which the typed row holds equal)."""
    from tito_audit.matrix import row

    shipped = row.engine_columns()
    monkeypatch.setattr(engines, "ENGINES", registry)
    first = row.COLUMNS.index(shipped[0])
    others = tuple(column for column in row.COLUMNS if column not in shipped)
    monkeypatch.setattr(row, "COLUMNS", (*others[:first], *row.engine_columns(), *others[first:]))


@pytest.fixture
def two_engines(monkeypatch):
    registry = (ToyEngine("alpha"), ToyEngine("beta", strip=True), ToyEngine("gamma", installed=False))
    use_engines(monkeypatch, registry)
    return registry


@pytest.fixture(scope="module")
def good(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("engines") / "good.jinja"
    path.write_text(templates.GOOD, encoding="utf-8")
    return load(tiny_model_dir, path), path


def test_auto_gives_a_verdict_with_each_engine_installed(two_engines, good):
    report = audit(good[0], AuditOptions(count=32, parser="auto"))
    alpha, beta = report.parsers
    assert (alpha.engine, alpha.parser, alpha.verdict) == ("alpha", "alpha toy", READY)
    assert (beta.engine, beta.parser, beta.verdict) == ("beta", "beta toy", BROKEN)
    assert report.verdict == READY, "the perfect-inverse verdict is the template's own"
    assert beta.causes == {"parse-lossy": beta.causes["parse-lossy"]} and beta.fields[CONTENT_WHITESPACE] > 0
    assert alpha.causes == {} and alpha.fields == {}
    assert beta.way_out and "bridge" in beta.way_out and alpha.way_out is None
    assert report.settings.parsers == ["alpha toy", "beta toy"]
    for variant in report.variants:
        assert [(p.engine, p.parser) for p in variant.parses] == [("alpha", "alpha toy"), ("beta", "beta toy")]
        assert variant.values_parser == "alpha toy"
    (note,) = [n for n in report.notes if "Gamma" in n]
    assert note.startswith("Gamma's parser (gamma toy) is not installed") and "pip install gamma-parsers" in note


def test_the_verdict_that_decides_is_the_named_engines_or_the_worst(two_engines, good):
    both = audit(good[0], AuditOptions(count=16, parser="auto"))
    assert deciding_verdict(both) == ("beta toy", BROKEN)
    assert deciding_verdict(both, "alpha") == ("alpha toy", READY)
    assert deciding_verdict(both, "beta") == deciding_verdict(both, "beta toy") == ("beta toy", BROKEN)
    with pytest.raises(ValueError, match="gamma"):
        deciding_verdict(both, "gamma")  # not audited (not installed): it names nothing to decide by
    assert all((variant_loop(v).loop, variant_loop(v).verdict) == ("beta toy", BROKEN) for v in both.variants)
    named = audit(good[0], AuditOptions(count=16, parser="alpha"))
    assert [v.engine for v in named.parsers] == ["alpha"] and deciding_verdict(named) == ("alpha toy", READY)
    plain = audit(good[0], AuditOptions(count=16, parser="template"))
    assert plain.parsers == [] and deciding_verdict(plain) == ("template", plain.verdict) == ("template", READY)


def test_the_exit_code_follows_the_rule(two_engines, good):
    model, template = good
    folder = str(model.resolved.path)

    def exit_code(*parser: str) -> int:
        args = ["audit", folder, "--template", str(template), "-n", "16", "--no-hub", *parser]
        return CliRunner().invoke(app, args).exit_code

    assert exit_code() == 1, "auto: the worst engine (beta strips content)"
    assert exit_code("--parser", "alpha") == 0
    assert exit_code("--parser", "beta") == 1
    assert exit_code("--parser", "template") == 0
    assert exit_code("--parser", "alpha:toy") == 0 and exit_code("--parser", "beta:toy") == 1


def test_checks_verdict_requirement_follows_the_rule(two_engines, good):
    report = audit(good[0], AuditOptions(count=16, parser="auto"))
    (result,) = evaluate(report, Policy([parse_requirement("verdict:ready")]))
    assert not result.passed and "broken with beta toy" in result.reason
    (tool,) = evaluate(report, Policy([parse_requirement("rollout:tool")]))
    assert not tool.passed, "rollout requirements judge each engine's walk: Beta's strips content"
    assert "with beta toy" in tool.reason and "parse-lossy" in tool.reason
    (append,) = evaluate(report, Policy([parse_requirement("append:tool")]))
    assert append.passed, "appending a message is the template's alone"
    named = audit(good[0], AuditOptions(count=16, parser="alpha"))
    (result,) = evaluate(named, Policy([parse_requirement("verdict:ready")]))
    assert result.passed and result.reason == "verdict ready with alpha toy"


def test_every_output_gives_each_engines_verdict(two_engines, good):
    report = audit(good[0], AuditOptions(count=16, parser="auto"))
    markdown = to_markdown(report)
    assert "**Verdict with Alpha's parser toy: ready" in markdown
    assert "**Verdict with Beta's parser toy: broken" in markdown
    page = model_page(report)
    assert 'id="parser-verdict-alpha"' in page and 'id="parser-verdict-beta"' in page
    row = row_from_report(report, "models/x.md", 1.0)
    assert (row["alpha_verdict"], row["alpha_parser"], row["alpha_way_out"]) == ("ready", "alpha toy", "")
    assert (row["beta_verdict"], row["beta_parser"]) == ("broken", "beta toy") and row["beta_way_out"]
    assert (row["gamma_verdict"], row["gamma_parser"]) == ("", "not installed")
    result = CliRunner().invoke(
        app, ["audit", str(good[0].resolved.path), "--template", str(good[1]), "-n", "16", "--no-hub"]
    )
    closing = " ".join(result.output[result.output.rindex("overall verdict") :].split())
    assert closing.startswith("overall verdict: ready; with Alpha's parser toy: ready; with Beta's parser toy: broken")


def test_each_engines_verdict_says_when_it_breaks_with_its_own_steps(two_engines, good):
    """The conditions beside each engine's verdict are read from that engine's rollouts alone: Beta's (it strips
    content, so every tool step breaks) say so with Beta's step counts; Alpha's, ready, name nothing. Every output
    shows them per engine."""
    report = audit(good[0], AuditOptions(count=16, parser="auto"))
    alpha, beta = report.parsers
    assert alpha.conditions is not None and alpha.conditions.verdict == READY and not alpha.conditions.breaking
    assert beta.conditions is not None and beta.conditions.verdict == BROKEN
    assert beta.conditions.plain_verdict == BROKEN and beta.conditions.plain_failed > 0
    walked = [row for row in report.variants[0].parses[1].check.rows if row.category == "tool"]
    assert 0 < beta.conditions.plain_steps <= sum(row.cases - row.refused for row in walked)
    markdown = to_markdown(report)
    assert "when it breaks with Beta's parser toy: plain loop broken" in markdown
    assert "when it breaks with Alpha's parser" not in markdown
    assert "When it breaks with Beta's parser toy: plain loop broken" in html.unescape(model_page(report))
    row = row_from_report(report, "models/x.md", 1.0)
    assert row["alpha_conditions"] == "" and row["beta_conditions"].startswith("plain loop broken")
    dumped = report_to_dict(report)
    assert [engine["conditions"]["verdict"] for engine in dumped["parsers"]] == [READY, BROKEN]


def test_a_report_with_two_engines_reads_back(two_engines, good):
    report = audit(good[0], AuditOptions(count=16, parser="auto"))
    assert report_to_dict(report_from_dict(json.loads(to_json(report)))) == report_to_dict(report)


def test_a_version_1_report_is_read_as_one_engine(good):
    """A report written before the engines were told apart (``parser``, ``parser_verdict``, ``parser_way_out`` and
    one ``parse`` per variant) reads as the same report with one engine."""
    now = report_to_dict(audit(good[0], AuditOptions(count=16, parser=ToyParser("sglang toy", strip=True))))
    (engine,) = now["parsers"]
    old = {k: v for k, v in now.items() if k != "parsers"} | {
        "schema_version": 1,
        "parser": {k: engine[k] for k in ("tool", "reasoning", "why", "source")} | {"name": engine["parser"]},
        "parser_verdict": engine["verdict"],
        "parser_way_out": engine["way_out"],
        "settings": {k: v for k, v in now["settings"].items() if k != "parsers"} | {"parser": "sglang toy"},
        "variants": [
            {k: v for k, v in variant.items() if k not in ("parses", "values_parser")}
            | {"parse": {k: v for k, v in variant["parses"][0].items() if k != "engine"}}
            for variant in now["variants"]
        ],
    }
    read = report_to_dict(report_from_dict(old))
    expected = now | {"parsers": [engine | {"engine": "sglang"}]}
    expected["variants"] = [v | {"parses": [v["parses"][0] | {"engine": "sglang"}]} for v in now["variants"]]
    assert read == expected


@requires_shared
@pytest.mark.skipif(not engines.ENGINES[0].installed(), reason="SGLang's parsers are not installed")
def test_two_real_parser_sets_give_two_verdicts_from_the_same_rollout():
    """SGLang's qwen25 and hermes tool-call parsers on Qwen2.5's own turns: two parse results per variant, each
    named by its parsers, each with the steps it walked."""
    from tests.helpers import shared_model

    assert SHARED_TOKENIZERS.is_dir()
    model = shared_model("Qwen/Qwen2.5-7B-Instruct")
    report = audit(model, AuditOptions(count=24, parser=["sglang:qwen25", "sglang:hermes"]))
    assert [(v.engine, v.parser) for v in report.parsers] == [("sglang", "sglang qwen25"), ("sglang", "sglang hermes")]
    (variant,) = report.variants
    first, second = variant.parses
    assert first.turns_parsed == second.turns_parsed > 0
    assert sum(r.cases for r in first.check.rows) == sum(r.cases for r in second.check.rows) > 0


def test_the_results_key_names_the_engines_and_their_versions(two_engines, good, monkeypatch, tmp_path):
    """A stored matrix result made with other engines' parsers, or another version of them, is not reused."""
    from tito_audit.matrix.matrix_options import MatrixOptions
    from tito_audit.matrix.tasks import identify

    folder = str(good[0].resolved.path)
    options = MatrixOptions(out_dir=tmp_path, allow_hub=False, count=4)

    def key(installed: set[str], version: str | None = "1.0"):
        monkeypatch.setattr(ToyEngine, "installed", lambda engine: engine.name in installed)
        monkeypatch.setattr(ToyEngine, "version", lambda engine: version)
        return identify(folder, options).key

    alpha = key({"alpha"})
    assert alpha.material["settings"]["engines"] == {"alpha": ["toy", None, "1.0"]}
    assert key({"alpha", "beta"}).digest != alpha.digest
    assert key({"alpha"}, "1.1").digest != alpha.digest
    assert key({"alpha"}).digest == alpha.digest


class FormatOnlyEngine(ToyEngine):
    """An engine whose documents name no parsers for the model: the registry records the pair whose call format the
    template asks for (``"chosen_by": "format"``)."""

    def recorded(self, model_id):
        return RegistryParsers("toy", None, "by the call format its template asks for", self.name, by_format=True)


def test_parsers_chosen_by_the_templates_call_format_say_so(monkeypatch, good):
    """A pair no document names is never passed off as documented: the reason and the matrix's parser column say the
    template's call format chose it; a documented pair's column names the parsers alone."""
    use_engines(monkeypatch, (ToyEngine("alpha"), FormatOnlyEngine("beta")))
    report = audit(good[0], AuditOptions(count=8, parser="auto"))
    alpha, beta = report.parsers
    assert alpha.why.startswith("default: the Alpha parsers documented for")
    assert beta.why.startswith("default: no Beta document names parsers for") and "call format" in beta.why
    row = row_from_report(report, "models/x.md", 1.0)
    assert row["alpha_parser"] == "alpha toy"
    assert row["beta_parser"] == "beta toy, by its template's call format"


def test_a_named_engines_pair_chosen_by_format_is_not_said_to_be_a_default(monkeypatch, good):
    """``--parser beta`` names the engine: the reason says why its pair was chosen, never "default"."""
    from tito_audit.parse.choice import choose_parser

    use_engines(monkeypatch, (ToyEngine("alpha"), FormatOnlyEngine("beta")))
    named = choose_parser("beta", "org/model", good[0].tokenizer)
    assert named.why == "no Beta document names parsers for org/model; these read the call format its template asks for"
    assert choose_parser("alpha", "org/model", good[0].tokenizer).why == "the Alpha parsers documented for org/model"


def test_the_registry_marks_the_pairs_chosen_by_format():
    from tito_audit.model.registry import registry_parsers

    smollm3 = registry_parsers("HuggingFaceTB/SmolLM3-3B", engine="vllm")
    assert smollm3 is not None and smollm3.by_format and smollm3.tool == "hermes"
    qwen = registry_parsers("Qwen/Qwen2.5-7B-Instruct", engine="vllm")
    assert qwen is not None and not qwen.by_format
