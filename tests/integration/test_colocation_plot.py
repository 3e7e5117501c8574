"""The co-location PNG is the whole page, as the HTML is: chromium's ``--screenshot``
takes the window, so the window is sized to the page as chromium lays it out (a window
sized by guess cut the report off at the bottom). A report line longer than the page
wraps, in the HTML and the PNG alike, rather than widening the picture."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from bench.colocation_plot import PAGE_WIDTH, chromium, write_pictures
from tests.need import need

pytestmark = pytest.mark.integration
#: The report's font (10 px monospace): a line is at least 10 px high, a character 5 px wide.
LINE_PX, CHAR_PX = 10, 5


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_png_holds_the_whole_report_however_long(tmp_path: Path) -> None:
    if chromium() is None:
        need("the co-location PNG needs a chromium (apt-get install chromium)")
    lines = [f"line {i:03d} " + "x" * (i % 5 * 30) for i in range(300)] + ["legend " * 90]
    written = write_pictures(str(tmp_path), {"mode": "quick", "cases": [], "windows": []}, [],
                             "\n".join(lines))  # fmt: skip
    assert written[-1] == f"picture: {tmp_path / 'colocation.png'}", written
    width, height = png_size(tmp_path / "colocation.png")
    wrapped = math.ceil(len(lines[-1].strip()) * CHAR_PX / (PAGE_WIDTH + 16))  # rows, at least
    assert height >= (len(lines) - 1 + wrapped) * LINE_PX, (width, height)  # nothing cut
    assert width <= PAGE_WIDTH + 16, (width, height)  # the long line wrapped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["colocation.html", "colocation.png"]
