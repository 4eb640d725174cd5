"""The Spark DDL of the message rows the readers give (``rangescan.MESSAGE_SCHEMA``), in a module
that imports nothing: the ``rocketmq`` data source's planning processes (schema, filter
pushdown, partitions) need the schema without loading the decoder's compiled kernels."""

__all__ = ["MESSAGE_DDL"]

MESSAGE_DDL = ("commitlog_offset bigint, store_size int, msg_id string, topic string, queue_id int, "
               "queue_offset bigint, flag int, sys_flag int, body_crc int, born_timestamp bigint, "
               "born_host string, store_timestamp bigint, store_host string, reconsume_times int, "
               "prepared_transaction_offset bigint, body binary, properties map<string,string>, "
               "tags string, keys string, uniq_key string")
