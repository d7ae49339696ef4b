"""Small value types of the Python API."""

from __future__ import annotations

from typing import Any, NamedTuple


class SpecGroup(NamedTuple):
    """One spec group: member group ids (ascending) and whether it is EAGLE-flagged.

    Compares equal to the plain ``(ids, flag)`` tuple and to the ``[[ids...], flag]`` list the
    conformance vectors use, so results can be checked against either spelling.
    """

    group_ids: list[int]
    use_eagle: bool

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (tuple, list)) and len(other) == 2:
            return list(self.group_ids) == list(other[0]) and bool(self.use_eagle) == other[1]
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash((tuple(self.group_ids), bool(self.use_eagle)))
