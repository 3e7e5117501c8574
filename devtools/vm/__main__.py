"""``python -m devtools.vm build|up`` (``make vm``): the guest image, and one boot of it.

``build`` makes the image when its inputs changed (else says it is cached); ``up`` also
boots it once with a script that reports what the guest is (kernel, systemd as PID 1, the
cgroup v2 controllers, the Waterline installed from the fresh wheel) and prints the build,
boot and total times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from devtools.vm.guest import GuestError, accel, boot, prepare_share
from devtools.vm.image import ImageError, ensure_image

FACTS = """\
/opt/waterline/bin/python - <<'PY'
import json, os, platform, subprocess
def out(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
facts = {
    "kernel": platform.release(),
    "pid1": open("/proc/1/comm").read().strip(),
    "systemd": out("systemctl", "--version").splitlines()[0],
    "cgroup_fs": out("stat", "-fc", "%T", "/sys/fs/cgroup"),
    "controllers": open("/sys/fs/cgroup/cgroup.controllers").read().split(),
    "waterline": out("/opt/waterline/bin/waterline", "--version"),
    "uptime_s": float(open("/proc/uptime").read().split()[0]),
}
json.dump(facts, open("/mnt/share/out/facts.json", "w"), indent=1)
print(json.dumps(facts))
PY
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.vm", description=__doc__)
    parser.add_argument("verb", choices=["build", "up"])
    parser.add_argument("--timeout", type=float, default=600, help="seconds a boot may take")
    args = parser.parse_args(argv)
    try:
        image = ensure_image()
        how = "cached" if image.cached else f"built in {image.build_seconds:.0f} s"
        print(f"vm: image {image.folder} ({how})")
        if args.verb == "build":
            return 0
        with tempfile.TemporaryDirectory(prefix="waterline-vm-") as tmp:
            share = Path(tmp)
            start = time.monotonic()
            prepare_share(share, FACTS)
            wheel_s = time.monotonic() - start
            done = boot(image, share, timeout=args.timeout)
            facts_file = done.out / "facts.json"
            if done.rc != 0 or not facts_file.exists():
                print(f"vm: the guest's script failed (rc {done.rc}); its log:\n{done.log()}"
                      f"\nconsole: {done.console.read_text(errors='replace')[-3000:]}",
                      file=sys.stderr)  # fmt: skip
                return 1
            facts = json.loads(facts_file.read_text())
            print(f"vm: {facts['kernel']}, PID 1 {facts['pid1']} ({facts['systemd']}), "
                  f"/sys/fs/cgroup {facts['cgroup_fs']}: {' '.join(facts['controllers'])}")  # fmt: skip
            print(f"vm: {facts['waterline']} installed from the fresh wheel")
            boot_s = f"{done.boot_seconds:.0f} s" if done.boot_seconds is not None else "?"
            print(f"vm: wheel {wheel_s:.0f} s; boot to the guest's service {boot_s} "
                  f"(guest uptime {facts['uptime_s']:.0f} s at the end); qemu ran "
                  f"{done.seconds:.0f} s in all ({accel()})")  # fmt: skip
    except (ImageError, GuestError) as err:
        print(f"vm: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
