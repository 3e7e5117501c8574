"""Pressure stall information (PSI): the kernel's own measure of time lost waiting.

The same text format is used by ``/proc/pressure/{cpu,memory,io}`` and by the cgroup v2
files ``cpu.pressure`` / ``memory.pressure``::

    some avg10=3.72 avg60=0.93 avg300=0.36 total=2690513
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

Kernels without PSI (or booted with ``psi=0``) have no such files; that is "no figure",
never zero. ``cpu`` had no ``full`` line before 5.13, so ``full`` is optional.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PsiLine:
    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True, slots=True)
class Psi:
    some: PsiLine
    full: PsiLine | None = None


def _parse_line(fields: list[str]) -> PsiLine:
    values: dict[str, str] = {}
    for item in fields:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"bad PSI field {item!r}")
        values[key] = value
    return PsiLine(
        avg10=float(values["avg10"]),
        avg60=float(values["avg60"]),
        avg300=float(values["avg300"]),
        total_us=int(values["total"]),
    )


def parse_psi(text: str) -> Psi:
    """Parse PSI text; raises ValueError on anything that is not PSI."""
    some: PsiLine | None = None
    full: PsiLine | None = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            if fields[0] == "some":
                some = _parse_line(fields[1:])
            elif fields[0] == "full":
                full = _parse_line(fields[1:])
        except KeyError as err:
            raise ValueError(f"PSI line without {err}") from None
    if some is None:
        raise ValueError("no 'some' line in PSI text")
    return Psi(some=some, full=full)


_SOME_AVG10 = b"some avg10="


def some_avg10(data: bytes) -> float:
    """The ``some avg10`` figure alone, straight from the file's bytes: the per-pod reader
    needs only it, from 2,000 files a tick at 250 pods, where ``parse_psi`` was a third
    of the v2 collector's time. Raises ValueError on anything that is not PSI, as
    ``parse_psi`` does."""
    at = 0 if data.startswith(_SOME_AVG10) else data.find(b"\n" + _SOME_AVG10) + 1
    if at == 0 and not data.startswith(_SOME_AVG10):
        raise ValueError("no 'some avg10=' in PSI text")
    start = at + len(_SOME_AVG10)
    end = data.find(b" ", start)
    figure = data[start:] if end < 0 else data[start:end]
    try:
        return float(figure)
    except ValueError:
        raise ValueError(f"bad PSI avg10 {figure[:20]!r}") from None


def read_psi(path: str) -> Psi:
    """Read and parse one PSI file; raises OSError / ValueError for the caller to log."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return parse_psi(data.decode("ascii", "replace"))
