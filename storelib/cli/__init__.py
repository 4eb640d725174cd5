"""The command lines behind ``jobs/`` and the ``rocketlake`` command: Spark session, exit codes,
argument parsing for ingest, query and the operations.
"""
