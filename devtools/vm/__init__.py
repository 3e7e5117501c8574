"""A real cgroup v2 + systemd host on demand: a Debian 12 guest under qemu (docs/vm.md).

``image``: the guest's image, built from Debian's packages by ``hack/vm/build`` and cached
under a hash of its inputs; ``guest``: one boot of it with a 9p share that carries the
project's wheel and a script in, and the results out.
"""
