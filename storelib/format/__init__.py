"""The on-disk formats, defined once: CommitLog records, ConsumeQueue units, IndexFile header/slots/entries,
the checkpoint, the store configuration, name rules and the ``_rocketlake/`` paths.

Standard library and numpy only, cheap to import: the shell lookup path and every other wing build on it.
"""
