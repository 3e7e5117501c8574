"""Run every benchmark module listed in BENCHMARKS and print its figures."""

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


def main(names: list[str]) -> int:
    names = [n.replace("-", "_") for n in names]  # `python -m bench defrag-e2e`
    for module_name in BENCHMARKS:
        if names and module_name.rsplit(".", 1)[-1] not in names:
            continue
        module = importlib.import_module(module_name)
        print(f"== {module_name}")
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
