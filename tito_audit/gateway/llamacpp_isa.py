"""Which instructions past AVX2 the installed llama.cpp library holds: the check ``make install`` runs after it
installs ``llama-cpp-python`` (``python -m tito_audit.gateway.llamacpp_isa``), and the tests run on the library they
load.

``make`` builds llama.cpp for AVX2 with every later instruction set named off (AVX-512, AVX-VNNI, AMX): such a build
runs on every x86-64 machine this project meets. A build made otherwise (``-march=native`` on a machine with AMX, or a
wheel some other install left in pip's cache) holds kernels that die with an illegal instruction on another CPU, or on
the same CPU where the kernel never granted the process AMX's tile state. The library's code is read with ``objdump -d``
and each instruction sorted:

- AMX: the tile instructions (``tilezero``, ``tileloadd``, ``tdpbssd``, ``ldtilecfg``, ...) and any ``%tmm`` operand;
- AVX-512: any EVEX-encoded instruction (its first byte after the legacy prefixes is ``0x62``, which in 64-bit code is
  nothing else), whatever its registers;
- AVX-VNNI: ``vpdpbusd`` and its kin in their VEX form (objdump writes ``{vex}`` before them).

Exit 0 when none is found, 1 naming each library and what it holds, 2 when the check cannot be made (no library, no
objdump).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

AMX_MNEMONIC = re.compile(r"^(tile\w+|ldtilecfg|sttilecfg|tdp\w+|tcmm\w+|tcvt\w+)$")
AMX_OPERAND = re.compile(r"%tmm[0-7]\b")
VNNI_MNEMONIC = re.compile(r"^vpdp(bu|bs|wu|ws|bss|bsu|buu|wss|wsu|wus|wuu)s?d$")
LEGACY_PREFIXES = frozenset({"f0", "f2", "f3", "2e", "36", "3e", "26", "64", "65", "66", "67"})
EVEX = "62"
OBJDUMP_SECONDS = 300.0
"""The most one library's disassembly may take (a few seconds for libggml-cpu on a busy 2-core machine)."""


class CheckUnavailable(Exception):
    """The check cannot be made here (no objdump, no library): one line saying why."""


@dataclass
class Findings:
    """What one library's code holds past AVX2: per instruction set, the mnemonics found and how often."""

    path: Path
    instructions: int = 0
    """Instructions read."""
    found: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, family: str, mnemonic: str) -> None:
        self.found.setdefault(family, Counter())[mnemonic] += 1

    @property
    def clean(self) -> bool:
        return not self.found

    def line(self) -> str:
        """One line: the library and what it holds (the three most frequent mnemonics of each set)."""
        if self.clean:
            return f"{self.path.name}: no AMX, AVX-512 or AVX-VNNI instruction in {self.instructions} instructions"
        parts = []
        for family, counts in sorted(self.found.items()):
            common = ", ".join(f"{name} x{count}" for name, count in counts.most_common(3))
            parts.append(f"{family} ({sum(counts.values())}: {common})")
        return f"{self.path.name}: {'; '.join(parts)}"


def classify(raw_bytes: str, text: str) -> tuple[str, str] | None:
    """The instruction set past AVX2 of one disassembled instruction (its bytes as objdump prints them, hex pairs
    separated by spaces, and its text), with its mnemonic; None for one AVX2 machines run."""
    words = text.split()
    if not words:
        return None
    if words[0] == "{vex}" and len(words) > 1:
        mnemonic = words[1]
        if VNNI_MNEMONIC.match(mnemonic):
            return "AVX-VNNI", mnemonic
    mnemonic = words[0]
    while mnemonic in {"lock", "rep", "repz", "repnz", "data16", "addr32", "notrack", "bnd"} and len(words) > 1:
        words = words[1:]
        mnemonic = words[0]
    if AMX_MNEMONIC.match(mnemonic) or AMX_OPERAND.search(text):
        return "AMX", mnemonic
    first = next((byte for byte in raw_bytes.split() if byte not in LEGACY_PREFIXES), None)
    if first == EVEX:
        return "AVX-512", mnemonic
    return None


def scan(path: Path, objdump: str | None = None) -> Findings:
    """Disassemble ``path`` (``objdump -d -w``) and sort its instructions (:func:`classify`)."""
    tool = objdump or shutil.which("objdump")
    if tool is None:
        raise CheckUnavailable("objdump is not installed (binutils): the library's instructions cannot be read")
    findings = Findings(path)
    with subprocess.Popen(
        [tool, "-d", "-w", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            # "  1a2b3c:\t62 f1 7c 48 10 00 \tvmovups (%rax),%zmm0": address, bytes, instruction
            parts = line.split("\t")
            if len(parts) < 3 or not parts[0].rstrip().endswith(":"):
                continue
            findings.instructions += 1
            sorted_as = classify(parts[1], parts[2])
            if sorted_as is not None:
                findings.add(*sorted_as)
        try:
            _, errors = process.communicate(timeout=OBJDUMP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            raise CheckUnavailable(f"objdump did not read {path} within {OBJDUMP_SECONDS:g} s") from None
    if process.returncode != 0:
        raise CheckUnavailable(f"objdump could not read {path}: {' '.join(errors.split())[:200]}")
    return findings


def installed_libraries() -> list[Path]:
    """The shared libraries of the installed ``llama_cpp`` package (found without importing it: importing loads
    them), each once (the wheel ships copies under each soname)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise CheckUnavailable("llama-cpp-python is not installed")
    folder = Path(next(iter(spec.submodule_search_locations))) / "lib"
    seen: set[str] = set()
    libraries = []
    for path in sorted(folder.glob("lib*.so*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            libraries.append(path)
    if not libraries:
        raise CheckUnavailable(f"no shared library in {folder}")
    return libraries


def main(argv: list[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    try:
        findings = [scan(path) for path in (paths or installed_libraries())]
    except CheckUnavailable as exc:
        print(f"llama.cpp build check: not made ({exc})")
        return 2
    for each in findings:
        print(f"llama.cpp build check: {each.line()}")
    return 0 if all(each.clean for each in findings) else 1


if __name__ == "__main__":
    sys.exit(main())
