"""Findings about how one worker's batches were split across its replicas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from vizdist.checks.service import copies_by_design
from vizdist.diagnose import Finding, check
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


def _rebatch_rule(meta: dict[str, Any], replicas: int) -> str:
    """How TF cut the batches, when the trace knows which rebatch TF used (``meta["rebatch"]``).

    Example:
        >>> _rebatch_rule({"rebatch": "RebatchDataset"}, 4)
        " (TF's legacy rebatch cut every batch, a short one too, into pieces of ceil(n / 4) in replica order; TF swaps it in when auto-sharding applies DATA, as AUTO does for a pipeline that reads no files, one worker included)"
        >>> _rebatch_rule({}, 4)
        ''
    """
    op = meta.get("rebatch")
    if op == "RebatchDataset":
        return (" (TF's legacy rebatch cut every batch, a short one too, into pieces of "
                f"ceil(n / {replicas}) in replica order; TF swaps it in when auto-sharding applies DATA, as AUTO "
                "does for a pipeline that reads no files, one worker included)")
    if op == "RebatchDatasetV2":
        return (" (TF's rebatch gives each replica a fixed share of a full global batch, shares that differ by at "
                "most one, and fills them in replica order when a batch is short)")
    return ""


@check
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


@check
def empty_and_partial(trace: Trace) -> Iterator[Finding]:
    counts = _counts(trace)
    g = _global_batch(trace)
    drop_hint = (
        "batch(..., drop_remainder=True) in the pipeline"
        if trace.meta.get("api") not in _PER_PIPELINE
        else "batch(per_replica_batch, drop_remainder=True) in dataset_fn"
    )
    for step, row in counts.iterrows():
        values = {int(r): int(v) for r, v in row.items()}
        total = sum(values.values())
        empty = sorted(r for r, v in values.items() if v == 0)
        if empty:
            who = "replica" if len(empty) == 1 else "replicas"
            yield Finding(
                "empty-replica", "warning",
                f"At step {step}, {who} {_names(empty)} got an empty batch: this step had only "
                f"{_plural(total, 'element')} for {len(values)} replicas. TF still runs the step there on a "
                f"0-sized batch, so per-replica means become NaN unless the loss divides by the global batch. "
                f"Fix: {drop_hint}, or make the dataset size a multiple of the global batch"
                + (f" ({g})." if g else "."),
                step=int(step), replicas=empty,
            )
        # The global batch spans all replicas of all workers: a trace holding only some of
        # them (one worker's shard) expects its share, a merged trace the whole batch.
        n_all = int(trace.meta.get("num_replicas") or 0) or len(values)
        if g and 0 < total < g * min(len(values), n_all) / n_all:
            yield Finding(
                "partial-batch", "info",
                f"Step {step} delivered {total} of {g} elements: the dataset ran out in the middle of a global "
                f"batch, so this last batch is partial and split as "
                f"{', '.join(str(v) for v in values.values())}{_rebatch_rule(trace.meta, n_all)}. "
                f"Use {drop_hint} to drop it.",
                step=int(step), replicas=sorted(r for r, v in values.items() if v > 0),
            )
        nonzero = [v for v in values.values() if v > 0]
        if not empty and len(set(nonzero)) > 1 and (g is None or total < g or (g and g % len(values) == 0)):
            yield Finding(
                "uneven-split", "info",
                f"At step {step}, replicas got different numbers of elements "
                f"({', '.join(f'replica {r}: {v}' for r, v in values.items())}). Replicas with fewer elements "
                f"finish early and wait for the others at the gradient all-reduce.",
                step=int(step), replicas=sorted(values),
            )


@check
def duplicate_elements(trace: Trace) -> Iterator[Finding]:
    e = trace.elements
    if e.empty:
        return
    flags: dict[str, Any] = trace.meta.get("pipeline_flags") or {}
    copies = copies_by_design(trace)  # tf.data service parallel_epochs: one copy per service worker
    if copies == "unknown":
        return  # service-copies explains them; which copy came from which worker is unknown
    # An element is (source, id, part/line, epoch). Traces without an epoch column: with repeat() an
    # element legitimately comes back in a later epoch, so only the same step counts as a duplicate.
    keys = ["worker", "source", "source_id"] + [c for c in ("source_line", "epoch") if c in e.columns]
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


def _duplicate_cause(meta: dict[str, Any]) -> str:
    """Why elements came twice, from what the trace knows of its input: a dataset_fn that ignores its
    InputContext, readers of the tf.data service with a job each, or the pipeline itself."""
    contexts = meta.get("input_contexts") or []
    if meta.get("api") in _PER_PIPELINE and len(contexts) > 1:
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


def _universe(source: dict[str, Any]) -> set[int] | None:
    card = source.get("cardinality")
    if source.get("id_is") == "value" and source.get("kind") == "range":
        start, stop, step = source.get("start"), source.get("stop"), source.get("step")
        if all(isinstance(v, int) for v in (start, stop, step)):
            return set(range(start, stop, step))
    if source.get("id_is") == "index" and isinstance(card, int) and card >= 0:
        return set(range(card))
    return None


@check
def missing_elements(trace: Trace) -> Iterator[Finding]:
    meta = trace.meta
    flags: dict[str, Any] = meta.get("pipeline_flags") or {}
    if meta.get("provenance") != "tagged" or meta.get("stopped") not in (None, "end_of_data"):
        return
    if any(flags.get(k) for k in ("filter", "take", "skip", "opaque")):
        return
    every_pipeline = _every_pipeline(meta)
    if every_pipeline is False or (flags.get("shard") and not every_pipeline):
        return  # a shard of the data (some of the input pipelines): the worker checks judge coverage
    e = trace.elements
    for source in meta.get("sources") or []:
        universe = _universe(source)
        if not universe:
            continue
        got = set(e[e["source"] == source["index"]]["source_id"].tolist())
        missing = sorted(universe - got)
        if not missing:
            continue
        shown = _names(missing[:10]) + (" ..." if len(missing) > 10 else "")
        yield Finding(
            "missing-elements", "warning",
            f"{_plural(len(missing), 'source element')} of {len(universe)} never arrived ({shown}): "
            f"{_missing_cause(meta, flags, len(missing))}",
        )


def _every_pipeline(meta: dict[str, Any]) -> bool | None:
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


def _missing_cause(meta: dict[str, Any], flags: dict[str, Any], n: int) -> str:
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


def provenance_exact(meta: dict[str, Any]) -> bool:
    """True when every id in the trace is the real source element (``meta["provenance"] == "tagged"``).

    Error-severity findings about ids (duplicates) are only raised for exact traces.

    Example:
        >>> provenance_exact({"provenance": "positional"})
        False
    """
    return meta.get("provenance", "tagged") == "tagged"


@check
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


@check
def provenance_fallback(trace: Trace) -> Iterator[Finding]:
    if trace.meta.get("provenance") == "fingerprint":
        note = trace.meta.get("provenance_note") or "the pipeline could not be tagged"
        yield Finding(
            "provenance-by-content", "info",
            f"Element ids were matched by content, not tagged at the source ({note}). Equal values look like "
            "the same element. For exact provenance, pass the undistributed dataset to "
            "vizdist.trace_distribution.",
        )
