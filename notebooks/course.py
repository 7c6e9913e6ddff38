"""The course's plumbing: the pandas and trace-metadata reads a lesson needs but does not teach.

The notebooks ``import course`` (this file, beside them) so their cells show TensorFlow and what
vizdist recorded, not DataFrame bookkeeping. Every helper reads a finished trace (no TensorFlow is
imported here). The exercise checks print ``done: ...`` when the goal is met and ``not yet: ...``
(what is still wrong) otherwise; ``tests/test_solutions.py`` runs each on the committed start and on
the model answer, and ``tests/test_course.py`` checks the table helpers against plain TensorFlow runs
and notebook 05's reports against ``trace.timing`` (``tests/test_course_svc.py``: those of 04 and 06b
against a real tf.data service's sharding rules and plain TF reductions).

Example:
    >>> import vizdist, course
    >>> t = vizdist.Trace.from_records(
    ...     batches=[dict(step=0, replica=0, n_elements=2), dict(step=0, replica=1, n_elements=0, empty=True)])
    >>> course.sizes(t).to_dict()          # {replica: {step: elements}}
    {0: {0: 2}, 1: {0: 0}}
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import PurePath
from typing import Any

import pandas as pd

import vizdist

__all__ = [
    "bad_elements",
    "batch_devices",
    "buffer_report",
    "by_worker",
    "came_from",
    "check_every_replica_fed",
    "check_fit_feeds_every_replica",
    "check_guess",
    "check_one_arrival_each",
    "check_worker_guess",
    "collectives",
    "dataset_fn_calls",
    "describe",
    "failed_element",
    "file_readers",
    "finding",
    "findings_at",
    "nonfinite_graph_ops",
    "passes",
    "reduction_ops",
    "run_ms",
    "shards_by_policy",
    "sizes",
    "sizes_side_by_side",
    "times_seen",
]


# --- what each replica got -------------------------------------------------------------------------

def sizes(trace: vizdist.Trace) -> pd.DataFrame:
    """How many elements each replica got at each step: steps down, replicas across."""
    return trace.batches.pivot(index="step", columns="replica", values="n_elements")


def sizes_side_by_side(runs: Mapping[str, vizdist.Trace]) -> pd.DataFrame:
    """:func:`sizes` of several runs, one block of columns per run (named by the mapping's keys)."""
    return pd.concat({name: sizes(t) for name, t in runs.items()}, axis=1)


def batch_devices(trace: vizdist.Trace) -> pd.Series:
    """The device each replica's batch was on (``CPU:1``, ``GPU:0``), by replica, for one step's run."""
    return trace.batches.set_index("replica")["device"].str.split("device:").str[-1]


def dataset_fn_calls(trace: vizdist.Trace) -> pd.DataFrame:
    """One row per call TF made to the ``dataset_fn``: the ``InputContext`` it passed."""
    return pd.DataFrame(trace.meta["input_contexts"])


def passes(trace: vizdist.Trace) -> pd.DataFrame:
    """One row per pass Keras made over a dataset in a ``vizdist.record()`` block (build, train, validation)."""
    return pd.DataFrame(trace.meta["passes"])


def times_seen(trace: vizdist.Trace, *, phase: str = "train") -> pd.Series:
    """How many examples were seen how many times in ``phase``: index = times seen, value = examples."""
    rows = trace.elements[trace.elements["phase"] == phase]
    counts = rows.groupby("source_id").size().value_counts().sort_index()
    return counts.rename_axis("times seen").rename("examples")


# --- findings and NaN/Inf ----------------------------------------------------------------------------

def finding(trace: vizdist.Trace, code: str) -> pd.Series:
    """The first finding of ``vizdist.diagnose(trace)`` with this ``code`` (a KeyError names those found)."""
    found = vizdist.diagnose(trace)
    rows = found[found["code"] == code]
    if rows.empty:
        raise KeyError(f"no {code!r} finding; the findings are {sorted(set(found['code']))}")
    return rows.iloc[0]


def nonfinite_graph_ops(trace: vizdist.Trace) -> pd.DataFrame:
    """The graph ops (of a ``placement=True`` run) whose outputs held a NaN or an Inf, and where they ran."""
    ops = [o for o in trace.meta["placement"]["ops"] if o["nonfinite"] and o["kind"] == "graph"]
    table = pd.DataFrame(ops, columns=["stage", "op_type", "graph", "device", "nonfinite"])
    return table.rename(columns={"op_type": "op", "nonfinite": "outputs with NaN/Inf"})


def bad_elements(trace: vizdist.Trace) -> pd.DataFrame:
    """The source elements that reached a replica holding a NaN or an Inf: step, replica, source_id."""
    rows = trace.meta["placement"]["numerics"]["bad_rows"]
    bad = pd.DataFrame(rows, columns=["step", "replica", "position"]).drop_duplicates()
    found = bad.merge(trace.elements, on=["step", "replica", "position"])
    return found[["step", "replica", "source_id"]].reset_index(drop=True)


def failed_element(trace: vizdist.Trace) -> dict[str, Any]:
    """The element an input ``map``/``filter`` raised on (the partial trace of a failed run)."""
    return dict(trace.meta["placement"]["numerics"]["failed_element"])


# --- timelines (notebook 05) -------------------------------------------------------------------------

def run_ms(trace: vizdist.Trace) -> float:
    """Milliseconds from the first recorded span's start to the last one's end (a ``timing=True`` run)."""
    return float(trace.events["t_end_ns"].max() - trace.events["t_start_ns"].min()) / 1e6


def describe(name: str, trace: vizdist.Trace, *, map_ms: float) -> None:
    """05: input- or step-bound, whether production overlaps the steps, where the map ran, how long a span lasts."""
    s = trace.timing.overlap_summary()
    print(f"{name}: {trace.meta['steps_run']} steps")
    print(f"  median wait for input {s['wait_ms']:.1f} ms, median step {s['step_ms']:.1f} ms")
    print(f"  -> {'INPUT-bound: the step waits for data' if s['bound'] == 'input' else 'STEP-bound: data is ready when the step asks'}")
    print(f"  production runs while a step runs: {'yes' if s['overlap'] > 0.4 else 'no'}")
    maps = trace.events[trace.events["stage"] == "map"]
    whole = (maps["t_end_ns"] - maps["t_start_ns"]).median() >= 0.9 * map_ms * 1e6
    print(f"  map spans on {' and '.join(trace.timing.map_threads())}; a typical map span lasts a whole call "
          f"({map_ms:g} ms): {whole}")


def buffer_report(name: str, trace: vizdist.Trace) -> None:
    """05: bound, how often a replica found its ``tf.distribute`` buffer empty, and whether replicas overlapped."""
    bound = trace.timing.overlap_summary()["bound"].upper()
    buffer = trace.timing.empty_buffer_steps()  # at how many steps did a replica find its buffer empty?
    empty = "most" if buffer["empty"] > buffer["steps"] / 2 else "few"
    print(f"{name}: {bound}-bound; a replica found its buffer (limit {buffer['limit']}) empty at {empty} steps")
    print("  the replicas' step functions ever ran at the same time:", trace.timing.most_at_once(lane="replica") > 1)


# --- exercise checks: each prints "done: ..." or "not yet: ..." ------------------------------------

def _verdict(done: str, problems: list[str]) -> None:
    print(f"done: {done}" if not problems else "not yet: " + "; ".join(problems))


def check_every_replica_fed(trace: vizdist.Trace, *, global_batch: int) -> None:
    """00: every replica gets elements at every step, with the global batch kept at ``global_batch``."""
    b = trace.batches[trace.batches["empty"]]
    problems = [f"replica {r} still gets 0 elements at step {s}" for s, r in zip(b["step"], b["replica"], strict=True)]
    if trace.meta["global_batch_size"] != global_batch:
        problems.append(f"the global batch is {trace.meta['global_batch_size']} now; keep it at {global_batch}")
    _verdict("every replica gets elements at every step", problems)


def check_one_arrival_each(trace: vizdist.Trace, *, n: int, per_replica: int) -> None:
    """02: each of the ``n`` source elements reaches one replica once, ``per_replica`` per replica per step."""
    ids, b = trace.elements["source_id"], trace.batches
    problems = [f"element {i} arrives {k} times" for i, k in ids.value_counts().sort_index().items() if k > 1][:3]
    problems += [f"element {i} never arrives" for i in sorted(set(range(n)) - set(ids))][:3]
    problems += [f"replica {r} gets {k} elements at step {s}, not {per_replica}"
                 for s, r, k in zip(b["step"], b["replica"], b["n_elements"], strict=True) if k != per_replica][:3]
    _verdict(f"each element reaches one replica, {per_replica} per replica per step", problems)


def check_fit_feeds_every_replica(trace: vizdist.Trace, *, examples: int, failed: BaseException | None) -> None:
    """02b: ``fit`` ran (``failed`` is its error, if any) and every replica trained on examples at every step."""
    problems = ["fit failed: the first global batch does not split evenly over 4 replicas"] if failed else []
    b = trace.batches[trace.batches["phase"] == "train"]
    problems += [f"replica {r} trains on an empty batch at step {s}"
                 for s, r in b.loc[b["empty"], ["epoch_step", "replica"]].itertuples(index=False)]
    if len(b) and b["n_elements"].sum() != examples:
        problems.append(f"{b['n_elements'].sum()} of {examples} examples trained on")
    _verdict("fit runs and every replica gets examples at every step", problems)


def check_guess(trace: vizdist.Trace, guess: Mapping[str, int]) -> None:
    """07: ``guess`` names the source element holding a NaN/Inf, the step and the replica that got it."""
    first = bad_elements(trace).iloc[0]
    real = {"source": int(first["source_id"]), "step": int(first["step"]), "replica": int(first["replica"])}
    wrong = [key for key in real if guess.get(key) != real[key]]
    _verdict("that is the element, step and replica", [f"look again at {', '.join(wrong)}"] if wrong else [])


# --- tf.data service, reduction, topology (notebooks 04, 06b, 10) ---

def by_worker(trace: vizdist.Trace) -> dict[int, list[int]]:
    """04: the source ids each tf.data service worker made, in the order they arrived: ``{worker: [ids]}``."""
    return {int(w): [int(i) for i in ids] for w, ids in trace.elements.groupby("worker")["source_id"]}


def came_from(trace: vizdist.Trace) -> pd.Series:
    """04: the service workers each source element came from (one per copy, sorted), by source id."""
    column = "service_worker" if "service_worker" in trace.elements else "worker"  # your own pipeline's trace
    workers = trace.elements.groupby("source_id")[column].agg(lambda w: sorted(int(x) for x in w))
    return workers.rename("service workers it came from")


def shards_by_policy(runs: Mapping[str, vizdist.Trace], *, varies: Collection[str] = ()) -> pd.DataFrame:
    """04: per sharding policy, how many copies of each element arrived and the ids each worker made (sorted)."""
    workers = sorted({w for t in runs.values() for w in by_worker(t)})
    rows = {policy: {"copies of each element": sorted({len(w) for w in came_from(t)}),
                     **{f"worker {w}": "(varies by run)" if policy in varies else sorted(by_worker(t).get(w, []))
                        for w in workers}} for policy, t in runs.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("policy")


def file_readers(trace: vizdist.Trace) -> pd.DataFrame:
    """04: the service workers that read each file (by file name), for a run sharded by ``FILE``."""
    e = trace.elements
    files = e["source_file"].map(lambda p: PurePath(p).name).rename("file")
    readers = e.groupby(files)["worker"].agg(lambda w: sorted({int(x) for x in w}))
    return readers.to_frame("workers that read it")


def findings_at(trace: vizdist.Trace, severity: str) -> pd.DataFrame:
    """The findings of ``vizdist.diagnose(trace)`` at this ``severity`` (``"error"``, ...), numbered from 0."""
    found = vizdist.diagnose(trace)
    return found[found["severity"] == severity].reset_index(drop=True)


def check_worker_guess(trace: vizdist.Trace, guess: int | None, *, element: int) -> None:
    """04: ``guess`` is the service worker that made ``element``; prints the run's ``service-`` findings first."""
    real = came_from(trace)[element][0]
    print("service findings:", [c for c in vizdist.diagnose(trace)["code"] if c.startswith("service-")])
    _verdict(f"worker {real} produces element {element}",
             [] if guess == real else [f"element {element} does not come from that worker"])


def reduction_ops(runs: Mapping[str, vizdist.Trace]) -> pd.DataFrame:
    """06b: the ops that combined each run's values (``"AddN on CPU:0"``, sorted), one column per run."""
    def ops(t: vizdist.Trace) -> pd.Series:
        ops = t.meta["reductions"][0]["ops"]
        pairs = {(o["op_type"], o["device"]) for o in ops if not o["op_type"].startswith("__")}  # not TF's calls
        return pd.Series([f"{op} on {device}" for op, device in sorted(pairs)], dtype=object)

    return pd.DataFrame({name: ops(t) for name, t in runs.items()}).fillna("")


def collectives(trace: vizdist.Trace) -> list[tuple[str, str, str, str, str]]:
    """06b: the collective ops of the first reduction, once each: (device, op, ``group_size=N``, hint, implementation)."""
    return sorted({(c["device"], c["op_type"], f"group_size={c['group_size']}", c["communication_hint"],
                    c["implementation"]) for c in trace.meta["reductions"][0]["collectives"]})
