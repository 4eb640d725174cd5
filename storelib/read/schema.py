"""The Spark DDL of the message rows the readers give (``rangescan.MESSAGE_SCHEMA``), from the one
list of message columns (``format.records.MESSAGE_FIELDS``), in a module that loads no decoder: the
``rocketmq`` data source's planning processes (schema, filter pushdown, partitions) need the
schema without the compiled kernels."""
from ..format.records import MESSAGE_FIELDS

__all__ = ["MESSAGE_DDL"]

MESSAGE_DDL = ", ".join(f"{name} {sql}" for name, sql in MESSAGE_FIELDS)
