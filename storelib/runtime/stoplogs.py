"""A stopped streaming query into rocketlake says nothing: Spark's own log lines of a stop, filtered.

``q.stop()`` cancels the micro-batch's Spark job; the cancelled tasks of the sink's write half
(storelib.ingest.sink) and Spark's bookkeeping then log, in the user's own session, about a
dozen lines that report no problem: ``ERROR WriteToDataSourceV2Exec ... is aborting`` /
``aborted``, ``ERROR Utils: Aborting task`` with a ``TaskKilledException`` trace, ``ERROR
DataWritingSparkTask: Aborting commit`` / ``Aborted commit``, ``WARN TaskSetManager: Lost task
... TaskKilled``, ``WARN DAGScheduler: Failed to cancel job group ... Cannot find active jobs``,
``ERROR TorrentBroadcast: Store broadcast ... fail``. Nothing was written: the batch never
committed (a stopped commit is crash safe), and the query's restart writes it.

``quiet_stops(spark)`` adds one log4j2 ``RegexFilter`` (DENY on a match of a whole message) for
exactly those messages to the root logger's configuration of ``spark``'s JVM (its loggers keep
their levels and configurations: Spark shows a logger's INFO lines once it has one of its own),
nothing else: a write that really fails still fails the query (``StreamingQueryException``,
``MicroBatchExecution``'s error) and its tasks still say why in ``TaskSetManager``'s ``Lost task``
line. It also keeps PySpark's accumulator server from printing an ``EOFError`` traceback when the
JVM closes its end first (a context stopping, a job killed by SIGTERM). Done once per context,
when the sink is registered, a ``foreachBatch`` writer runs or a ``rocketlake`` command starts
Spark; best effort (a JVM without log4j2 core keeps its lines).
"""
from __future__ import annotations

import socketserver
import sys
import types

from .accumserver import prompt_stop
__all__ = ["STOP_NOISE", "quiet_stops"]

# the whole message of each line a cancelled write or job logs (the logger in the comment)
STOP_NOISE = (
    r"Data source write support MicroBatchWrite\[.*\] (is aborting|aborted|failed to abort)\.",   # WriteToDataSourceV2Exec
    r"Abort(ing|ed) commit for partition \d+ \(task .*",                                    # DataWritingSparkTask
    r"Aborting task",                                                                     # Utils (+ TaskKilledException)
    r"Lost task .*TaskKilled.*",                                                          # TaskSetManager
    r"Failed to cancel job group .*\. Cannot find active jobs for it\.",                    # DAGScheduler
    r"Store broadcast broadcast_\d+ fail, remove all pieces of the broadcast",             # TorrentBroadcast
    # TaskContextImpl: a killed task releasing a broadcast block its block manager already dropped
    # (the message alone is matched, not its exception's)
    r"Error in TaskCompletionListener",
)
_MARK = "rocketlake.quietStops"          # a JVM system property: the filter is in


def quiet_stops(spark) -> bool:
    """Filter the lines of a stopped query on ``spark``'s JVM (once); False if that failed."""
    sc = spark.sparkContext
    _quiet_accumulator_server(getattr(sc, "_accumulatorServer", None))
    prompt_stop(getattr(sc, "_accumulatorServer", None))      # the context's stop() without a 1 s wait
    try:
        jvm = sc._jvm
        system = jvm.java.lang.System
        if system.getProperty(_MARK) == "1":
            return True
        core = jvm.org.apache.logging.log4j.core
        ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        result = getattr(core, "Filter$Result")
        no_flags = sc._gateway.new_array(jvm.java.lang.String, 0)
        regex = "(?s)(" + "|".join(STOP_NOISE) + ")"
        ctx.getConfiguration().getRootLogger().addFilter(
            core.filter.RegexFilter.createFilter(regex, no_flags, False, result.DENY, result.NEUTRAL))
        ctx.updateLoggers()
        system.setProperty(_MARK, "1")
        return True
    except Exception:  # noqa: BLE001 - best effort: the lines only say what happened
        return False


def _quiet_accumulator_server(server) -> None:
    if server is None or getattr(server, "_rocketlake_quiet", False):
        return

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            return                   # the JVM closed the connection: its context is stopping
        socketserver.BaseServer.handle_error(self, request, client_address)

    server.handle_error = types.MethodType(handle_error, server)
    server._rocketlake_quiet = True
