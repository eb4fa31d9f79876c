"""Downloading and unpacking one archive, safely.

A download goes to ``<file>.part`` and is renamed to its name only once complete and its SHA-256
matches the pinned value: a file with its final name is always whole and right. An interrupted
transfer resumes where it stopped (HTTP Range), at once within the same run and from the
``.part`` file on the next; a wrong checksum deletes the file. Failures say what to do: with no
network, which URL to fetch by hand, its SHA-256, and where to put the file (the next run uses it).
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import os
import shutil
import stat
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tvmgen import __version__
from tvmgen.core import log as logs
from tvmgen.core.artifact import sha256_file
from tvmgen.core.errors import ToolMissingError

log = logging.getLogger("tvmgen.fetch")

CHUNK = 1 << 16
TIMEOUT_S = 60
RESUMES = 5  # in-run resumes after a transfer breaks off having made progress


class DownloadError(ToolMissingError):
    """A download failed: the tool it brings is still missing (exit 3)."""


def manual_hint(url: str, sha256: str, dest: Path) -> str:
    return (
        f"download {url} by hand (SHA-256 {sha256}), save it as {dest} and run this command again; "
        f"or set TVMGEN_DOWNLOAD_MIRROR to a server that has {dest.name}"
    )


def fetch(url: str, sha256: str | None, dest: Path, what: str) -> Path:
    """``url`` as ``dest``, checked against ``sha256``. A right file already at ``dest`` costs no request."""
    if not sha256:
        raise DownloadError(
            f"no SHA-256 is pinned for {url}: tvmgen does not install unverified downloads",
            'give one in the file TVMGEN_DOWNLOADS names ({"<name>": {"sha256": ...}}), from the publisher\'s page',
        )
    if dest.is_file():
        if sha256_file(dest) == sha256:
            log.info("%s: %s is already here and verified", what, dest)
            return dest
        dest.unlink()
        raise DownloadError(
            f"{dest} is not the file tvmgen expects for {what} (SHA-256 mismatch): deleted",
            manual_hint(url, sha256, dest),
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    resumes = 0
    while True:
        before = part.stat().st_size if part.exists() else 0
        try:
            complete = _transfer(url, sha256, part, what, dest)
        except _InterruptedError as e:
            after = part.stat().st_size if part.exists() else 0
            if after > before and resumes < RESUMES:
                resumes += 1
                log.warning("%s: the transfer broke off at %d bytes (%s); resuming", what, after, e)
                continue
            if after == 0:
                part.unlink(missing_ok=True)
            raise DownloadError(
                f"downloading {what} from {url} broke off ({e}); {after} bytes kept in {part}",
                "run the command again: it resumes from there; or " + manual_hint(url, sha256, dest),
            ) from None
        if complete:
            break
    got = sha256_file(part)
    if got != sha256:
        part.unlink()
        raise DownloadError(
            f"{url} has SHA-256 {got}, not the pinned {sha256}: the file was deleted",
            "a mirror or proxy may have served another file; run again, or " + manual_hint(url, sha256, dest),
        )
    os.replace(part, dest)
    log.info("%s: %s verified (sha256 %s)", what, dest, sha256)
    return dest


class _InterruptedError(Exception):
    pass


def _transfer(url: str, sha256: str, part: Path, what: str, dest: Path) -> bool:
    """One request, appending to ``part`` (from where it stops); True when the file is whole."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"tvmgen/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    log.debug("GET %s %s", url, headers.get("Range", ""))
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing after what we have: the .part is whole (the checksum decides)
            return True
        raise DownloadError(
            f"downloading {what}: {url} answered HTTP {e.code} {e.reason}",
            "check the URL (TVMGEN_DOWNLOAD_MIRROR / TVMGEN_DOWNLOADS), or " + manual_hint(url, sha256, dest),
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if have:
            raise _InterruptedError(str(reason)) from None
        raise DownloadError(
            f"cannot download {what}: {url} is unreachable ({reason})",
            "no network here? " + manual_hint(url, sha256, dest),
        ) from None
    with response:
        if have and response.status != 206:  # the server ignores Range: start again
            log.info("%s: the server does not resume; downloading from the start", what)
            have = 0
        length = response.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        total = have + remaining if remaining is not None else None
        _check_space(part.parent, remaining, what)
        received = 0
        try:
            with open(part, "ab" if have else "wb") as out, _progress(what, total, have) as advance:
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    received += len(block)
                    advance(len(block))
        except (http.client.HTTPException, ConnectionError, TimeoutError) as e:
            raise _InterruptedError(type(e).__name__) from None
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise _disk_full(part.parent, what, part) from None
            raise _InterruptedError(str(e)) from None
    if remaining is not None and received < remaining:
        raise _InterruptedError(f"got {received} of {remaining} bytes")
    return True


def _check_space(directory: Path, needed: int | None, what: str) -> None:
    if needed is None:
        return
    free = shutil.disk_usage(directory).free
    if free < needed + (64 << 20):
        raise _disk_full(directory, what, None, needed, free)


def _disk_full(
    directory: Path, what: str, part: Path | None, needed: int | None = None, free: int | None = None
) -> DownloadError:
    # _check_space gives both sizes, the other callers neither
    need = (
        f" ({needed / 2**20:.0f} MiB needed, {free / 2**20:.0f} MiB free)"
        if needed is not None and free is not None
        else ""
    )
    kept = f"; what arrived is kept in {part} and the next run resumes from it" if part else ""
    return DownloadError(
        f"the disk holding {directory} is full: cannot store {what}{need}{kept}",
        "free some space there (or set TVMGEN_DATA_DIR to a bigger disk) and run again",
    )


@contextlib.contextmanager
def _progress(what: str, total: int | None, done: int):
    """A progress bar on a terminal; a line at the start and the end otherwise (logs, CI)."""
    size = f" ({total / 2**20:.1f} MiB)" if total else ""
    if not logs.console.is_terminal:
        logs.console.print(f"[bold]•[/] downloading {what}{size}" + (f", resuming at {done} bytes" if done else ""))
        yield lambda n: None
        logs.console.print(f"[green]✓[/] downloaded {what}")
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=logs.console,
    ) as bar:
        task = bar.add_task(what, total=total, completed=done)
        yield lambda n: bar.advance(task, n)


def unpack_zip(archive: Path, top: str, final: Path) -> Path:
    """Unpack ``archive`` (whose entries sit under ``top``/) as ``final``, in one rename.

    The entries go to a scratch folder beside ``final`` first: an interrupted unpack leaves no
    half-filled ``final``. File modes (executable scripts) and symbolic links are kept.
    """
    scratch = final.parent / f".{final.name}.unpacking"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                target = (scratch / info.filename).resolve()
                if not target.is_relative_to(scratch.resolve()):
                    raise DownloadError(
                        f"{archive} holds an entry outside its folder: {info.filename}",
                        "delete the file and download it again",
                    )
                mode = info.external_attr >> 16
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                elif stat.S_ISLNK(mode):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(z.read(info).decode(), target)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(info) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    if mode & 0o777:
                        target.chmod(mode & 0o777)
        if not (scratch / top).is_dir():
            raise DownloadError(
                f"{archive} has no {top}/ folder: not the expected archive", f"delete {archive} and run again"
            )
        if final.exists():
            shutil.rmtree(final)
        os.replace(scratch / top, final)
    except zipfile.BadZipFile as e:
        archive.unlink(missing_ok=True)
        raise DownloadError(f"{archive} is not a readable zip ({e}): deleted", "run the command again") from None
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise _disk_full(final.parent, archive.name, None) from None
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


# ------------------------------------------------------------------ where downloads go


def data_dir() -> Path:
    """tvmgen's own data directory: $TVMGEN_DATA_DIR, else $XDG_DATA_HOME/tvmgen (~/.local/share/tvmgen)."""
    if os.environ.get("TVMGEN_DATA_DIR"):
        return Path(os.environ["TVMGEN_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tvmgen"


def sdk_dir() -> Path:
    """The Android SDK tvmgen installs (cmdline-tools/latest, platforms, build-tools, ndk, cmake)."""
    return data_dir() / "android-sdk"
