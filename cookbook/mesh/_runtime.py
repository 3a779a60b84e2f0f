"""What this process runs on: platform, chips, the matching slice, how many processes."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from cookbook import core


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    platform: str  # "tpu" | "gpu" | "cpu"
    device_kind: str
    num_devices: int  # global, across processes
    num_local_devices: int
    process_count: int
    process_index: int
    chip: str | None  # "v5p", "v6e", "v5e", ... for TPUs
    slice: core.SliceSpec | None  # the matching known slice (TPU) or core.cpu_slice (CPU)
    fake_cpu_devices: bool  # CPU devices made with --xla_force_host_platform_device_count

    def describe(self) -> str:
        procs = f"{self.process_count} process{'es' if self.process_count > 1 else ''}"
        if self.platform == "tpu":
            where = self.slice.describe() if self.slice else f"{self.num_devices} x {self.device_kind}"
            return f"TPU: {where}; {self.num_local_devices} chips on this host, {procs}"
        if self.platform == "gpu":
            return f"GPU: {self.num_devices} x {self.device_kind}, {procs}"
        fake = " (fake, from XLA_FLAGS)" if self.fake_cpu_devices else ""
        return f"CPU: {self.num_devices} device{'s' if self.num_devices > 1 else ''}{fake}, {procs}; no accelerator"

    def results(self) -> dict[str, Any]:
        """What notebook 01 records of the runtime."""
        return {
            "platform": self.platform,
            "device_kind": self.device_kind,
            "num_devices": self.num_devices,
            "process_count": self.process_count,
        }


def detect_runtime() -> Runtime:
    """Describe the devices JAX sees (initialising JAX's backend)."""
    import jax

    devices = jax.devices()
    d0 = devices[0]
    chip = core.chip_of(d0.device_kind) if d0.platform != "cpu" else None
    found: core.SliceSpec | None = None
    if d0.platform == "tpu" and chip:
        found = next(
            (s for s in core.SLICES.values() if s.chip.name == chip and s.num_devices == len(devices)),
            None,
        )
    elif d0.platform == "cpu":
        found = core.cpu_slice(len(devices))
    return Runtime(
        platform=d0.platform,
        device_kind=d0.device_kind,
        num_devices=len(devices),
        num_local_devices=jax.local_device_count(),
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        chip=chip,
        slice=found,
        fake_cpu_devices=d0.platform == "cpu"
        and "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""),
    )
