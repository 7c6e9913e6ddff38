"""Auto-shard policies side by side, on real multi-worker TensorFlow.

:func:`compare_shard_policies` runs the same file-based pipeline under
``AUTO``, ``FILE``, ``DATA``, ``HINT`` and ``OFF`` in a real
:class:`~vizdist.instrument.processes.cluster.LocalCluster` of worker processes with
``MultiWorkerMirroredStrategy`` and records, per policy, which worker read
which file and element. :func:`write_text_files` writes the small files it
uses by default (each line holds a unique integer, so what TF delivered can
be read back from the data itself).

Example:
    >>> import vizdist
    >>> files = vizdist.write_text_files("/tmp/shards", n_files=4, lines_per_file=4)  # doctest: +SKIP
    >>> cmp = vizdist.compare_shard_policies(files, workers=2, global_batch_size=4)     # doctest: +SKIP
    >>> cmp.summary()                                                                 # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vizdist._files import write_file
from vizdist.analysis.sharding import POLICIES, ShardComparison, content_map
from vizdist.errors import TracingError
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.supervisor import DEFAULT_TIMEOUT
from vizdist.trace import Trace

__all__ = ["POLICIES", "ShardComparison", "compare_shard_policies", "write_text_files", "write_tfrecord_files"]
_MARK = "vizdist-policy-marker:"


def write_text_files(
    directory: str | os.PathLike[str],
    *,
    n_files: int = 4,
    lines_per_file: int = 4,
    prefix: str = "part",
) -> list[str]:
    """Write ``n_files`` small text files whose lines are unique integers.

    File ``i`` holds the lines ``i * lines_per_file`` ... ``(i + 1) *
    lines_per_file - 1``, one per line, so every element names itself and
    the file it came from.

    Args:
        directory: folder to write into (created if missing).
        n_files: how many files.
        lines_per_file: lines in each file.
        prefix: file names are ``<prefix>-<i>.txt``.

    Returns:
        The file paths, in order.

    Example:
        >>> import tempfile
        >>> files = write_text_files(tempfile.mkdtemp(), n_files=2, lines_per_file=3)
        >>> [open(f).read().split() for f in files]
        [['0', '1', '2'], ['3', '4', '5']]
    """
    def write(path: Path, values: range) -> None:
        write_file(path, "".join(f"{v}\n" for v in values))

    return _integer_files(directory, n_files, lines_per_file, f"{prefix}-{{i}}.txt", write, "lines_per_file")


def _integer_files(directory: str | os.PathLike[str], n_files: int, per_file: int, name: str,
                   write: Callable[[Path, range], None], per_name: str) -> list[str]:
    """Write file ``i`` (named ``name.format(i=i)``) holding ``i * per_file ... (i + 1) * per_file - 1``."""
    if n_files < 1 or per_file < 1:
        raise ValueError(f"n_files and {per_name} must be >= 1; got {n_files} and {per_file}.")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n_files):
        p = d / name.format(i=i)
        write(p, range(i * per_file, (i + 1) * per_file))
        out.append(str(p))
    return out


def write_tfrecord_files(
    directory: str | os.PathLike[str],
    *,
    n_files: int = 4,
    records_per_file: int = 4,
    prefix: str = "part",
) -> list[str]:
    """Write ``n_files`` small TFRecord files whose records are unique integers (as text).

    The same layout as :func:`write_text_files`, for pipelines that read
    ``tf.data.TFRecordDataset``: pass ``dataset_fn=tf.data.TFRecordDataset``
    to :func:`compare_shard_policies`.

    Returns:
        The file paths, in order.

    Example:
        >>> import tempfile, tensorflow as tf                               # doctest: +SKIP
        >>> files = write_tfrecord_files(tempfile.mkdtemp(), n_files=2, records_per_file=2)  # doctest: +SKIP
        >>> [r.numpy() for r in tf.data.TFRecordDataset(files)]              # doctest: +SKIP
        [b'0', b'1', b'2', b'3']
    """
    import tensorflow as tf

    def write(path: Path, values: range) -> None:
        with tempfile.TemporaryDirectory(prefix="vizdist-tfrecord-") as own:  # TF's writer follows links
            tmp = os.path.join(own, "records")
            with tf.io.TFRecordWriter(tmp) as w:
                for v in values:
                    w.write(str(v).encode())
            write_file(path, Path(tmp).read_bytes())

    return _integer_files(directory, n_files, records_per_file, f"{prefix}-{{i}}.tfrecord", write,
                          "records_per_file")


def _short_error(exc: BaseException) -> str:
    """First line of a TF error without the function-node prefix and debug links."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    line = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", line)
    line = re.sub(r":?\s*goo\.gle/\S+", "", line)
    line = re.sub(r"\s*\[Op:[^\]]*\]", "", line)
    return line.strip()[:500]


def _int_or(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


# -- what runs in each worker -----------------------------------------------------
def _record_policies(
    ctx: Any,
    *,
    files: list[str],
    policies: list[str],
    global_batch_size: int,
    dataset_fn: Callable[[list[str]], Any] | None,
    tag: bool,
    max_steps: int,
    content: dict[str, tuple[str, int]],
) -> Trace:
    """Run each policy in this worker and record what this worker's replicas got.

    ``partial`` is left to :func:`compare_shard_policies`, which sees every
    worker's rows (a step is partial only when its global batch is short).
    """
    from vizdist.instrument.core.rows import Recorder, replica_devices, worker_position

    strategy = ctx.multi_worker_strategy()
    worker, offset = worker_position(strategy)
    rec = Recorder(worker=worker)
    errors: dict[str, dict[str, str]] = {}
    pipelines: dict[str, Any] = {}
    for policy in policies:
        os.write(2, f"\n{_MARK}{policy}\n".encode())
        try:
            pipelines[policy] = _record_policy(strategy, rec, offset, policy, files=files, dataset_fn=dataset_fn,
                                               global_batch_size=global_batch_size, tag=tag,
                                               max_steps=max_steps, content=content)
        except Exception as exc:
            errors[policy] = {"type": type(exc).__name__, "message": _short_error(exc)}
    os.write(2, f"\n{_MARK}END\n".encode())
    meta = {
        "kind": "shard_comparison",
        "strategy": "MultiWorkerMirroredStrategy", "num_workers": ctx.num_workers,
        "num_replicas": int(strategy.num_replicas_in_sync), "replicas_per_worker": len(replica_devices(strategy)),
        "global_batch_size": global_batch_size, "errors": errors, "pipelines": pipelines,
        "provenance": "tagged" if tag else "content",
    }
    elements, batches = rec.tables()
    return Trace(elements=elements, batches=batches, meta=meta)


def _record_policy(strategy: Any, rec: Any, offset: int, policy: str, *, files: list[str],
                   dataset_fn: Callable[[list[str]], Any] | None, global_batch_size: int, tag: bool,
                   max_steps: int, content: dict[str, tuple[str, int]]) -> list[Any]:
    """Distribute the pipeline under ``policy`` and add every (step, replica) to ``rec``; return its ops."""
    import tensorflow as tf

    from vizdist.instrument.core.codes import decode_tags
    from vizdist.instrument.ids.tagging import tag_dataset

    ds = dataset_fn(list(files)) if dataset_fn is not None else tf.data.TextLineDataset(list(files))
    ds = ds.batch(global_batch_size)
    info: dict[str, Any] = {"provenance": "content"}
    if tag:
        tagged = tag_dataset(ds)
        ds, info = tagged.dataset, tagged.info
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    dist = strategy.experimental_distribute_dataset(ds.with_options(opts))
    for step, batch in enumerate(dist):
        if step >= max_steps:
            break
        parts = tf.nest.map_structure(strategy.experimental_local_results, batch)
        tag_parts, value_parts = parts if tag else (None, parts)
        for i, vals in enumerate(value_parts):
            texts = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                     for v in vals.numpy().reshape(-1).tolist()]
            dec = decode_tags(tag_parts[i].numpy(), info) if tag_parts is not None else None
            ids, sources = _ids_and_sources(texts, dec, content)
            rec.add(step, offset + i, ids=ids, sources=sources, device=str(vals.device),
                    shape=str(list(vals.shape)), dtype=vals.dtype.name,
                    elements={"value": np.asarray(texts, dtype=object), "policy": policy},
                    batch={"policy": policy})
    return info.get("pipeline", [])


def _ids_and_sources(texts: list[str], dec: dict[str, Any] | None,
                     content: dict[str, tuple[str, int]]) -> tuple[np.ndarray, dict[str, Any]]:
    """Ids and file/line of one batch: from the tags when tagged (the file's own lines by content otherwise)."""
    by_content = [content.get(t, ("", -1)) for t in texts]
    files = [f for f, _ in by_content]
    lines = [ln for _, ln in by_content]
    if dec is not None:
        tag_files = [str(f) for f in dec["source_file"]]
        files = [tf_ or f for tf_, f in zip(tag_files, files, strict=True)]
        lines = [int(tl) if tf_ else ln for tf_, tl, ln in zip(tag_files, dec["source_line"], lines, strict=True)]
        ids = np.asarray(dec["source_id"], dtype=np.int64)
    else:
        ids = np.array([_int_or(t, -1) for t in texts], dtype=np.int64)
    return ids, {"source_file": np.asarray(files, dtype=object), "source_line": np.asarray(lines, dtype=np.int64)}


def _split_logs(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            continue
        if current and current != "END" and "auto_shard" in line:
            out.setdefault(current, []).append(re.sub(r"^.*?auto_shard\.cc:\d+\]\s*", "", line).strip())
    return out


def compare_shard_policies(
    files: Sequence[str | os.PathLike[str]] | None = None,
    *,
    workers: int = 2,
    global_batch_size: int = 4,
    policies: Sequence[str] = POLICIES,
    dataset_fn: Callable[[list[str]], Any] | None = None,
    tag: bool = True,
    max_steps: int = 100,
    run_unshardable: bool = False,
    capture_tf_log: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    collective_timeout: float = 15.0,
    progress: bool | None = None,
    isolate: bool = True,
) -> ShardComparison:
    """Run one file pipeline under several auto-shard policies on real workers.

    All policies run one after the other in the same cluster of ``workers``
    real processes (``MultiWorkerMirroredStrategy``, one replica per worker
    on CPU). Each worker records which elements its replicas received; the
    per-policy traces are merged across workers.

    FILE with fewer files than workers cannot work: TF's shard raises on the
    workers that have a file, and the workers without one see their data end
    and wait for them in a collective. AUTO shards a pipeline that reads files
    by FILE and falls back to DATA only when FILE sharding finds no reader
    (``auto_shard.cc``), so with the default ``dataset_fn``
    (``TextLineDataset``) it fails the same way. vizdist checks both up front
    and does not run them, explaining why in ``notes["FILE"]`` and
    ``notes["AUTO"]`` (AUTO with your own ``dataset_fn`` runs: it may find no
    reader and shard by DATA); with ``run_unshardable=True`` it runs each
    anyway in a cluster of its own, bounded by ``collective_timeout``, and
    shows each worker's real error.

    Args:
        files: input files; default: 4 files of 4 lines from :func:`write_text_files`.
        workers: number of worker processes.
        global_batch_size: the batch the pipeline is batched with.
        policies: names from ``AUTO``, ``FILE``, ``DATA``, ``HINT``, ``OFF``.
        dataset_fn: ``files -> tf.data.Dataset`` of single elements (before
            batching); default ``tf.data.TextLineDataset(files)``.
        tag: tag elements with vizdist's per-file tags (file and line of
            every element). With ``tag=False`` the raw pipeline runs and
            elements are identified by their content (lines must be unique).
        max_steps: stop after this many steps per policy.
        run_unshardable: run FILE (and AUTO) even with fewer files than workers.
        capture_tf_log: keep TensorFlow's ``auto_shard`` log lines (they say
            when AUTO fell back to DATA) in ``ShardComparison.logs``.
        timeout: wall-clock limit for each cluster run.
        collective_timeout: seconds a worker waits in a collective for a peer.
        progress: show progress bars (None: shown, as starting workers takes seconds).
        isolate: passed to :class:`~vizdist.instrument.processes.cluster.LocalCluster`: run the workers in a
            private network namespace (default; :class:`vizdist.IsolationError` where the OS cannot
            make one). ``False`` runs them exposed: anyone who can reach this machine can connect to
            their servers and run code in them while they run.

    Returns:
        A :class:`ShardComparison`; ``.summary()`` is the table, ``.plot()`` the figure, and in
        Jupyter it renders side by side.

    Example:
        >>> cmp = compare_shard_policies(workers=2, global_batch_size=4)   # doctest: +SKIP
        >>> cmp.summary()[["policy", "worker", "files"]]                    # doctest: +SKIP
    """
    kw: dict[str, Any] = dict(workers=workers, global_batch_size=global_batch_size, policies=policies, dataset_fn=dataset_fn,
              tag=tag, max_steps=max_steps, run_unshardable=run_unshardable, capture_tf_log=capture_tf_log,
              timeout=timeout, collective_timeout=collective_timeout, progress=progress, isolate=isolate)
    if files is not None:
        return _compare(files, **kw)
    folder = tempfile.mkdtemp(prefix="vizdist-files-")  # the default files: they go with the result
    try:
        cmp = _compare(write_text_files(folder, n_files=4, lines_per_file=4), **kw)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(cmp, shutil.rmtree, folder, ignore_errors=True)
    return cmp


def _compare(files: Sequence[str | os.PathLike[str]], *, workers: int, global_batch_size: int,
             policies: Sequence[str], dataset_fn: Callable[[list[str]], Any] | None, tag: bool, max_steps: int,
             run_unshardable: bool, capture_tf_log: bool, timeout: float, collective_timeout: float,
             progress: bool, isolate: bool) -> ShardComparison:
    """:func:`compare_shard_policies` on given files."""
    pols, files = _check_policy_args(files, policies, global_batch_size)
    notes = _unrunnable(pols, files, workers, reads_files=dataset_fn is None)
    main = [p for p in pols if p not in notes]
    # each policy that fails runs in a cluster of its own: a failed collective leaves a cluster unusable
    deferred = [[p] for p in pols if p in notes] if run_unshardable else []
    env = {"TF_CPP_VMODULE": "auto_shard=2", "TF_CPP_MIN_LOG_LEVEL": "0"} if capture_tf_log else {}
    kwargs = dict(files=files, global_batch_size=global_batch_size, dataset_fn=dataset_fn, tag=tag,
                  max_steps=max_steps, content=content_map(files))
    cluster_kw = dict(workers=workers, timeout=timeout, collective_timeout=collective_timeout, env=env,
                      progress=progress, isolate=isolate)
    traces: dict[str, Trace] = {}
    errors: dict[str, dict[str, str]] = {}
    logs: dict[str, list[str]] = {}
    for group in (main, *deferred):
        if not group:
            continue
        merged = _run_group(group, cluster_kw, kwargs, logs if capture_tf_log else None)
        for policy in group:
            traces[policy], errs = _policy_trace(merged, policy, files=files, workers=workers,
                                                 global_batch_size=global_batch_size, logs=logs,
                                                 note=notes.get(policy))
            if errs:
                errors[policy] = errs
    if not traces and not notes:
        raise TracingError("no policy could be recorded; see the errors above.")
    return ShardComparison(traces, files=files, workers=workers, global_batch_size=global_batch_size,
                           errors=errors, notes=notes, logs=logs)


def _check_policy_args(files: Sequence[str | os.PathLike[str]], policies: Sequence[str],
                       global_batch_size: int) -> tuple[list[str], list[str]]:
    """(policy names, file paths), checked."""
    pols = [str(p).upper() for p in policies]
    bad = [p for p in pols if p not in POLICIES]
    if bad or not pols:
        raise ValueError(f"unknown auto-shard policies {bad or pols}; choose from {list(POLICIES)}.")
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size must be >= 1; got {global_batch_size}.")
    paths = [str(f) for f in files]
    missing = [f for f in paths if not os.path.exists(f)]
    if missing or not paths:
        raise FileNotFoundError(f"input files not found: {missing or 'no files given'}. "
                                "Write some with vizdist.write_text_files(folder).")
    return pols, paths


def _unrunnable(pols: list[str], files: list[str], workers: int, *, reads_files: bool = True) -> dict[str, str]:
    """Policies that cannot work with these files, and why: FILE with fewer files than workers, and AUTO
    too when the pipeline reads the files (``reads_files``: the default ``TextLineDataset``)."""
    if len(files) >= workers:
        return {}
    starved = (
        f"there are {len(files)} file(s) for {workers} workers: worker(s) {list(range(len(files), workers))} "
        "would get no file. TensorFlow's shard then raises on the workers that do have a file (it finds too "
        "few files for all workers), while the ones without see their data end and wait for them in a "
        "collective. Use at least as many files as workers, or DATA sharding.")
    notes = {}
    if "AUTO" in pols and reads_files:
        notes["AUTO"] = (
            "AUTO shards a pipeline that reads files by FILE, and falls back to DATA only when FILE sharding "
            "finds no file reader (TensorFlow's auto_shard.cc); this pipeline reads the files, so AUTO gives "
            "each worker whole files, and " + starved)
    if "FILE" in pols:
        notes["FILE"] = "FILE sharding gives each worker whole files, but " + starved
    return notes


def _run_group(group: list[str], cluster_kw: dict[str, Any], kwargs: dict[str, Any],
               logs: dict[str, list[str]] | None) -> Trace:
    """Run some policies in one cluster; keep TF's auto_shard log lines per policy in ``logs``."""
    from vizdist.instrument.processes.cluster import LocalCluster

    with LocalCluster(**cluster_kw) as cluster:
        merged = cluster.run(_record_policies, policies=group, **kwargs)
        if cluster.job_dir is not None and logs is not None:
            for w in range(int(cluster_kw["workers"])):
                with contextlib.suppress(OSError):
                    text = jobfiles.LOG.path(cluster.job_dir, f"worker-{w}").read_text(errors="replace")
                    for p, lines in _split_logs(text).items():
                        logs.setdefault(p, []).extend(f"worker {w}: {ln}" for ln in lines)
    return merged


def _policy_trace(merged: Trace, policy: str, *, files: list[str], workers: int, global_batch_size: int,
                  logs: dict[str, list[str]], note: str | None) -> tuple[Trace, dict[str, str]]:
    """One policy's rows of the merged run as its own trace, and each worker's error under it."""
    from vizdist.instrument.core.rows import mark_partial

    shard_meta: Sequence[Mapping[str, Any]] = merged.meta.get("shards", [merged.meta])  # each worker's
    errs = {m.get("task", "?"): f"{m['errors'][policy]['type']}: {m['errors'][policy]['message']}"
            for m in shard_meta if policy in m.get("errors", {})}
    e, b = merged.elements, merged.batches
    e = e[e["policy"] == policy] if "policy" in e.columns else e.iloc[0:0]
    b = b[b["policy"] == policy] if "policy" in b.columns else b.iloc[0:0]
    b = mark_partial(b, global_batch_size)  # the global rule, now that every worker's rows are here
    meta: dict[str, Any] = {k: v for k, v in merged.meta.items() if k not in ("shards", "errors")}
    meta.update(shard_policy=policy, files=files, errors=errs, num_workers=workers,
                pipeline=(shard_meta[0].get("pipelines", {}).get(policy, [])), auto_shard_log=logs.get(policy, []))
    if note:
        meta["note"] = note
    return Trace(elements=e, batches=b, meta=meta), errs

