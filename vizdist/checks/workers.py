"""Checks about several workers: elements read by two workers in one pass, starved workers, FILE sharding
that became DATA or failed.

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

from vizdist.checks.finding import Finding
from vizdist.contract import TraceMeta
from vizdist.trace import Trace

__all__ = ["file_shard_fallback", "file_shard_unshardable", "worker_duplicates", "worker_starved"]


_FILE_SHARD_ERROR = "Could not apply FILE based sharding"  # TF's shard op, with too few files


def _policy(meta: TraceMeta) -> str:
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


def _is_ps(meta: TraceMeta) -> bool:
    return meta["kind"] == "parameter_server" or (meta.get("cluster") or {}).get("mode") == "ps"


def _label(e: pd.DataFrame, key: str) -> str:
    row = e[_keys(e) == key].iloc[0]
    if row["source_file"]:
        name = str(row["source_file"]).replace("\\", "/").rsplit("/", 1)[-1]
        return f"{name}#{int(row['source_line'])}"
    return str(int(row["source_id"]))


#: Columns of trace.elements that tell passes over the data apart, in this order, where present:
#: ``phase`` (train/validation/evaluate/predict/loop), ``dataset`` (which dataset of the run), ``epoch``
#: (which repetition under repeat(), or a Keras run's epoch) and ``repetition``. The same element read
#: by two workers in different passes is the data seen again, not a sharding mistake.
PASS_COLUMNS = ("phase", "dataset", "epoch", "repetition")


def _shared_per_pass(e: pd.DataFrame) -> tuple[pd.Series, int, str]:
    """(element key -> workers) for elements more than one worker read within one pass, how many
    (pass, element) pairs were read in all, and words naming the passes ("" when there is one)."""
    passes = [c for c in PASS_COLUMNS if c in e.columns]
    df = pd.DataFrame({"k": _keys(e), "w": e["worker"], **{c: e[c] for c in passes}}).drop_duplicates()
    per = df.groupby([*passes, "k"])["w"].agg(sorted)
    shared = per[per.map(len) > 1]
    several = [c for c in passes if df[c].nunique() > 1]
    words = (f" within the same pass over the data (each element counted once per pass, a pass being one value "
             f"of {', '.join(several)})") if several else ""
    return (shared.droplevel(passes) if passes else shared), len(per), words


def _passes_ambiguous(trace: Trace) -> bool:
    """repeat() whose repetitions the trace could not number: a shared id may be the data seen again."""
    flags = trace.meta.get("pipeline_flags") or {}
    return bool(flags.get("repeat")) and trace.meta.get("provenance", "tagged") != "tagged"


def worker_duplicates(trace: Trace) -> Iterator[Finding]:
    """Source elements that more than one worker read within one pass over the data (see PASS_COLUMNS).

    Causes it names, as TensorFlow 2.21 behaves (tests/checks/test_worker_passes.py runs them):
    an unseeded shuffle before the data is split by element (tensorflow/core/grappler/optimizers/data/
    auto_shard.cc, ShardByData: DATA sharding appends shard(num_workers, index) and changes nothing
    upstream; tensorflow/python/data/ops/options.py, AutoShardPolicy: DATA "needs to produce elements in
    a deterministic order"; tensorflow/python/framework/random_seed.py, get_seed: no op and no global seed
    gives seeds the C++ ops read as nondeterministic), OFF/HINT policies, a dataset_fn that ignores its
    InputContext, and parameter servers (each worker iterates the coordinator's one pipeline).
    """
    if _is_service(trace):
        return
    e = trace.elements
    if e.empty or e["worker"].nunique() < 2:
        return
    shared, total, passes = _shared_per_pass(e)
    if shared.empty:
        return
    workers = sorted({int(w) for ws in shared for w in ws})
    examples = ", ".join(_label(e, k) for k in list(dict.fromkeys(shared.index))[:5])
    what = (f"{len(shared)} of {total} source elements were read by more than one worker{passes} "
            f"(workers {workers}; e.g. {examples}).")
    severity, cause, fix = _duplicates_cause(trace)
    if _passes_ambiguous(trace):
        severity = "info"
        cause = ("The trace cannot number the repetitions of repeat() here (see trace.meta['provenance_note']), "
                 "so some of these may be one worker's element read again in a later repetition. " + cause)
    yield Finding("worker-duplicates", severity, f"{what} {cause} Fix: {fix}", workers=workers)


def _duplicates_cause(trace: Trace) -> tuple[str, str, str]:
    """(severity, cause, fix) of elements shared between workers, from what the trace knows."""
    meta, policy = trace.meta, _policy(trace.meta)
    if _is_ps(meta):
        return "info", _PS_CAUSE, _PS_FIX
    if policy in ("OFF", "HINT"):
        return "warning", _off_or_hint(policy), _OFF_FIX
    if _unseeded_before_shard(trace):
        return "warning", _UNSEEDED_CAUSE, _UNSEEDED_FIX
    flags = meta.get("pipeline_flags") or {}
    if meta.get("api") == "distribute_datasets_from_function" and not flags.get("shard"):
        return "warning", _IGNORES_CONTEXT, _CONTEXT_FIX
    return "info", _CANDIDATES, _CANDIDATES_FIX


def _unseeded_before_shard(trace: Trace) -> bool:
    """An unseeded shuffle upstream of where the data was split by element: DATA sharding (TF's
    ShardByData appends shard(num_workers, index) at the end of the pipeline and leaves the shuffle as it
    is), AUTO over a source TF cannot split by file (it then falls back to DATA), or a dataset_fn's shard()."""
    meta = trace.meta
    if not (meta.get("pipeline_flags") or {}).get("shuffle_unseeded"):
        return False
    policy = _policy(meta)
    if meta.get("api") == "distribute_datasets_from_function":  # the shuffle must come before its shard()
        ops = [str(op) for op in meta.get("pipeline") or []]
        shuffles = [i for i, op in enumerate(ops) if op.startswith("shuffle(")]
        return bool(shuffles) and any(op.startswith("shard(") for op in ops[shuffles[0]:])
    return policy == "DATA" or (policy == "AUTO" and not (trace.elements["source_file"] != "").any())


def _off_or_hint(policy: str) -> str:
    return f"The auto-shard policy is {policy}: " + (
        "TensorFlow does not shard the input, so every worker reads the whole dataset."
        if policy == "OFF" else
        "HINT only shards where the pipeline calls shard(tf.data.experimental.SHARD_HINT, ...); this "
        "pipeline has no such call, so every worker reads the whole dataset.")


_PS_CAUSE = ("Under ParameterServerStrategy TensorFlow calls dataset_fn once, on the coordinator, with "
             "InputContext(num_input_pipelines=1, input_pipeline_id=0), and every worker iterates its "
             "own full copy of that pipeline, so every worker reads everything (sharding by the "
             "InputContext does nothing here).")
_PS_FIX = ("If each example should be seen once per epoch, use tf.data service with "
           "processing_mode='distributed_epoch'; otherwise shuffle (and repeat) so the workers at "
           "least see different orders, as TensorFlow's parameter-server tutorial does.")
_OFF_FIX = ("Use AutoShardPolicy.FILE (enough files) or DATA, or place "
            "ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT) in the pipeline "
            "for HINT.")
_UNSEEDED_CAUSE = (
    "Sharding worked, but each worker split a different order: the pipeline shuffles without a seed before "
    "the data is split by element, and an unseeded shuffle draws its own random seed in every worker "
    "process. TensorFlow's DATA sharding keeps every num_workers-th output (batch) of each worker's own stream "
    "(it adds shard(num_workers, worker_index) at the end of the pipeline), which splits the data only when every "
    "worker produces the elements in the same order (AutoShardPolicy.DATA's documentation), so some "
    "elements reach two workers and others none.")
_UNSEEDED_FIX = ("Give the shuffle the same seed on every worker (ds.shuffle(buffer, seed=42), or "
                 "tf.random.set_seed(...) in every worker before building the dataset): every worker then "
                 "reshuffles each epoch into the same order. Or split the data before the shuffle: FILE "
                 "sharding, or ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id) "
                 "before shuffle in a dataset_fn.")
_IGNORES_CONTEXT = ("TensorFlow does not shard datasets made by distribute_datasets_from_function: it calls your "
                    "dataset_fn once per worker with an InputContext, and this dataset_fn built the same "
                    "pipeline on every worker.")
_CONTEXT_FIX = ("In dataset_fn call ds.shard(input_context.num_input_pipelines, "
                "input_context.input_pipeline_id) before batching (or read a different set of files per "
                "input_pipeline_id).")
_CANDIDATES = ("The trace does not tell why. Candidates: a dataset_fn that ignores its InputContext; a "
               "pipeline whose order differs between workers before it is split by element (an unseeded "
               "shuffle, or a transformation with deterministic=False); an auto-shard policy of OFF or "
               "HINT set where the trace does not show it.")
_CANDIDATES_FIX = ("In dataset_fn call ds.shard(input_context.num_input_pipelines, "
                   "input_context.input_pipeline_id) before batching; seed every shuffle alike on all "
                   "workers; or set an auto-shard policy (FILE/DATA) with experimental_distribute_dataset.")


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
    texts = list(errors.values()) if isinstance(errors, dict) else [str(x) for x in errors]
    policy = _policy(trace.meta)
    files = trace.meta.get("files") or sorted({f for f in e["source_file"] if f})
    # AUTO shards by FILE when the pipeline has a file reader and falls back to DATA only when it finds none
    # (auto_shard.cc, a NotFound error); too few files then fails as under FILE, with TF's FILE error.
    file_ran = policy == "FILE" or (policy == "AUTO" and any(_FILE_SHARD_ERROR in t for t in texts))
    too_few_files = file_ran and bool(files) and len(files) < len(workers)
    if not any(counts.values()):
        if too_few_files:
            yield _no_file_for_some_workers(workers, len(files), policy, errors)
        return
    starved = [w for w, n in counts.items() if n == 0]
    if starved:
        cause = _why_starved(trace, starved, len(files) if too_few_files else None, len(workers))
        yield _starved_while_others_read(trace, starved, counts, cause, errors, texts, too_few_files=too_few_files)


def _no_file_for_some_workers(workers: list[int], n_files: int, policy: str, errors: Any) -> Finding:
    """The run failed before anyone got data, FILE sharding having too few files: which workers had none."""
    starved = workers[n_files:]
    auto = ("AUTO sharding applied FILE, as it does for a pipeline that reads files (it falls back to "
            "DATA only when it finds no file reader). " if policy == "AUTO" else "")
    return Finding(
        "worker-starved", "error",
        f"{auto}FILE sharding hands out whole files, and there are only {n_files} file(s) for "
        f"{len(workers)} workers: worker(s) {starved} have no file, see their data end at once and "
        "wait in a collective, while TensorFlow's shard raises \"Could not apply FILE based sharding\" "
        "on the workers that do have a file, finding too few files for all workers"
        + (f" ({len(errors)} worker(s) failed; their errors are in trace.meta['errors'])" if errors else "")
        + ". Fix: split the data into at least as many files as workers (ideally many more), or use "
        "AutoShardPolicy.DATA.",
        workers=starved,
    )


def _data_sharding_applied(meta: TraceMeta) -> bool:
    """DATA was asked for, or AUTO said in TF's log that it applied DATA (it found no file reader)."""
    policy = _policy(meta)
    return policy == "DATA" or (policy == "AUTO" and any(
        "apply DATA sharding" in ln for ln in meta.get("auto_shard_log", [])))


def _why_starved(trace: Trace, starved: list[int], n_files: int | None, n_workers: int) -> str:
    """The cause of ``starved`` reading nothing; ``n_files`` is set when FILE (or AUTO) had too few files."""
    if n_files is not None:
        return (f"FILE sharding hands out whole files and there are only {n_files} file(s) for "
                f"{n_workers} workers, so worker(s) {starved} have no file.")
    if _data_sharding_applied(trace.meta):
        # auto_shard.cc (ShardByData, RewriteRebatchV2ToV1) and input_lib.py (_make_rebatch_fn)
        return ("Under DATA sharding TensorFlow's legacy rebatch cuts every global batch into one piece per "
                "replica of all the workers (ceil(n / replicas) elements each, filled in replica order) and "
                "each worker keeps its own replicas' pieces: the global batches held too few elements to "
                f"reach the replicas of worker(s) {starved}, so their pieces were empty.")
    return "The worker's input shard was empty (its dataset_fn or shard() gave it no elements)."


def _starved_while_others_read(trace: Trace, starved: list[int], counts: dict[int, int], cause: str,
                               errors: Any, texts: list[str], *, too_few_files: bool) -> Finding:
    """Some workers read elements and ``starved`` read none: an error, or a warning where they ran every
    step (on empty batches) and nothing failed."""
    if errors:
        failed = [f"{k}: {v}" for k, v in sorted(errors.items())] if isinstance(errors, dict) else texts
        cause += " Workers also failed: " + "; ".join(failed) + "."
    b = trace.batches
    steps = {w: int(b.loc[b["worker"] == w, "step"].nunique()) for w in counts}
    ran_every_step = max(steps.values()) > 0 and all(steps[w] == max(steps.values()) for w in starved)
    if ran_every_step and not errors and not too_few_files:
        return Finding(
            "worker-starved", "warning",
            f"Worker(s) {starved} received no input elements while the others received {sum(counts.values())}, "
            f"though they ran every step ({max(steps.values())}): each of their replicas ran the step on an "
            f"empty batch, so they trained on nothing. {cause} Fix: make the global batch size a multiple of the "
            "number of replicas in all and drop the short last batch (batch(..., drop_remainder=True)), so "
            "every replica's piece is full.",
            workers=starved,
        )
    fix = ("Give every worker data: use at least as many files as workers (ideally many more), or "
           "AutoShardPolicy.DATA; check that the number of batches is at least the number of workers.")
    return Finding(
        "worker-starved", "error",
        f"Worker(s) {starved} received no input elements while the others received {sum(counts.values())}. "
        f"{cause} A starved worker still has to join every collective, so its peers stall or fail. Fix: {fix}",
        workers=starved,
    )


def file_shard_fallback(trace: Trace) -> Iterator[Finding]:
    """AUTO was asked for, but files were shared between workers: TF applied DATA sharding.

    Under FILE, TF never shards by element: ``ApplyAutoShard`` (auto_shard.cc) returns FILE's error
    (``file-shard-unshardable``); only AUTO falls back to DATA, on a NotFound.
    """
    if _is_service(trace) or _policy(trace.meta) != "AUTO":
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
             "applied DATA: every worker reads every file in full and keeps only its share of the pipeline's "
             "output.")
    fix = ("Start the pipeline from the file names (tf.data.Dataset.list_files(...) or "
           "TextLineDataset(files)) and apply per-element transformations after the reader, with no zip, "
           "concatenate or enumerate that brings in another source; set AutoShardPolicy.DATA explicitly if "
           "element sharding is what you want.")
    yield Finding("file-shard-fallback", "info", "AUTO sharding was requested (it tries FILE first), but data "
                  f"sharding happened: {evidence}. {cause} Fix: {fix}",
                  workers=sorted({int(w) for ws in shared for w in ws}))


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
