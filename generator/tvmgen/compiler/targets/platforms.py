"""Platforms x devices: the one place that knows TVM targets.

Every other module asks this table for a target (as a JSON dict), the exporter to use,
and the facts the manifest records (ABI, architecture, DLPack device types).
"""

from __future__ import annotations

import functools
import platform as _platform
import re
from dataclasses import dataclass
from typing import Any

from tvmgen.core.errors import InputError

GPU_FAMILIES = ("adreno", "mali", "generic", "desktop")


@dataclass(frozen=True)
class GpuLimits:
    """What one work-group of a GPU family may use: every schedule tvmgen makes stays within it
    (``compiler.gpu.limits``)."""

    name: str
    shared_bytes: int  # local memory per work-group: OpenCL __local, Vulkan/CUDA shared, Metal threadgroup
    threads: int  # threads (work-items, invocations) per work-group


# Per family, the least its devices give a work-group: what an artifact for the family must fit in.
# - generic OpenCL: the OpenCL 1.2 full profile's minimum local memory (32 KB); 256 threads, the most TVM's
#   OpenCL targets schedule (the spec sets no useful minimum).
# - adreno, mali: 32 KB of local memory (Adreno 5xx-7xx, Mali Midgard to Valhall report 32 KB or more); Adreno
#   takes work-groups of 1024, Mali Midgard 256.
# - desktop OpenCL (NVIDIA, AMD, Intel): 48 KB (NVIDIA's without opting in), 1024 threads.
# - vulkan: the spec's minimum maxComputeSharedMemorySize, 16 KB; 256 invocations (the spec's minimum is 128,
#   but the mobile, desktop and software (lavapipe) drivers tvmgen targets take 256 or more, and TVM's
#   Vulkan schedules use up to 256).
# - metal (Apple GPUs): 32 KB of threadgroup memory, 1024 threads; cuda: 48 KB, 1024.
GPU_LIMITS = {
    "generic": GpuLimits("generic OpenCL", 32 * 1024, 256),
    "adreno": GpuLimits("Adreno", 32 * 1024, 1024),
    "mali": GpuLimits("Mali", 32 * 1024, 256),
    "desktop": GpuLimits("desktop OpenCL", 48 * 1024, 1024),
    "vulkan": GpuLimits("Vulkan", 16 * 1024, 256),
    "metal": GpuLimits("Apple (Metal)", 32 * 1024, 1024),
    "cuda": GpuLimits("CUDA", 48 * 1024, 1024),
}


def gpu_limits(target) -> GpuLimits | None:
    """The limits of the GPU family a TVM target builds for (its kind, and an OpenCL target's device); None
    for a CPU target."""
    kind = target.kind.name
    if kind == "opencl":
        family = str(target.attrs.get("device", "") or "generic")
        return GPU_LIMITS.get(family, GPU_LIMITS["generic"])
    return GPU_LIMITS.get(kind)


@dataclass(frozen=True)
class Platform:
    name: str
    description: str
    abi: str  # Android ABI name, or the architecture name elsewhere
    arch: str  # ELF/Mach-O machine the library must be built for: x86_64, aarch64, arm
    llvm: tuple  # CPU target attributes as (key, value) pairs; the host's are filled at run time
    devices: tuple[str, ...]
    exporter: str  # key into compiler.export.EXPORTERS
    system_lib: bool = False  # static linking (iOS cannot dlopen an uploaded library)
    features: tuple[str, ...] = ()  # extra LLVM CPU features (compile --cpu-features), e.g. +dotprod
    cpu: str | None = None  # LLVM CPU name (compile --cpu); the host's own CPU when None on host

    def cpu_target(self) -> dict:
        target = dict(host_cpu_target()) if self.name == "host" else {"kind": "llvm", **dict(self.llvm)}
        if self.cpu:
            target["mcpu"] = self.cpu
        if self.features:
            target["mattr"] = [*target.get("mattr", []), *self.features]
        return target

    def with_cpu(self, cpu: str) -> Platform:
        """This platform's code for the CPU LLVM calls ``cpu`` (haswell, skylake-avx512, cortex-a76)."""
        import dataclasses

        from tvm.target import codegen

        triple = dict(self.llvm).get("mtriple") or f"{self.arch}-linux-gnu"
        if not codegen.llvm_is_valid_cpu(cpu, triple):
            raise InputError(
                f"LLVM knows no CPU {cpu!r} for {self.name} ({triple})",
                "e.g. --cpu haswell (AVX2), --cpu skylake-avx512, --cpu x86-64-v3, "
                "--cpu cortex-a76; this machine's is " + host_cpu_target()["mcpu"],
            )
        return dataclasses.replace(self, cpu=cpu)

    def with_features(self, features) -> Platform:
        """This platform with extra CPU features ("+dotprod", "-avx512f"), checked for form."""
        import dataclasses

        features = tuple(f.strip() for f in features if f.strip())
        bad = [f for f in features if not re.fullmatch(r"[+-][A-Za-z0-9][A-Za-z0-9._-]*", f)]
        if bad:
            raise InputError(
                f"CPU feature(s) {', '.join(map(repr, bad))} are not of the form +name or -name",
                "e.g. --cpu-features +dotprod (Arm dot product) or +dotprod,+i8mm",
            )
        return dataclasses.replace(self, features=self.features + features)


@functools.lru_cache(maxsize=1)
def host_cpu_target() -> dict:
    # "native" falls back to a generic CPU; LLVM's own name for this CPU keeps AVX2/AVX-512.
    import tvm

    return {"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()}


def missing_cpu_features(target: dict, host_cpu: str | None = None) -> list[str]:
    """The CPU features an x86-64 host target's code may use that ``host_cpu`` (default: this
    machine's CPU) lacks: code built for AVX-512 stops with an illegal instruction on an AVX2 CPU."""
    from tvm.target import Target, codegen

    cpu_part = target.get("host", target)
    if cpu_part.get("kind") != "llvm" or cpu_part.get("mtriple") or _host_arch() != "x86_64":
        return []
    wanted = set(codegen.llvm_get_cpu_features(Target(cpu_part)))
    have = set(codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": host_cpu or host_cpu_target()["mcpu"]})))
    # the vector extensions are what differs between x86-64 servers and desktops
    return sorted(f for f in wanted - have if f.startswith(("avx", "fma", "f16c", "bmi", "sse", "amx", "vnni")))


def _host_arch() -> str:
    machine = _platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in [
        Platform(
            "host",
            "this machine (run and check here)",
            _host_arch(),
            _host_arch(),
            (),
            ("cpu", "opencl", "cuda", "vulkan"),
            "host",
        ),
        Platform(
            "linux-aarch64",
            "64-bit Arm Linux (boards, emulated phone CPU under qemu)",
            "aarch64",
            "aarch64",
            (("mtriple", "aarch64-linux-gnu"), ("mattr", ["+neon"])),
            ("cpu", "opencl", "vulkan"),
            "aarch64-linux-gnu",
        ),
        Platform(
            "android-arm64",
            "Android phones, arm64-v8a",
            "arm64-v8a",
            "aarch64",
            (("mtriple", "aarch64-linux-android"), ("mattr", ["+neon"])),
            ("cpu", "opencl", "vulkan", "nnapi"),
            "ndk",
        ),
        Platform(
            "android-armv7",
            "older Android phones, armeabi-v7a",
            "armeabi-v7a",
            "arm",
            (("mtriple", "armv7a-linux-androideabi"), ("mattr", ["+neon"])),
            ("cpu", "opencl", "vulkan", "nnapi"),
            "ndk",
        ),
        Platform(
            "android-x86_64",
            "Android emulator / x86_64 devices",
            "x86_64",
            "x86_64",
            (("mtriple", "x86_64-linux-android"),),
            ("cpu", "opencl", "vulkan", "nnapi"),
            "ndk",
        ),
        Platform(
            "ios-arm64",
            "iPhone / iPad, static system library",
            "arm64",
            "aarch64",
            (("mtriple", "aarch64-apple-ios"),),
            ("cpu", "metal"),
            "xcode",
            system_lib=True,
        ),
    ]
}


@dataclass(frozen=True)
class Device:
    """What a ``--device`` is: every step asks this table instead of comparing device names."""

    name: str
    description: str
    dl_type: int  # DLPack device type (dlpack.h): what the runtime passes to vm_initialization
    gpu: bool  # its kernels run on a GPU (launched from the host: host timers see launches, not kernels)
    target_kind: str  # the TVM target kind of its kernels ("llvm": CPU code, the platform's CPU target)
    backend: str | None = None  # tvmgen's runtime backend library (libtvmgen_<backend>) that runs its kernels
    partitions: bool = False  # parts of the model go to the phone's own driver (NNAPI); the rest is CPU code
    tunable: bool = False  # a --tuning-db's records apply (MetaSchedule's CPU or generic GPU rules)
    # why --check cannot run this device's kernels here (None: the artifact itself runs where it was built
    # for); a host build for a device with a ``backend`` still runs here where this machine has such a device
    not_checked: str | None = None
    tvm_codegen: bool = True  # TVM's wheel generates its kernels (False: tvmgen's own code generator)

    @property
    def host_memory(self) -> bool:
        """Its tensors live in the CPU's memory: numpy arrays are used in place, no copies."""
        return self.dl_type == 1

    @property
    def app_fallback(self) -> str | None:
        """The device an app also ships an artifact for, where this one is missing on a phone."""
        return None if self.name == "cpu" else "cpu"


_GPU_NOT_CHECKED = "its {0} kernels run on the target's GPU, through its {0} driver"

DEVICE_TABLE: dict[str, Device] = {
    d.name: d
    for d in [
        Device("cpu", "the CPU (LLVM code)", 1, gpu=False, target_kind="llvm", tunable=True),
        Device(
            "opencl",
            "the GPU through OpenCL (tvmgen's OpenCL backend)",
            4,
            gpu=True,
            target_kind="opencl",
            backend="opencl",
            tunable=True,
            not_checked=_GPU_NOT_CHECKED.format("OpenCL"),
        ),
        Device(
            "vulkan",
            "the GPU through Vulkan (tvmgen's GLSL code generator and Vulkan backend)",
            7,
            gpu=True,
            target_kind="vulkan",
            backend="vulkan",
            not_checked=_GPU_NOT_CHECKED.format("Vulkan"),
            tvm_codegen=False,
        ),
        Device(
            "metal",
            "the Apple GPU through Metal",
            8,
            gpu=True,
            target_kind="metal",
            not_checked="its Metal kernels run only on an Apple GPU",
        ),
        Device("cuda", "an NVIDIA GPU through CUDA (TVM's runtime)", 2, gpu=True, target_kind="cuda"),
        Device(
            "nnapi",
            "Android's NNAPI drivers, with what they do not take on the CPU",
            1,  # NNAPI parts are called from the CPU
            gpu=False,
            target_kind="llvm",
            partitions=True,
            tunable=True,
            not_checked="the NNAPI parts run in the phone's NNAPI drivers",
        ),
    ]
}

DEVICES = tuple(DEVICE_TABLE)
DL_DEVICE_TYPES = {name: d.dl_type for name, d in DEVICE_TABLE.items()}


def get_device(name: str) -> Device:
    try:
        return DEVICE_TABLE[name]
    except KeyError:
        raise InputError(f"unknown device {name!r}", f"use one of: {', '.join(DEVICES)}") from None


def valid_pairs() -> list[str]:
    return [f"{p.name}/{d}" for p in PLATFORMS.values() for d in p.devices]


def get_platform(name: str) -> Platform:
    try:
        return PLATFORMS[name]
    except KeyError:
        raise InputError(
            f"unknown platform {name!r}",
            f"use one of: {', '.join(PLATFORMS)}",
        ) from None


def check_pair(platform: Platform, device: str) -> None:
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}", f"use one of: {', '.join(DEVICES)}")
    if device not in platform.devices:
        raise InputError(
            f"device {device!r} is not available on platform {platform.name!r}",
            "valid platform/device pairs: " + ", ".join(valid_pairs()),
        )


@dataclass(frozen=True)
class BuildTarget:
    """A platform, a device on it and a GPU family, checked together once (from the command line's
    options), with the TVM target they make: what every later step reads instead of the options."""

    platform: Platform
    device: str
    gpu_family: str = "generic"

    def __post_init__(self) -> None:
        check_pair(self.platform, self.device)
        if self.kind.target_kind == "opencl" and self.gpu_family not in GPU_FAMILIES:
            raise InputError(f"unknown GPU family {self.gpu_family!r}", f"use one of: {', '.join(GPU_FAMILIES)}")

    @property
    def kind(self) -> Device:
        """The device's entry in DEVICE_TABLE."""
        return DEVICE_TABLE[self.device]

    @functools.cached_property
    def spec(self) -> dict:
        """The target as the JSON dict TVM 0.27 accepts (and the manifest records)."""
        return target_dict(self.platform, self.device, self.gpu_family)

    @functools.cached_property
    def tvm(self):
        """The ``tvm.target.Target`` (made once: TVM parses the dict and queries LLVM)."""
        return make_target(self.spec)


def target_dict(platform: Platform, device: str, gpu_family: str = "generic") -> dict:
    """The TVM target for a platform/device pair, as the JSON dict TVM 0.27 accepts.

    GPU targets carry the platform's CPU target as their host. Plain dicts are kept in the
    manifest so the runtime and later commands never parse TVM target strings.
    """
    check_pair(platform, device)
    cpu = platform.cpu_target()
    kind = DEVICE_TABLE[device].target_kind
    if kind == "llvm":  # with NNAPI, what NNAPI does not take runs on the CPU
        return cpu
    # vulkan: tvmgen's own code generator (compiler.vulkan) reads this target: GLSL -> SPIR-V
    gpu: dict[str, Any] = {"kind": kind}
    if kind == "opencl":
        if gpu_family not in GPU_FAMILIES:
            raise InputError(f"unknown GPU family {gpu_family!r}", f"use one of: {', '.join(GPU_FAMILIES)}")
        if gpu_family == "adreno":  # TVM's Adreno schedules, with texture (image) memory
            gpu.update(device="adreno", keys=["adreno", "opencl", "gpu", "texture"])
        elif gpu_family != "generic":
            gpu["device"] = gpu_family
    return {**gpu, "host": cpu}


def make_target(spec: dict):
    """A tvm.target.Target from a dict made by target_dict."""
    from tvm.target import Target

    spec = dict(spec)
    host = spec.pop("host", None)
    if host is None:
        return Target(spec)
    return Target(spec, host=Target(host))


def tunable(target) -> bool:
    """Whether ``target`` is built with TVM's generic GPU pipeline here (so a database applies):
    OpenCL, except the Adreno family, which TVM gives a pipeline of its own."""
    return target.kind.name == "opencl" and "adreno" not in [str(k) for k in target.keys]


def app_devices(device: str) -> list[str]:
    """The devices an app ships models for: ``device``, then the one it falls back to on a phone without
    it (a GPU / NNAPI app runs on the CPU there)."""
    fallback = get_device(device).app_fallback
    return [device] + ([fallback] if fallback else [])


def app_targets(platform_names, device: str, gpu_family: str = "generic") -> list[BuildTarget]:
    """The builds an Android app ships: ``device`` and its fallback (app_devices) on the first platform
    (one ABI's models ship); every platform named is checked against ``device`` first."""
    platforms = [get_platform(name) for name in platform_names]
    for platform in platforms:
        check_pair(platform, device)
    return [BuildTarget(platforms[0], d, gpu_family) for d in app_devices(device)]
