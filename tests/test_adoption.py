"""Adoption in three lines: the composite GitHub Action (action.yml) run step by step as the runner would, and the
pre-commit hook (.pre-commit-hooks.yaml) run in a model repository's folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import templates

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of datasets and transformers) is not installed")

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
BIN = Path(sys.executable).parent
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
HOOK_KEYS = {
    "id", "name", "entry", "language", "files", "exclude", "types", "types_or", "exclude_types", "always_run",
    "fail_fast", "verbose", "pass_filenames", "require_serial", "description", "language_version",
    "minimum_pre_commit_version", "args", "stages", "additional_dependencies",
}  # fmt: skip
"""The keys pre-commit reads from a hooks manifest."""


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def test_action_is_composite_and_its_scripts_take_inputs_only_from_the_environment():
    spec = action()
    assert spec["runs"]["using"] == "composite"
    inputs = spec["inputs"]
    assert {"model", "template", "kwargs", "requirements", "baseline"} <= set(inputs)
    steps = spec["runs"]["steps"]
    ids = {step["id"]: step for step in steps if "id" in step}
    assert [s["uses"] for s in steps if "uses" in s] == ["actions/setup-python@v5", "actions/upload-artifact@v4"]
    for step in steps:
        if "run" in step:
            assert step["shell"] == "bash"
            assert "${{" not in step["run"], "an expression inside a script (script injection): pass it through env"
    for expression in EXPRESSION.findall(ACTION.read_text(encoding="utf-8")):
        for name in re.findall(r"inputs\.([\w-]+)", expression):
            assert name in inputs, name
        for step_id, output in re.findall(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression):
            assert step_id in ids and f"{output}=" in ids[step_id]["run"], (step_id, output)


def _substitute(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    def value(match: re.Match) -> str:
        expression = match.group(1)
        if expression.startswith("inputs."):
            return inputs[expression.removeprefix("inputs.")]
        found = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        assert found, f"the test runner does not know {expression!r}"
        return outputs.get(found.group(1), {}).get(found.group(2), "")

    return EXPRESSION.sub(value, text)


def run_action(given: dict[str, str], tmp_path: Path) -> dict:
    """Every ``run:`` step of action.yml, in order, with ``bash -eo pipefail`` as the runner runs them: the step's
    ``env`` with its expressions filled (``given`` inputs over the defaults, earlier steps' ``$GITHUB_OUTPUT``),
    ``GITHUB_ACTION_PATH``, ``RUNNER_TEMP`` and ``GITHUB_STEP_SUMMARY`` set. ``uses:`` steps are not run (the
    upload step's paths are returned instead); the install step runs against a stub ``python`` that records
    what it would install, since this interpreter has the tool already."""
    spec = action()
    inputs = {name: str(item.get("default", "")) for name, item in spec["inputs"].items()} | given
    stub = tmp_path / "stub"
    stub.mkdir(parents=True)
    (stub / "python").write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/pip-args"\n', encoding="utf-8")
    (stub / "python").chmod(0o755)
    summary, temp = tmp_path / "summary.md", tmp_path / "runner-temp"
    summary.touch()
    temp.mkdir()
    outputs: dict[str, dict[str, str]] = {}
    codes: list[int] = []
    upload: list[str] = []
    failed = False
    for number, step in enumerate(spec["runs"]["steps"]):
        condition = str(step.get("if", "success()"))
        if failed and "always()" not in condition:
            continue
        if "uses" in step:
            if "upload-artifact" in step["uses"]:
                upload = _substitute(step["with"]["path"], inputs, outputs).split()
            continue
        output = tmp_path / f"output-{number}"
        output.touch()
        path = f"{stub}:{BIN}:/usr/bin:/bin" if step.get("name") == "Install tito-audit" else f"{BIN}:/usr/bin:/bin"
        env = {key: _substitute(str(value), inputs, outputs) for key, value in step.get("env", {}).items()}
        env |= {
            "PATH": path,
            "HOME": str(tmp_path),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "GITHUB_ACTION_PATH": str(ROOT),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(temp),
        }
        script = tmp_path / f"step-{number}.sh"
        script.write_text(step["run"], encoding="utf-8")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        codes.append(done.returncode)
        failed = failed or done.returncode != 0
        if "id" in step:
            lines = output.read_text(encoding="utf-8").splitlines()
            outputs[step["id"]] = dict(line.split("=", 1) for line in lines if "=" in line)
    return {
        "outputs": outputs.get("check", {}),
        "summary": summary.read_text(encoding="utf-8"),
        "upload": upload,
        "exit": codes[-1],
        "installed": (tmp_path / "pip-args").read_text(encoding="utf-8").split(),
    }


def test_action_fails_a_broken_template_with_summary_and_page(tiny_model_dir, write_template, tmp_path):
    template = write_template("broken", templates.MULTILINE_EMPTY_THINK)
    result = run_action(
        {
            "model": str(tiny_model_dir),
            "template": str(template),
            "kwargs": "enable_thinking=false\nflavour=plain",
            "requirements": "rollout:tool\nverdict:unsupported",
            "count": "8",
        },
        tmp_path,
    )
    assert result["installed"] == ["-m", "pip", "install", "--quiet", str(ROOT)]
    assert result["exit"] == 1 and result["outputs"]["exit-code"] == "1"
    assert result["outputs"]["verdict"] == "broken"
    summary = result["summary"]
    assert "🔴 **broken**" in summary and "| `rollout:tool` | ❌ FAIL |" in summary
    assert "| `verdict:unsupported` | ✅ PASS |" in summary
    page = Path(result["outputs"]["page"])
    assert page.name == "model.html" and str(page) in result["upload"]
    assert all(Path(path).is_file() for path in result["upload"])
    assert 'data-verdict="broken"' in page.read_text(encoding="utf-8")
    report = json.loads((page.parent / "report.json").read_text(encoding="utf-8"))
    assert report["settings"]["pinned_kwargs"] == {"enable_thinking": False, "flavour": "plain"}
    assert report["settings"]["count"] == 8


def test_action_passes_with_a_baseline_and_a_ready_template(tiny_model_dir, write_template, tmp_path):
    broken = write_template("broken", templates.MULTILINE_EMPTY_THINK)
    first = run_action({"model": str(tiny_model_dir), "template": str(broken), "count": "8"}, tmp_path / "a")
    assert first["exit"] == 1
    baseline = tmp_path / "baseline.json"
    shutil.copy(Path(first["outputs"]["dir"]) / "report.json", baseline)
    again = run_action(
        {"model": str(tiny_model_dir), "template": str(broken), "count": "8", "baseline": str(baseline)},
        tmp_path / "b",
    )
    assert again["exit"] == 0 and again["outputs"]["verdict"] == "broken"  # no failure the baseline lacks
    good = write_template("good", templates.GOOD)
    ready = run_action({"model": str(tiny_model_dir), "template": str(good), "count": "8"}, tmp_path / "c")
    assert ready["exit"] == 0 and ready["outputs"]["verdict"] == "ready" and "🟢 **ready**" in ready["summary"]


def test_action_that_cannot_run_says_so_and_fails(tmp_path):
    result = run_action({"model": str(tmp_path / "nowhere"), "count": "8"}, tmp_path)
    assert result["exit"] == 2 and result["outputs"]["verdict"] == ""
    assert "could not run" in result["summary"]


def hooks() -> list[dict]:
    manifest = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert isinstance(manifest, list) and manifest
    return manifest


def test_hooks_manifest_is_valid_and_matches_a_model_repositorys_template():
    for hook in hooks():
        assert {"id", "name", "entry", "language"} <= set(hook) <= HOOK_KEYS
        assert hook["language"] == "python" and hook["pass_filenames"] is False
        pattern = re.compile(hook["files"])
        assert pattern.search("chat_template.jinja") and pattern.search("tokenizer_config.json")
        assert not pattern.search("README.md") and not pattern.search("other/chat_template.jinja.bak")
        assert shlex.split(hook["entry"])[:2] == ["tito-audit", "check"]


@pytest.mark.parametrize(("source", "code"), [(templates.GOOD, 0), (templates.MULTILINE_EMPTY_THINK, 1)])
def test_hook_gates_the_repositorys_own_chat_template(tiny_model_dir, tmp_path, source, code):
    (hook,) = hooks()
    repository = tmp_path / "model-repo"
    shutil.copytree(tiny_model_dir, repository)
    (repository / "chat_template.jinja").write_text(source, encoding="utf-8")
    command = [*shlex.split(hook["entry"]), *hook.get("args", []), "-n", "8"]
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), **_locale()}
    done = subprocess.run(command, cwd=repository, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    assert ("PASS" if code == 0 else "FAIL") in done.stdout


def _locale() -> dict[str, str]:
    return {key: os.environ[key] for key in ("LANG", "LC_ALL") if key in os.environ}


def test_the_hook_and_the_action_use_the_audits_defaults():
    """A baseline made with ``audit --json`` compares with what the hook and the Action check: no other -n or seed."""
    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    for hook in hooks:
        words = [*hook["entry"].split(), *hook.get("args", [])]
        assert not {"-n", "--count", "--seed"} & set(words), hook
    inputs = action()["inputs"]
    assert inputs["count"]["default"] == ""
