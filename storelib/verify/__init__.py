"""Checking a store against its manifest and against RocketMQ's own rules: every file's bytes, the
record chain, consume queues and index files, and their cross references.
"""
