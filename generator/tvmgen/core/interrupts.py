"""Ctrl-C (SIGINT) and kill (SIGTERM): the command stops, its unfinished output goes, and the exit code
says which signal stopped it (128 + its number: 130, 143).

Python runs a signal handler between two bytecodes of the main thread; during a TVM build that is mostly
inside a Python callback that TVM's C++ called (a pass, a legaliser, ``tir.build``). The exception raised
there crosses C++ frames as an FFI error, and two things in TVM 0.27 lose it:

- tvm_ffi turns an exception type it has not registered into a RuntimeError with an empty message, which a
  fallback's ``except Exception`` took for a failed pipeline (the slower pipeline then ran to the end);
- C++ that catches every error and carries on: FoldConstant's ``GetCachedBuild`` catches what ``tir.build``
  raised, skips that fold and goes on, and so does the rest of the build.

So the handler

- records the signal in a process-wide flag before it raises: ``reraise_if_interrupted``, first in the
  ``except`` clauses around fallbacks, turns any error after it into the interrupt, and ``staging`` puts no
  artifact in place after it;
- registers ``Interrupted`` with tvm_ffi, so the exception keeps its type across C++ frames and
  ``except Exception`` does not catch it;
- raises it again at the next Python call made inside TVM (``_remind``), so C++ that swallowed it stops at
  its next callback instead of building on.

A second signal from outside ends the process at once, the way the signal's default would: the user
insists, and the temporary folder it leaves is removed by the next compile into the same place
(``artifact.staging``).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by a signal; ``exit_code`` is the shell's 128 + the signal's number.

    Takes the signal's name (not its number): tvm_ffi rebuilds a registered exception from its message
    alone when it comes back out of C++ frames."""

    def __init__(self, name: str = "SIGINT"):
        super().__init__(name)
        self.name = name if name in signal.Signals.__members__ else "SIGINT"

    def __str__(self) -> str:
        # tvm_ffi reads the message as the exception enters C++ frames, which may swallow it: from here
        # on, the next Python call TVM makes raises it again (Python removed ``_remind`` when it raised).
        # Nothing here may raise: tvm_ffi calls this where an exception is a crash.
        _arm()
        return self.name

    @property
    def signum(self) -> int:
        return int(signal.Signals[self.name])

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: int | None = None  # the first signal this process received
_deferring = 0  # inside ``deferred()``: the signal is recorded, raised when the block ends
_pending = False
_handled = False  # the command line has the interrupt: nothing more to stop
removed: list[Path] = []  # unfinished output removed after the signal, for the command line's one line


_main = threading.main_thread().ident


def install() -> None:
    """Handle SIGINT and SIGTERM in this process (main thread only: Python's rule for signal handlers)."""
    if _thread.get_ident() != _main:
        return
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)


@contextlib.contextmanager
def handling():
    """``install`` for the ``with`` block, then the handlers that were there before: the command line's
    ``main`` also runs inside other programs (tests call it in their own process)."""
    if _thread.get_ident() != _main:
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    install()
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def received() -> int | None:
    """The signal that interrupted this process, if one did."""
    return _received


def exit_code(default: int = 130) -> int:
    return 128 + _received if _received is not None else default


def _name() -> str:
    return signal.Signals(_received).name if _received is not None else "SIGINT"


def reraise_if_interrupted(error: BaseException | None = None) -> None:
    """Raise ``Interrupted`` if a signal was received: called first in an ``except`` clause that would
    otherwise fall back, retry or carry on, so that an interrupt which came back through TVM as an ordinary
    error stops the command instead."""
    if _received is None:
        return
    if isinstance(error, Interrupted):
        raise error
    raise Interrupted(_name()) from error


def is_interrupt(error: BaseException) -> bool:
    """Whether ``error`` is, or was caused by, an interrupt (the signal flag, or a KeyboardInterrupt
    raised without tvmgen's handler, e.g. by Python's own on SIGINT)."""
    if _received is not None:
        return True
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


@contextlib.contextmanager
def deferred():
    """Hold a signal back until the block ends: for steps that must not stop halfway (putting a finished
    artifact in place, removing an unfinished one)."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending and sys.exc_info()[1] is None:
            _pending = False
            raise Interrupted(_name())


def note_removed(path: Path) -> None:
    removed.append(Path(path))


def summary() -> str:
    """The command line's one line: which signal, and what unfinished output it removed."""
    if not removed:
        return f"interrupted ({_name()})"
    return f"interrupted ({_name()}); removed the unfinished {', '.join(str(p) for p in removed)}"


def _register_with_tvm_ffi() -> None:
    """Let ``Interrupted`` cross TVM's C++ frames as itself (only when TVM is loaded: importing it here
    would cost every command its load time)."""
    ffi = sys.modules.get("tvm_ffi")
    if ffi is None:
        return
    with contextlib.suppress(Exception):  # tvm_ffi's registry is its own; without it the flag still works
        ffi.register_error("tvmgen.Interrupted", Interrupted)


_TVM = f"{os.sep}tvm{os.sep}"
_TVM_FFI = f"{os.sep}tvm_ffi{os.sep}"


def _inside_tvm(frame) -> bool:
    """Whether ``frame`` runs for TVM (a TVM function is below it), and not for tvm_ffi's own Python
    helpers, this module, or a finaliser: tvm_ffi calls those (an error's message and backtrace, value
    conversions) where an exception cannot go, a crash rather than an error."""
    inside = False
    while frame is not None:
        name = frame.f_code.co_filename
        if _TVM_FFI in name or name == __file__ or frame.f_code.co_name == "__del__":
            return False
        inside = inside or _TVM in name
        frame = frame.f_back
    return inside


def _remind(frame, event, arg) -> None:
    """The main thread's profile function once a signal came: a Python call made inside TVM raises the
    interrupt again. Not while an interrupt is being handled (the ``except``/``finally``/``__exit__`` code
    that cleans up), not in a finaliser, nor inside ``deferred()``. Python removes a profile function that
    raises; the exception's ``__str__`` puts it back as it enters C++ frames."""
    if (
        event != "call"
        or _received is None
        or _handled
        or _deferring
        or isinstance(sys.exc_info()[1], KeyboardInterrupt)
        or not _inside_tvm(frame)
    ):
        return
    raise Interrupted(_name())


def handled() -> None:
    """The interrupt reached the top (the command line's handler): stop raising it again, so exit
    handlers (TVM's among them) run undisturbed."""
    global _handled
    _handled = True
    if _thread.get_ident() == _main:
        sys.setprofile(None)


def _arm() -> None:
    """Install ``_remind`` in the main thread; C calls only (a Python call here would be profiled)."""
    if _received is not None and not _handled and _thread.get_ident() == _main and sys.getprofile() is None:
        sys.setprofile(_remind)


def _on_signal(signum, frame) -> None:
    global _received, _pending
    if _received is not None:  # a second signal: stop now, as the signal's default does
        if _deferring:  # renaming or removing a folder: let it finish, the first signal stops the rest
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _received = signum
    _register_with_tvm_ffi()
    _arm()
    if _deferring:
        _pending = True
        return
    raise Interrupted(_name())
