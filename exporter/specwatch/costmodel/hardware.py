"""GPU hardware: peak HBM bandwidth and dense tensor FLOPS per compute dtype, and the presets.

Preset numbers are dense (no 2:4 sparsity) and each carries its source; the table and the
reasoning are in docs/costmodel.md ("Hardware presets").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specwatch.costmodel.errors import CostModelError


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    bandwidth_bytes_per_second: float
    flops: Mapping[str, float]  # compute dtype -> dense peak FLOP/s ("bf16", "fp8", "int8")
    memory_bytes: float | None = None
    source: str = ""

    def peak_flops(self, compute_dtype: str) -> float:
        # A GPU without FP8/INT8 tensor cores (A100 has no FP8) runs those weights through
        # bf16 math (weight-only kernels), so fall back to the bf16 peak.
        return self.flops.get(compute_dtype) or self.flops["bf16"]


#: Which tensor-core math a weight dtype uses: fp8 -> W8A8 fp8, int8 -> W8A8 int8,
#: int4 -> weight-only W4A16 (dequantised into bf16 GEMMs).
COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16"}

_T = 1e12
_GB = 1e9


def _gpu(
    name: str, tb_per_second: float, gb: float, *, bf16: float, fp8: float | None = None, int8: float, source: str
) -> HardwareSpec:
    """A preset in datasheet units: TB/s, GB and dense TFLOPS (no fp8: no FP8 tensor cores)."""
    flops = {"bf16": bf16 * _T} | ({"fp8": fp8 * _T} if fp8 is not None else {}) | {"int8": int8 * _T}
    return HardwareSpec(name, tb_per_second * _T, flops, gb * _GB, source)


HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    spec.name: spec
    for spec in (
        _gpu(
            "h100-sxm",
            3.35,
            80,
            bf16=989.4,
            fp8=1979,
            int8=1979,
            source="NVIDIA H100 product page, SXM column (989.4 TFLOPS bf16 / 1979 fp8 dense, 3.35 TB/s); "
            "transcribed twice",
        ),
        _gpu(
            "h100-pcie",
            2.0,
            80,
            bf16=756,
            fp8=1513,
            int8=1513,
            source="NVIDIA H100 datasheet, PCIe column (2.0 TB/s, ~756 bf16 / ~1513 fp8); not re-verified",
        ),
        _gpu(
            "h200",
            4.8,
            141,
            bf16=989.4,
            fp8=1979,
            int8=1979,
            source="NVIDIA H200 page: 4.8 TB/s, same GH100 compute as H100 SXM",
        ),
        _gpu(
            "a100-80gb",
            2.039,
            80,
            bf16=312,
            int8=624,
            source="NVIDIA A100 datasheet (2.039 TB/s, 312 TFLOPS bf16, 624 TOPS int8, no FP8)",
        ),
        _gpu("a100-40gb", 1.555, 40, bf16=312, int8=624, source="NVIDIA A100 datasheet, 40GB column (1.555 TB/s)"),
        _gpu(
            "l40s",
            0.864,
            48,
            bf16=362.05,
            fp8=733,
            int8=733,
            source="NVIDIA L40S datasheet (864 GB/s GDDR6, 362 bf16 / 733 fp8)",
        ),
        _gpu(
            "mi300x",
            5.3,
            192,
            bf16=1307.4,
            fp8=2614.9,
            int8=2614.9,
            source="AMD Instinct MI300X spec page (5.3 TB/s, 1307.4 bf16 / 2614.9 fp8)",
        ),
        _gpu(
            "b200",
            7.7,
            180,
            bf16=2250,
            fp8=4500,
            int8=4500,
            source="NVIDIA HGX B200 table https://www.nvidia.com/en-us/data-center/hgx/ (per GPU: 180 GB HBM3e, "
            "7.7 TB/s; 4.5 PFLOPS bf16 / 9 fp8 with sparsity, so 2.25 / 4.5 dense at 1000 W); DGX B200 and "
            "most write-ups quote 8 TB/s",
        ),
        _gpu(
            "h20",
            4.0,
            96,
            bf16=148,
            fp8=296,
            int8=296,
            source="no public NVIDIA datasheet (China-market Hopper); secondary sources agree on 96 GB, 4.0 TB/s, "
            "148 TFLOPS fp16/bf16 dense, 296 fp8/int8 dense (https://willitrunai.com/es/gpus/h20-96gb)",
        ),
        _gpu(
            "mi325x",
            6.0,
            256,
            bf16=1307.4,
            fp8=2614.9,
            int8=2614.9,
            source="AMD Instinct MI325X https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html "
            "(256 GB HBM3E, 6 TB/s; same compute as MI300X: 1307.4 bf16 / 2614.9 fp8 dense)",
        ),
        _gpu(
            "l4",
            0.3,
            24,
            bf16=121,
            fp8=242,
            int8=242,
            source="NVIDIA L4 datasheet https://www.nvidia.com/en-us/data-center/l4/ (24 GB GDDR6, 300 GB/s; "
            "242 bf16 / 485 fp8 with sparsity, so 121 / 242 dense)",
        ),
    )
}

DEFAULT_HARDWARE = "h100-sxm"


def hardware_from(
    preset: str | None = DEFAULT_HARDWARE, bandwidth_bytes_per_second: float | None = None, flops: float | None = None
) -> HardwareSpec:
    """A preset, a preset with raw overrides, or raw bandwidth + bf16 FLOPS alone."""
    base = None
    if preset:
        if preset not in HARDWARE_PRESETS:
            raise CostModelError(
                "hardware", f"hardware: unknown preset '{preset}' (one of {', '.join(HARDWARE_PRESETS)})"
            )
        base = HARDWARE_PRESETS[preset]
    if base is None:
        if not bandwidth_bytes_per_second or not flops:
            raise CostModelError("hardware", "hardware: give a preset or both bandwidth_bytes_per_second and flops")
        return HardwareSpec(
            "custom",
            float(bandwidth_bytes_per_second),
            {"bf16": float(flops)},
            None,
            "user-supplied bandwidth and FLOPS",
        )
    if bandwidth_bytes_per_second or flops:
        # Raw numbers override the preset; a FLOPS override applies to every compute dtype's ratio.
        bw = float(bandwidth_bytes_per_second or base.bandwidth_bytes_per_second)
        scale = float(flops) / base.flops["bf16"] if flops else 1.0
        return HardwareSpec(
            base.name + "+custom",
            bw,
            {k: v * scale for k, v in base.flops.items()},
            base.memory_bytes,
            base.source + "; overridden by user",
        )
    return base
