"""Findings about how one worker's batches were split across its replicas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from vizdist.analysis.coverage import universe
from vizdist.checks.finding import MAX_PER_CODE, Finding, more_like_these
from vizdist.checks.service import copies_by_design
from vizdist.checks.workers import PASS_COLUMNS
from vizdist.contract import ServiceRead, TraceMeta
from vizdist.trace import Trace


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _names(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def _counts(trace: Trace) -> pd.DataFrame:
    """steps x replicas table of element counts (from batches, else elements)."""
    b = trace.batches
    if len(b):
        return b.pivot_table(index="step", columns="replica", values="n_elements", aggfunc="sum", fill_value=0)
    e = trace.elements
    return e.groupby(["step", "replica"]).size().unstack(fill_value=0)


#: APIs that split each global batch over the replicas (TF2, and TF1's iterator for the same).
_SPLITS_GLOBAL = ("experimental_distribute_dataset", "make_dataset_iterator")
#: APIs that call a function of InputContext per input pipeline (TF2, and TF1's iterator for the same).
_PER_PIPELINE = ("distribute_datasets_from_function", "make_input_fn_iterator")


def _global_batch(trace: Trace) -> int | None:
    g = trace.meta.get("global_batch_size")
    return int(g) if isinstance(g, (int, float)) and g else None


def _rebatch_rule(meta: TraceMeta, replicas: int) -> str:
    """How TF cut the batches, when the trace knows which rebatch TF used (``meta["rebatch"]``).

    Example:
        >>> _rebatch_rule({"rebatch": "RebatchDataset"}, 4)
        " (TF's legacy rebatch cut every batch, a short one too, into pieces of ceil(n / 4) in replica order; TF takes it when auto-sharding applies DATA, as AUTO does for a pipeline that reads no files, one worker included, and when it cannot read a fixed batch size from the pipeline, as after a map that follows the batch)"
        >>> _rebatch_rule({}, 4)
        ''
    """
    op = meta.get("rebatch")
    if op == "RebatchDataset":
        # input_lib.py (_make_rebatch_fn: the legacy op when compute_batch_size gives -1) and auto_shard.cc
        # (ShardByData rewrites RebatchDatasetV2 to it)
        return (" (TF's legacy rebatch cut every batch, a short one too, into pieces of "
                f"ceil(n / {replicas}) in replica order; TF takes it when auto-sharding applies DATA, as AUTO "
                "does for a pipeline that reads no files, one worker included, and when it cannot read a fixed "
                "batch size from the pipeline, as after a map that follows the batch)")
    if op == "RebatchDatasetV2":
        return (" (TF's rebatch gives each replica a fixed share of a full global batch, shares that differ by at "
                "most one, and fills them in replica order when a batch is short)")
    return ""


def batch_not_divisible(trace: Trace) -> Iterator[Finding]:
    g, r = _global_batch(trace), int(trace.meta.get("num_replicas") or 0)
    if trace.meta.get("api") not in _SPLITS_GLOBAL or not g or r <= 1 or g % r == 0:
        return
    counts = _counts(trace)
    example = ""
    if len(counts):
        first = counts.iloc[0].tolist()
        example = f" (step {int(counts.index[0])}: {', '.join(str(int(c)) for c in first)})"
    lo, hi = (g // r) * r, (g // r + 1) * r
    fixes = f"{lo} or {hi}" if lo else f"{hi}"
    yield Finding(
        "batch-not-divisible", "warning",
        f"The global batch of {g} does not divide evenly over {r} replicas, so replicas get different batch "
        f"sizes every step{example}{_rebatch_rule(trace.meta, r)}. Losses averaged per replica then weigh elements unequally. Use a global "
        f"batch that is a multiple of {r} (e.g. {fixes}), or average with "
        f"tf.nn.compute_average_loss(..., global_batch_size={g}).",
    )


def empty_and_partial(trace: Trace) -> Iterator[Finding]:
    counts = _counts(trace)
    if not counts.size:
        return
    g = _global_batch(trace)
    drop_hint = (
        "batch(..., drop_remainder=True) in the pipeline"
        if trace.meta.get("api") not in _PER_PIPELINE
        else "batch(per_replica_batch, drop_remainder=True) in dataset_fn"
    )
    reps, steps, a = [int(r) for r in counts.columns], counts.index.to_numpy(), counts.to_numpy()
    # The global batch spans all replicas of all workers: a trace holding only some of
    # them (one worker's shard) expects its share, a merged trace the whole batch.
    n_all = int(trace.meta.get("num_replicas") or 0) or len(reps)
    last = int(steps.max())

    def values(i: int) -> dict[int, int]:
        return dict(zip(reps, (int(v) for v in a[i]), strict=True))

    def empty_finding(i: int) -> Finding:
        v = values(i)
        return Finding("empty-replica", "warning", _empty_message(trace.meta, int(steps[i]), v, drop_hint, g),
                       step=int(steps[i]), replicas=sorted(r for r, n in v.items() if n == 0))

    def partial_finding(i: int) -> Finding:
        v, step = values(i), int(steps[i])
        split = f"{', '.join(str(n) for n in v.values())}{_rebatch_rule(trace.meta, n_all)}"
        return Finding("partial-batch", "info", f"Step {step} delivered {sum(v.values())} of {g} elements: "
                       + _partial_cause(trace.meta, step == last, split, drop_hint),
                       step=step, replicas=sorted(r for r, n in v.items() if n > 0))

    def uneven_finding(i: int) -> Finding:
        v = values(i)
        return Finding("uneven-split", "info",
                       f"At step {int(steps[i])}, replicas got different numbers of elements "
                       f"({', '.join(f'replica {r}: {n}' for r, n in v.items())}). Replicas with fewer elements "
                       f"finish early and wait for the others at the gradient all-reduce.",
                       step=int(steps[i]), replicas=sorted(v))

    empty, partial, uneven = _step_masks(a, g, n_all)
    for code, severity, mask, make in (("empty-replica", "warning", empty, empty_finding),
                                       ("partial-batch", "info", partial, partial_finding),
                                       ("uneven-split", "info", uneven, uneven_finding)):
        idx = np.flatnonzero(mask)
        yield from (make(int(i)) for i in idx[:MAX_PER_CODE])  # the first ones, built one by one
        if len(idx) > MAX_PER_CODE:  # the rest, counted with whole-table arithmetic
            rest = steps[idx[MAX_PER_CODE:]]
            yield more_like_these(code, severity, len(rest), [int(rest.min()), int(rest.max())])


def _step_masks(a: np.ndarray, g: int | None, n_all: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which steps (rows of the steps x replicas counts ``a``) have an empty replica, a partial batch, an
    uneven split."""
    total, hi = a.sum(axis=1), a.max(axis=1)
    empty = (a == 0).any(axis=1)
    partial = (total > 0) & (total < g * min(a.shape[1], n_all) / n_all) if g else np.zeros(len(a), bool)
    lo_nonzero = np.where(a > 0, a, hi[:, None]).min(axis=1)
    rule = np.ones(len(a), bool) if g is None else (total < g) | bool(g and g % a.shape[1] == 0)
    return empty, partial, ~empty & (lo_nonzero != hi) & rule


_BATCH_OPS = ("batch", "padded_batch", "ragged_batch", "rebatch")


_KERAS_PHASES = ("train", "validation", "evaluate", "predict")


def _empty_tail(meta: TraceMeta) -> str:
    """What a 0-sized replica batch does to the loss: Keras's own rule where Keras ran the step."""
    if meta.get("phase") in _KERAS_PHASES:
        return ("TF still runs the step there on a 0-sized batch. Keras 3 divides that replica's loss by its batch "
                "size with divide_no_nan and weighs its loss metric by batch size (keras/src/losses/loss.py, "
                "reduce_values), so the empty replica adds 0 and counts for nothing, never NaN; a mean of your own "
                "(tf.reduce_mean in a custom metric or loss) over that batch would be NaN.")
    return ("TF still runs the step there on a 0-sized batch, so per-replica means become NaN unless the loss "
            "divides by the global batch.")


def _empty_message(meta: TraceMeta, step: int, values: dict[int, int], drop_hint: str, g: int | None) -> str:
    """Why replicas got an empty batch at ``step`` (replica -> elements), and the fix."""
    empty = [r for r, v in values.items() if v == 0]
    head = f"At step {step}, {'replica' if len(empty) == 1 else 'replicas'} {_names(empty)} got an empty batch: "
    tail = _empty_tail(meta)
    per_fn = meta.get("api") in _PER_PIPELINE
    nested = _nested_batches(meta) if per_fn else []
    if nested:
        cause, fix = _nested_cause(meta, nested, values)
        return f"{head}{cause} {tail} Fix: {fix}"
    p = meta.get("per_replica_batch_size")
    if per_fn and isinstance(p, int) and p > 0:
        return head + _per_pipeline_cause(p, values) + f" {tail} Fix: {drop_hint}, or make the dataset size a " \
            f"multiple of the global batch{f' ({g})' if g else ''}." + _global_mixup(p, len(values))
    return (head + f"this step had only {_plural(sum(values.values()), 'element')} for {len(values)} replicas. "
            f"{tail} Fix: {drop_hint}, or make the dataset size a multiple of the global batch"
            + (f" ({g})." if g else "."))


def _per_pipeline_cause(p: int, values: dict[int, int]) -> str:
    """Empty replicas under distribute_datasets_from_function: its pipeline ran out of whole batches."""
    full = sum(1 for v in values.values() if v > 0)
    return (f"each replica takes one whole batch of dataset_fn's dataset per step (up to {p} elements; TF does not "
            f"split them), and only {full} of its batches remained for {len(values)} replicas at this step "
            f"({_plural(sum(values.values()), 'element')}).")


def _global_mixup(p: int, replicas: int) -> str:
    """The per-replica vs global batch size mix-up, as a question (the trace cannot know which was meant)."""
    if replicas < 2 or p % replicas:
        return ""
    return (f" If {p} was meant as the global batch size, dataset_fn should batch by "
            f"input_context.get_per_replica_batch_size({p}) = {p // replicas}.")


def _nested_batches(meta: TraceMeta) -> list[str]:
    """The batch ops of a pipeline that batches its batches (a batch after a batch, no unbatch between).

    Example:
        >>> _nested_batches({"pipeline": ["range(0, 8, 1)", "batch(4, drop_remainder=False)", "batch(2, drop_remainder=False)"]})
        ['batch(4, drop_remainder=False)', 'batch(2, drop_remainder=False)']
        >>> _nested_batches({"pipeline": ["range(0, 8, 1)", "batch(4, drop_remainder=False)", "unbatch", "batch(2, drop_remainder=False)"]})
        []
    """
    for ops in [meta.get("pipeline") or [], *(meta.get("pipelines") or [])]:
        chain: list[str] = []
        for op in map(str, ops or []):
            name = op.split("(")[0]
            if name == "unbatch":
                chain = []
            elif name in ("batch", "padded_batch", "ragged_batch"):
                chain.append(op)
        if len(chain) > 1:
            return chain
    return []


def _nested_cause(meta: TraceMeta, nested: list[str], values: dict[int, int]) -> tuple[str, str]:
    """Empty replicas of a dataset_fn's dataset that batches twice: few, big per-replica batches (distribute_lib.py,
    distribute_datasets_from_function: the dataset_fn's dataset is "already batched by per-replica batch
    size" and each replica "will dequeue one batch of inputs")."""
    sizes = [op.split("(")[1].split(",")[0].rstrip(")") for op in nested]
    full = sum(1 for v in values.values() if v > 0)
    g = meta.get("global_batch_size")
    note = (f" ({sizes[0]} is also this run's global batch size: a global batch belongs in a dataset given to "
            "experimental_distribute_dataset, which splits it; dataset_fn batches by the per-replica size)"
            if str(g) == sizes[0] else "")
    fix = "batch once in dataset_fn, by input_context.get_per_replica_batch_size(global_batch_size)"
    return (f"dataset_fn's dataset is batched twice ({', then '.join(nested)}), so each of its elements is a batch "
            f"of up to {sizes[-1]} batches of up to {sizes[0]} elements{note}. Each replica takes one such element "
            f"per step (one replica got {max(values.values())} elements), and only {full} such element(s) remained "
            f"for {len(values)} replicas at this step.", f"{fix}, and drop the other batch.")


def _batched_by_service(meta: TraceMeta) -> ServiceRead | None:
    """The tf.data service read whose served dataset was batched (the batch ran on the service workers)."""
    services = meta.get("services") or []
    if not services or not _batched_before(meta, "tf.data service ("):
        return None
    # parallel_epochs (OFF) and distributed_epoch (DYNAMIC) only: a static DATA policy shards after the batch.
    return services[-1] if services[-1].get("sharding_policy") in ("OFF", "DYNAMIC") else None


def _batched_before(meta: TraceMeta, prefix: str) -> bool:
    """Whether the pipeline batches before an op whose label starts with ``prefix``."""
    ops = [str(op) for op in meta.get("pipeline") or []]
    at = [i for i, op in enumerate(ops) if op.startswith(prefix)]
    return bool(at) and any(op.split("(")[0] in _BATCH_OPS for op in ops[: at[-1]])


def _partial_cause(meta: TraceMeta, last: bool, split: str, drop_hint: str) -> str:
    """Why a step's global batch was short, and the fix (TF's distribute docstring, data_service_ops.py:
    distributed_epoch sends splits to the workers, "which will perform the rest of the dataset
    transformations"; parallel_epochs: "the entire input dataset will be processed independently by each
    of the tf.data service workers")."""
    read = _batched_by_service(meta)
    if read is not None:
        n = read.get("num_workers")
        return (
            f"the dataset sent to the tf.data service ({read.get('processing_mode') or read.get('sharding_policy')}) "
            "is batched there, so each service worker batches only the elements it produces (its own pass over the "
            "whole dataset under parallel_epochs, the splits the dispatcher sent it under distributed_epoch) and "
            "its stream can end with its own short batch, which can reach the consumer before other workers' full "
            "batches"
            + (f" (up to {n} such batches per pass with {n} service workers)" if isinstance(n, int) else "")
            + f". This one was split as {split}. Fix: batch(..., drop_remainder=True) inside the dataset sent to "
            "the service, or batch after reading from the service (then only the consumer's last batch can be short)."
        )
    if last:
        return (f"the dataset ran out in the middle of a global batch, so this last batch is partial and split as "
                f"{split}. Use {drop_hint} to drop it.")
    if _batched_before(meta, "repeat("):
        return (f"the pipeline batches before repeat(), so each repetition ends with its own short batch (split as "
                f"{split}). Use {drop_hint} to drop them, or repeat() before batch() to batch across repetitions.")
    return (f"a batch in the middle of the run was short (split as {split}); the trace does not show why. "
            "Candidates: batched datasets joined one after another (concatenate, flat_map, interleave) or drawn "
            f"from in turn (sample_from_datasets, choose_from_datasets). Use {drop_hint} to drop such batches.")


def duplicate_elements(trace: Trace) -> Iterator[Finding]:
    e = trace.elements
    if e.empty:
        return
    flags: dict[str, Any] = trace.meta.get("pipeline_flags") or {}
    copies = copies_by_design(trace)  # tf.data service parallel_epochs: one copy per service worker
    if copies == "unknown":
        return  # service-copies explains them; which copy came from which worker is unknown
    # An element is (source, id, part/line) within one pass (PASS_COLUMNS: phase, dataset, epoch, repetition,
    # where present). Traces without an epoch column: with repeat() an element legitimately comes back in a
    # later epoch, so only the same step counts as a duplicate.
    keys = ["worker", "source", "source_id"] + [c for c in ("source_line", *PASS_COLUMNS) if c in e.columns]
    keys += ["step"] if flags.get("repeat") and "epoch" not in e.columns else []
    keys += ["service_worker"] if copies == "per_worker" else []
    counts = e.groupby(keys)["replica"].agg(["size", "nunique"]).reset_index()
    dup = counts[counts["size"] > 1]
    if dup.empty:
        return
    if not provenance_exact(trace.meta):
        yield Finding(
            "ids-ambiguous", "info",
            f"{_plural(len(dup), 'id')} appeared more than once, but this trace's ids are not exact "
            f"(provenance: {trace.meta.get('provenance')}; {trace.meta.get('provenance_note') or 'see meta'}), "
            "so equal ids may be different elements (equal values, or positions). This is not evidence of "
            "duplicated data.",
        )
        return
    n_dup = len(dup)
    example = dup.iloc[0]
    ex_rows = e[(e["source_id"] == example["source_id"]) & (e["source"] == example["source"])
                & (e["worker"] == example["worker"])]
    where = ", ".join(f"step {s} replica {r}" for s, r in zip(ex_rows["step"], ex_rows["replica"], strict=False))
    replicas = sorted(int(r) for r in e[e.set_index(keys).index.isin(dup.set_index(keys).index)]["replica"].unique())
    cause = _duplicate_cause(trace.meta)
    yield Finding(
        "duplicate-elements", "error",
        f"{_plural(n_dup, 'source element')} reached the replicas more than once (element "
        f"{int(example['source_id'])}: {where}). Cause: {cause}",
        replicas=replicas,
    )


def _duplicate_cause(meta: TraceMeta) -> str:
    """Why elements came twice, from what the trace knows of its input: a dataset_fn that ignores its
    InputContext, readers of the tf.data service with a job each, or the pipeline itself."""
    contexts = meta.get("input_contexts") or []
    if meta.get("api") in _PER_PIPELINE and len(contexts) > 1 and _shuffled_apart(meta):
        return (
            f"dataset_fn was called for {len(contexts)} input pipelines, and each shuffles before shard() with "
            "its own random seed, so each pipeline shards a different order and their shards overlap (and miss "
            "elements). Fix: give the shuffle a seed (shuffle(n, seed=...), the same in every pipeline), or "
            "shard before shuffling."
        )
    if meta.get("api") in _PER_PIPELINE and len(contexts) > 1 and not _sharded(meta):
        return (
            f"dataset_fn was called for {len(contexts)} input pipelines but builds the same data in each "
            "(it ignores its InputContext), so every pipeline reads every element. Fix: in dataset_fn, add "
            "ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id) before batching."
        )
    if meta.get("services"):
        return (
            "the pipeline reads from the tf.data service and each reader made its own job (readers that should "
            "share the data need one job_name), or the pipeline yields these elements more than once."
        )
    return (
        "the pipeline itself yields these elements more than once (check repeat/concatenate/"
        "flat_map), or several replicas read the same data. Each duplicate is trained on more than once."
    )


def _first_pipeline(meta: TraceMeta) -> list[str]:
    pipelines = meta.get("pipelines") or [meta.get("pipeline") or []]
    first = pipelines[0] if isinstance(pipelines, list) else []  # a shard_comparison's is a dict (by policy)
    return [str(op) for op in (first or [])]


def _sharded(meta: TraceMeta) -> bool:
    """Whether the pipelines a dataset_fn built shard their data (a shard other than shard(1, 0))."""
    return bool((meta.get("pipeline_flags") or {}).get("shard")) or any(
        op.startswith("shard(") and not op.startswith("shard(1, 0)") for op in _first_pipeline(meta))


def _shuffled_apart(meta: TraceMeta) -> bool:
    """Whether each pipeline of a dataset_fn shuffles before it shards, with seeds that differ between them
    (or none: TF then draws a seed per pipeline at run time, ``random_seed.get_seed``)."""
    ops = _first_pipeline(meta)
    shuffle = next((i for i, op in enumerate(ops) if op.startswith("shuffle(")), None)
    shard = next((i for i, op in enumerate(ops) if op.startswith("shard(") and not op.startswith("shard(1, 0)")),
                 None)
    if shuffle is None or shard is None or shuffle > shard:
        return False
    firsts = [tuple(s[0]) for s in meta.get("pipeline_shuffle_seeds") or [] if s]
    return any(seed == (0, 0) for seed in firsts) or len(set(firsts)) > 1


def _part_read(trace: Trace) -> tuple[int, int] | None:
    """One epoch of a ``record()`` trace that read only part of the data: (steps it read, steps the data
    holds); None where it read all of it, or where that is not known."""
    full = trace.meta.get("steps_per_pass")
    if "phase" not in trace.meta or not isinstance(full, int) or trace.batches.empty:
        return None
    n = int(trace.batches["step"].nunique())
    return (n, full) if n < full else None


def partial_read(trace: Trace) -> Iterator[Finding]:
    """An epoch read fewer steps than the data holds: the code asked for fewer (not missing data)."""
    part = _part_read(trace)
    if part is not None:
        yield Finding(
            "partial-read", "info",
            f"This epoch read {part[0]} of the {part[1]} steps one pass of the data holds: your code stopped "
            "reading (steps_per_epoch, evaluate/predict(steps=...), a loop that stops early). The elements it "
            "did not read are not missing; a later epoch may read them.")


def missing_elements(trace: Trace) -> Iterator[Finding]:
    meta = trace.meta
    flags: dict[str, Any] = meta.get("pipeline_flags") or {}
    if meta.get("provenance") != "tagged" or meta.get("stopped") not in (None, "end_of_data"):
        return
    if ("phase" in meta and not isinstance(meta.get("steps_per_pass"), int)) or _part_read(trace) is not None:
        return  # a record() epoch: elements are missing only from a pass known to have read all the data
    if any(flags.get(k) for k in ("filter", "take", "skip", "opaque")):
        return
    every_pipeline = _every_pipeline(meta)
    if every_pipeline is False or (flags.get("shard") and not every_pipeline):
        return  # a shard of the data (some of the input pipelines): the worker checks judge coverage
    e = trace.elements
    for source in meta.get("sources") or []:
        ids = universe(source)
        if not ids:
            continue
        got = set(e[e["source"] == source["index"]]["source_id"].tolist())
        missing = sorted(ids - got)
        if not missing:
            continue
        shown = _names(missing[:10]) + (" ..." if len(missing) > 10 else "")
        yield Finding(
            "missing-elements", "warning",
            f"{_plural(len(missing), 'source element')} of {len(ids)} never arrived ({shown}): "
            f"{_missing_cause(meta, flags, len(missing))}",
        )


def _every_pipeline(meta: TraceMeta) -> bool | None:
    """Whether the trace holds every input pipeline its dataset_fn was called for (None: no dataset_fn).

    A sharded pipeline can only be judged whole: then every source element should arrive once.

    Example:
        >>> ctx = {"num_input_pipelines": 2, "num_replicas_in_sync": 2}
        >>> _every_pipeline({"api": "distribute_datasets_from_function",
        ...                  "input_contexts": [dict(ctx, input_pipeline_id=i) for i in (0, 1)]})
        True
        >>> _every_pipeline({"api": "distribute_datasets_from_function",
        ...                  "input_contexts": [dict(ctx, input_pipeline_id=1)]})
        False
    """
    if meta.get("api") not in _PER_PIPELINE:
        return None
    contexts = meta.get("input_contexts") or []
    wanted = {int(c.get("num_input_pipelines") or 0) for c in contexts}
    ids = {int(c.get("input_pipeline_id", -1)) for c in contexts}
    return len(wanted) == 1 and ids == set(range(wanted.pop()))


def _missing_cause(meta: TraceMeta, flags: dict[str, Any], n: int) -> str:
    """Why elements of an unfiltered, unsharded pipeline never arrived."""
    if not flags.get("drop_remainder"):
        return "they never reached any replica. Check the pipeline's filters and sharding."
    if meta.get("api") in _PER_PIPELINE:
        # TF's input_lib (_enable_get_next_as_optional): partial-batch handling is off when every
        # element has a static shape (as drop_remainder=True gives) on a single worker.
        return (
            "with batch(..., drop_remainder=True) a short per-replica batch is dropped and, every batch having "
            "a fixed shape, TF ends the data at the first step where some replica would get no batch: the last "
            f"{_plural(n, 'element')} never reached a replica. Keep them with drop_remainder=False (TF then hands "
            "such replicas an empty batch), or choose a dataset size that is a multiple of the global batch."
        )
    return (
        f"batch(..., drop_remainder=True) dropped the last {_plural(n, 'element')} because they did not fill "
        "a whole batch. Keep them with drop_remainder=False (and handle the partial batch), or choose a dataset "
        "size that is a multiple of the batch."
    )


def provenance_exact(meta: TraceMeta) -> bool:
    """True when every id in the trace is the real source element (``meta["provenance"] == "tagged"``).

    Error-severity findings about ids (duplicates) are only raised for exact traces.

    Example:
        >>> provenance_exact({"provenance": "positional"})
        False
    """
    return meta.get("provenance", "tagged") == "tagged"


def provenance_labels(trace: Trace) -> Iterator[Finding]:
    """Positional or ambiguous ids: say which part of the trace is approximate, and why."""
    kind = trace.meta.get("provenance")
    if kind in ("positional", "ambiguous"):
        yield Finding(
            f"provenance-{kind}", "info",
            f"Some element ids are {'positions, not source elements' if kind == 'positional' else 'ambiguous'}: "
            f"{trace.meta.get('provenance_note') or 'see trace.meta'}. The values each replica got are exact; "
            "only which source element each one was is approximate there.",
        )


def provenance_fallback(trace: Trace) -> Iterator[Finding]:
    if trace.meta.get("provenance") == "fingerprint":
        note = trace.meta.get("provenance_note") or "the pipeline could not be tagged"
        yield Finding(
            "provenance-by-content", "info",
            f"Element ids were matched by content, not tagged at the source ({note}). Equal values look like "
            "the same element. For exact provenance, pass the undistributed dataset to "
            "vizdist.trace_distribution.",
        )
