"""The llama.cpp engine on the machine the tests run on, and when it cannot run: the installed library samples here
(in a process the test watches: a library this CPU cannot run fails the test naming the signal); it holds no
instruction past AVX2 (read with objdump, by a check shown to find AMX, AVX-512 and AVX-VNNI where a compiler put
them); an engine process that dies fails its turn in one line and the next turn is answered; an engine that cannot
run here is refused at start in one line (exit 2); the engine's process ends with the server.

A real illegal instruction stands in for a library built for another CPU: a small preloaded library that takes the
place of the ggml function llama.cpp calls to compute each batch (``ggml_backend_sched_graph_compute_async``) and runs
``tilezero`` (AMX), as ggml's AMX kernels do. No process here is granted AMX's tile state, so the instruction raises
SIGILL on every x86-64 CPU, with AMX or without: the failure the issue met, at the place it met it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.llamacpp_model import assembled_model, require_llamacpp
from tests.watched import alive, children, popen, run_python

require_llamacpp()

pytestmark = [
    pytest.mark.timeout(1200),  # a real model on CPU: minutes per turn where other jobs share the 2 cores
    pytest.mark.filterwarnings("ignore::tito_audit.session.breaks.TitoBreakWarning"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64", reason="x86-64 Linux"),
]

MODEL = "google/gemma-3-4b-it"
SAMPLE = """
import sys
import llama_cpp
llama = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, seed=7, verbose=False)
prompt = llama.tokenize(b"The sea is", add_bos=True)
ids = []
for token in llama.generate(prompt, temp=0.0):
    ids.append(token)
    if len(ids) == 8:
        break
print(" ".join(map(str, ids)))
print(repr(llama.detokenize(ids).decode("utf-8", "replace")))
"""
TILE_ZERO = r"""
#include <immintrin.h>
/* llama.cpp computes each batch through this ggml function: here it runs an AMX instruction instead */
int ggml_backend_sched_graph_compute_async(void *sched, void *graph) {
    (void) sched; (void) graph;
    _tile_zero(0);
    return 0;
}
"""


def compiler() -> str:
    found = shutil.which("gcc") or shutil.which("cc")
    if found is None:
        pytest.skip("no C compiler (gcc) to build the check's controls")
    return found


def build(tmp_path: Path, name: str, source: str, *flags: str, shared: bool = False) -> Path:
    c_file = tmp_path / f"{name}.c"
    c_file.write_text(textwrap.dedent(source), encoding="utf-8")
    out = tmp_path / (f"lib{name}.so" if shared else f"{name}.o")
    command = [compiler(), "-O2", *flags, *(["-shared", "-fPIC"] if shared else ["-c"]), str(c_file), "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"{' '.join(flags)}: this compiler cannot build the control ({done.stderr.strip()[:200]})")
    return out


def test_llama_cpp_loads_the_model_and_samples_on_this_machine():
    done = run_python(SAMPLE, 300, "llama.cpp loading Gemma 3 270M and sampling 8 tokens", str(assembled_model()))
    ids = done.stdout.splitlines()[0].split()
    assert len(ids) == 8 and all(i.isdigit() for i in ids), done.stdout


def test_the_installed_library_holds_no_instruction_past_avx2():
    from tito_audit.gateway import llamacpp_isa

    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed: the library's instructions cannot be read")
    libraries = llamacpp_isa.installed_libraries()
    assert any(path.name.startswith("libggml-cpu") for path in libraries), libraries
    for path in libraries:
        findings = llamacpp_isa.scan(path)
        assert findings.instructions > 1000, findings.line()  # it read the code
        assert findings.clean, findings.line()


def test_the_check_finds_amx_avx512_and_avx_vnni_where_a_compiler_put_them(tmp_path):
    from tito_audit.gateway import llamacpp_isa

    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    amx = build(
        tmp_path, "amx", "#include <immintrin.h>\nvoid f(void) { _tile_zero(4); _tile_release(); }\n", "-mamx-tile"
    )
    wide = "#include <immintrin.h>\nvoid f(float *a, const float *b) {\n"
    wide += "    _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));\n}\n"
    avx512 = build(tmp_path, "avx512", wide, "-mavx512f")
    # AVX-512 with 256-bit registers only (AVX512VL): found by its EVEX encoding, not by a register name
    narrow = "#include <immintrin.h>\n__m256i f(__m256i a, __m256i b, __m256i c) {\n"
    narrow += "    return _mm256_ternarylogic_epi32(a, b, c, 0x96);\n}\n"
    avx512vl = build(tmp_path, "avx512vl", narrow, "-mavx512f", "-mavx512vl")
    dot = "#include <immintrin.h>\n__m256i f(__m256i s, __m256i a, __m256i b) {\n"
    dot += "    return _mm256_dpbusd_avx_epi32(s, a, b);\n}\n"
    vnni = build(tmp_path, "vnni", dot, "-mavxvnni")
    avx2 = build(
        tmp_path, "avx2", narrow.replace("_mm256_ternarylogic_epi32(a, b, c, 0x96)", "_mm256_xor_si256(a, b)"), "-mavx2"
    )
    found = {path.stem: llamacpp_isa.scan(path) for path in (amx, avx512, avx512vl, vnni, avx2)}
    assert set(found["amx"].found) == {"AMX"} and found["amx"].found["AMX"]["tilezero"] == 1
    assert set(found["avx512"].found) == {"AVX-512"}
    assert set(found["avx512vl"].found) == {"AVX-512"} and "vpternlogd" in found["avx512vl"].found["AVX-512"]
    assert set(found["vnni"].found) == {"AVX-VNNI"}
    assert found["avx2"].clean and found["avx2"].instructions > 0
    # the command make runs: exit 1 and a line naming the library and the set
    checked = subprocess.run(
        [sys.executable, "-m", "tito_audit.gateway.llamacpp_isa", str(amx), str(avx2)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 1
    assert "amx.o: AMX (2: tilezero x1, tilerelease x1)" in checked.stdout
    assert "avx2.o: no AMX, AVX-512 or AVX-VNNI instruction" in checked.stdout


def test_how_an_engine_process_ended_is_said_in_words():
    from tito_audit.gateway.llamacpp_process import ending

    said = ending(-signal.SIGILL, "llama_kv_cache: using full-size SWA cache")
    assert said.startswith("died of SIGILL (illegal instruction: ") and "make llamacpp" in said
    assert "SWA" not in said  # a line the library wrote before it died says nothing of why
    assert ending(-signal.SIGABRT, "GGML_ASSERT(n > 0) failed").endswith("(its last line: GGML_ASSERT(n > 0) failed)")
    assert ending(3, "out of memory") == "exited with status 3 (its last line: out of memory)"
    assert ending(-signal.SIGKILL).startswith("died of SIGKILL (killed: the system's out-of-memory killer")


def test_an_engine_process_that_does_not_answer_is_stopped_within_its_timeout():
    from tito_audit.gateway.errors import EngineProcessTimeout
    from tito_audit.gateway.llamacpp_process import EngineProcess

    process = EngineProcess(timeout=60)
    try:
        os.kill(process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(EngineProcessTimeout, match="did not answer within 1 s"):
            process.ask({"op": "end"}, timeout=1)
        assert time.monotonic() - started < 10
        assert not process.running  # killed, not left stopped
    finally:
        process.stop(kill=True)


@requires_shared
@pytest.mark.shared
def test_an_engine_that_cannot_run_here_is_refused_at_start_in_one_line(tmp_path):
    preload = build(tmp_path, "tilezero", TILE_ZERO, "-mamx-tile", shared=True)
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--mirror", str(SHARED_TOKENIZERS), "--no-hub"]
    command += ["--engine", f"llamacpp:{assembled_model()}", "--parser", "text", "--port", "0"]
    env = dict(os.environ, LD_PRELOAD=str(preload))
    server = popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, err = server.communicate(timeout=600)
    finally:
        server.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert server.returncode == 2, err
    assert len(lines) == 1, err
    assert "the llama.cpp engine process" in lines[0] and "died of SIGILL (illegal instruction" in lines[0], lines
    assert "while it started" in lines[0] and "Traceback" not in err


@pytest.fixture(scope="module")
def gateway_url():
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    if not SHARED_TOKENIZERS.is_dir():
        pytest.skip("../shared/tokenizers is absent (real tokenizers are not part of the repository)")
    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    machinery = machinery_for(MODEL, source, None, ())
    config = GatewayConfig(MODEL, engine=f"llamacpp:{assembled_model()}", parser="text", seed=1, max_tokens=400)
    gateway = Gateway(config, machinery=machinery)
    with running(gateway) as url:
        yield gateway, url


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@requires_shared
@pytest.mark.shared
def test_an_engine_process_that_dies_mid_turn_fails_that_turn_in_one_line_and_the_next_is_answered(gateway_url):
    import httpx

    gateway, url = gateway_url
    engine = gateway.engine
    body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 400}
    answers: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "crash"}, timeout=600)
        )
    )
    pid = engine.pid
    before = cpu_ticks(pid)
    asking.start()
    deadline = time.monotonic() + 300
    while not (engine.busy and cpu_ticks(pid) > before + 5):  # sampling this turn: 50 ms of its CPU time at least
        assert time.monotonic() < deadline and asking.is_alive(), "the turn never reached the engine"
        time.sleep(0.01)
    os.kill(pid, signal.SIGILL)
    asking.join(timeout=120)
    refused = answers[0]
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert error["code"] == "engine_crashed"
    assert f"the llama.cpp engine process (pid {pid}) died of SIGILL (illegal instruction" in error["message"]
    assert "\n" not in error["message"]
    assert httpx.get(f"{url}/sessions/crash", timeout=60).status_code == 404  # the turn was not kept
    short = body | {"max_tokens": 4}
    again = httpx.post(f"{url}/v1/chat/completions", json=short, headers={"X-Session-Id": "crash"}, timeout=600)
    assert again.status_code == 200, again.text
    assert engine.pid not in (None, pid)  # a new process answered


@requires_shared
@pytest.mark.shared
def test_the_engine_process_ends_with_the_server():
    import httpx

    from tito_audit.gateway.server import free_port

    port = free_port()
    command = [sys.executable, "-m", "tito_audit", "serve", MODEL, "--mirror", str(SHARED_TOKENIZERS), "--no-hub"]
    command += ["--engine", f"llamacpp:{assembled_model()}", "--parser", "text", "--port", str(port)]
    server = popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, server.communicate()[1][-600:]
            assert time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        engines = [pid for pid in children(server.pid) if b"llamacpp_worker" in cmdline(pid)]
        assert len(engines) == 1, engines
        server.kill()  # no shutdown of its own: the engine must see its parent go
        server.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(engines[0]):
            assert time.monotonic() < deadline, f"the engine process {engines[0]} outlived its server"
            time.sleep(0.1)
    finally:
        server.kill()
        server.wait()


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
