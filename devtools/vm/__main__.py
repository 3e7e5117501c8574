"""``python -m devtools.vm build|up|node|node-down`` (``make vm``, ``make vm-node``): the
guest image, one boot of it, and the guest as a real node.

``build`` makes the image when its inputs changed (else says it is cached); ``up`` also
boots it once with a script that reports what the guest is (kernel, systemd as PID 1, the
cgroup v2 controllers, the Waterline installed from the fresh wheel) and prints the build,
boot and total times. ``node`` joins the guest to the cluster running under ``--dir``
(``make cluster``) as a real node (devtools/vm/node.py), installs deploy/ and waits for the
agent's pod there, printing each step's time; the guest keeps running until ``node-down``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from devtools.cluster.images import default_images
from devtools.cluster.launcher import Cluster, ClusterError
from devtools.vm.guest import GuestError, accel, boot, prepare_share
from devtools.vm.image import ROOT, ImageError, ensure_image
from devtools.vm.node import VmNode, install, save_image

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
    parser.add_argument("verb", choices=["build", "up", "node", "node-down"])
    parser.add_argument("--timeout", type=float, default=600, help="seconds a boot may take")
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster",
                        help="node: the cluster's folder (default %(default)s)")  # fmt: skip
    parser.add_argument("--image", default=None,
                        help="node: the local image of Waterline to run (default: the project's, "
                             "make image); another one runs under the project's name")  # fmt: skip
    args = parser.parse_args(argv)
    if args.verb in ("node", "node-down"):
        return node_verb(args.verb, args.dir.resolve(), args.image)
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


def node_verb(verb: str, folder: Path, local: str | None) -> int:
    cluster = Cluster(folder, folder / "bin")
    try:
        image = ensure_image()
        if verb == "node-down":
            node = VmNode(cluster, image)
            print(f"vm-node: {'guest stopped' if node.down() else 'no guest was running'}")
            return 0
        project = default_images()[0]
        local = local or project
        start = time.monotonic()
        node = VmNode(cluster, image, memory_mib=2048)
        archive = save_image(local, node.folder.parent / "vm-node-image.tar")
        saved = time.monotonic() - start
        node.images = (archive,)
        node.tags = {local: project} if local != project else {}
        steps = node.up()
        agent = install(cluster, node)
        print(f"vm-node: {node.name} Ready and Waterline's agent running on it ({accel()}):")
        print(f"  {local} saved for the guest: {saved:.0f} s")
        for line in [*steps.lines(), f"deploy/ applied to the agent's pod Ready: {agent:.0f} s"]:
            print(f"  {line}")
        print(
            f"  {cluster.bin_dir / 'kubectl'} --kubeconfig {cluster.kubeconfig} get nodes -o wide"
        )
        print(f"  the guest's logs: {node.share / 'out'}; make vm-node-down stops it")
    except (ImageError, ClusterError) as err:
        print(f"vm-node: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
