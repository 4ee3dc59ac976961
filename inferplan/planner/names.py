"""Name matching shared by the catalogs: case- and separator-insensitive keys, closest-name hints."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_SEPARATORS = re.compile(r"[^a-z0-9]+")


def normalize_name(name: str) -> str:
    """Key for matching: lower case with every run of non-alphanumerics removed.

    `NVIDIA-H100-80GB-HBM3`, `nvidia h100 80gb hbm3` and `Nvidia_H100_80GB_HBM3` share one key.
    """
    return _SEPARATORS.sub("", name.lower())


def closest_names(name: str, candidates: Iterable[str], limit: int = 5) -> list[str]:
    """The candidates most like `name` (best first), compared on their normalised keys."""
    by_key: dict[str, str] = {}
    for candidate in candidates:
        by_key.setdefault(normalize_name(candidate), candidate)
    key = normalize_name(name)
    keys = difflib.get_close_matches(key, list(by_key), n=limit, cutoff=0.4)
    # Substring hits ("h100" -> every H100 variant) rank after the fuzzy matches.
    keys += [k for k in by_key if key and key in k and k not in keys]
    return [by_key[k] for k in keys[:limit]]


class CatalogLookupError(LookupError):
    """A name that no catalog entry answers to; `suggestions` holds the closest known names."""

    def __init__(self, kind: str, name: str, suggestions: list[str], note: str = "") -> None:
        self.kind = kind
        self.name = name
        self.suggestions = suggestions
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint}" + (f" ({note})" if note else ""))
