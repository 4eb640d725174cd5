"""Reading a store: RocketMQ-compatible queries (by offset, key, id, time) over the CommitLog,
ConsumeQueue and IndexFile readers, the distributed range scan and key lookup, and the
``rocketmq`` Spark data source.
"""
