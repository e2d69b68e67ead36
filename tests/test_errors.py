"""sclated.errors.describe: every exception becomes a reason that says something."""

from __future__ import annotations

from sclated.errors import FailedPrecondition, describe


def test_a_sclate_error_is_its_own_message() -> None:
    assert describe(FailedPrecondition("the sandbox is not running", reason="NO_SANDBOX")) == (
        "the sandbox is not running"
    )


def test_other_exceptions_carry_their_type() -> None:
    assert describe(ValueError("bad value")) == "ValueError: bad value"


def test_an_exception_without_a_message_is_not_left_empty() -> None:
    # "TimeoutError: " was a run's whole reason once (a turn's asyncio.timeout ran out).
    assert describe(TimeoutError()) == "TimeoutError (raised without a message)"
    assert describe(RuntimeError("  ")) == "RuntimeError (raised without a message)"
