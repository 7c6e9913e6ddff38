"""TensorFlow's servers run isolated, or the caller opted out in so many words.

TF's servers listen on every interface and run what any client sends (:data:`EXPOSURE`), so
:class:`vizdist.LocalCluster` and :class:`vizdist.LocalDataService` put them in a private network namespace
(:func:`start_namespace`). Where this machine cannot make one, that is an :class:`~vizdist.errors.IsolationError`
naming the cause, the fix (:data:`ENABLE_USERNS`) and the opt-out; an opt-out runs them exposed with an
:class:`IsolationWarning` (:func:`warn_exposed`). Importable from :mod:`vizdist.instrument.processes.cluster` too.

Example:
    >>> start_namespace("demo", False) is None   # isolate=False: no namespace (the caller warns)
    True
"""

from __future__ import annotations

import sys
import warnings

from vizdist.errors import IsolationError
from vizdist.instrument.processes.namespace import Namespace

__all__ = ["CLUSTER_OPT_OUT", "ENABLE_USERNS", "EXPOSURE", "IsolationWarning", "probe_namespace", "start_namespace",
           "warn_exposed"]

EXPOSURE = (
    "TensorFlow's servers listen on every network interface ([::]:port) and run the work any client sends "
    "them, so unisolated, anyone who can reach this machine can run code in them while they run."
)


ENABLE_USERNS = (
    "To run them isolated, allow unprivileged user namespaces (sysctl user.max_user_namespaces=15000; on "
    "Debian/Ubuntu also kernel.unprivileged_userns_clone=1 and kernel.apparmor_restrict_unprivileged_userns=0)."
)


CLUSTER_OPT_OUT = ("LocalCluster(isolate=False) (compare_shard_policies / what_if_cluster: isolate=False, "
                   "which they pass on)")


class IsolationWarning(UserWarning):
    """Servers run unisolated because you opted out (``isolate=False``, ``in_process=True``): they are reachable."""


def warn_exposed(opt_out: str, *, stacklevel: int = 3) -> None:
    """Say, when the servers start unisolated on purpose, that anyone who can reach the machine can use them."""
    warnings.warn(f"{opt_out}: {EXPOSURE}", IsolationWarning, stacklevel=stacklevel)


def start_namespace(owner: str, isolate: bool, *, opt_out: str = CLUSTER_OPT_OUT) -> Namespace | None:
    """A private network namespace for ``owner``'s servers; ``None`` only when ``isolate`` is false.

    Raises:
        IsolationError: this machine cannot make one (the message names the cause and ``opt_out``).
    """
    if not isolate:
        return None
    ns, why = Namespace.start()
    if ns is None:
        fix = f"{ENABLE_USERNS} " if sys.platform == "linux" else ""
        raise IsolationError(
            f"{owner}: could not create a private network namespace for its TensorFlow servers ({why}), so "
            f"vizdist starts none. {EXPOSURE} {fix}To run them exposed on purpose, pass {opt_out}.")
    return ns


def probe_namespace(owner: str, *, opt_out: str = CLUSTER_OPT_OUT) -> None:
    """Make and close a private network namespace: :class:`IsolationError` where none can be made."""
    ns = start_namespace(owner, True, opt_out=opt_out)
    if ns is not None:
        ns.close()
