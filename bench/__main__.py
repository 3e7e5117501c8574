"""Run every benchmark module listed in BENCHMARKS and print its figures.

``python -m bench NAME... [--flag ...]`` runs the named ones; flags after the names go to
the one benchmark named. ON_REQUEST benchmarks run only when named (minutes long, root).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    "bench.decision",
    "bench.collectors",
    "bench.cluster",
    "bench.defrag_e2e",
    "bench.faults",
)
ON_REQUEST = ("bench.colocation",)


def main(argv: list[str]) -> int:
    flagged = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, flags = argv[:flagged], argv[flagged:]
    names = [n.replace("-", "_") for n in names]  # `python -m bench defrag-e2e`
    if flags and len(names) != 1:
        print("flags go to one named benchmark: python -m bench NAME --flag ...", file=sys.stderr)
        return 2
    for module_name in BENCHMARKS + ON_REQUEST:
        short = module_name.rsplit(".", 1)[-1]
        if (names and short not in names) or (not names and module_name in ON_REQUEST):
            continue
        module = importlib.import_module(module_name)
        print(f"== {module_name}")
        module.main(flags) if flags else module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
