"""`tito-audit check`: requirements, allowed causes, baselines, pyproject policy, CI output formats."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from tests import templates
from tests.test_cli import run_cli


@pytest.fixture
def good(write_template):
    return str(write_template("good", templates.GOOD))


@pytest.fixture
def broken(write_template):
    return str(write_template("broken", templates.EMPTY_THINK_ONLY_WHEN_LAST))


def check(model_dir, template, *args, cwd=None):
    return run_cli("check", str(model_dir), "--template", template, "-n", "16", *args, cwd=cwd)


def test_pass_is_quiet_and_exit_0(tiny_model_dir, good, tmp_path):
    result = check(
        tiny_model_dir,
        good,
        "--require",
        "tool-append",
        "--require",
        "ready",
        "--github",
        "--junit",
        str(tmp_path / "j.xml"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == ["PASS", "PASS"]
    assert "::error" not in result.stdout
    suite = ElementTree.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "0"


def test_failure_exit_1_with_reason_annotations_and_junit(tiny_model_dir, broken, tmp_path):
    result = check(
        tiny_model_dir,
        broken,
        "--require",
        "rollout:tool",
        "--require",
        "verdict:unsupported",
        "--github",
        "--junit",
        str(tmp_path / "j.xml"),
        "--json",
        str(tmp_path / "c.json"),
    )
    assert result.returncode == 1
    assert "FAIL rollout:tool:" in result.stdout and "empty-think-dropped" in result.stdout
    assert "PASS verdict:unsupported" in result.stdout
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    assert len(annotations) == 1 and annotations[0].startswith("::error file=") and "rollout:tool" in annotations[0]
    suite = ElementTree.parse(tmp_path / "j.xml").getroot().find("testsuite")
    failed = [case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert failed == ["rollout:tool"]
    import json

    document = json.loads((tmp_path / "c.json").read_text())
    assert document["passed"] is False and document["requirements"][0]["failures"] > 0


def test_allowed_cause_does_not_count(tiny_model_dir, broken, write_template):
    full = check(tiny_model_dir, broken, "--require", "rollout:tool")
    allowed_one = check(tiny_model_dir, broken, "--require", "rollout:tool", "--allow-cause", "empty-think-dropped")
    assert full.returncode == 1 and allowed_one.returncode == 0, allowed_one.stdout
    # a failure counts unless every one of its causes is allowed: these carry two labels each
    two_labels = str(write_template("two", templates.PROMPT_CLOSES_THINK_HISTORY_NEVER_SHOWS))
    partly = check(tiny_model_dir, two_labels, "--require", "rollout:tool", "--allow-cause", "empty-think-dropped")
    assert partly.returncode == 1 and "empty-think-dropped" in partly.stdout and "gen-prompt-mismatch" in partly.stdout
    allowed = check(
        tiny_model_dir,
        two_labels,
        "--require",
        "rollout:tool",
        "--allow-cause",
        "empty-think-dropped",
        "--allow-cause",
        "gen-prompt-mismatch",
    )
    assert allowed.returncode == 0, allowed.stdout


def test_baseline_fails_only_on_new_failures(tiny_model_dir, broken, good, write_template, tmp_path):
    baseline = tmp_path / "baseline.json"
    first = check(tiny_model_dir, broken, "--require", "rollout:tool", "--report", str(baseline))
    assert first.returncode == 1 and baseline.is_file()
    same = check(tiny_model_dir, broken, "--require", "rollout:tool", "--baseline", str(baseline))
    assert same.returncode == 0 and "no new failure" in same.stdout
    regressed = str(write_template("worse", templates.STOP_TOKEN_SWAPPED_IN_HISTORY))
    worse = check(tiny_model_dir, regressed, "--require", "rollout:tool", "--baseline", str(baseline))
    assert worse.returncode == 1 and "new failures" in worse.stdout


def test_a_baseline_made_with_other_settings_is_refused_in_one_line(tiny_model_dir, broken, tmp_path):
    """Counts made with -n 16 are not compared with counts made with -n 24 or another seed: the other conversations'
    failures would all look new."""
    baseline = tmp_path / "baseline.json"
    first = check(tiny_model_dir, broken, "--require", "rollout:tool", "--report", str(baseline))
    assert first.returncode == 1 and baseline.is_file()
    for args, difference in ((["-n", "24"], "-n: 16 there, 24 here"), (["--seed", "1"], "--seed: 0 there, 1 here")):
        other = check(tiny_model_dir, broken, "--baseline", str(baseline), *args)
        assert other.returncode == 2, other.stdout + other.stderr
        lines = [line for line in other.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "made with other settings" in lines[0], other.stderr
        assert difference in lines[0] and "FAIL" not in other.stdout


def test_policy_in_pyproject(tiny_model_dir, broken, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.tito-audit]\n"
        'require = ["rollout:tool", "append:system"]\n'
        'allow-causes = ["empty-think-dropped", "gen-prompt-mismatch"]\n'
        "count = 12\n"
    )
    result = check(tiny_model_dir, broken, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS rollout:tool" in result.stdout and "PASS append:system" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--require", "rollout:robot"], "rollout needs one of"),
        (["--require", "vibes"], "unknown requirement"),
        (["--allow-cause", "gremlins"], "unknown cause label"),
        (["--require", "rollout:tool@nope=1"], "no variant 'nope=1'"),
        (["--baseline", "/no/such.json"], "--baseline"),
    ],
)
def test_bad_policy_exit_2(tiny_model_dir, good, args, fragment):
    result = check(tiny_model_dir, good, *args)
    assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr


def test_the_policy_is_read_on_python_3_10_which_has_no_tomllib(tmp_path, monkeypatch):
    """Python 3.10 (the package's oldest) has no ``tomllib``: the policy is read with its backport, ``tomli``."""
    import sys

    import tomllib

    from tito_audit.gate.policy import read_pyproject_policy

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.tito-audit]\nrequire = ["no-broken"]\n', encoding="utf-8")
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on 3.10: importing it fails
    monkeypatch.setitem(sys.modules, "tomli", tomllib)  # the backport reads TOML as tomllib does
    assert read_pyproject_policy(pyproject) == {"require": ["no-broken"]}


def test_check_writes_the_report_and_the_page_in_the_audit_formats(tiny_model_dir, broken, tmp_path):
    """``check --report`` and ``--html`` are the audit report's json and html formats, of the report it checked."""
    import json

    report, page = tmp_path / "report.json", tmp_path / "page.html"
    result = check(tiny_model_dir, broken, "--require", "ready", "--report", str(report), "--html", str(page))
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads(report.read_text(encoding="utf-8"))
    html = page.read_text(encoding="utf-8")
    assert document["verdict"] == "broken" and html.startswith("<!doctype html>")
    assert f"{document['model']['model_id']}: broken — tito-audit" in html
