"""What the topology view needs from a live run: the sockets a process listens on, a TPU's shape.

:func:`listening` reads the TCP sockets a process listens on from
``/proc/<pid>/net/tcp{,6}`` and ``/proc/<pid>/fd``. Those files show the
process's *own* network namespace, so it also sees the servers vizdist runs in
a private namespace (``psutil`` reads the caller's namespace and finds none
there). :func:`network_meta` packs what a run advertised and what it listened
on into ``trace.meta["network"]`` (:class:`vizdist.contract.NetworkMeta`).

:func:`tpu_meta` turns TensorFlow's ``tf.tpu.experimental.Topology`` (what
``tf.tpu.experimental.initialize_tpu_system(resolver)`` returns on a TPU) into
``trace.meta["tpu"]`` (:class:`vizdist.contract.TPUMeta`): hosts and cores.

Example:
    >>> import os, socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    >>> f"127.0.0.1:{s.getsockname()[1]}" in listening(os.getpid()) or not os.path.exists("/proc/self/net/tcp")
    True
    >>> s.close()
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vizdist._files import write_file

__all__ = [
    "listening", "network_meta", "read_listen_files", "service_network", "sockets", "tpu_meta", "write_listen_file",
]

_LISTEN, _ESTABLISHED = "0A", "01"  # TCP states in /proc/net/tcp


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _address(hex_addr: str) -> str:
    """``/proc/net/tcp`` notation (little-endian words) -> ``127.0.0.1:80`` / ``[::]:80``."""
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return f"{'.'.join(str(b) for b in words)}:{int(port, 16)}"
    import ipaddress

    ip = ipaddress.IPv6Address(words)
    text = str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)
    return f"[{text}]:{int(port, 16)}" if not ip.ipv4_mapped else f"{text}:{int(port, 16)}"


def _tcp(pid: int) -> list[tuple[str, str, str]]:
    """``(state, local, remote)`` of the TCP sockets process ``pid`` holds (its own network namespace)."""
    inodes = _socket_inodes(pid)
    rows = []
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                rows.append((cols[3], _address(cols[1]), _address(cols[2])))
    return rows


def sockets(pid: int | None = None) -> dict[str, list[str]]:
    """What process ``pid`` (this one when ``None``) listens on and which servers it connected to.

    ``listening``: addresses of its listening sockets (``["[::]:4321"]``); ``connected``: the remote
    ``host:port`` of each connection it opened (established connections whose local port is not one
    it listens on: those were accepted, not opened). Read from ``/proc`` in the process's own network
    namespace; empty lists where ``/proc`` is missing (not Linux) or the process is gone.

    Example:
        >>> sorted(sockets())
        ['connected', 'listening']
    """
    pid = os.getpid() if pid is None else int(pid)
    if not sys.platform.startswith("linux"):
        return {"listening": [], "connected": []}
    try:
        rows = _tcp(pid)
    except OSError:
        return {"listening": [], "connected": []}
    listen = sorted({local for state, local, _ in rows if state == _LISTEN})
    ports = {a.rpartition(":")[2] for a in listen}
    out = sorted({remote for state, local, remote in rows
                  if state == _ESTABLISHED and local.rpartition(":")[2] not in ports})
    return {"listening": listen, "connected": out}


def listening(pid: int | None = None) -> list[str]:
    """The TCP addresses process ``pid`` (this one when ``None``) listens on, e.g. ``["[::]:4321"]``.

    Example:
        >>> isinstance(listening(), list)
        True
    """
    return sockets(pid)["listening"]


def write_listen_file(folder: str | os.PathLike[str], task: str) -> None:
    """Write ``listen-<task>.json``: this process's :func:`sockets` (read by :func:`read_listen_files`)."""
    path = Path(folder) / f"listen-{task}.json"
    write_file(path, json.dumps(sockets()))


def read_listen_files(folder: str | os.PathLike[str]) -> dict[str, dict[str, list[str]]]:
    """``{"worker:0": {"listening": [...], "connected": [...]}, ...}`` from ``listen-<type>-<index>.json``."""
    out = {}
    for f in sorted(Path(folder).glob("listen-*.json")):
        job, _, index = f.name[len("listen-"):-len(".json")].rpartition("-")
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
            out[f"{job}:{int(index)}"] = {k: [str(a) for a in doc.get(k, [])] for k in ("listening", "connected")}
        except (ValueError, TypeError, AttributeError):
            continue
    return out


def network_meta(addresses: Mapping[str, Sequence[str]], *,
                 seen: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                 isolated: bool | None = None, resolver: str = "", rpc_layer: str = "") -> dict[str, Any]:
    """``trace.meta["network"]``: advertised addresses per job, what each task listened on and connected to.

    ``seen`` maps a task (``"worker:0"``) to its :func:`sockets`.

    Example:
        >>> network_meta({"worker": ["127.0.0.1:1"]}, seen={"worker:0": {"listening": ["[::]:1"]}})
        {'addresses': {'worker': ['127.0.0.1:1']}, 'listening': {'worker:0': ['[::]:1']}, 'connections': {}}
    """
    out: dict[str, Any] = {"addresses": {str(k): [str(a) for a in v] for k, v in addresses.items()}}
    if seen is not None:
        out["listening"] = {str(k): [str(a) for a in v.get("listening", [])] for k, v in seen.items()}
        out["connections"] = {str(k): [str(a) for a in v["connected"]] for k, v in seen.items() if "connected" in v}
    if isolated is not None:
        out["isolated"] = bool(isolated)
    if resolver:
        out["resolver"] = resolver
    if rpc_layer:
        out["rpc_layer"] = rpc_layer
    return out


def service_network(dispatcher: str, workers: Sequence[str], pids: Mapping[str, int | None], *,
                    isolated: bool, in_process: bool) -> dict[str, Any]:
    """``meta["network"]`` of a tf.data service: advertised addresses, what each server listens on and
    which servers each process connected to.

    ``pids`` maps ``"dispatcher:0"`` / ``"data_worker:<i>"`` to the process serving it (``None``: not
    ours, or gone). ``LocalDataService`` runs its consumers in the dispatcher's process, so that
    process's connections are the consumers' (``"consumer"``: every consumer). With ``in_process``
    every server shares one process: each keeps only the sockets on its own port, and connections
    cannot be told apart (none are recorded).

    Example:
        >>> service_network("127.0.0.1:1", [], {"dispatcher:0": None}, isolated=True, in_process=False)["listening"]
        {}
    """
    ports = {"dispatcher:0": dispatcher, **{f"data_worker:{i}": a for i, a in enumerate(workers)}}
    seen: dict[str, dict[str, list[str]]] = {}
    for task, pid in pids.items():
        if pid is None:
            continue
        found = sockets(pid)
        if in_process:
            port = ":" + ports.get(task, "").rpartition(":")[2]
            seen[task] = {"listening": [a for a in found["listening"] if a.endswith(port)]}
        elif task == "dispatcher:0":
            seen[task] = {"listening": found["listening"]}
            seen["consumer"] = {"listening": [], "connected": found["connected"]}
        else:
            seen[task] = found
    return network_meta({"dispatcher": [dispatcher], "data_worker": list(workers)}, seen=seen, isolated=isolated)


def tpu_meta(tpu_topology: Any, *, job: str = "worker", addresses: Sequence[str] = (),
             accelerator: str = "") -> dict[str, Any]:
    """``trace.meta["tpu"]`` from a ``tf.tpu.experimental.Topology``: its hosts and their cores.

    Args:
        tpu_topology: what ``tf.tpu.experimental.initialize_tpu_system(resolver)`` returns.
        job: the TPU hosts' job name (``TPUClusterResolver(...).get_job_name()``, usually ``"worker"``).
        addresses: the hosts' addresses (``resolver.cluster_spec().as_dict()[job]``), if known.
        accelerator: the TPU type, e.g. ``"v3-8"``, if known.

    Example:
        >>> import tensorflow as tf, numpy as np                                   # doctest: +SKIP
        >>> coords = np.array([[[x, 0, 0, c] for x in range(2) for c in range(2)]])  # doctest: +SKIP
        >>> tpu_meta(tf.tpu.experimental.Topology(mesh_shape=[2, 1, 1, 2], device_coordinates=coords))["num_cores"]  # doctest: +SKIP
        4
    """
    import numpy as np

    coords = np.asarray(tpu_topology.device_coordinates)
    hosts = []
    for task in range(int(tpu_topology.num_tasks)):
        cores = [{"core": int(tpu_topology.tpu_device_ordinal_at_coordinates(c)),
                  "device": str(tpu_topology.tpu_device_name_at_coordinates(c, job=job)),
                  "coordinates": [int(x) for x in c]} for c in coords[task]]
        hosts.append({"task": task, "address": str(addresses[task]) if task < len(addresses) else "",
                      "cpu_device": str(tpu_topology.cpu_device_name_at_coordinates(coords[task][0], job=job)),
                      "cores": cores})
    return {"job": job, "accelerator": accelerator, "mesh_shape": [int(x) for x in tpu_topology.mesh_shape],
            "num_hosts": int(tpu_topology.num_tasks), "cores_per_host": int(tpu_topology.num_tpus_per_task),
            "num_cores": int(tpu_topology.num_tasks) * int(tpu_topology.num_tpus_per_task), "hosts": hosts}
