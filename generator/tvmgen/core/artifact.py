"""The artifact directory: model library, optional detached weights, and manifest.json.

Everything downstream (run, device runtime, apps, RPC bench) reads the manifest and
nothing else. The directory is written in a temporary sibling and renamed into place only
when complete, so a failed compile never leaves a half-written artifact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tvmgen.core import interrupts
from tvmgen.core.errors import InputError
from tvmgen.core.model import TensorSpec

log = logging.getLogger("tvmgen.artifact")

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


@dataclass
class Manifest:
    model: dict  # name, format, source, sha256
    platform: str
    abi: str
    arch: str
    device: str
    target: dict  # TVM target as JSON dict (GPU targets carry "host")
    export: dict  # kind: shared|objects|static, library, system_lib, finish_command
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    vm: dict  # entry, devices: [{name, dl_device_type, id, alloc_type}]
    params: dict | None = None  # file, names (order of main's weight arguments)
    files: dict = field(default_factory=dict)  # name -> {sha256, bytes}
    versions: dict = field(default_factory=dict)
    created: str = ""
    schema_version: int = SCHEMA_VERSION
    runtime_needs: dict = field(default_factory=dict)  # e.g. {"nnapi": {library, loader, min_android_api}}
    precision: str = "fp32"  # "fp16": weights and activations in float16; inputs/outputs stay float32
    # Streaming state the runtime carries from run to run: [{input, output, shape, dtype, initial}], where
    # initial is a .npy file of the artifact (listed in files) or None for zeros. Empty: a stateless model.
    state: list[dict] = field(default_factory=list)

    @property
    def state_inputs(self) -> set[str]:
        return {s["input"] for s in self.state}

    @property
    def state_outputs(self) -> set[str]:
        return {s["output"] for s in self.state}

    @property
    def own_inputs(self) -> list[TensorSpec]:
        """The inputs a caller gives: every input of main but the state ones (the runtime feeds those)."""
        held = self.state_inputs
        return [s for s in self.inputs if s.name not in held]

    @property
    def own_outputs(self) -> list[TensorSpec]:
        """The outputs a caller gets: every output of main but the state ones (the runtime keeps those)."""
        held = self.state_outputs
        return [s for s in self.outputs if s.name not in held]

    def to_json(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "created": self.created,
            "versions": self.versions,
            "model": self.model,
            "platform": self.platform,
            "abi": self.abi,
            "arch": self.arch,
            "device": self.device,
            "target": self.target,
            "export": self.export,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "params": self.params,
            "vm": self.vm,
            "files": self.files,
            **({"runtime_needs": self.runtime_needs} if self.runtime_needs else {}),
            "precision": self.precision,
            **({"state": self.state} if self.state else {}),
        }

    @classmethod
    def from_json(cls, d: dict) -> Manifest:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise InputError(
                f"manifest schema version {d.get('schema_version')} is not the one this tvmgen reads ({SCHEMA_VERSION})",
                "compile the model again with this version of tvmgen",
            )
        return cls(
            model=d["model"],
            platform=d["platform"],
            abi=d["abi"],
            arch=d["arch"],
            device=d["device"],
            target=d["target"],
            export=d["export"],
            inputs=[TensorSpec.from_json(t) for t in d["inputs"]],
            outputs=[TensorSpec.from_json(t) for t in d["outputs"]],
            vm=d["vm"],
            params=d.get("params"),
            files=d.get("files", {}),
            versions=d.get("versions", {}),
            created=d.get("created", ""),
            schema_version=d["schema_version"],
            runtime_needs=d.get("runtime_needs", {}),
            precision=d.get("precision", "fp32"),  # manifests written before --precision: fp32
            state=[_state_entry(e) for e in d.get("state") or []],
        )


def _state_entry(d: dict) -> dict:
    """One entry of the manifest's state list, its fields checked (a KeyError or TypeError says it is corrupt)."""
    initial = d["initial"]
    if initial is not None and not isinstance(initial, str):
        raise TypeError(f"state initial value {initial!r} is neither a file name nor null")
    return {
        "input": str(d["input"]),
        "output": str(d["output"]),
        "shape": [int(x) for x in d["shape"]],
        "dtype": str(d["dtype"]),
        "initial": initial,
    }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def exclusive(lock_path: Path):
    """Hold an exclusive lock on ``lock_path`` (created if missing) for the ``with`` block: processes that
    build into the same cache directory (two test workers, two shells) take turns instead of racing."""
    import fcntl

    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def load(directory: Path, verify: bool = True) -> Manifest:
    """Read an artifact's manifest; with ``verify``, check every file against its recorded hash."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        what = "does not exist" if not directory.exists() else f"has no {MANIFEST}"
        raise InputError(
            f"{directory} {what}: it is not a tvmgen artifact directory",
            "pass the directory that `tvmgen compile` wrote (its --out)",
        )
    try:
        manifest = Manifest.from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path} is corrupt ({type(e).__name__}: {e})", "compile the model again") from e
    if verify:
        for name, info in manifest.files.items():
            f = directory / name
            if not f.is_file():
                raise InputError(f"{f} is missing from the artifact", "compile the model again")
            if sha256_file(f) != info["sha256"]:
                raise InputError(
                    f"{f} does not match the sha256 in {MANIFEST}: the file changed or is corrupt",
                    "compile the model again",
                )
    return manifest


def refuse_existing(out_dir: Path, force: bool) -> None:
    """An existing output directory is replaced only with --force: checked before minutes of work."""
    if Path(out_dir).exists() and not force:
        raise InputError(
            f"output directory {out_dir} already exists", "pass --force to replace it, or choose another --out"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(out_dir: Path) -> list[Path]:
    """Remove the temporary folders a killed compile left beside ``out_dir`` (``.NAME.tmp-PID-*`` from
    ``staging``, ``.NAME.old-PID`` from its swap) whose process is gone; those of a live process (another
    compile into the same place) stay. Folders named without a process id are left alone: nothing says
    whose they are. Returns what was removed."""
    out_dir = Path(out_dir).absolute()
    if not out_dir.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(out_dir.name)}\.(?:tmp-(\d+)-.+|old-(\d+))")
    removed = []
    for entry in sorted(out_dir.parent.iterdir()):
        m = pattern.fullmatch(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(m.group(1) or m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        if m.group(2) and not out_dir.exists():  # the swap was cut short: the old artifact is the only one
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed


@contextlib.contextmanager
def staging(out_dir: Path, force: bool):
    """Yield a temporary directory; on success it replaces ``out_dir``, on failure or an interrupt it is
    removed. Its name carries this process's id, so a later compile can tell one a killed run left
    (``remove_stale``) from one a running compile is writing."""
    out_dir = Path(out_dir).absolute()
    refuse_existing(out_dir, force)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir} exists and is not a directory", "choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale(out_dir):
        log.info("removed %s, left by a compile that was killed", stale)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{os.getpid()}-", dir=out_dir.parent))
    try:
        yield tmp
        interrupts.reraise_if_interrupted()  # an interrupt something swallowed: still no artifact
    except BaseException as e:
        with interrupts.deferred():
            shutil.rmtree(tmp, ignore_errors=True)
        if interrupts.is_interrupt(e) and not tmp.exists():
            interrupts.note_removed(tmp)
        raise
    with interrupts.deferred():  # the swap is not cut in half: the old artifact or the new one is in place
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            out_dir.rename(old)
        os.chmod(tmp, 0o755)
        tmp.rename(out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


STATE_DIR = "state"  # the initial values of the state, one .npy file per pair: state/<index>.npy


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Hash every file in the directory (and its state/ folder) into the manifest, then write it."""
    found = [p for p in directory.iterdir() if p.is_file() and p.name != MANIFEST]
    if (directory / STATE_DIR).is_dir():
        found += [p for p in (directory / STATE_DIR).iterdir() if p.is_file()]
    manifest.files = {
        p.relative_to(directory).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(found, key=lambda p: p.relative_to(directory).as_posix())
    }
    (directory / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
