"""One boot of the guest: qemu-system-x86_64, a 9p share in and out, a time limit.

The share is a folder of this machine: the host puts Waterline's wheel and a script
``run`` in it; the guest's ``waterline-guest.service`` mounts it, installs the wheel
into /opt/waterline (offline, ``--no-deps``: the locked dependencies are in the image),
runs the script, writes ``out/rc`` and ``out/guest.log`` and powers off. Nothing is read
from the console: it goes to ``console.log`` for a person to read when a boot fails.

The root file system is opened with ``-snapshot``: the guest's writes go to a throw-away
overlay, the cached image never changes. Acceleration: ``VM_ACCEL`` (``tcg``, the
default, software emulation; ``kvm`` where KVM works: on this project's machines a KVM
guest hangs after the BIOS).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.vm.image import ROOT, Image

QEMU = "qemu-system-x86_64"
#: The kernel's command line: cgroup v2 only (systemd 252's default, said anyway), the
#: console on the serial port for console.log, no speculative-execution mitigations
#: (they cost much under emulation and guard nothing here).
CMDLINE = ("root=/dev/vda rw rootfstype=ext4 console=ttyS0 systemd.unified_cgroup_hierarchy=1 "
           "systemd.show_status=0 mitigations=off net.ifnames=0 quiet")  # fmt: skip
INSTALL = """\
#!/bin/sh
# Waterline's wheel, fresh from the host at each boot (its locked dependencies are in the
# image). A pure-Python wheel installs by being unpacked into site-packages, with a script
# for each console entry point: what pip does, in a second instead of pip's half minute
# under emulation.
set -e
/opt/waterline/bin/python - /mnt/share/wheel/*.whl <<'PY'
import configparser, os, sys, sysconfig, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sysconfig.get_paths()["purelib"])
    points = configparser.ConfigParser()
    points.read_string(wheel.read(next(
        n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode())
for name, target in points["console_scripts"].items():
    module, _, func = target.partition(":")
    path = os.path.join(sys.prefix, "bin", name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\\nimport sys\\nfrom {module} import {func}\\nsys.exit({func}())\\n")
    os.chmod(path, 0o755)
PY
echo "installed: $(/opt/waterline/bin/waterline --version 2>&1)"
"""


class GuestError(RuntimeError):
    """The guest could not be booted or did not finish: the message says why."""


@dataclass(frozen=True, slots=True)
class Boot:
    share: Path
    rc: int | None  # the script's exit code; None: it never finished
    seconds: float  # wall time, qemu's start to its exit
    #: Wall seconds from qemu's start to the guest's service starting (the boot itself).
    boot_seconds: float | None
    console: Path

    @property
    def out(self) -> Path:
        return self.share / "out"

    def log(self) -> str:
        try:
            return (self.out / "guest.log").read_text(errors="replace")
        except OSError:
            return ""


def accel() -> str:
    return os.environ.get("VM_ACCEL", "tcg")


def build_wheel(dest: Path, root: Path = ROOT) -> Path:
    """Waterline's wheel from this checkout, by the development environment's pip."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in root.glob("build/lib"):
        shutil.rmtree(old, ignore_errors=True)  # setuptools would ship a deleted module
    pip = root / ".venv" / "bin" / "pip"
    done = subprocess.run(  # noqa: S603
        [str(pip), "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dest), str(root)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"), cwd=root,
    )  # fmt: skip
    wheels = sorted(dest.glob("waterline-*.whl"))
    if done.returncode != 0 or not wheels:
        raise GuestError(f"the wheel could not be built: {done.stderr.strip()[-1000:]}")
    return wheels[-1]


def prepare_share(share: Path, script: str, files: dict[str, Path] | None = None) -> None:
    """The share: the wheel, ``run`` (the wheel's install, then ``script``), and
    ``files`` (name in the share -> a file or folder of this machine) copied in."""
    (share / "out").mkdir(parents=True, exist_ok=True)
    build_wheel(share / "wheel")
    for name, source in (files or {}).items():
        if source.is_dir():
            shutil.copytree(source, share / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, share / name)
    run = share / "run"
    run.write_text(INSTALL + script)
    run.chmod(0o755)


def boot(image: Image, share: Path, timeout: float = 900, memory_mib: int = 1024,
         cpus: int = 2) -> Boot:  # fmt: skip
    """Boot the guest once with ``share`` and wait for it to power off (killed after
    ``timeout`` seconds). Raises GuestError when qemu is missing or fails to start."""
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise GuestError(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
    console = share / "console.log"
    command = [
        qemu, "-machine", "q35", "-accel", accel(), "-cpu", "max" if accel() == "tcg" else "host",
        "-smp", str(cpus), "-m", str(memory_mib),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", CMDLINE,
        "-drive", f"file={image.rootfs},format=raw,if=virtio,snapshot=on",
        "-virtfs", f"local,path={share},mount_tag=share,security_model=none,id=share",
        "-nic", "none", "-display", "none", "-no-reboot",
        "-serial", f"file:{console}", "-monitor", "none",
    ]  # fmt: skip
    started = time.monotonic()
    boot_seconds: float | None = None
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603
                          stderr=subprocess.STDOUT) as proc:  # fmt: skip
        try:
            while proc.poll() is None:
                if boot_seconds is None and (share / "out" / "started").exists():
                    boot_seconds = time.monotonic() - started
                if time.monotonic() - started > timeout:
                    proc.kill()
                    break
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    seconds = time.monotonic() - started
    rc_file = share / "out" / "rc"
    rc = int(rc_file.read_text().strip()) if rc_file.exists() else None
    if rc is None and proc.returncode not in (0, None) and output.strip():
        raise GuestError(f"qemu failed ({proc.returncode}): {output.strip()[-1000:]}")
    return Boot(share, rc, seconds, boot_seconds, console)
