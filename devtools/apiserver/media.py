"""Reading Accept headers: which of the server's forms a client asked for."""

from __future__ import annotations


def media_types(accept: str) -> list[tuple[str, dict[str, str]]]:
    """[(type, {param: value})] in the order the header lists them."""
    out = []
    for part in accept.split(","):
        bits = [b.strip() for b in part.split(";")]
        if not bits[0]:
            continue
        params = dict(b.split("=", 1) for b in bits[1:] if "=" in b)
        out.append((bits[0].lower(), {k.strip(): v.strip() for k, v in params.items()}))
    return out


def asks_for(accept: str, as_: str, group: str, versions: tuple[str, ...]) -> bool:
    """Whether a JSON form ``as=<as_>;g=<group>;v=<one of versions>`` is acceptable."""
    return any(
        kind in ("application/json", "*/*")
        and params.get("as") == as_
        and params.get("g") == group
        and params.get("v") in versions
        for kind, params in media_types(accept)
    )
