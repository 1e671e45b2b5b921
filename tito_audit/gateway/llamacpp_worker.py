"""What runs in the llama.cpp engine's own process (``python -m tito_audit.gateway.llamacpp_worker``): the GGUF model
loaded through ``llama-cpp-python``, driven by the gateway over the process's standard input and output, one JSON
object a line each way (:mod:`.llamacpp_process` is the gateway's side).

The library runs here, never in the gateway's process: a kernel that dies (an illegal instruction, a segmentation
fault, an abort) ends this process only, and the gateway answers the turn with an error naming how it ended. The
process ends when its standard input closes or its parent is gone (checked every half second), whichever comes first:
it never outlives the gateway. Ctrl-C is left to the gateway, which stops it when it stops.

Requests (``op``) and answers, in order:

- ``load`` (``path``, ``n_ctx``, ``threads``, ``seed``): ``{"n_ctx", "n_ctx_train", "n_vocab"}``; always first;
- ``tokenize`` (``texts``): ``{"ids": [[...], ...]}``, each text with special tokens read as such, no BOS added;
- ``begin`` (``prompt``, ``seed``, ``knobs``: ``Llama.generate``'s sampling parameters, ``top``: alternatives asked):
  ``{}``; the prompt is evaluated whole (no state kept from the turn before);
- ``next``: ``{"id", "logprob", "top": [[id, logprob], ...]}``, the next sampled id and its log-probability from the
  raw logits it was sampled from (``log_softmax`` at temperature 1, before top-k and top-p);
- ``end``: ``{}``, the turn is over.

A request that fails in Python is answered ``{"error": "one line"}`` and the process goes on.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

PARENT_CHECK_SECONDS = 0.5


class Worker:
    """The model and the turn under way."""

    def __init__(self) -> None:
        self.llama: Any = None
        self.turn: Iterator[int] | None = None
        self.top = 0
        self.n_vocab = 0

    def load(self, path: str, n_ctx: int, threads: int, seed: int) -> dict[str, Any]:
        import llama_cpp

        self.llama = llama_cpp.Llama(
            model_path=path, n_ctx=n_ctx, n_threads=threads, seed=seed, logits_all=False, verbose=False
        )
        self.n_vocab = int(self.llama.n_vocab())
        return {
            "n_ctx": int(self.llama.n_ctx()),
            "n_ctx_train": int(self.llama._model.n_ctx_train()),
            "n_vocab": self.n_vocab,
        }

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        tokenize = self.llama.tokenize
        return {"ids": [list(tokenize(text.encode("utf-8"), add_bos=False, special=True)) for text in texts]}

    def begin(self, prompt: list[int], seed: int, knobs: dict[str, Any], top: int) -> dict[str, Any]:
        self.end()
        self.llama.reset()  # no prompt cache: the same prompt and seed sample the same ids whatever ran before
        self.llama.set_seed(seed)
        self.turn = iter(self.llama.generate(prompt, reset=True, **knobs))
        self.top = top
        return {}

    def next(self) -> dict[str, Any]:
        import numpy

        if self.turn is None:
            raise RuntimeError("no turn under way ('begin' first)")
        token = int(next(self.turn))
        logits = numpy.ctypeslib.as_array(self.llama._ctx.get_logits_ith(-1), shape=(self.n_vocab,))
        shifted = logits.astype(numpy.float64) - float(logits.max())
        logprobs = shifted - numpy.log(numpy.exp(shifted).sum())
        answer: dict[str, Any] = {"id": token, "logprob": float(logprobs[token]), "top": []}
        if self.top:
            best = numpy.argpartition(-logprobs, self.top)[: self.top]
            answer["top"] = sorted(([int(i), float(logprobs[i])] for i in best), key=lambda pair: -pair[1])
        return answer

    def end(self) -> dict[str, Any]:
        if self.turn is not None:
            close = getattr(self.turn, "close", None)
            if close is not None:
                close()
            self.turn = None
        return {}

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "load":
            return self.load(str(request["path"]), int(request["n_ctx"]), int(request["threads"]), int(request["seed"]))
        if self.llama is None:
            raise RuntimeError(f"{op!r} before 'load'")
        if op == "tokenize":
            return self.tokenize([str(text) for text in request["texts"]])
        if op == "begin":
            prompt = [int(token) for token in request["prompt"]]
            return self.begin(prompt, int(request["seed"]), dict(request["knobs"]), int(request.get("top", 0)))
        if op == "next":
            return self.next()
        if op == "end":
            return self.end()
        raise ValueError(f"unknown op {op!r}")


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer each request line until the input closes."""
    worker = Worker()
    for line in requests:
        try:
            answer = worker.answer(json.loads(line))
        except StopIteration:
            answer = {"error": "the model's generation ended"}
        except Exception as exc:  # one line back to the gateway, which names the engine and the request
            answer = {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
        answers.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
        answers.flush()


def leave_with_parent(parent: int) -> None:
    """End this process once its parent is gone (this process is then another's child)."""

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_SECONDS)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> int:
    parent = int(os.environ.get("TITO_AUDIT_ENGINE_PARENT", os.getppid()))
    if os.getppid() != parent:  # the parent is already gone
        return 0
    leave_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway stops this process when it stops
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what the library prints goes to stderr, not into the answers
    try:
        serve(sys.stdin.buffer, answers)
    except BrokenPipeError:  # the gateway is gone
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
