"""Every check :func:`vizdist.diagnose` runs, declared in one list, in the order it runs them.

A check is a function ``Trace -> Iterable[Finding]`` in ``vizdist/checks/<topic>.py`` (it reads only the
trace). It runs because it is listed in :data:`CHECKS` here, nowhere else: no check registers itself by
being imported. The order goes from the run as a whole to its details, and the findings of one step and
code keep it (``diagnose`` sorts its table by step, then code, stably):

1. the run: did it record anything, did it finish (``run``);
2. one worker's batches split across its replicas (``split``);
3. across workers: shards, duplicates, starved workers (``workers``);
4. the tf.data service: copies, lost elements, stalls (``service``);
5. parameter servers: lost workers and ps tasks (``parameter_server``);
6. where ops ran and how losses were scaled (``placement``);
7. NaN and Inf: the element, the result, the op (``numerics``).

``tests/checks/test_registry.py`` fails when a check function of a check module is not listed (here or in
:data:`BLOCK_CHECKS`, the checks of a whole ``vizdist.record()`` trace).

Example:
    >>> CHECKS[0].__name__, len(CHECKS)
    ('empty_dataset', 26)
"""

from __future__ import annotations

from vizdist.checks import numerics, parameter_server, placement, restarts, run, service, split, workers
from vizdist.checks.finding import CheckFn

__all__ = ["BLOCK_CHECKS", "CHECKS"]

CHECKS: tuple[CheckFn, ...] = (
    # 1. the run as a whole
    run.empty_dataset, run.timed_out, run.not_recorded,
    # 2. one worker's split across its replicas
    split.batch_not_divisible, split.empty_and_partial, split.duplicate_elements, split.partial_read,
    split.missing_elements, split.provenance_labels, split.provenance_fallback,
    # 3. across workers
    workers.worker_duplicates, workers.worker_starved, workers.file_shard_fallback, workers.file_shard_unshardable,
    # 4. the tf.data service
    service.service_copies, service.service_duplicates, service.service_lost, service.service_stall,
    service.service_attribution,
    # 5. parameter servers
    parameter_server.ps_worker_lost, parameter_server.ps_ps_lost,
    # 6. placement and loss scaling
    placement.placement_notes, placement.loss_scaling,
    # 7. NaN and Inf
    numerics.nonfinite_element, numerics.nonfinite_result, numerics.numerics_error,
)

#: The checks that read a whole ``vizdist.record()`` trace at once, across its passes and runs (the others
#: read one pass at a time): what happened *between* passes, such as an epoch read again after a restart.
BLOCK_CHECKS: tuple[CheckFn, ...] = (restarts.epoch_read_again, restarts.epoch_never_delivered)
