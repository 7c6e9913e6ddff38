"""The TensorFlow versions vizdist records, and the check that runs before it records anything.

vizdist supports TensorFlow 2.16 to 2.21 with the Keras 3 that pip installs beside each, and TensorFlow
2.15 with its Keras 2 (``tf.keras``). The first time a process reaches for anything that runs TensorFlow
(``vizdist.record``, ``vizdist.trace_distribution``, ``vizdist.virtual_devices``, ``vizdist.LocalCluster``,
...), :func:`require_supported_tensorflow` reads TensorFlow's version (without importing it, where pip's
metadata tells it): an older TensorFlow is refused with what to install, a newer one runs with an
:class:`UntestedTensorFlowWarning` naming the versions CI tests.

Example:
    >>> check_tensorflow("2.16.2")             # supported: nothing to say
    >>> check_tensorflow("2.14.1")             # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ImportError: vizdist records TensorFlow 2.15 to 2.21; this process has TensorFlow 2.14.1, ...
    >>> supported_range()
    '>=2.15,<2.22'
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings

__all__ = ["CI_TESTED", "NEWEST", "OLDEST", "UntestedTensorFlowWarning", "check_tensorflow",
           "installed_tensorflow_version", "require_supported_tensorflow", "supported_range"]

#: The oldest (major, minor) TensorFlow vizdist records: 2.15, with Keras 2 (``tf.keras``).
OLDEST = (2, 15)
#: The newest (major, minor) TensorFlow vizdist was tested with.
NEWEST = (2, 21)
#: The TensorFlow versions CI runs (``make test``) and what it runs on each: ``"all"`` (every test and
#: notebook) or ``"smoke"`` (the tests marked ``smoke``, in a virtualenv of their own). The Makefile's
#: ``OLD_TF`` and the README's table say the same (tests/instrument/test_versions.py).
CI_TESTED = {"2.21": "all", "2.16.2": "smoke", "2.15.1": "smoke"}

_checked = False


class UntestedTensorFlowWarning(UserWarning):
    """This TensorFlow is newer than any vizdist was tested with: it may record wrongly or fail."""


def supported_range() -> str:
    """The pip version range of the supported TensorFlow (the ``cpu`` and ``gpu`` extras pin it).

    Example:
        >>> supported_range()
        '>=2.15,<2.22'
    """
    return f">={OLDEST[0]}.{OLDEST[1]},<{NEWEST[0]}.{NEWEST[1] + 1}"


def _tested() -> str:
    return ", ".join(f"{v} ({'every test' if what == 'all' else 'a smoke suite'})" for v, what in CI_TESTED.items())


def check_tensorflow(version: str, *, stacklevel: int = 2) -> None:
    """Refuse a TensorFlow older than :data:`OLDEST`; warn about one newer than :data:`NEWEST`.

    Args:
        version: TensorFlow's version, as ``tf.__version__`` gives it (``"2.16.2"``, ``"2.22.0-dev2026..."``).
        stacklevel: the frame a warning names, as :func:`warnings.warn`'s (2: the caller).

    Raises:
        ImportError: the version is older than 2.15; the message says what to install.

    Warns:
        UntestedTensorFlowWarning: the version is newer than 2.21, or cannot be read.

    Example:
        >>> check_tensorflow("2.21.0")
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     check_tensorflow("2.22.0")
        >>> print(w[0].message)                # doctest: +ELLIPSIS
        TensorFlow 2.22.0 is newer than any vizdist was tested with (2.15 to 2.21; CI tests 2.21 (every ...
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        warnings.warn(f"vizdist cannot read TensorFlow's version {version!r}; it was tested with {_tested()}.",
                      UntestedTensorFlowWarning, stacklevel=stacklevel)
        return
    have = (int(found.group(1)), int(found.group(2)))
    oldest, newest = ".".join(map(str, OLDEST)), ".".join(map(str, NEWEST))
    if have < OLDEST:
        raise ImportError(
            f"vizdist records TensorFlow {oldest} to {newest}; this process has TensorFlow {version}, which it "
            f"does not support. Install a supported TensorFlow together with everything else, in one pip call "
            f"(pip resolves numpy for the TensorFlow you pin; a second call can pull in a numpy that TensorFlow "
            f"2.15 and 2.16 refuse): from vizdist's folder, `pip install -e \".[cpu]\"` for the newest "
            f"({newest}; `.[gpu]` for CUDA), or `pip install -e . \"tensorflow-cpu==2.16.2\"` for the oldest "
            f"with Keras 3 (`tensorflow-cpu==2.15.1` for Keras 2).")
    if have > NEWEST:
        warnings.warn(
            f"TensorFlow {version} is newer than any vizdist was tested with ({oldest} to {newest}; CI tests "
            f"{_tested()}). vizdist uses some of TensorFlow's private names (vizdist/instrument/tfapi/table.py), "
            f"so it may fail or record wrongly here. To be sure, use TensorFlow {newest} (`pip install \"tensorflow-cpu{supported_range()}\"` "
            f"with everything else, in one pip call).", UntestedTensorFlowWarning, stacklevel=stacklevel)


def installed_tensorflow_version() -> str | None:
    """The version of the TensorFlow this process imports, or None where none is installed.

    ``tf.__version__`` once TensorFlow is imported; before, the version pip's metadata gives the
    distribution that installed the ``tensorflow`` package (``tensorflow``, ``tensorflow-cpu``,
    ``tf-nightly``, ...), so that checking it imports nothing (``LocalCluster`` and ``LocalDataService``
    start their servers without TensorFlow in this process). Only where no metadata, or several
    distributions, claim the package is TensorFlow imported to ask it.

    Example:
        >>> installed_tensorflow_version()     # doctest: +SKIP
        '2.21.0'
    """
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return str(tf.__version__)
    if importlib.util.find_spec("tensorflow") is None:
        return None
    from importlib import metadata

    found = {metadata.version(name) for name in metadata.packages_distributions().get("tensorflow", [])}
    if len(found) == 1:
        return found.pop()
    import tensorflow  # no metadata, or several distributions installed it: TensorFlow knows its version

    return str(tensorflow.__version__)


def require_supported_tensorflow(*, stacklevel: int = 2) -> None:
    """Check the installed TensorFlow (:func:`installed_tensorflow_version`, :func:`check_tensorflow`), once per
    process; without TensorFlow, check nothing (importing vizdist's TensorFlow code then says it is missing).

    ``vizdist``'s package calls it before it first imports a module that runs TensorFlow, so an old
    TensorFlow is refused with a clear message, not with an error from deep inside vizdist. A refused
    version is checked again at the next call; a warning is given once. ``stacklevel`` is the frame a
    warning names, as :func:`warnings.warn`'s (2: the caller).

    Example:
        >>> require_supported_tensorflow()     # doctest: +SKIP
    """
    global _checked
    if _checked:
        return
    version = installed_tensorflow_version()
    if version is not None:
        check_tensorflow(version, stacklevel=stacklevel + 1)
    _checked = True
