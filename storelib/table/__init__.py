"""The Delta tables under ``_rocketlake/``: the manifest, its durable local commits, the log reader,
the writer lease, the snapshot cache, which files a snapshot sees, and export of a snapshot.
"""
