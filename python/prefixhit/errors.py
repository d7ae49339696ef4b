"""Exceptions raised by prefixhit.

Every error of the engine is a :class:`PrefixhitError` whose ``kind`` is the snake_case error
kind of SEMANTICS.md 9.3 (``"invalid_config"``, ``"unaligned_length"``, ...) or an engine-level
kind (``"invalid_argument"``, ``"unavailable"``, ...). Where a builtin exception fits, the class
also derives from it, so ``except ValueError`` catches a bad argument as Python code expects.

Malformed arguments that are simply the wrong Python type raise plain :class:`TypeError`.
"""

from __future__ import annotations

__all__ = [
    "PrefixhitError",
    "InvalidConfigError",
    "UnalignedLengthError",
    "UnsupportedLookupError",
    "UnsupportedEagleChunkedLocalError",
    "UnsupportedAlignmentChunkedLocalError",
    "UnsupportedAlignmentSlidingWindowError",
    "InvalidArgumentError",
    "CapacityExceededError",
    "PrefixhitIOError",
    "FormatError",
    "CudaError",
    "BackendUnavailableError",
]


class PrefixhitError(Exception):
    """Base class of every prefixhit error. ``kind`` names the error kind."""

    kind: str = "error"

    def __init__(self, message: str = "", kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class InvalidConfigError(PrefixhitError, ValueError):
    """The configuration is invalid (SEMANTICS.md 1.1, or a malformed group spec)."""

    kind = "invalid_config"


class UnalignedLengthError(PrefixhitError, ValueError):
    """A store/lookup mask length is not a multiple of the lookup alignment."""

    kind = "unaligned_length"


class UnsupportedLookupError(PrefixhitError):
    """The configuration cannot be looked up this way (a finder error of SEMANTICS.md 4)."""


class UnsupportedEagleChunkedLocalError(UnsupportedLookupError):
    """Chunked local attention was asked to apply the EAGLE drop."""

    kind = "unsupported_eagle_chunked_local"


class UnsupportedAlignmentChunkedLocalError(UnsupportedLookupError):
    """A chunked-local group's block size differs from the lookup alignment."""

    kind = "unsupported_alignment_chunked_local"


class UnsupportedAlignmentSlidingWindowError(UnsupportedLookupError):
    """The lookup alignment is not a multiple of a sliding-window group's block size."""

    kind = "unsupported_alignment_sliding_window"


class InvalidArgumentError(PrefixhitError, ValueError):
    """A malformed argument value: a digest of the wrong length, a length out of range, ..."""

    kind = "invalid_argument"


class CapacityExceededError(PrefixhitError, RuntimeError):
    """An index reached its configured maximum capacity (nothing was inserted)."""

    kind = "capacity_exceeded"


class PrefixhitIOError(PrefixhitError, OSError):
    """A file could not be read or written."""

    kind = "io_error"


class FormatError(PrefixhitError, ValueError):
    """A file or document is malformed, truncated or corrupt."""

    kind = "format_error"


class CudaError(PrefixhitError, RuntimeError):
    """A CUDA runtime call failed."""

    kind = "cuda_error"


class BackendUnavailableError(PrefixhitError, RuntimeError):
    """The requested backend (the GPU engine, the device index) is not built in or has no
    device."""

    kind = "unavailable"


_BY_KIND: dict[str, type[PrefixhitError]] = {
    cls.kind: cls
    for cls in (
        InvalidConfigError,
        UnalignedLengthError,
        UnsupportedEagleChunkedLocalError,
        UnsupportedAlignmentChunkedLocalError,
        UnsupportedAlignmentSlidingWindowError,
        InvalidArgumentError,
        CapacityExceededError,
        PrefixhitIOError,
        FormatError,
        CudaError,
        BackendUnavailableError,
    )
}


def _from_kind(kind: str, message: str) -> PrefixhitError:
    """The exception instance for an error kind (called by the native core)."""
    cls = _BY_KIND.get(kind, PrefixhitError)
    return cls(message, kind)
