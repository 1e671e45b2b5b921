"""``python -m tito_audit.harnesses.install DIR [NAME ...]`` (``make harnesses-install``): the pinned harnesses, in a
folder apart from the project's own packages (as vLLM's parsers are): the npm CLIs with ``npm install --prefix
DIR/npm`` (and what a fix configuration pre-installs for one, in ``DIR/npm-NAME``), each PyPI harness in a virtual
environment of its own (``DIR/venv-NAME``), so that their pins never move ours. A part whose pins have not changed
since it was installed (its stamp file) is left as it is."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

from tito_audit.harnesses.catalogue import HARNESSES
from tito_audit.harnesses.harness import NPM, PYPI, Harness


def _stamped(stamp: Path, wanted: list[str]) -> bool:
    return stamp.is_file() and stamp.read_text(encoding="utf-8") == json.dumps(wanted)


def install_npm(folder: Path, harnesses: list[Harness]) -> None:
    wanted = sorted(f"{h.package}@{h.version}" for h in harnesses if h.source == NPM)
    stamp = folder / "npm" / ".installed"
    if not wanted or _stamped(stamp, wanted):
        return
    print(f"harnesses: npm install {' '.join(wanted)} into {folder / 'npm'}", flush=True)
    subprocess.run(
        ["npm", "install", "--prefix", str(folder / "npm"), "--no-audit", "--no-fund", "--save-exact", *wanted],
        check=True,
    )
    for harness in harnesses:  # npm 11 leaves install scripts unrun unless allowed: run the postinstall that places
        if harness.source == NPM:  # a CLI's native binary (Claude Code's bin/claude.exe is a stub until then)
            _postinstall(folder / "npm" / "node_modules" / harness.package)
    stamp.write_text(json.dumps(wanted), encoding="utf-8")


def install_companions(folder: Path, harnesses: list[Harness]) -> None:
    """Each harness's companions (:attr:`Harness.companions`): its npm ones into ``DIR/npm-NAME`` (a folder as ``npm
    install`` leaves it: ``package.json``, ``package-lock.json``, ``node_modules``), its PyPI ones into a virtual
    environment ``DIR/venv-NAME``: what a fix configuration puts where the harness looks."""
    for harness in harnesses:
        npm = sorted(c.removeprefix("npm:") for c in harness.companions if c.startswith("npm:"))
        pypi = sorted(c.removeprefix("pypi:") for c in harness.companions if c.startswith("pypi:"))
        target = folder / f"npm-{harness.name}"
        if npm and not _stamped(target / ".installed", npm):
            print(f"harnesses: npm install {' '.join(npm)} into {target}", flush=True)
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", "--save-exact", *npm], check=True
            )
            (target / ".installed").write_text(json.dumps(npm), encoding="utf-8")
        if pypi:
            _install_venv(folder / f"venv-{harness.name}", pypi)


def _postinstall(package: Path) -> None:
    """Run the package's ``postinstall`` when it is ``node FILE`` (what npm would have run)."""
    try:
        script = (
            json.loads((package / "package.json").read_text(encoding="utf-8")).get("scripts", {}).get("postinstall")
        )
    except (OSError, ValueError):
        return
    if isinstance(script, str) and script.startswith("node ") and len(script.split()) == 2:
        subprocess.run(["node", script.split()[1]], cwd=package, check=True)


def install_pypi(folder: Path, harnesses: list[Harness]) -> None:
    environments: dict[str, list[str]] = {}
    for harness in harnesses:
        if harness.source == PYPI:
            environments.setdefault(harness.venv, [])
            environments[harness.venv] += [r for r in harness.requirements if r not in environments[harness.venv]]
    for name, requirements in sorted(environments.items()):
        _install_venv(folder / f"venv-{name}", requirements)


def _install_venv(target: Path, requirements: list[str]) -> None:
    """A virtual environment at ``target`` with ``requirements`` installed (left as it is when its stamp says so)."""
    stamp = target / ".installed"
    if _stamped(stamp, requirements):
        return
    print(f"harnesses: {' '.join(requirements)} into {target}", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off", "-q"]
    subprocess.run([*pip, *requirements], check=True)
    stamp.write_text(json.dumps(requirements), encoding="utf-8")


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    names = set(argv[1:])
    chosen = [h for h in HARNESSES if not names or h.name in names]
    folder.mkdir(parents=True, exist_ok=True)
    install_npm(folder, chosen)
    install_companions(folder, chosen)
    install_pypi(folder, chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
