"""The small task every harness is given: a folder with two files, and one question a few commands that only read
answer. Each rollout gets a folder of its own under a root whose name is fixed (``/var/tmp/tito-harnesses/...``; not
under ``/tmp``, where Codex refuses to put its helpers), so that what a harness writes into its prompt (its working
directory) is the same from one run to the next."""

from __future__ import annotations

import shutil
from pathlib import Path

TASK = "What is in this folder? Look at the files with the tools you have, then answer in one sentence."
FILES = {
    "README.md": "# notes-demo\n\nA folder with notes about a small project.\n",
    "notes.txt": "TODO: write the tests\nTODO: publish the page\ndone: set up the folder\n",
}
ROOT = Path("/var/tmp/tito-harnesses")


def task_folder(*parts: str) -> Path:
    """A fresh task folder (``ROOT/parts...``): the files of :data:`FILES`, nothing else."""
    folder = ROOT.joinpath(*parts)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def home_folder(*parts: str) -> Path:
    """A fresh, empty home folder for one rollout's settings, caches and logs."""
    folder = ROOT.joinpath("home", *parts)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder
