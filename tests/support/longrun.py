"""Which cases `make test` leaves to the longer targets, named once.

``make test`` runs one case of each kind; the other parametrizations of the same check run under
``ROCKETLAKE_LONG=1`` (``make long``) or ``ROCKETLAKE_FAULTS=all`` (``make faults``), so that
the whole suite stays inside its time on 2 cores without losing what any case checks.
"""
from __future__ import annotations

import os

import pytest

LONG = bool(os.environ.get("ROCKETLAKE_LONG"))
FAULTS = os.environ.get("ROCKETLAKE_FAULTS") == "all"

__all__ = ["LONG", "FAULTS", "long_only", "faults_only", "long_test"]


def long_only(*values):
    """A parametrization ``make long`` runs and ``make test`` skips."""
    return pytest.param(*values, marks=pytest.mark.skipif(not LONG, reason="make long (ROCKETLAKE_LONG=1)"))


def faults_only(*values):
    """A parametrization ``make faults`` (and ``make long``) runs and ``make test`` skips."""
    return pytest.param(*values, marks=pytest.mark.skipif(not FAULTS, reason="make faults (ROCKETLAKE_FAULTS=all)"))


def long_test(why: str):
    """A whole test ``make long`` runs and ``make test`` skips, saying why (what it costs)."""
    return pytest.mark.skipif(not LONG, reason=f"{why}: make long (ROCKETLAKE_LONG=1)")
