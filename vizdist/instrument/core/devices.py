"""Logical devices: split one CPU (or each GPU) into several, before TF starts."""

from __future__ import annotations

import tensorflow as tf

from vizdist.instrument.core import service_registry as _service_registry

__all__ = ["virtual_devices"]

def _initialized() -> bool:
    from vizdist.instrument.tfapi import runtime

    return runtime.context_initialized()


def virtual_devices(n: int = 4, kind: str = "CPU", *, memory_limit_mb: int = 1024) -> list[str]:
    """Split the machine into ``n`` logical devices and return their names.

    Call it first, before anything runs TensorFlow (in a notebook: the setup
    cell, right after setting the ``TF_*`` environment variables).

    Args:
        n: logical devices per physical device (1 or more).
        kind: ``"CPU"`` splits the first CPU into ``n`` logical CPUs (works
            everywhere); ``"GPU"`` splits each GPU into ``n`` logical GPUs of
            ``memory_limit_mb`` each; ``"auto"`` uses GPUs when there are any,
            else CPUs.
        memory_limit_mb: memory of each logical GPU.

    With ``kind="CPU"`` on a machine with GPUs, the GPUs are left whole but grow their memory as
    needed: by default TF maps nearly all of a GPU's memory when it first uses it, which would leave
    none for the worker and tf.data service processes vizdist starts beside this one (they grow theirs
    too: ``TF_FORCE_GPU_ALLOW_GROWTH``).

    It also lets vizdist see the tf.data service pipelines built after it
    (:func:`vizdist.instrument.core.service_registry.install`), so they trace with real ids.

    Returns:
        The logical device names, e.g. ``['/device:CPU:0', ..., '/device:CPU:3']``.

    Raises:
        RuntimeError: TensorFlow already started with another device layout;
            restart the kernel and call this first.

    Example:
        >>> import vizdist
        >>> vizdist.virtual_devices(4)          # doctest: +SKIP
        ['/device:CPU:0', '/device:CPU:1', '/device:CPU:2', '/device:CPU:3']
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number of devices, 1 or more; got {n!r}.")
    _service_registry.install()  # so a tf.data service pipeline built after this can be traced with real ids
    kind = str(kind).upper()
    if kind not in ("CPU", "GPU", "AUTO"):
        raise ValueError(f"kind must be 'CPU', 'GPU' or 'auto'; got {kind!r}.")
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "AUTO":
        kind = "GPU" if gpus else "CPU"
    if kind == "GPU" and not gpus:
        raise RuntimeError(
            "virtual_devices(kind='GPU') found no GPU on this machine. Use kind='CPU' (works everywhere) "
            "or kind='auto' (GPUs when present)."
        )
    physical = gpus if kind == "GPU" else tf.config.list_physical_devices("CPU")[:1]
    if kind == "GPU":
        wanted = [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb) for _ in range(n)]
    else:
        wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(n)]

    def current_count(dev: tf.config.PhysicalDevice) -> int:
        conf = tf.config.get_logical_device_configuration(dev)
        return len(conf) if conf else 1

    if kind == "CPU" and not _initialized():
        _grow_memory(gpus)
    if all(current_count(d) == n for d in physical) and (_initialized() or n == 1):
        return [d.name for d in tf.config.list_logical_devices(kind)]
    if _initialized():
        have = len(tf.config.list_logical_devices(kind))
        raise RuntimeError(
            f"TensorFlow has already started with {have} logical {kind} device(s), so it cannot be split "
            f"into {n} now (TF fixes its devices when it first runs). Restart the kernel (or process) and "
            f"call vizdist.virtual_devices({n}) first, before any other TensorFlow code."
        )
    for dev in physical:
        tf.config.set_logical_device_configuration(dev, wanted)
    return [d.name for d in tf.config.list_logical_devices(kind)]


def _grow_memory(gpus: list[tf.config.PhysicalDevice]) -> None:
    """Let GPUs this process does not split take memory as they need it (see :func:`virtual_devices`)."""
    for gpu in gpus:
        if not tf.config.get_logical_device_configuration(gpu):
            tf.config.experimental.set_memory_growth(gpu, True)
