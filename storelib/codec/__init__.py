"""CommitLog records to and from Arrow batches: the message codec, properties and host columns.
"""
