"""Nothing a harness does leaves the machine, and any attempt fails its run.

- **A network of its own**: a harness group runs in a new network namespace (``unshare --net``: loopback only),
  the gateway and the stand-in engine inside it, so a connection to any other host cannot be made at all
  (:func:`isolated_argv`). Where namespaces are not available (not root, no ``unshare``), the group runs on the
  machine's network and the table says so.
- **A trap for what tries**: every proxy variable (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, lower case too)
  points at a proxy on 127.0.0.1 that lets only loopback traffic through (:class:`ProxyTrap`): a harness that
  reaches for another host through its proxy settings (telemetry, updates, a web tool) lands there, the host it asked
  for is recorded and the run fails. ``NO_PROXY`` keeps 127.0.0.1 direct for the clients that read it.
- **Telemetry and updates off** by each harness's documented switch (:data:`QUIET`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Mapping

QUIET: dict[str, str] = {
    "DO_NOT_TRACK": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "OTEL_SDK_DISABLED": "true",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "ANONYMIZED_TELEMETRY": "False",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
    "NO_UPDATE_NOTIFIER": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""Each harness's switches for telemetry, error reports and self-updates."""


class ProxyTrap:
    """A proxy on 127.0.0.1 that lets through only what goes to 127.0.0.1 (a client that sends even loopback traffic
    through its proxy, as some do whatever ``NO_PROXY`` says: ``CONNECT 127.0.0.1:PORT`` is tunnelled, an absolute
    ``http://127.0.0.1:PORT/...`` request relayed) and records the first line of anything else
    (``CONNECT host:443``), answering it 403."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._lock = threading.Lock()
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._serve, name="proxy-trap", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(30)
            try:
                head = _read_head(connection)
            except OSError:
                head = b""
            first = head.split(b"\r\n", 1)[0].decode("latin-1")
            target = _loopback_target(first)
            if target is None:
                with self._lock:
                    self.attempts.append(first or "(a connection that sent nothing)")
                with contextlib.suppress(OSError):
                    connection.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            with contextlib.suppress(OSError), socket.create_connection(target, timeout=30) as upstream:
                if first.startswith("CONNECT "):
                    connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:  # an absolute-form request: sent on with its path alone
                    method, url, rest = first.split(" ", 2)
                    path = "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"
                    upstream.sendall(f"{method} {path} {rest}".encode("latin-1") + head[len(first) :])
                _relay(connection, upstream)

    def taken(self) -> list[str]:
        """The attempts so far, cleared."""
        with self._lock:
            found, self.attempts = self.attempts, []
        return found

    def close(self) -> None:
        self._socket.close()

    def env(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{self.port}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        return {
            **{name: proxy for name in names},
            **{name.lower(): proxy for name in names},
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }


def _read_head(connection: socket.socket, limit: int = 65536) -> bytes:
    """A request's head (to its blank line), and whatever of its body came with it."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _loopback_target(first: str) -> tuple[str, int] | None:
    """The 127.0.0.1 address a proxy request line asks for, or None when it asks for another host."""
    parts = first.split(" ")
    if len(parts) < 3:
        return None
    where = parts[1] if parts[0] == "CONNECT" else parts[1].split("://", 1)[-1].split("/", 1)[0]
    host, _, port = where.rpartition(":")
    if host not in ("127.0.0.1", "localhost") or not port.isdigit():
        return None
    return "127.0.0.1", int(port)


def _relay(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    back = threading.Thread(target=pump, args=(other, one), daemon=True)
    back.start()
    one.settimeout(None)
    other.settimeout(None)
    pump(one, other)
    back.join(timeout=60)


def harness_env(trap: ProxyTrap, home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of one rollout: the machine's PATH and locale, a home of its own, the trap, quiet switches."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TZ")}
    return {
        **keep,
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "TMPDIR": f"{home}/tmp",
        **QUIET,
        **trap.env(),
        **extra,
    }


def namespaces_available() -> bool:
    """Whether this process can run a group in a network namespace of its own."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    try:
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def isolated_argv(argv: list[str]) -> list[str]:
    """``argv`` run in a new network namespace whose loopback is up."""
    script = 'ip link set lo up && exec "$@"'
    return ["unshare", "--net", "sh", "-c", script, "sh", *argv]
