"""Reading typed records back from their stored dict form (cache facts, clip params).

`checked` is the one type check of a stored field: the build cache's facts and the
noise kinds' params records both call it from their `from_dict`.
"""

from __future__ import annotations

from typing import Any


def checked(
    d: dict[str, Any], name: str, kinds: type | tuple[type, ...], *, each: type | None = None
) -> Any:
    """`d[name]`, checked to be of `kinds` (and, for a list, every item of `each`): a wrong
    shape raises (KeyError, TypeError) rather than a value of the wrong type travelling
    deep into the build. A bool is not a number here unless `kinds` names bool."""
    value = d[name]
    items = value if each is not None and isinstance(value, list) else ()
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    wrong_bool = isinstance(value, bool) and bool not in allowed
    if wrong_bool or not isinstance(value, kinds) or not all(isinstance(v, each) for v in items):
        raise TypeError(f"field {name!r}: unexpected {type(value).__name__} {value!r:.60}")
    return value
