"""The guest, booted once per test run: every check of guest_checks.py runs in that boot.

Where it cannot be had (no qemu, no root to build the image, a failed build) the tests
skip with the reason on a workstation and fail in CI (``CI=true``), as devtools/harness/cluster.py
does for the real cluster.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.vm.guest import QEMU, Boot, GuestError, boot, prepare_share
from devtools.vm.image import Image, ImageError, ensure_image
from tests.need import need

HERE = Path(__file__).resolve().parent
#: Boot (45 s to 4 minutes under emulation, as busy as the machine is) and every check
#: (5 to 15 minutes), with room.
TIMEOUT = 2700


@dataclass
class GuestRun:
    image: Image
    boot: Boot
    results: dict[str, Any]

    def result(self, name: str) -> dict[str, Any]:
        """A check's figures; fails with the guest's own error when it failed there."""
        got = self.results.get(name)
        if got is None:
            pytest.fail(f"{name} did not run in the guest (rc {self.boot.rc}, qemu {self.boot.seconds:.0f} s "
                        f"of {TIMEOUT}); its log:\n{self.boot.log()[-3000:]}\n"
                        f"the console's end (a stuck check's stacks are there):\n{self.boot.console_tail(6000)}",
                        pytrace=False)  # fmt: skip
        figures = got.get("figures", {})
        if not got["ok"]:
            pytest.fail(f"in the guest: {got['error']}\nfigures: {json.dumps(figures, indent=1)}\n"
                        f"{got.get('trace', '')}", pytrace=False)  # fmt: skip
        return figures


@pytest.fixture(scope="session")
def guest(tmp_path_factory: pytest.TempPathFactory) -> GuestRun:
    if shutil.which(QEMU) is None:
        need(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
    try:
        image = ensure_image(say=lambda _line: None)
    except ImageError as err:
        need(str(err))
    share = tmp_path_factory.mktemp("vm")
    script = "exec /opt/waterline/bin/python /mnt/share/guest_checks.py /mnt/share/out\n"
    try:
        prepare_share(share, script, {"guest_checks.py": HERE / "guest_checks.py"})
        done = boot(image, share, timeout=TIMEOUT)
    except GuestError as err:
        need(str(err))
    results_file = done.out / "results.json"
    if not results_file.exists():
        console = done.console_tail()
        pytest.fail(f"the guest ran no check (rc {done.rc}, {done.seconds:.0f} s); its log:\n"
                    f"{done.log()[-3000:]}\nconsole:\n{console}", pytrace=False)  # fmt: skip
    run = GuestRun(image, done, json.loads(results_file.read_text()))
    summary = {"build_s": image.build_seconds, "boot_s": done.boot_seconds, "qemu_s": done.seconds,
               **{k: v.get("seconds") for k, v in run.results.items()}}  # fmt: skip
    (tmp_path_factory.getbasetemp() / "vm-times.json").write_text(json.dumps(summary, indent=1))
    return run
