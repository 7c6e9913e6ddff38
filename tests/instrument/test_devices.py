"""virtual_devices: splits before TF starts, clear error after."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})


def test_split_cpu_into_logical_devices():
    out = run("import vizdist; print(vizdist.virtual_devices(3))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['/device:CPU:0', '/device:CPU:1', '/device:CPU:2']"


def test_after_tf_started_says_restart():
    out = run("import tensorflow as tf, vizdist; tf.constant(1); vizdist.virtual_devices(4)")
    assert out.returncode != 0
    assert "Restart the kernel" in out.stderr and "virtual_devices(4) first" in out.stderr


def test_repeat_call_with_same_n_is_harmless(devices):
    import vizdist

    assert vizdist.virtual_devices(len(devices)) == devices


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4"])
def test_bad_n(bad):
    import vizdist

    with pytest.raises(ValueError, match="whole number of devices"):
        vizdist.virtual_devices(bad)


def test_gpu_without_gpu_is_a_clear_error(tf):
    import vizdist

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="found no GPU"):
        vizdist.virtual_devices(2, kind="GPU")


def test_importing_vizdist_patches_nothing_in_tensorflow_until_asked():
    """TF's tf.data service functions are wrapped explicitly (virtual_devices, a run), never by an import."""
    import subprocess
    import sys

    code = ("import vizdist.instrument.run.distribution, vizdist.instrument.core.devices\n"
            "from vizdist.instrument.core import service_registry as registry\n"
            "before = registry.installed()\n"
            "import vizdist; vizdist.virtual_devices(2)\n"
            "print(before, registry.installed())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-2:] == ["False", "True"]
