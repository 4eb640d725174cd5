"""Writing batches: input formats, the driver sequencer, the encode, write and commit stages of an
ingest, the IndexFile writer, and ingest of a DataFrame.
"""
