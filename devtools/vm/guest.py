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

import compileall
import os
import py_compile
import shutil
import subprocess
import sys
import time
import zipfile
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
# Waterline, fresh from the host at each boot (its locked dependencies are in the image):
# the wheel's files as the host unpacked and byte-compiled them (share/site: a pure-Python
# wheel installs by being unpacked into site-packages), copied into /opt/waterline, with a
# script for each console entry point. What pip would do, without pip's start-up and the
# guest compiling every module under emulation (minutes on a busy machine).
set -e
/opt/waterline/bin/python - <<'PY'
import configparser, glob, os, shutil, sys, sysconfig
site = sysconfig.get_paths()["purelib"]
shutil.copytree("/mnt/share/site", site, dirs_exist_ok=True)
points = configparser.ConfigParser()
points.read(glob.glob(os.path.join(site, "waterline-*.dist-info", "entry_points.txt")))
for name, target in points["console_scripts"].items():
    module, _, func = target.partition(":")
    path = os.path.join(sys.prefix, "bin", name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\\nimport sys\\nfrom {module} import {func}\\nsys.exit({func}())\\n")
    os.chmod(path, 0o755)
PY
echo "installed: $(/opt/waterline/bin/waterline --version 2>&1)"
"""
#: The guest's Python: bytecode compiled here is valid there when the minor versions match.
GUEST_PYTHON = (3, 11)


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

    def console_tail(self, chars: int = 3000) -> str:
        """The end of the serial console, or "" when qemu never wrote it (killed at once)."""
        try:
            return self.console.read_text(errors="replace")[-chars:]
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


def unpack_wheel(wheel: Path, site: Path) -> None:
    """The wheel's files in ``site``, byte-compiled for the guest when this Python is
    the guest's (``unchecked-hash``: valid whatever the files' times become)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    if sys.version_info[:2] == GUEST_PYTHON:
        compileall.compile_dir(str(site), quiet=1, workers=0,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)  # fmt: skip


def prepare_share(share: Path, script: str, files: dict[str, Path] | None = None) -> None:
    """The share: the wheel, ``run`` (the wheel's install, then ``script``), and
    ``files`` (name in the share -> a file or folder of this machine) copied in."""
    (share / "out").mkdir(parents=True, exist_ok=True)
    unpack_wheel(build_wheel(share / "wheel"), share / "site")
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
