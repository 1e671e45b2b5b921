"""A lane of the harness matrix: ``python -m tito_audit.harnesses.lane LANE.json OUT.jsonl`` runs groups
(:mod:`.group`) one after another in one process, in a network namespace of its own (:mod:`.isolation`), and appends
each cell to ``OUT.jsonl`` as one JSON line as soon as it has run (the table stores it from there: a lane stopped
half way keeps what it finished); progress goes to standard error.

What a lane starts once serves all its groups: the proxy trap, one zygote per framework (:mod:`.zygotes`: the
framework imported once, each rollout forked from it) and vLLM's parser process (one per process: a lane of vLLM's
groups starts it once). The table (:mod:`.run`) runs a few lanes at once, the groups of one engine's parsers in
one lane where it can.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tito_audit.harnesses.group import GroupSpec, Runner, kept_share, run_group
from tito_audit.harnesses.harness import Configuration, Harness
from tito_audit.harnesses.isolation import ProxyTrap, harness_env
from tito_audit.harnesses.task import home_folder
from tito_audit.harnesses.zygotes import Zygotes


def run_lane(groups: list[GroupSpec], lane: int, out: Path) -> None:
    trap = ProxyTrap()
    folder = tempfile.TemporaryDirectory(prefix="tito-lane-")
    zygotes = Zygotes(Path(folder.name), harness_env(trap, str(home_folder(f"zygotes-{lane}")), {}))
    written = out.open("a", encoding="utf-8")
    try:
        for spec in groups:
            print(
                f"{spec.model} × {spec.parser}: {len(spec.cells)} harness configurations", file=sys.stderr, flush=True
            )

            def emit(
                harness: Harness, configuration: Configuration, cell: dict[str, Any], spec: GroupSpec = spec
            ) -> None:
                line = {"model": spec.model, "parser": spec.parser, **cell}
                written.write(json.dumps(line, ensure_ascii=False) + "\n")
                written.flush()
                said = f"{harness.title} ({configuration.name}): {kept_share(cell):.0%}, {cell['seconds']:.0f} s"
                print(f"  {spec.model} × {spec.parser}: {said}", file=sys.stderr, flush=True)

            run_group(spec, Runner(trap, zygotes), emit)
    finally:
        written.close()
        zygotes.close()
        trap.close()
        folder.cleanup()


def main(argv: list[str]) -> int:
    data = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    run_lane([GroupSpec.read(group) for group in data["groups"]], int(data.get("lane", 0)), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
