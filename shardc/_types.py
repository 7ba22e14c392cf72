"""What ``shardc.typeof`` reports beyond shape and dtype: the manual axis type of a value."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ManualAxisType:
    """How a value in a ``shard_map`` body relates to the manual mesh axes (JAX's name).

    ``varying``: the axes over which the value may differ between devices (its vma).
    ``unreduced`` and ``reduced`` are JAX's types for partial sums; shardc has none, so they
    are always empty.

    >>> shardc.typeof(x_block).manual_axis_type.varying
    frozenset({'x'})
    """
    varying: frozenset = frozenset()
    unreduced: frozenset = frozenset()
    reduced: frozenset = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.varying or self.unreduced or self.reduced)

    def __repr__(self):
        return (f"ManualAxisType(varying={set(self.varying) or '{}'}, "
                f"unreduced={set(self.unreduced) or '{}'}, reduced={set(self.reduced) or '{}'})")
