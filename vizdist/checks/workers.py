"""Checks about several workers: duplicated reads, starved workers, FILE sharding that became DATA or failed.

Example:
    >>> from vizdist import Trace
    >>> from vizdist.diagnose import diagnose
    >>> t = Trace.from_records(
    ...     elements=[dict(step=0, replica=w, worker=w, source_id=i, position=i)
    ...               for w in range(2) for i in range(2)],
    ...     meta={"num_workers": 2, "shard_policy": "OFF"})
    >>> diagnose(t)["code"].tolist()
    ['worker-duplicates']
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pandas as pd

from vizdist.diagnose import Finding, check
from vizdist.trace import Trace

__all__ = ["file_shard_fallback", "file_shard_unshardable", "worker_duplicates", "worker_starved"]


def _policy(meta: dict[str, Any]) -> str:
    """The auto-shard policy name (``meta["shard_policy"]``, see vizdist.contract), or ""."""
    return str(meta.get("shard_policy") or "").upper()


def _is_service(trace: Trace) -> bool:
    # tf.data service traces make other promises (parallel_epochs copies on purpose, dynamic
    # splits may leave a worker idle); vizdist/checks/service.py judges them.
    return trace.meta["kind"] == "data_service"


def _workers(trace: Trace) -> list[int]:
    m = trace.meta
    n = m.get("num_workers") or (m.get("cluster") or {}).get("workers")
    seen = set(trace.elements["worker"].tolist()) | set(trace.batches["worker"].tolist())
    if isinstance(n, int) and n > 0:
        seen |= set(range(n))
    return sorted(int(w) for w in seen if w >= 0)


def _keys(e: pd.DataFrame) -> pd.Series:
    """One key per source element: source + file + line + id."""
    return (e["source"].astype(str) + "|" + e["source_file"].astype(str) + "|"
            + e["source_line"].astype(str) + "|" + e["source_id"].astype(str))


def _is_ps(meta: dict[str, Any]) -> bool:
    return meta["kind"] == "parameter_server" or (meta.get("cluster") or {}).get("mode") == "ps"


def _label(e: pd.DataFrame, key: str) -> str:
    row = e[_keys(e) == key].iloc[0]
    if row["source_file"]:
        name = str(row["source_file"]).replace("\\", "/").rsplit("/", 1)[-1]
        return f"{name}#{int(row['source_line'])}"
    return str(int(row["source_id"]))


@check
def worker_duplicates(trace: Trace) -> Iterator[Finding]:
    """Source elements that more than one worker read."""
    if _is_service(trace):
        return
    e = trace.elements
    if e.empty or e["worker"].nunique() < 2:
        return
    keys = _keys(e)
    per_key = pd.DataFrame({"k": keys, "w": e["worker"]}).drop_duplicates().groupby("k")["w"].agg(sorted)
    shared = per_key[per_key.map(len) > 1]
    if shared.empty:
        return
    workers = sorted({int(w) for ws in shared for w in ws})
    policy = _policy(trace.meta)
    examples = ", ".join(_label(e, k) for k in list(shared.index)[:5])
    what = f"{len(shared)} of {len(per_key)} source elements were read by more than one worker (workers {workers}; e.g. {examples})."
    if _is_ps(trace.meta):
        cause = ("Under ParameterServerStrategy TensorFlow calls dataset_fn once, on the coordinator, with "
                 "InputContext(num_input_pipelines=1, input_pipeline_id=0), and every worker iterates its "
                 "own full copy of that pipeline, so every worker reads everything (sharding by the "
                 "InputContext does nothing here).")
        fix = ("If each example should be seen once per epoch, use tf.data service with "
               "processing_mode='distributed_epoch'; otherwise shuffle (and repeat) so the workers at "
               "least see different orders, as TensorFlow's parameter-server tutorial does.")
        severity = "info"
    elif policy in ("OFF", "HINT"):
        cause = (f"The auto-shard policy is {policy}: " + (
            "TensorFlow does not shard the input, so every worker reads the whole dataset."
            if policy == "OFF" else
            "HINT only shards where the pipeline calls shard(tf.data.experimental.SHARD_HINT, ...); this "
            "pipeline has no such call, so every worker reads the whole dataset."))
        fix = ("Use AutoShardPolicy.FILE (enough files) or DATA, or place "
               "ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT) in the pipeline "
               "for HINT.")
        severity = "warning"
    elif trace.meta.get("api") == "distribute_datasets_from_function":
        cause = ("TensorFlow does not shard datasets made by distribute_datasets_from_function: it calls your "
                 "dataset_fn once per worker with an InputContext, and this dataset_fn built the same "
                 "pipeline on every worker.")
        fix = ("In dataset_fn call ds.shard(input_context.num_input_pipelines, "
               "input_context.input_pipeline_id) before batching (or read a different set of files per "
               "input_pipeline_id).")
        severity = "warning"
    else:
        cause = ("The workers' pipelines were not split between them: typically a dataset_fn that ignores "
                 "its InputContext (distribute_datasets_from_function), or a pipeline that TensorFlow "
                 "could not auto-shard.")
        fix = ("In dataset_fn call ds.shard(input_context.num_input_pipelines, "
               "input_context.input_pipeline_id) before batching, or set an auto-shard policy "
               "(FILE/DATA) with experimental_distribute_dataset.")
        severity = "warning"
    yield Finding("worker-duplicates", severity, f"{what} {cause} Fix: {fix}", workers=workers)


@check
def worker_starved(trace: Trace) -> Iterator[Finding]:
    """A worker that received no input while others did (or that failed before it could)."""
    if _is_service(trace):
        return
    workers = _workers(trace)
    if len(workers) < 2:
        return
    e = trace.elements
    counts = {w: int((e["worker"] == w).sum()) for w in workers}
    errors = trace.meta.get("errors") or {}
    policy = _policy(trace.meta)
    files = trace.meta.get("files") or sorted({f for f in e["source_file"] if f})
    if not any(counts.values()):
        if policy == "FILE" and files and len(files) < len(workers):
            # The run failed before anyone got data: say which workers had no file to read.
            starved = workers[len(files):]
            yield Finding(
                "worker-starved", "error",
                f"FILE sharding hands out whole files, and there are only {len(files)} file(s) for "
                f"{len(workers)} workers: worker(s) {starved} have no file, see their data end at once and "
                "wait in a collective, while TensorFlow's shard raises \"Could not apply FILE based sharding\" "
                "on the workers that do have a file, finding too few files for all workers"
                + (f" ({len(errors)} worker(s) failed; their errors are in trace.meta['errors'])" if errors else "")
                + ". Fix: split the data into at least as many files as workers (ideally many more), or use "
                "AutoShardPolicy.DATA.",
                workers=starved,
            )
        return
    starved = [w for w, n in counts.items() if n == 0]
    if not starved:
        return
    if policy == "FILE" and files and len(files) < len(workers):
        cause = (f"FILE sharding hands out whole files and there are only {len(files)} file(s) for "
                 f"{len(workers)} workers, so worker(s) {starved} have no file.")
    elif policy in ("DATA", "AUTO"):
        cause = ("The dataset has fewer batches than workers x steps, so some workers' shard came out "
                 "empty.")
    else:
        cause = "The worker's input shard was empty (its dataset_fn or shard() gave it no elements)."
    if errors:
        cause += " Workers also failed: " + "; ".join(f"{k}: {v}" for k, v in sorted(errors.items())) + "."
    fix = ("Give every worker data: use at least as many files as workers (ideally many more), or "
           "AutoShardPolicy.DATA; check that the number of batches is at least the number of workers.")
    yield Finding(
        "worker-starved", "error",
        f"Worker(s) {starved} received no input elements while the others received {sum(counts.values())}. "
        f"{cause} A starved worker still has to join every collective, so its peers stall or fail. Fix: {fix}",
        workers=starved,
    )


@check
def file_shard_fallback(trace: Trace) -> Iterator[Finding]:
    """FILE (or AUTO) was asked for, but files were shared between workers: data sharding happened."""
    if _is_service(trace):
        return
    policy = _policy(trace.meta)
    if policy not in ("FILE", "AUTO"):
        return
    e = trace.elements[trace.elements["source_file"] != ""]
    if e.empty or e["worker"].nunique() < 2:
        return
    readers = e.drop_duplicates(["source_file", "worker"]).groupby("source_file")["worker"].agg(sorted)
    shared = readers[readers.map(len) > 1]
    log = [ln for ln in trace.meta.get("auto_shard_log", []) if "DATA" in ln or "data" in ln]
    if shared.empty:
        return
    names = [str(f).replace("\\", "/").rsplit("/", 1)[-1] for f in shared.index[:4]]
    evidence = f"files {names} were read by workers {sorted({w for ws in shared for w in ws})}"
    if log:  # TF ends the line with a link whose name varies run to run (goo.gle/debugstr, .../debugproto)
        said = re.sub(r"[:.]?\s*goo\.gle/\S+$", "", log[0].strip())
        evidence += f"; TensorFlow's log says: {said!r}"
    cause = ("Walking from the end of the pipeline to its sources, TensorFlow met a source it cannot shard by "
             "files (range, from_tensor_slices, a generator: auto_shard.cc's unshardable sources; enumerate is "
             "zip(range, ...), and every branch of a zip or concatenate counts) or found no file reader, so it "
             "sharded by element: every worker opens every file and keeps 1/N of its lines.")
    fix = ("Start the pipeline from the file names (tf.data.Dataset.list_files(...) or "
           "TextLineDataset(files)) and apply per-element transformations after the reader, with no zip, "
           "concatenate or enumerate that brings in another source; set AutoShardPolicy.DATA explicitly if "
           "element sharding is what you want.")
    severity = "warning" if policy == "FILE" else "info"
    what = "FILE sharding was requested" if policy == "FILE" else "AUTO sharding was requested (it tries FILE first)"
    yield Finding("file-shard-fallback", severity, f"{what}, but data sharding happened: {evidence}. "
                  f"{cause} Fix: {fix}", workers=sorted({int(w) for ws in shared for w in ws}))


@check
def file_shard_unshardable(trace: Trace) -> Iterator[Finding]:
    """FILE was asked for and TensorFlow refused: the pipeline does not start from files."""
    if _is_service(trace) or _policy(trace.meta) != "FILE":
        return
    errors = trace.meta.get("errors") or {}  # task -> message (a list only in parameter_server traces)
    failed = sorted(k for k, v in errors.items() if "unshardable" in str(v)) if isinstance(errors, dict) else []
    if not failed:
        return
    workers = sorted(int(k.rsplit("-", 1)[-1]) for k in failed if k.rsplit("-", 1)[-1].isdigit())
    yield Finding(
        "file-shard-unshardable", "error",
        f"FILE sharding was requested but TensorFlow raised \"Found an unshardable source dataset\" on "
        f"{', '.join(failed)}: it looks for a file reader (TextLineDataset, TFRecordDataset, ...) fed by a "
        "list of file names, and this pipeline has none it can shard (a range, from_tensor_slices, or a "
        "transformation such as enumerate/zip between the files and the reader). Fix: start from the file "
        "names (tf.data.Dataset.list_files(...) or TextLineDataset(files)) and apply per-element "
        "transformations after the reader, or use AutoShardPolicy.DATA.",
        workers=workers,
    )
