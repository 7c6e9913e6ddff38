"""Old spellings of options, kept for one release with a ``DeprecationWarning`` that names the new one.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     renamed("lose", "worker-1", "stop", None)
    'worker-1'
    >>> str(w[0].message)
    "'lose=' is deprecated: use 'stop=' (the same value); 'lose=' goes in the next release."
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed"]

_UNSET: Any = None


def renamed(old: str, old_value: Any, new: str, new_value: Any, *, stacklevel: int = 3) -> Any:
    """``new_value``, or ``old_value`` (with a DeprecationWarning) when only the old spelling was given.

    Raises:
        TypeError: both spellings were given.
    """
    if old_value is _UNSET:
        return new_value
    if new_value is not _UNSET:
        raise TypeError(f"give {new}= only ({old}= is its old spelling); got both.")
    warnings.warn(f"{old + '='!r} is deprecated: use {new + '='!r} (the same value); {old + '='!r} goes in the next "
                  "release.", DeprecationWarning, stacklevel=stacklevel)
    return old_value
