"""Errors a user can hit. Each says what happened and what to do next."""

from __future__ import annotations


class TvmgenError(Exception):
    """An error with a cause and a fix, printed without a traceback.

    ``exit_code`` groups failures so scripts can tell them apart:
    2 bad usage or input, 3 missing tool, 4 compile failure, 5 check failure.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  fix: {self.hint}"
        return self.message


class InputError(TvmgenError):
    """The user's input (a file, a flag, a model) cannot be used."""

    exit_code = 2


class ModelError(InputError):
    """The model file is unreadable, corrupt, or uses something TVM cannot import."""


class ToolMissingError(TvmgenError):
    """An external tool (compiler, NDK, Xcode) is not installed or not found."""

    exit_code = 3


class CompileError(TvmgenError):
    """TVM failed to build or export the model."""

    exit_code = 4


class ToolTimeoutError(CompileError):
    """An external tool ran past its time limit and was stopped (a failed tool run, like a non-zero exit)."""


class CheckError(TvmgenError):
    """Outputs differ from the reference runtime beyond the tolerance."""

    exit_code = 5
