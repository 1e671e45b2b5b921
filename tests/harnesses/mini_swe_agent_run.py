"""Runs mini-swe-agent's default agent (its tool-calling configuration, ``mini.yaml``), as it ships, against the
gateway: ``python mini_swe_agent_run.py URL FOLDER``. It names no session; the gateway finds each request's session
from its conversation. The task has no end the agent can submit here, so it stops at its step limit."""

from __future__ import annotations

import pathlib
import sys

import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import builtin_config_dir
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_model import LitellmModel

URL, FOLDER = sys.argv[1], pathlib.Path(sys.argv[2])

config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
model = LitellmModel(
    model_name="openai/Qwen/Qwen3-4B",
    model_kwargs={"api_base": URL + "/v1", "api_key": "unused"},
    cost_tracking="ignore_errors",
)
agent = DefaultAgent(model, LocalEnvironment(cwd=str(FOLDER)), **{**config["agent"], "step_limit": 4})
try:
    print(agent.run("Tell me what the README in this folder says."))
except Exception as exc:  # the step limit ends the run: the requests are what the test reads
    print(type(exc).__name__, exc)
