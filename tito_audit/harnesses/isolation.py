"""Nothing a harness does leaves the machine, and any attempt fails its run.

- **A network of its own**: a harness group runs in a new network namespace (``unshare --net``: loopback only),
  the gateway and the stand-in engine inside it, so a connection to any other host cannot be made at all
  (:func:`isolated_argv`). Where namespaces are not available (not root, no ``unshare``), the group runs on the
  machine's network and the table says so.
- **A trap for what tries**: every proxy variable (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, lower case too)
  points at a port on 127.0.0.1 that only listens (:class:`ProxyTrap`): a harness that reaches for another host
  through its proxy settings (telemetry, updates, a web tool) lands there, the host it asked for is recorded and
  the run fails. ``NO_PROXY`` keeps 127.0.0.1 direct.
- **Telemetry and updates off** by each harness's documented switch (:data:`QUIET`).
"""

from __future__ import annotations

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
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "INSPECT_DISABLE_MODEL_API": "",
    "ANONYMIZED_TELEMETRY": "False",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
    "NO_UPDATE_NOTIFIER": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""Each harness's switches for telemetry, error reports and self-updates."""


class ProxyTrap:
    """A port on 127.0.0.1 that accepts connections and records the first line each sends (``CONNECT host:443``)."""

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
            with connection:
                connection.settimeout(2)
                try:
                    first = connection.recv(1024).split(b"\r\n", 1)[0].decode("latin-1")
                except OSError:
                    first = "(a connection that sent nothing)"
            with self._lock:
                self.attempts.append(first or "(a connection that sent nothing)")

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
