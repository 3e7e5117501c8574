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
from devtools.vm.node import VmNode, install, save_image, stop_guest

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


#: The verbs, each with what it does (``--help``).
VERBS = {
    "build": "make the guest image when its inputs changed (make vm-build)",
    "up": "boot the guest once and print what it is and the times (make vm)",
    "node": "join the guest to --dir's cluster as a real node and install deploy/ (make vm-node)",
    "node-down": "stop that guest and delete its Node (make vm-node-down)",
}


def positive_seconds(text: str) -> float:
    """``--timeout``'s type: a number of seconds above 0. Without it ``up --timeout -5``
    started qemu, killed it at once and ended in a traceback (no console.log yet), and
    ``--timeout 0`` silently meant the default."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {text!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.vm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("verb", choices=list(VERBS), metavar="{" + ",".join(VERBS) + "}",
                        help="; ".join(f"{verb}: {what}" for verb, what in VERBS.items()))  # fmt: skip
    parser.add_argument("--timeout", type=positive_seconds, default=None,
                        help="up: seconds the boot may take (default 600); node: seconds from "
                             "qemu's start to the Node Ready (default 1500)")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster",
                        help="node, node-down: the cluster's folder (default %(default)s)")  # fmt: skip
    parser.add_argument("--image", default=None,
                        help="node: the local image of Waterline to run (default: the project's, "
                             "make image); another one runs under the project's name")  # fmt: skip
    parser.add_argument("--if-running", action="store_true",
                        help="node-down: say nothing when no guest runs (make cluster-down)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.verb in ("node", "node-down"):
        return node_verb(args.verb, args.dir.resolve(), args.image, args.timeout or 1500, args.if_running)
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
            done = boot(image, share, timeout=args.timeout or 600)
            facts_file = done.out / "facts.json"
            if done.rc != 0 or not facts_file.exists():
                print(f"vm: the guest's script failed (rc {done.rc}); its log:\n{done.log()}"
                      f"\nconsole: {done.console_tail()}",
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


def node_verb(verb: str, folder: Path, local: str | None, timeout: float, quiet: bool = False) -> int:
    cluster = Cluster(folder, folder / "bin")
    if verb == "node-down":  # from what the start recorded: no image needed to stop a guest
        if stop_guest(cluster):
            print("vm-node: guest stopped")
        elif not quiet:
            print("vm-node: no guest was running")
        return 0
    try:
        image = ensure_image()
        project = default_images()[0]
        local = local or project
        start = time.monotonic()
        node = VmNode(cluster, image, memory_mib=2048)
        archive = save_image(local, node.folder.parent / "vm-node-image.tar")
        saved = time.monotonic() - start
        node.images = (archive,)
        node.tags = {local: project} if local != project else {}
        steps = node.up(timeout)
        agent = install(cluster, node)
        print(f"vm-node: {node.name} Ready and Waterline's agent running on it ({accel()}):")
        print(f"  {local} saved for the guest: {saved:.0f} s")
        for line in [*steps.lines(), f"deploy/ applied to the agent's pod Ready: {agent:.0f} s"]:
            print(f"  {line}")
        print(
            f"  {cluster.bin_dir / 'kubectl'} --kubeconfig {cluster.kubeconfig} get nodes -o wide"
        )
        print(f"  the guest's logs: {node.share / 'out'}; make vm-node-down stops it")
    except (ImageError, ClusterError, GuestError) as err:
        print(f"vm-node: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
