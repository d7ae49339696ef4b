"""The errors of :mod:`prefixhit.vllm`: where vLLM's coordinator asserts, prefixhit's error is
re-raised as a class deriving from both the prefixhit error class and :class:`AssertionError`
(vLLM's callers catch the latter). Private: import these names from :mod:`prefixhit.vllm`."""

from __future__ import annotations

from . import errors


class VllmAssertionError(errors.PrefixhitError, AssertionError):
    """A failure where vLLM's coordinator raises AssertionError (its callers catch that)."""


class VllmConfigAssertionError(errors.InvalidConfigError, AssertionError):
    """An invalid configuration, where vLLM's constructor asserts."""


class VllmUnalignedLengthAssertionError(errors.UnalignedLengthError, AssertionError):
    """A mask length not a multiple of ``lcm_block_size``, where vLLM asserts."""


class VllmEagleChunkedLocalAssertionError(errors.UnsupportedEagleChunkedLocalError, AssertionError):
    """Chunked local attention asked to apply the EAGLE drop, where vLLM asserts."""


class VllmAlignmentChunkedLocalAssertionError(
    errors.UnsupportedAlignmentChunkedLocalError, AssertionError
):
    """A chunked-local block size that differs from the alignment, where vLLM asserts."""


class VllmAlignmentSlidingWindowAssertionError(
    errors.UnsupportedAlignmentSlidingWindowError, AssertionError
):
    """An alignment that is not a multiple of a window block size (pr49069), where vLLM asserts."""


_ASSERTING = {
    errors.InvalidConfigError: VllmConfigAssertionError,
    errors.UnalignedLengthError: VllmUnalignedLengthAssertionError,
    errors.UnsupportedEagleChunkedLocalError: VllmEagleChunkedLocalAssertionError,
    errors.UnsupportedAlignmentChunkedLocalError: VllmAlignmentChunkedLocalAssertionError,
    errors.UnsupportedAlignmentSlidingWindowError: VllmAlignmentSlidingWindowAssertionError,
}


def _translate(exc: errors.PrefixhitError) -> Exception:
    """The AssertionError-derived class for an engine error where vLLM asserts."""
    cls = _ASSERTING.get(type(exc))
    return exc if cls is None else cls(str(exc), exc.kind)
