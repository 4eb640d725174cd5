"""What the thin ``jobs/`` entry points share: Spark session, config, exit codes, summaries.

Exit statuses: ``storelib.errors`` (``ExitCode``, ``exit_code``); the one line an error ends a
command with: ``storelib.cli.failures``.
"""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Callable, NoReturn

from ..format import paths
from ..format.paths import PROJECT_ROOT
from ..format.config import DEFAULT_CONFIG, default_config, load_config
from ..errors import BadInput, ExitCode, exit_code
from . import failures
from .failures import guarded, worded
from ..runtime.fastexit import exit_now

if TYPE_CHECKING:
    from ..runtime.sparkcontext import ContextSession

__all__ = [
    "ROOT", "DEFAULT_CONFIG", "ExitCode", "exit_code", "config_from_args", "store_config", "on_signals",
    "interrupted", "prog", "help_doc", "check_outputs", "store_snapshot", "spark_session", "EarlySpark", "start_early", "run_job", "emit_summary", "exit_now", "ingest", "adopt", "INGEST_DRIVER_MODULES", "INGEST_TASK_MODULES",
]

ROOT = PROJECT_ROOT


def prog(script: str) -> str:
    """The name a job's --help and errors use: ``rocketlake CMD`` under the console script."""
    return os.environ.get("ROCKETLAKE_PROG") or script


def help_doc(doc: str) -> str:
    """A module docstring as --help text: no RST literals, no internal module names."""
    import re
    text = doc.replace("``", "")
    text = re.sub(r"\s*\((?:see )?storelib\.[\w.]+(?: / \w+)?\)", "", text)
    if os.environ.get("ROCKETLAKE_PROG"):
        text = re.sub(r"(?:spark-submit |python )?jobs/(\w+)\.py", r"rocketlake \1", text)
    return text


def check_outputs(store: str, outputs: dict[str, str | None]) -> None:
    """The files a command writes (``outputs``: option -> path, None: not given), checked before
    any work (no Spark, no lease, nothing read or written): ``BadInput`` (exit 2) naming the first
    local one that lies inside the local store ``store``, however either is spelled (real paths,
    ``paths.within``: the store's directory holds the store's own files only, and a broker reads
    them all as its store), that names a directory, or whose directory does not exist (a job that
    committed would fail after its commit). A remote output: refused under a remote store's own
    prefix (``storage.inside``: same bucket or name node) or with a ``..``-like component."""
    root = paths.local_root(store)
    for option, path in outputs.items():
        if not path:
            continue
        if not paths.is_local(path):
            if root is None:
                from ..io import storage
                if storage.inside(storage.Store(store), storage.Store(path)):
                    raise BadInput(f"{option} {path} is inside the store {store}: a command writes nothing among a "
                                   "store's own files; name a file outside the store (nothing was done)")
            continue
        local = paths.local_path(path)
        if root is not None and paths.within(root, local):
            raise BadInput(f"{option} {path} is inside the store {store}: a command writes nothing among a store's "
                           "own files; name a file outside the store (nothing was done)")
        if os.path.isdir(local):
            raise BadInput(f"{option} {path} is a directory: name a file (nothing was done)")
        if not os.path.isdir(os.path.dirname(os.path.abspath(local))):
            raise BadInput(f"{option} {path}: its directory does not exist (nothing was done)")


def config_from_args(args):
    path = getattr(args, "config", None)
    return load_config(path) if path else default_config()


def store_config(args, writing: bool = False, infer: bool = True, say: bool = False):
    """The configuration for ``args.store`` (``store_snapshot(...).config``)."""
    return store_snapshot(args, writing, infer, say).config


def store_snapshot(args, writing: bool = False, infer: bool = True, say: bool = False, history: bool = False):
    """The configuration for ``args.store`` and the snapshot it came from
    (``storelib.table.storeinfo.resolve_config``: the store's recorded sizes, a --config that
    disagrees is a ConfigError; ``.snapshot``: the batch of ``args.as_of_batch`` / ``args.version``,
    opened once, for the command to hand on); first refuses a path that is not a store
    (``check_store``). No Spark: a command calls it before its JVM starts. ``say``: print which
    sizes a broker's directory was found to have (verify, import). ``history``: the snapshot with
    every batch (from the Delta tables)."""
    from ..table import storeinfo
    kind = storeinfo.check_store(args.store, writing=writing,
                                 allow_nonempty=bool(getattr(args, "allow_nonempty", False)))
    version = getattr(args, "version", None)
    res = storeinfo.resolve_config(args.store, getattr(args, "config", None), kind,
                                   getattr(args, "as_of_batch", None) if not writing else None, infer=infer,
                                   version=version if isinstance(version, int) and not writing else None,
                                   history=history)
    if res.note and say:
        print(f"note: {res.note}", file=sys.stderr)
    return res


_SIGNALLED: list = []       # the signals that ended this job (on_signals)


def on_signals() -> None:
    """SIGTERM and SIGINT end a job with ``errors.Interrupted``, so its one line gets printed.

    Called again once a SparkContext exists: PySpark's own SIGINT handler calls into the JVM
    (cancelAllJobs) from inside the signal handler, which breaks the Py4J call the driver was in
    and prints pages of Py4J tracebacks; the job ends its JVM by exiting instead."""
    import logging
    import signal
    from ..errors import Interrupted
    from ..runtime import interrupts, stuck

    # The handler imports nothing: a signal that lands while a module is half imported would
    # otherwise fail the handler's own import (logging needs ``string``) and end the job with
    # that ImportError instead of its one line.
    def _raise(signum, _frame):
        stuck.taken(signum)
        if interrupts.deferring() and interrupts.pending() is None:
            interrupts.record(signum)       # the batch is committed: finish it, then say so (exit 0)
            return                          # (a second signal ends the job now; the next run finishes it)
        logging.disable(logging.CRITICAL)   # Py4J logs the call the interrupt broke; the job says one line
        _SIGNALLED.append(signum)
        raise Interrupted(signum)
    try:
        signal.signal(signal.SIGTERM, _raise)
        signal.signal(signal.SIGINT, _raise)
        stuck.install(_raise)       # a main thread blocked in native code never runs _raise
    except ValueError:              # not the main thread (a test calling main() from a thread)
        pass


def interrupted(e: BaseException, state: str) -> int:
    """Print the one line of an interrupted job (what the store holds, what to run) and its exit status.

    Py4J's own logging of the connection the interrupt broke is silenced first."""
    import logging
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    signum = getattr(e, "signum", 2)
    name = {2: "SIGINT", 15: "SIGTERM"}.get(signum, f"signal {signum}")
    print(f"interrupted ({name}): {state}", file=sys.stderr, flush=True)
    return 128 + signum


def spark_session(app: str, reach: dict | None = None, sql: bool = True, starting=None):
    """The job's SparkSession, with Delta Lake (``delta_spark.configure_delta``: delta-spark's
    jars from ``make install``, Delta's SQL extension and catalog). The driver's object-store
    settings go with every task (``objstore.ship``). ``reach``: option name -> path the executors
    must read; on a multi-host master one on the driver's disk is refused before any task runs
    (``multihost.UnreachablePath``, the session stopped). ``sql=False``: a job that only runs
    Python tasks gets the SparkContext alone (``runtime.sparkcontext.ContextSession``: no SQL
    session, no Delta jars; a cold start is seconds shorter). ``starting()``: called as the JVM
    starts the application, the driver's Python then only waiting on it."""
    from ..runtime.sparkenv import apply_submit_args, python_for_workers
    from ..runtime.pysparkpath import prefer_installed_pyspark
    prefer_installed_pyspark()       # before pyspark's first import: compiled, not from spark-submit's zip
    python_for_workers()             # before pyspark reads PYSPARK_PYTHON
    if not _submitted():
        apply_submit_args()          # the rocketlake command's --master, --conf and JVM options
        from ..runtime.sparkenv import quiet_jvm_boot
        quiet_jvm_boot()             # no "Using incubator modules" line from the JVM's boot
    from pyspark.sql import SparkSession
    from ..table.delta_spark import configure_delta
    from ..runtime.multihost import check_reachable
    if reach and _submitted():
        check_reachable(_submitted_master(), reach)        # before the application even starts
        reach = None
    builder = SparkSession.builder.appName(f"rocketlake-{app}")
    master = None if _submitted() else os.environ.get("ROCKETLAKE_MASTER", "local[*]")
    if master:
        builder = builder.master(master)
    # SIGINT / SIGTERM wait while the session starts (PySpark installs a SIGINT handler that calls
    # into the JVM, on_signals replaces it) and arrive as errors.Interrupted once it has.
    import signal
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, ValueError):
        mask = None
    spark: SparkSession | ContextSession
    try:
        if sql:
            builder = configure_delta(builder)
            if starting:
                starting()
            spark = builder.getOrCreate()
        else:
            from ..runtime.sparkcontext import context_session
            spark = context_session(f"rocketlake-{app}", master, starting)
        python_for_workers(spark.sparkContext)
        spark.sparkContext.setLogLevel(os.environ.get("ROCKETLAKE_SPARK_LOG", "WARN"))
        from ..io import objstore
        objstore.ship(spark.sparkContext)
        from ..runtime.stoplogs import quiet_stops
        quiet_stops(spark)       # a job stopped or killed mid-stage: no Spark ERROR lines, no EOFError trace
        on_signals()
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    master = spark.sparkContext.master or "local[*]"      # (Spark's default, as spark-submit's)
    if reach:
        try:
            check_reachable(master, reach)
        except BaseException:
            spark.stop()
            raise
    if not master.startswith("local"):
        _ship_code(spark)
    return spark


EARLY_SWITCH_S = 0.0005         # the interpreter's switch interval while EarlySpark starts a context


class EarlySpark:
    """A job's Spark application started on a thread while the job's own checks still run.

    Under ``spark-submit`` the driver's JVM is up before any of our Python runs; what a job then
    waits for is the ``SparkContext`` it asks the JVM for (about a second on 2 cores), and before
    asking, the checks that need no Spark (the arguments, the input, the store's state: a third to
    half a second, mostly imports). Started here, the context comes up beside the checks. A check
    that fails still ends the job with its one line and status, before any task runs (the JVM
    stops the context as it exits); ``run_job(early=...)`` joins it and reports its errors as
    its own start's. The thread imports only PySpark: what ``spark_session`` imports of storelib
    is imported first, here, so no module of ours is imported by two threads at once."""

    def __init__(self, app: str, reach: dict | None = None, sql: bool = True):
        import threading
        from ..compute import allocator
        from ..runtime.pysparkpath import prefer_installed_pyspark
        allocator.tune()                 # the driver's malloc settings before a second thread allocates
        prefer_installed_pyspark()       # sys.path changed on this thread, before the other one imports
        from ..runtime import sparkcontext, sparkenv, stoplogs  # noqa: F401 - imported on this thread (above)
        from ..io import objstore  # noqa: F401
        from ..runtime import multihost  # noqa: F401
        if sql:
            from ..table import delta_spark  # noqa: F401
        self._out: list = []
        self._switch = sys.getswitchinterval()
        # The start is ~100 Py4J calls, each waking this thread after a reply; the checks' imports
        # hold the GIL meanwhile, and each wake-up would wait out a 5 ms switch interval.
        sys.setswitchinterval(EARLY_SWITCH_S)
        self._thread = threading.Thread(target=self._start, args=(app, reach, sql), daemon=True,
                                        name="rocketlake-spark-start")
        self._thread.start()

    def _start(self, app: str, reach: dict | None, sql: bool) -> None:
        try:
            self._out.append(spark_session(app, reach, sql=sql))
        except BaseException as e:  # noqa: BLE001 - raised again by session(), on the job's thread
            self._out.append(e)
        finally:
            sys.setswitchinterval(self._switch)

    def session(self):
        """The session (joined); the error its start raised, raised here."""
        self._thread.join()
        got = self._out[0]
        if isinstance(got, BaseException):
            raise got
        return got


def start_early(app: str, reach: dict | None = None, sql: bool = True) -> EarlySpark | None:
    """``EarlySpark`` under ``spark-submit``; None otherwise (the ``rocketlake`` command starts its
    JVM itself and only once the checks passed: a bad argument never starts one)."""
    return EarlySpark(app, reach, sql) if _submitted() else None


def _submitted() -> bool:
    """True under spark-submit (the master then comes from --master or its default local[*])."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_master() -> str:
    """The master spark-submit was given (its JVM, our Py4J gateway, holds it as ``spark.master``),
    read without starting a SparkContext."""
    from pyspark import SparkConf, SparkContext
    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", "local[*]")


def _ship_code(spark) -> None:
    """Send storelib to executors of a real cluster (where it may not be installed). The zip is
    served from the driver's disk while the application runs (an executor that joins late fetches
    it then), and removed when the driver's Python exits."""
    import atexit
    import shutil
    import tempfile
    import zipfile
    tmp = tempfile.mkdtemp(prefix="rocketlake-code-")
    atexit.register(shutil.rmtree, tmp, True)
    path = os.path.join(tmp, "storelib.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, "storelib")):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for name in sorted(f for f in files if f.endswith(".py")):
                path_in = os.path.join(dirpath, name)
                zf.write(path_in, os.path.relpath(path_in, ROOT))
    spark.sparkContext.addPyFile(path)


def run_job(app: str, args, body, preload=(), warm=(), reach=None, config=None, state=None,
            session=None, sql=True, early: EarlySpark | None = None) -> int:
    """Run ``body(spark, config)`` with clear errors and exit codes (``exit_code``).

    ``preload``: modules the body needs, imported while the JVM starts the SparkSession (not before:
    the GIL would make the driver's own way to the JVM wait for them); ``warm``: modules
    the job's tasks need, imported in the executors' Python workers by a warm-up job while the
    body starts (``storelib.runtime.warmup``; the body joins it with ``warmup.wait_workers``).
    ``reach``: option name -> path the executors read (``spark_session``), checked before any task
    runs; ``config``: the job's configuration if already resolved (``store_config``); ``state()``:
    the line an interrupted job prints (what the store holds, what to run); ``session``: a stand-in
    for Spark (``runtime.localrun.LocalSession``) to run the body in this process; ``sql=False``: the
    body uses only ``spark.sparkContext`` (``spark_session``); ``early``: the session already
    starting (``start_early``; ``reach`` and ``sql`` were given to it), joined here."""
    from ..compute import allocator
    from ..runtime import interrupts, warmup
    from ..runtime.milestones import mark
    mark("run_job")
    allocator.tune()          # the driver's malloc settings, before Spark starts (as importing the codec did)
    interrupts.reset()
    on_signals()
    spark = None

    def job() -> int:
        nonlocal spark
        with worded(failures.CONFIG):         # an unreadable or invalid --config file
            cfg = config if config is not None else config_from_args(args)
        if session is not None:
            mark("body")
            return body(session, cfg)
        loading = []
        mark("spark-session")
        if early is not None:
            loading.append(warmup.preload(preload))     # the checks' imports are done: no two importers
            spark = early.session()
        else:
            spark = spark_session(app, reach, sql=sql, starting=lambda: loading.append(warmup.preload(preload)))
        mark("spark-started")
        if warm:
            warmup.warm_workers(spark.sparkContext, warm)
        for started in loading or [warmup.preload(preload)]:
            started.wait()
        mark("body")
        try:
            return body(spark, cfg)
        finally:
            mark("body-end")

    def signalled_job() -> int:
        try:
            return job()
        except Exception:
            if _SIGNALLED:  # a Py4J call the interrupt cut failed in its stead: still the interrupt's one line
                from ..errors import Interrupted
                raise Interrupted(_SIGNALLED[-1]) from None
            raise
    try:
        code = guarded(signalled_job, failures.WRITER, interrupted=lambda e: _interrupted_exit(e, state))
    finally:
        if spark is not None:
            try:
                warmup.wait_workers(spark.sparkContext, timeout=10)
                mark("spark-stop")
                spark.stop()
                mark("spark-stopped")
            except KeyboardInterrupt as e:      # while Spark shuts down: the job's work is done or not
                _interrupted_exit(e, state)
    return _after_commit_signal(code)


def _after_commit_signal(code: int) -> int:
    """A job that finished although SIGINT / SIGTERM arrived after its commit (``runtime.interrupts``)
    says so and keeps its status: the batch is committed and published."""
    from ..runtime import interrupts
    signum = interrupts.pending()
    interrupts.reset()
    if signum is not None:
        name = {2: "SIGINT", 15: "SIGTERM"}.get(signum, f"signal {signum}")
        print(f"{name} arrived after the batch was committed: the job finished it first (nothing to rerun)",
              file=sys.stderr, flush=True)
    return code


def _interrupted_exit(e: BaseException, state: Callable[[], str] | None) -> NoReturn:
    """End an interrupted job now: its one line and 128 + signal; exit 0 when the interrupt came
    after the commit (``state()`` reads what the store holds, ``runtime.interrupts`` what this run did)."""
    from ..runtime import interrupts
    if interrupts.deferring():
        name = {2: "SIGINT", 15: "SIGTERM"}.get(getattr(e, "signum", 2), "the interrupt")
        print(f"{name} arrived after the batch was committed: the batch is in the store; rerunning the same "
              f"command finishes publishing its files, if anything was left", file=sys.stderr, flush=True)
        code = 0
    else:
        try:
            line = state() if state else "nothing was committed by this run; rerun the same command"
        except Exception:  # noqa: BLE001 - the one line prints whatever the store says
            line = "rerun the same command"
        code = interrupted(e, line)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)          # no Spark shutdown noise; the JVM ends when its stdin closes


def emit_summary(summary: dict, json_path: str | None) -> None:
    line = " ".join(f"{k}={v}" for k, v in summary.items())
    print(f"rocketlake: {line}", flush=True)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(summary, fh, sort_keys=True)
            fh.write("\n")


# What an ingest's driver and its tasks import (run_job's preload / warm): the driver plans and
# commits (Delta through deltalake); the tasks encode and write, and pyarrow's first array from
# numpy imports pandas (~0.3-0.5 s a worker otherwise paid in its first encode task).
INGEST_DRIVER_MODULES = ("storelib.ingest.driver", "deltalake")
# the encode task's compiled kernels loaded once, in the worker daemon, not in each worker's first task
INGEST_TASK_MODULES = ("storelib.ingest.encode:load_kernels", "storelib.ingest.write", "pandas")


def ingest(spark, cfg, args) -> int:
    from ..ingest.driver import run_ingest
    summary = run_ingest(spark, args.store, args.input, args.format, cfg, batch_id=args.batch_id,
                         target_splits=args.partitions, quiet=args.quiet,
                         topics=getattr(args, "topics", None), queue_by=getattr(args, "queue_by", None),
                         store_timestamp=getattr(args, "store_timestamp", None),
                         update_topics=bool(getattr(args, "update_topics", False)),
                         allow_empty_body=getattr(args, "allow_empty_body", None))
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)


def adopt(spark, cfg, args) -> int:
    from ..ops.adopt import adopt as run_adopt
    summary = run_adopt(spark, args.store, args.from_store, cfg, batch_id=args.batch_id, quiet=args.quiet)
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)
