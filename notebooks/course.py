"""The course's plumbing: the pandas and trace-metadata reads a lesson needs but does not teach.

The notebooks ``import course`` (this file, beside them) so their cells show TensorFlow and what
vizdist recorded, not DataFrame bookkeeping. Every helper reads a finished trace (no TensorFlow is
imported here). The exercise checks print ``done: ...`` when the goal is met and ``not yet: ...``
(what is still wrong) otherwise; ``tests/test_solutions.py`` runs each on the committed start and on
the model answer, and ``tests/test_course.py`` checks the table helpers against plain TensorFlow runs
and notebook 05's reports against ``trace.timing`` (``tests/test_course_svc.py``: those of 04 and 06b
against a real tf.data service's sharding rules and plain TF reductions; ``tests/test_course_ps.py``:
those of 06, 08 and 09 against plain TF placements, ``ClusterCoordinator`` runs and TF1 iterators).

Example:
    >>> import vizdist, course
    >>> t = vizdist.Trace.from_records(
    ...     batches=[dict(step=0, replica=0, n_elements=2), dict(step=0, replica=1, n_elements=0, empty=True)])
    >>> course.sizes(t).to_dict()          # {replica: {step: elements}}
    {0: {0: 2}, 1: {0: 0}}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import PurePath
from typing import Any

import pandas as pd

import vizdist
from vizdist.render.parameter_server import closure_rows, shard_rows

__all__ = [
    "arrived_on",
    "attempt_outcomes",
    "bad_elements",
    "batch_devices",
    "buffer_report",
    "by_worker",
    "came_from",
    "check_every_replica_fed",
    "check_fit_feeds_every_replica",
    "check_guess",
    "check_lost_worker",
    "check_one_arrival_each",
    "check_placement",
    "check_ported_split",
    "check_worker_guess",
    "closures",
    "collectives",
    "copies",
    "dataset_fn_calls",
    "describe",
    "failed_element",
    "file_readers",
    "finding",
    "findings_at",
    "lines",
    "lost_tasks",
    "nonfinite_graph_ops",
    "op_devices",
    "passes",
    "put_back",
    "reduction_ops",
    "results",
    "run_ms",
    "shard_read_errors",
    "shards",
    "shards_by_policy",
    "side_by_side",
    "sizes",
    "sizes_side_by_side",
    "times_seen",
    "worker_iterators",
    "worker_reads",
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


# --- placement, parameter servers, TF1 (notebooks 06, 08, 09) ---
# tests/test_course_ps.py checks each against plain TF (08's on two small LocalCluster runs).

def op_devices(trace: vizdist.Trace, *ops: str) -> pd.DataFrame:
    """06: where these graph ops ran and how often (TF's debugger, a ``placement=True`` run): stage, op_type, graph, device, count."""
    rows = [o for o in trace.meta["placement"]["ops"] if o["op_type"] in ops and o["kind"] == "graph"]
    keys = ["stage", "op_type", "graph", "device"]
    return pd.DataFrame(rows, columns=[*keys, "count"]).groupby(keys, sort=False)["count"].sum().reset_index()


def arrived_on(trace: vizdist.Trace) -> list[str]:
    """06: the device each replica's batch arrived on, in replica order (TF's debugger, a ``placement=True`` run)."""
    return list(trace.meta["placement"]["batch_devices"])


def copies(trace: vizdist.Trace) -> list[tuple[str, str, str]]:
    """06: each copy between devices that the placement view draws, as (from, to, why)."""
    return [(c["src"], c["dst"], c["via"]) for c in trace.meta["placement"]["copies"]]


def check_placement(trace: vizdist.Trace, guess: Mapping[str, Any]) -> None:
    """06: ``guess`` names the device the batch arrives on, the one ``Mul`` runs on and the copy (from, to)."""
    real = {"batch arrives on": arrived_on(trace)[0], "Mul runs on": op_devices(trace, "Mul")["device"].iloc[0],
            "copy": copies(trace)[0][:2]}
    wrong = [key for key in real if guess.get(key) != real[key]]
    _verdict("your prediction matches the run", [f"look again at {', '.join(wrong)}"] if wrong else [])


def closures(trace: vizdist.Trace) -> pd.DataFrame:
    """08: one row per closure: its worker, status, the elements it read, what ``fetch()`` returned, the workers its attempts ran on."""
    rows = [{"closure": c["closure"], "worker": c["worker"], "status": c["status"],
             "elements": trace.ids(step=c["closure"], replica=0), "fetch()": c.get("result"),
             "ran on": [a["worker"] for a in c.get("attempts", [])]} for c in trace.meta["closures"]]
    return pd.DataFrame(rows, columns=["closure", "worker", "status", "elements", "fetch()", "ran on"])


def worker_reads(trace: vizdist.Trace) -> dict[int, list[int]]:
    """08: worker -> the first element of each closure it ran, in closure order."""
    e = trace.elements
    return {int(w): [trace.ids(step=int(s), replica=0)[0] for s in sorted(set(e["step"][e["worker"] == w]))]
            for w in sorted(set(e["worker"]))}


def worker_iterators(trace: vizdist.Trace) -> pd.DataFrame:
    """08: the iterator ``RemoteValue`` of each worker (``create_per_worker_dataset``): its type and status, by worker."""
    values = pd.DataFrame(trace.meta["per_worker_values"]["values"], columns=["worker", "type", "status"])
    return values.set_index("worker")


def shards(trace: vizdist.Trace) -> pd.DataFrame:
    """08: one row per variable shard: variable, shard, shape, rows, bytes, device, updates (-1: not readable)."""
    return pd.DataFrame(shard_rows(trace))[["variable", "shard", "shape", "rows", "bytes", "device", "updates"]]


def shard_read_errors(trace: vizdist.Trace) -> dict[int, set[str]]:
    """08: ps task -> the error types that reading its shards back raised (tasks read back fine are absent)."""
    out: dict[int, set[str]] = {}
    for r in shard_rows(trace):
        if r.get("read_error"):
            out.setdefault(int(r["task"]), set()).add(str(r["read_error"]).split(":")[0])
    return out


def lost_tasks(trace: vizdist.Trace) -> list[str]:
    """08: the cluster tasks lost during the run (``worker-1``, ``ps-1``), in the order they were stopped."""
    return [str(t["task"]) for t in trace.meta.get("lost_tasks") or []]


def attempt_outcomes(trace: vizdist.Trace) -> Counter[str]:
    """08: how many closure attempts ended each way (done, rescheduled, retried, failed, cancelled)."""
    return Counter(r["outcome"] for r in closure_rows(trace))


def put_back(trace: vizdist.Trace) -> pd.DataFrame:
    """08: one row per attempt TF put back after its worker failed: the closure, the workers all its attempts ran on, the error."""
    rows = [{"closure": c["closure"], "ran on": tuple(a["worker"] for a in c["attempts"]),
             "error": str(a.get("error", "")).split(":")[0]}
            for c in trace.meta["closures"] for a in c.get("attempts", []) if a["outcome"] == "rescheduled"]
    return pd.DataFrame(rows, columns=["closure", "ran on", "error"])


def check_lost_worker(trace: vizdist.Trace, *, worker: int, after: int, steps: int) -> None:
    """08: ``worker`` was lost after ``after`` closures, all ``steps`` closures finished and the other worker ran the rest."""
    m, lost, want = trace.meta, lost_tasks(trace), f"worker-{worker}"
    other = next(w for w in range(m["num_workers"]) if w != worker)
    problems = [] if lost == [want] else [f"this run lost {lost or 'no task'}, not {want}"]
    problems += [] if m["steps_scheduled"] == steps else [f"it scheduled {m['steps_scheduled']} closures, not {steps}"]
    problems += [] if m["steps_run"] == m["steps_scheduled"] else [f"{m['steps_run']} of {m['steps_scheduled']} finished"]
    if not problems:  # what fetch() returned: the worker that ran each closure, as TF reported it
        table = closures(trace)
        late = [int(c) for c, got in zip(table["closure"], table["fetch()"], strict=True) if c >= after and got != other]
        problems += [f"worker {worker} still ran closure(s) {late}: lose it after {after} closures"] if late else []
    moved = sorted({int(c) for c in put_back(trace)["closure"]})
    _verdict(f"worker {worker} was lost after {after} closures and all {steps} finished; fetch() names worker {other} "
             f"for closures {after}-{steps - 1}" + (f"; TF put back closure(s) {moved}, which worker {worker}'s thread "
                                                   f"had taken, and worker {other} re-ran them" if moved else ""),
             problems)


def lines(trace: vizdist.Trace) -> pd.DataFrame:
    """09: the lines each replica got, steps down and replicas across, named by file and line (b3: b.txt, line 3)."""
    e = trace.elements.sort_values(["step", "replica", "position"], kind="stable")
    name = e["source_file"].astype(str).map(lambda f: PurePath(f).stem) + e["source_line"].astype(str)
    got = name.groupby([e["step"], e["replica"]]).agg(list)
    return pd.DataFrame([[got.get((s, r), []) for r in trace.replicas] for s in trace.steps],
                        index=pd.Index(trace.steps, name="step"), columns=pd.Index(trace.replicas, name="replica"))


def results(trace: vizdist.Trace) -> pd.DataFrame:
    """09: what ``step_fn`` returned on each replica at each step (JSON text, as the trace keeps it): steps down, replicas across."""
    return trace.batches.pivot(index="step", columns="replica", values="result")


def side_by_side(tables: Mapping[str, pd.DataFrame], *, missing: Any = None) -> pd.DataFrame:
    """09: steps x replicas tables in one, a block of columns per table (the mapping's keys); ``missing`` fills absent steps."""
    joined = pd.concat(dict(tables), axis=1)
    return joined if missing is None else joined.fillna(missing)


def check_ported_split(ported: vizdist.Trace, tf1: vizdist.Trace) -> None:
    """09: ``ported`` gives every replica the elements that the TF1 run ``tf1`` gave it, at the same steps."""
    want, got = tf1.split(), ported.split()
    problems = [f"step {s}, replica {r}: TF1 gives {want.loc[s, r]}, TF2 gives {got.loc[s, r] if s in got.index else 'no step'}"
                for s in want.index for r in want.columns if s not in got.index or got.loc[s, r] != want.loc[s, r]][:3]
    problems += [f"TF2 runs {len(got)} steps, TF1 {len(want)}"] if len(got) != len(want) else []
    _verdict("TF2 splits exactly like TF1's make_input_fn_iterator", problems)
