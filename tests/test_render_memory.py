"""A template cannot take the machine's memory: what its operations would build (strings repeated, replaced, padded,
joined, formatted, concatenated; lists repeated, summed, batched; a list of shared lists written out or serialized) is
refused before it is made, with one line naming the option to raise, in the audit, the session and the gateway.

The hostile renders run in a child process under an address-space limit (``RLIMIT_AS``), so that a failure is a
MemoryError in that child, not the machine's memory; each case's peak (tracemalloc) is asserted too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests import templates

resource = pytest.importorskip("resource", reason="address-space limits need the resource module (Unix)")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")

CAP = 1536 * 1024 * 1024
"""Address space the child may add to what it holds once the model is loaded."""
PEAK = 400 * 1024 * 1024
"""The most a refused case may have allocated (the default --max-render-bytes is 256 MiB)."""

A = "{% set a = messages[0].content * 20000 %}"  # 100,000 characters at run time ("hello")
CASES = {
    # the three of the issue
    "replace": "{% set s = 'a' * 60000 %}{% set s = s.replace('a', 'a' * 60) %}{% set s = s.replace('a', 'a' * 60) %}"
    "{{ s.replace('a', 'a' * 60) | length }}",
    "list-join": "{{ (['a' * 60000] * 60000) | join }}",
    "center": "{{ 'a' | center(500000000) }}",
    # the same at run time, and their relatives
    "join-runtime": A + "{{ ([a] * 60000) | join }}",
    "center-runtime": "{{ messages[0].content | center(500000000) }}",
    "str-center": "{{ messages[0].content.center(500000000) }}",
    "str-join": A + "{{ ''.join([a] * 60000) | length }}",
    "format-method": "{{ '{:>500000000}'.format(messages[0].content) }}",
    "format-filter": "{{ '%500000000s' | format(messages[0].content) }}",
    "indent": "{{ ((messages[0].content ~ '\\n') * 100000) | indent(10000) | length }}",
    "concat-doubling": "{% set ns = namespace(s=messages[0].content) %}{% for i in range(40) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "plus-doubling": "{% set ns = namespace(s=messages[0].content) %}{% for i in range(40) %}"
    "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
    "list-doubling": "{% set ns = namespace(l=[messages[0].content]) %}{% for i in range(40) %}"
    "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
    "shared-written": A + "{{ [[a] * 1000] * 1000 }}",
    "shared-tojson": A + "{{ ([[a] * 1000] * 1000) | tojson }}",
    "shared-string": A + "{{ ([[a] * 1000] * 1000) | string | length }}",
    "shared-concat": A + "{{ ([[a] * 1000] * 1000) ~ '' }}",
    "copies-kept": "{% set ns = namespace(l=[]) %}{% set a = messages[0].content * 200000 %}"
    "{% for i in range(10000) %}{% set ns.l = ns.l + [a | upper] %}{% endfor %}{{ ns.l | length }}",
    "slices-kept": "{% set ns = namespace(l=[]) %}{% set a = messages[0].content * 200000 %}"
    "{% for i in range(10000) %}{% set ns.l = ns.l + [a[i:]] %}{% endfor %}{{ ns.l | length }}",
    "sum-lists": "{{ ([[messages[0].content] * 100000] * 100000) | sum(start=[]) | length }}",
    "batch-fill": "{{ [1] | batch(1000000000, messages[0].content) | list | length }}",
    "output-refs": A + "{% for i in range(100000) %}{{ a }}{% endfor %}",
    "macro-buffer": A + "{% macro m(a) %}{% for i in range(100000) %}{{ a }}{% endfor %}{% endmacro %}"
    "{{ m(a) | length }}",
}

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time, tracemalloc
    from tests.helpers import load
    from tito_audit.model.load_folder import codec_for
    from tito_audit.model.render import Renderer, RenderError, RenderLimits

    folder, cases = sys.argv[1], json.loads(sys.argv[2])
    results = {}
    loaded = {}
    for name, path in cases.items():
        loaded[name] = load(__import__("pathlib").Path(folder), __import__("pathlib").Path(path))
    size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[3]), resource.RLIM_INFINITY))
    tracemalloc.start()
    for name, model in loaded.items():
        renderer = Renderer(model, codec_for(model), limits=RenderLimits(refuse_after_timeout=False))
        tracemalloc.reset_peak()
        started = time.perf_counter()
        try:
            outcome = "rendered " + str(len(renderer.text([{"role": "user", "content": "hello"}], None, True)))
        except RenderError as exc:
            outcome = str(exc)
        except MemoryError:
            outcome = "MemoryError"
        results[name] = [outcome, time.perf_counter() - started, tracemalloc.get_traced_memory()[1]]
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def refusals(tiny_model_dir, tmp_path_factory) -> dict[str, list]:
    folder = tmp_path_factory.mktemp("hostile")
    paths = {}
    for name, source in CASES.items():
        paths[name] = str(folder / f"{name}.jinja")
        (folder / f"{name}.jinja").write_text(source, encoding="utf-8")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tiny_model_dir), json.dumps(paths), str(CAP)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": "."},
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_a_template_would_build_is_refused_before_it_is_made(refusals, name):
    outcome, seconds, peak = refusals[name]
    assert "--max-render-bytes" in outcome or "--max-render-chars" in outcome, outcome
    assert "\n" not in outcome and "MemoryError" not in outcome
    assert peak < PEAK, f"{name}: {peak / 2**20:.0f} MiB allocated before the refusal ({seconds:.1f}s)"


BOOM = (  # "boom": copies of a megabyte kept (200 MB); "long": one value past --max-render-chars
    "{%- if messages[0].content == 'boom' -%}{% set a = messages[0].content * 250000 %}{% set ns = namespace(l=[]) %}"
    "{% for i in range(200) %}{% set ns.l = ns.l + [a | upper] %}{% endfor %}{{ ns.l | length }}{%- endif -%}"
    "{%- if messages[0].content == 'long' -%}{{ messages[0].content | center(10000000) }}{%- endif -%}" + templates.GOOD
)


def test_the_session_refuses_what_the_template_would_build_naming_the_option(tiny_model_dir, write_template):
    from tests.helpers import load
    from tito_audit import TitoSession
    from tito_audit.model.render import RenderLimits
    from tito_audit.session.breaks import RenderRefused
    from tito_audit.session.machinery import build_machinery

    limits = RenderLimits(refuse_after_timeout=False, max_bytes=50_000_000)
    session = TitoSession(build_machinery(load(tiny_model_dir, write_template("boom", BOOM)), limits=limits))
    with pytest.raises(RenderRefused) as refused:
        session.start([{"role": "user", "content": "boom"}])
    assert refused.value.limit == "max_bytes" and "--max-render-bytes" in refused.value.reason
    with pytest.raises(RenderRefused) as refused:
        session.start([{"role": "user", "content": "long"}])
    assert refused.value.limit == "max_chars" and "--max-render-chars" in refused.value.reason
    assert len(session.start([{"role": "user", "content": "hello"}])) > 0, "the next conversation renders"


def test_the_gateway_answers_413_naming_the_option(tiny_model_dir, write_template):
    pytest.importorskip("starlette", reason="the gateway extra is not installed")
    httpx = pytest.importorskip("httpx")
    from tito_audit.cli.serve import serve_command
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    config = GatewayConfig(
        str(tiny_model_dir),
        template=str(write_template("boom", BOOM)),
        allow_hub=False,
        parser="template",
        max_render_bytes=50_000_000,
    )
    with running(Gateway(config)) as url:
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "boom"}]},
            headers={"X-Session-Id": "boom"},
            timeout=60,
        )
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "render_too_large" and "--max-render-bytes" in error["message"]
        assert "\n" not in error["message"]
    assert "max_render_bytes" in serve_command.__signature__.parameters


def test_the_audit_exits_2_with_one_line_naming_the_option(tiny_model_dir, write_template, tmp_path):
    """The CLI under the same address-space limit: the hostile template ends the audit in one line, exit 2; the
    good one audits whole under it (the limit is not what fails)."""
    limit = 4 * 1024**3

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120", "TOKENIZERS_PARALLELISM": "false"}
    results = {}
    hostile = {
        "replace": CASES["replace"],
        # a constant Jinja computes while compiling, set rather than written: the template's inputs are read (by
        # Jinja's meta, which compiles) before any render; it took 3.6 GB, then "unexpected MemoryError"
        "set-join": "{% set n = (['a' * 60000] * 60000) | join %}",
    }
    for name, source in (*((name, case + templates.GOOD) for name, case in hostile.items()), ("good", templates.GOOD)):
        command = ["audit", str(tiny_model_dir), "--template", str(write_template(name, source)), "-n", "4"]
        results[name] = subprocess.run(
            [sys.executable, "-m", "tito_audit.cli", *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            preexec_fn=capped,
        )
    assert results["good"].returncode == 0, results["good"].stderr[-2000:]
    for name in hostile:
        refused = results[name]
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-2000:]
        assert "--max-render-chars" in lines[0] or "--max-render-bytes" in lines[0], lines[0]
