"""Numeric command-line options as argparse types: a bad value is refused by the parser itself, one
line naming the option and what it takes (exit 2), before a command reads or writes anything.

    --partitions -3     rocketlake ingest: error: argument --partitions: must be an integer, 0 or more (got '-3')
    --threads 0         rocketlake verify: error: argument --threads: must be a positive integer (got '0')
    --every nan         rocketlake mirror: error: argument --every: must be a positive number of seconds (got 'nan')
"""
from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["whole", "POSITIVE", "NON_NEGATIVE", "seconds"]


def whole(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (1: "a positive integer")."""
    what = "a positive integer" if minimum == 1 else f"an integer, {minimum} or more"

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or n < minimum:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})")
        return n
    parse.__name__ = "integer"
    return parse


POSITIVE = whole(1)
NON_NEGATIVE = whole(0)


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (``nan`` / ``inf`` would make a loop of
    cycles that never waits or never runs again)."""
    try:
        s = float(text)
    except ValueError:
        s = math.nan
    if not (math.isfinite(s) and s > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds (got {text!r})")
    return s
