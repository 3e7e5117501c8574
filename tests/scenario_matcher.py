"""The scenario expectation matcher, a copy of ``match`` from ../shared/bin/check-scenarios.

Kept here so the scenario tests run where ../shared is absent (CI); tests/test_scenarios.py
prefers the shared script when it exists, so the two cannot drift silently in this repo.

An expectation is a subset of the report: every key it names must be in the report with a
matching value. Lists match element by element, in order, unless written as
``{"$unordered": [...]}``, ``{"$contains": [...]}`` or ``{"$excludes": [...]}``; other
special values: ``{"$absent": true}``, ``{"$any": true}``, ``{"$len": N}``,
``{"$approx": X, "tol": T}``, ``{"$le": X}``, ``{"$ge": X}``. Numbers match within 1e-3.
"""

import json


def match(exp, act, path):
    """Return a list of mismatch descriptions (empty when exp matches act)."""
    if isinstance(exp, dict) and len(exp) >= 1 and next(iter(exp)).startswith("$"):
        op = next(iter(exp))
        if op == "$any":
            return []
        if op == "$unordered":
            if not isinstance(act, list) or len(act) != len(exp[op]):
                return [
                    f"{path}: expected {len(exp[op])} items in any order, got {json.dumps(act)[:300]}"
                ]
            left = list(act)
            for e in exp[op]:
                for i, a in enumerate(left):
                    if not match(e, a, path):
                        del left[i]
                        break
                else:
                    return [f"{path}: no match for {json.dumps(e)} in {json.dumps(act)[:300]}"]
            return []
        if op == "$contains":
            if not isinstance(act, list):
                return [f"{path}: expected a list, got {json.dumps(act)[:200]}"]
            errs = []
            for e in exp[op]:
                if not any(not match(e, a, path) for a in act):
                    errs.append(f"{path}: {json.dumps(e)} not found in {json.dumps(act)[:300]}")
            return errs
        if op == "$excludes":
            if not isinstance(act, list):
                return [f"{path}: expected a list, got {json.dumps(act)[:200]}"]
            bad = [e for e in exp[op] if e in act]
            return [f"{path}: must not contain {json.dumps(bad)}"] if bad else []
        if op == "$len":
            if not isinstance(act, (list, dict)) or len(act) != exp[op]:
                n = len(act) if isinstance(act, (list, dict)) else "no list"
                return [f"{path}: expected {exp[op]} entries, got {n}: {json.dumps(act)[:300]}"]
            return []
        if op == "$approx":
            tol = exp.get("tol", 1e-3)
            if (
                not isinstance(act, (int, float))
                or isinstance(act, bool)
                or abs(act - exp[op]) > tol
            ):
                return [f"{path}: expected {exp[op]} +- {tol}, got {json.dumps(act)}"]
            return []
        if op in ("$le", "$ge"):
            ok = (
                isinstance(act, (int, float))
                and not isinstance(act, bool)
                and (act <= exp[op] + 1e-9 if op == "$le" else act >= exp[op] - 1e-9)
            )
            return [] if ok else [f"{path}: expected {op[1:]} {exp[op]}, got {json.dumps(act)}"]
        return [f"{path}: unknown operator {op}"]
    if isinstance(exp, dict):
        if not isinstance(act, dict):
            return [f"{path}: expected an object, got {json.dumps(act)[:200]}"]
        errs = []
        for k, v in exp.items():
            if isinstance(v, dict) and v.get("$absent"):
                if k in act:
                    errs.append(f"{path}.{k}: must be absent, got {json.dumps(act[k])[:200]}")
                continue
            if k not in act:
                errs.append(f"{path}.{k}: missing")
                continue
            errs += match(v, act[k], f"{path}.{k}")
        return errs
    if isinstance(exp, list):
        if not isinstance(act, list) or len(act) != len(exp):
            return [f"{path}: expected {json.dumps(exp)[:300]}, got {json.dumps(act)[:300]}"]
        errs = []
        for i, (e, a) in enumerate(zip(exp, act, strict=True)):
            errs += match(e, a, f"{path}[{i}]")
        return errs
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        if not isinstance(act, (int, float)) or isinstance(act, bool) or abs(act - exp) > 1e-3:
            return [f"{path}: expected {exp}, got {json.dumps(act)}"]
        return []
    return (
        [] if exp == act else [f"{path}: expected {json.dumps(exp)}, got {json.dumps(act)[:200]}"]
    )
