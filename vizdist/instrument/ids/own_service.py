"""Your own tf.data service pipeline, traced with real ids through the service.

``ds.apply(tf.data.experimental.service.distribute(...))`` (or
``register_dataset`` + ``from_dataset_id``) hands the service a dataset that
the *workers* run; your process only reads the results. To follow every
element, :func:`vizdist.instrument.ids.tagging.tag_dataset` rebuilds that
registered dataset with a tag per element (the dataset comes from
:mod:`vizdist.instrument.core.service_registry`), and this module registers the tagged copy with the same
dispatcher and compression and reads it with the very arguments of your read
(processing mode, consumer index, ``target_workers``, ...). The tag rides
through the service, so ``parallel_epochs`` copies show up as the same source
element arriving once per worker.

The worker of each element is read on the worker itself when the dispatcher
is a :class:`vizdist.LocalDataService` vizdist started with worker processes
(each holds its id in a file in its working directory, see
:mod:`vizdist.instrument.service._service_worker`); elsewhere it is unknown (-1) and
``meta["services"]`` says why.

What stays approximate, and is labelled (numbered by position, with a note):

* a read vizdist did not see being made (built before vizdist was loaded, or
  of a dataset registered by another process);
* ``distributed_epoch`` over sources vizdist numbers with ``enumerate`` (the
  dispatcher would split the numbering and the data separately).

A ``job_name`` is kept shared inside one trace but renamed
(``<name>/vizdist-<run>``): a named job that already ended hands a new reader
nothing (TF 2.21), and the tagged readers must not join your untagged job.

Example:
    >>> import vizdist, tensorflow as tf                                  # doctest: +SKIP
    >>> with vizdist.LocalDataService(workers=2, isolate=False) as service:   # doctest: +SKIP
    ...     ds = tf.data.Dataset.range(8).apply(
    ...         tf.data.experimental.service.distribute("parallel_epochs", service.target))
    ...     t = vizdist.trace_distribution(strategy, ds.batch(4))
    >>> t.elements.groupby("source_id").size().tolist()                    # doctest: +SKIP
    [2, 2, 2, 2, 2, 2, 2, 2]
"""

from __future__ import annotations

from typing import Any

from vizdist.errors import TracingError
from vizdist.instrument.core import service_registry as registry

__all__ = ["NOT_SEEN", "WORKER_ID_FILE", "describe", "dynamic_note", "reread", "scalar_elements", "services_in", "stamp_worker",
           "worker_field", "worker_id_tensor"]

#: The file a ``LocalDataService`` worker process writes its id into, in its own working directory
#: (:mod:`vizdist.instrument.service._service_worker`); a pipeline step reads it on the worker.
WORKER_ID_FILE = "vizdist_worker_id"
_MODES = {"OFF": "parallel_epochs", "DYNAMIC": "distributed_epoch"}
NOT_SEEN = ("vizdist did not see this tf.data service read being made (it was built before vizdist was loaded, "
            "or reads a dataset registered by another process), so it cannot rebuild what the workers run; "
            "build the pipeline after vizdist.virtual_devices(...) or vizdist.LocalDataService(...) in this "
            "process for exact ids")
_UNKNOWN_WORKER = ("unknown: the dispatcher is not a LocalDataService vizdist started with worker processes, so "
                   "the pipeline cannot read which worker runs it")


def worker_id_tensor(tf: Any) -> Any:
    """The id of the service worker process running this pipeline (-1 when unknown).

    Example:
        >>> import tensorflow as tf          # doctest: +SKIP
        >>> int(worker_id_tensor(tf))        # doctest: +SKIP
        -1
    """
    found = tf.io.matching_files(WORKER_ID_FILE)
    return tf.cond(
        tf.size(found) > 0,
        lambda: tf.strings.to_number(tf.strings.strip(tf.io.read_file(found[0])), tf.int64),
        lambda: tf.constant(-1, tf.int64),
    )


def _policy(ds: Any, read: registry.Read | None) -> str:
    """The read's ShardingPolicy name (OFF, DYNAMIC, FILE, DATA, FILE_OR_DATA, HINT)."""
    from vizdist.instrument.tfapi import datasets as tfd
    from vizdist.instrument.tfapi import service

    if read is not None:
        return service.policy_name(read.arguments["processing_mode"])
    import tensorflow as tf

    raw = tf.get_static_value(tfd.field(ds, "processing_mode"))  # a constant, also in graph mode
    if raw is None:
        return ""
    return service.processing_mode_policy(raw.item() if hasattr(raw, "item") else raw)


def describe(ds: Any) -> dict[str, Any]:
    """What ``meta["services"]`` says about one read from the service (``ds``: a ``_DataServiceDatasetV2``).

    Example:
        >>> describe(service_ds)["sharding_policy"]   # doctest: +SKIP
        'OFF'
    """
    from vizdist.instrument.tfapi import datasets as tfd

    read = registry.read_of(ds)
    policy = _policy(ds, read)
    address = read.address if read is not None else registry.text_of(tfd.field(ds, "address")) or ""
    svc = registry.serving(address)
    own = svc is not None and not svc.in_process
    return {
        "sharding_policy": policy, "processing_mode": _MODES.get(policy, ""), "address": address,
        "job_name": registry.text_of(tfd.field(ds, "job_name")) or "", "traced_job_name": "",
        "num_workers": svc.num_workers if svc is not None and not svc.external else None,
        "worker_attribution": "worker-process-file" if own else _UNKNOWN_WORKER,
        "exact": False, "note": "",
    }


def services_in(dataset: Any, depth: int = 0) -> list[dict[str, Any]]:
    """:func:`describe` for every read from the service in ``dataset``'s pipeline (for ``watch``).

    Example:
        >>> services_in(tf.data.Dataset.range(3))   # doctest: +SKIP
        []
    """
    if depth > 200 or dataset is None:
        return []
    from vizdist.instrument.tfapi import datasets as tfd

    if type(dataset).__name__ == tfd.DATA_SERVICE:
        return [describe(dataset)]
    return [s for i in tfd.inputs(dataset) for s in services_in(i, depth + 1)]


def scalar_elements(ds: Any) -> bool:
    """Whether every part of ``ds``'s elements is a scalar (only then can its outputs be numbered whole:
    a vector may be a batch, or be unbatched later).

    Example:
        >>> scalar_elements(tf.data.Dataset.range(3))   # doctest: +SKIP
        True
    """
    import tensorflow as tf

    return all(getattr(s, "shape", tf.TensorShape(None)).rank == 0 for s in tf.nest.flatten(ds.element_spec))


def dynamic_note(kinds: list[str]) -> str:
    """Why a ``distributed_epoch`` read over enumerated sources is numbered by position.

    Example:
        >>> dynamic_note(["tensors"]).split(":")[0]
        'under distributed_epoch vizdist cannot number the elements of tensors sources'
    """
    return (f"under distributed_epoch vizdist cannot number the elements of {', '.join(kinds)} sources: the "
            "dispatcher would split the numbering and the data separately")


def worker_field(entry: dict[str, Any], shift: int, limit: int) -> dict[str, int] | None:
    """Where the service worker goes in the tag (``{"shift", "bits"}``), or None when it cannot be read.

    Example:
        >>> entry = {"address": "127.0.0.1:1", "worker_attribution": "unknown: not ours"}
        >>> worker_field(entry, 3, 56) is None
        True
    """
    svc = registry.serving(entry["address"])
    if svc is None or svc.in_process:
        return None
    bits = (max(svc.num_workers, 1) + 1).bit_length()
    if shift + bits > limit:
        entry["worker_attribution"] = "unknown: the source ids leave no room in the tag for the worker"
        return None
    return {"shift": shift, "bits": bits}


def stamp_worker(tagged: Any, field: dict[str, int]) -> Any:
    """Add ``(worker id + 1) << shift`` to every tag of ``(tag, value)`` elements, read on the worker (0: unknown).

    Example:
        >>> stamp_worker(tagged_upstream, {"shift": 3, "bits": 2})   # doctest: +SKIP
    """
    import tensorflow as tf

    shift = field["shift"]
    return tagged.map(lambda tag, v: (tag + tf.bitwise.left_shift(worker_id_tensor(tf) + 1, shift), v))


def reread(read: registry.Read, tagged: Any, entry: dict[str, Any]) -> Any:
    """Register ``tagged`` (the tagged registered dataset) where ``read`` reads, and read it the same way.

    Example:
        >>> reread(registry.read_of(service_ds), tagged_upstream, describe(service_ds))   # doctest: +SKIP
    """
    assert read.registration is not None
    registry.refuse_isolated(read.address)
    registry.check_reachable(read.address)  # bounded: TensorFlow would wait for an absent dispatcher forever
    changes: dict[str, Any] = {"element_spec": tagged.element_spec}
    job = registry.text_of(read.arguments.get("job_name"))
    if job:
        entry["traced_job_name"] = changes["job_name"] = f"{job}/vizdist-{registry.run_token()}"
    try:
        changes["dataset_id"] = registry.register(read.arguments["service"], tagged, read.registration.compression)
        out = registry.read(read.arguments, **changes)
    except Exception as exc:
        raise TracingError(f"the tf.data service at {read.address} refused vizdist's tagged copy of the "
                           f"pipeline ({type(exc).__name__}: {exc}).") from exc
    entry["exact"] = True
    return out
