"""What every command of `python -m controller` shares: the exit codes, `note`, and
the argparse value types.

Exit codes: `EXIT_OK` (0) success; `EXIT_FAILED` (1) the work could not be done (a
plan refused or violating its instance, an unreachable controller, a failed
case); `EXIT_BAD_INPUT` (2) bad input or bad arguments, reported as one
`error: ...` line on stderr.

A value type raises `argparse.ArgumentTypeError`, whose message argparse prints
after the option's name (`--jobs: must be a non-negative integer, got -1`).

Standard library only, and no other module of the project: `controller.client`
(which training code imports without the controller's dependencies) takes its
types and exit codes from here too.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import TypeVar

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

T = TypeVar("T")


def note(message: str) -> None:
    """A note, a warning or an error line for the user: on stderr, never on stdout."""
    print(message, file=sys.stderr)


def _converted(text: str, convert: Callable[[str], T], expected: str) -> T:
    """`convert(text)`; a ValueError becomes "expected <expected>, got '<text>'"."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """The type of an integer ≥ `minimum`; `what` names the range in the message."""

    def parse(text: str) -> int:
        value = _converted(text, int, "an integer")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    return parse


non_negative_int = int_at_least(0, "a non-negative integer")
positive_int = int_at_least(1, "a positive integer")


def positive_number(text: str) -> float:
    """A finite number > 0."""
    value = _converted(text, float, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def probability(text: str) -> float:
    """A number within [0, 1]."""
    value = _converted(text, float, "a number")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1], got {text}")
    return value


def port_number(text: str) -> int:
    """A TCP or UDP port, 1..65535."""
    value = _converted(text, int, "a port number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1..65535, got {value}")
    return value


_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def bit_rate(text: str) -> float:
    """A rate in bit/s: a number, optionally with k, M, G or T (`1e9`, `500M`, `2.5G`)."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKmMgGtT]?)(?:bit/s|bps)?\s*", text)
    try:
        value = float(m.group(1)) * _SCALE[m.group(2).lower()] if m else float("nan")
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive rate in bit/s such as 1e9 or 500M, got {text!r}")
    return value
