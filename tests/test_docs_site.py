"""The documentation site builds with ``mkdocs build --strict`` (no broken link, no orphan page, no warning), its
generated reference holds every option of every command and every field of the JSON report, and the matrix pages
sit under the same root. The README stays short and points at both."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None or not MKDOCS:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e .[dev] -c constraints.txt)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def _text(html: str) -> str:
    """The page's text with tags removed and entities of the option names undone."""
    return re.sub(r"<[^>]+>", "", html).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_every_cli_option_is_in_the_built_reference(site):
    import typer

    from tito_audit.cli import app

    page = _text((site / "reference" / "cli" / "index.html").read_text(encoding="utf-8"))
    group = typer.main.get_command(app)
    commands = group.list_commands(None)
    assert {"audit", "check", "matrix", "replay", "explain", "patch"} <= set(commands)
    missing = []
    for name in commands:
        command = group.get_command(None, name)
        assert f"tito-audit {name}" in page, f"command {name} is not in the reference"
        section = page.split(f"tito-audit {name}", 1)[1]
        for param in command.params:
            spellings = (
                [param.name.upper()] if param.param_type_name == "argument" else param.opts + param.secondary_opts
            )
            missing += [
                f"{name} {s}" for s in spellings if not re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", section)
            ]
    assert not missing, f"options missing from the generated CLI reference: {missing}"


def test_every_report_field_is_in_the_built_json_reference(site):
    from tito_audit.audit.results import AuditReport, Failure, VariantResult

    page = _text((site / "reference" / "json" / "index.html").read_text(encoding="utf-8"))
    for cls in (AuditReport, VariantResult, Failure):
        assert cls.__name__ in page
        for f in dataclasses.fields(cls):
            assert f.name in page, f"{cls.__name__}.{f.name} is not in the JSON reference"


def test_the_api_reference_comes_from_the_docstrings(site):
    from tito_audit.session.session import TitoSession

    page = _text((site / "reference" / "api" / "index.html").read_text(encoding="utf-8"))
    first_line = TitoSession.extend.__doc__.strip().splitlines()[0].strip()
    assert first_line[:60] in " ".join(page.split()), "TitoSession.extend's docstring is not on the API page"


def test_the_matrix_pages_are_under_the_same_root(site):
    reports = ROOT / "reports"
    if not (reports / "index.html").is_file():
        pytest.skip("no published matrix in reports/")
    assert (site / "reports" / "index.html").read_bytes() == (reports / "index.html").read_bytes()
    for page in sorted((reports / "models").glob("*")):
        assert (site / "reports" / "models" / page.name).is_file(), page.name
    assert (site / "reports" / "matrix.md").is_file()


def test_the_built_site_loads_nothing_from_the_network(site):
    for page in [site / "index.html", site / "getting-started" / "index.html"]:
        html = page.read_text(encoding="utf-8")
        loads = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', html)
        assert not loads, f"{page.relative_to(site)} loads {loads}"


def test_every_page_is_in_the_nav_and_every_generated_page_has_a_source():
    yaml = pytest.importorskip("yaml", reason="pyyaml comes with mkdocs (pip install -e .[dev])")

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))
    in_nav: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            in_nav.append(node)

    walk(config["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")} | set(_hooks().GENERATED)
    assert sorted(pages) == sorted(in_nav)


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "make matrix    # the main job" in readme and "make test      # the test suite" in readme
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "`make matrix` (the main job" in makefile.splitlines()[0]
    for link in re.findall(r"\]\(((?:docs|reports)/[^)#]+)", readme):
        assert (ROOT / link).exists(), f"README links {link}, which does not exist"
