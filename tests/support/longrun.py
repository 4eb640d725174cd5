"""Which cases `make test` leaves to the longer targets, named once.

``make test`` runs one case of each kind; the other parametrizations of the same check run under
``ROCKETLAKE_LONG=1`` (``make long``), ``ROCKETLAKE_FAULTS=all`` (``make faults``) or
``ROCKETLAKE_STREAMING_FULL=1`` (``make streaming``), so that the whole suite stays inside its
time on 2 cores without losing what any case checks. ``make long`` sets all three.
"""
from __future__ import annotations

import os

import pytest

LONG = bool(os.environ.get("ROCKETLAKE_LONG"))
FAULTS = os.environ.get("ROCKETLAKE_FAULTS") == "all"
STREAMING = bool(os.environ.get("ROCKETLAKE_STREAMING_FULL"))

__all__ = ["LONG", "FAULTS", "STREAMING", "long_only", "faults_only", "long_test", "faults_test", "streaming_test"]


def long_only(*values):
    """A parametrization ``make long`` runs and ``make test`` skips."""
    return pytest.param(*values, marks=pytest.mark.skipif(not LONG, reason="make long (ROCKETLAKE_LONG=1)"))


def faults_only(*values):
    """A parametrization ``make faults`` (and ``make long``) runs and ``make test`` skips."""
    return pytest.param(*values, marks=pytest.mark.skipif(not FAULTS, reason="make faults (ROCKETLAKE_FAULTS=all)"))


def long_test(why: str):
    """A whole test ``make long`` runs and ``make test`` skips, saying why (what it costs)."""
    return pytest.mark.skipif(not LONG, reason=f"{why}: make long (ROCKETLAKE_LONG=1)")


def faults_test(why: str):
    """A whole test ``make faults`` (and ``make long``) runs and ``make test`` skips, saying why."""
    return pytest.mark.skipif(not FAULTS, reason=f"{why}: make faults (ROCKETLAKE_FAULTS=all)")


def streaming_test(why: str):
    """A whole test ``make streaming`` (and ``make long``) runs and ``make test`` skips, saying why."""
    return pytest.mark.skipif(not STREAMING, reason=f"{why}: make streaming (ROCKETLAKE_STREAMING_FULL=1)")
