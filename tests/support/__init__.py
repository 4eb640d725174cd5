"""The test suite's helpers, imported as a package: ``from support import goldenlib``.

pytest puts the checkout and tests/ on sys.path (pyproject.toml's ``pythonpath``), and tests/conftest.py gives
every process a test starts the same PYTHONPATH. Helpers that are also commands run as modules, e.g.
``PYTHONPATH=tests python -m support.rmqjars fetch`` (the Makefile's ``make rocketmq``).
"""
