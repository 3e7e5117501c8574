"""Run every benchmark module listed in BENCHMARKS and print its figures.

``python -m bench NAME... [--flag ...]`` runs the named ones; flags after the names go to
the one benchmark named. ON_REQUEST benchmarks run only when named (minutes long, root).
Exit codes: 0 every benchmark run measured; 2 a name or flag refused before anything ran;
3 one lacked what it measures with (bench.outcome), after the others ran.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from bench.outcome import NOTHING_MEASURED, NothingMeasured

BENCHMARKS = (
    "bench.decision",
    "bench.collectors",
    "bench.cluster",
    "bench.defrag_e2e",
    "bench.faults",
)
ON_REQUEST = ("bench.colocation", "bench.watch_recovery", "bench.soak", "bench.agent_memory",
              "bench.churn_memory")


def main(argv: list[str]) -> int:
    flagged = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, flags = argv[:flagged], argv[flagged:]
    names = [n.replace("-", "_") for n in names]  # `python -m bench defrag-e2e`
    if flags and len(names) != 1:
        print("flags go to one named benchmark: python -m bench NAME --flag ...", file=sys.stderr)
        return 2
    known = [m.rsplit(".", 1)[-1] for m in BENCHMARKS + ON_REQUEST]
    unknown = [n for n in names if n not in known]
    if unknown:
        listed = ", ".join(k.replace("_", "-") for k in known)
        print(f"unknown benchmark {unknown[0]!r} (known: {listed})", file=sys.stderr)
        return 2
    code = 0
    for module_name in BENCHMARKS + ON_REQUEST:
        short = module_name.rsplit(".", 1)[-1]
        if (names and short not in names) or (not names and module_name in ON_REQUEST):
            continue
        module = importlib.import_module(module_name)
        if flags and not inspect.signature(module.main).parameters:
            if flags in (["--help"], ["-h"]):  # what it measures, and that it takes no flags
                print(f"usage: python -m bench {short.replace('_', '-')}  (no flags)\n\n{(module.__doc__ or '').strip()}")
                return 0
            print(f"{short.replace('_', '-')} takes no flags, got {' '.join(flags)}", file=sys.stderr)
            return 2
        print(f"== {module_name}")
        try:
            module.main(flags) if flags else module.main()
        except NothingMeasured as lacking:
            print(f"{short.replace('_', '-')}: nothing measured: {lacking}", file=sys.stderr)
            code = NOTHING_MEASURED
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
