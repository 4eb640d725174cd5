"""rocketlake: one command for every job (installed with the package as a console script).

    rocketlake ingest  --store STORE --input messages.jsonl      write one batch
    rocketlake query   --store STORE key --topic T --key K       look messages up (also range, keys, ...)
    rocketlake inspect --store STORE stats                       what the store holds
    rocketlake verify  --store STORE [--deep]                    check every file
    rocketlake expire  --store STORE --reserved-hours 72         retention
    rocketlake export  --store STORE --to DIR                    a broker-ready directory
    rocketlake repair  --store STORE [--apply]                   rebuild queues, index, checkpoint
    rocketlake mirror  --from BROKER_DIR --store STORE [--every S]  back up a running broker
    rocketlake demo    [--store demo-store]                      ingest the bundled sample and look at it
    rocketlake ui      --store STORE [--port 8040]               a web page over the store (read only)

Spark is found as the installed pyspark and started in this process only by what needs it (a
large ingest, the compat batch of ``query --queries``, ``--spark`` checks): its Python workers run
this interpreter, the JVM gets the cold-job options and a quiet log4j configuration, and the master
is ``local[*]`` unless ``--master`` says otherwise. ``--master URL`` and ``--conf KEY=VALUE``
(repeatable) go to Spark as spark-submit would take them, before or after the command name.
Without ``--master``, small local inputs are ingested and small stores queried in this process
(no JVM at all). Each command's ``--help`` says the rest.
"""
from __future__ import annotations

import os
import sys

__all__ = ["COMMANDS", "main", "split_spark_args"]

COMMANDS = {
    "ingest": ("storelib.cli.ingest", "write one batch of messages (or import a broker's directory)"),
    "query": ("storelib.cli.query", "look messages up: key, id, unique-key, offset, time, range, keys"),
    "inspect": ("storelib.cli.inspect", "what the store holds: stats, segments, checkpoints, topics, history"),
    "verify": ("storelib.cli.verify", "check every file against the manifest and RocketMQ's rules"),
    "expire": ("storelib.cli.expire", "retention: expired commitlog segments, per-topic queue files"),
    "export": ("storelib.cli.export", "write a broker-ready RocketMQ store directory"),
    "mirror": ("storelib.cli.mirror", "copy a running broker's new records into the store, once or every N seconds"),
    "repair": ("storelib.cli.repair", "rebuild consume queues, index files and the checkpoint from the CommitLog"),
    "demo": ("storelib.cli.demo", "ingest the bundled 2,000-message sample and look at it"),
    "ui": ("storelib.ui.command", "a local, read-only web page over one store (batches, topics, messages)"),
}


def split_spark_args(argv: list) -> tuple[str | None, list, list]:
    """(--master, [--conf values], the other arguments): Spark's options wherever they stand."""
    master, confs, rest = None, [], []
    it = iter(argv)
    for a in it:
        if a in ("--master", "--conf"):
            value = next(it, None)
            if value is None:
                raise SystemExit(f"rocketlake: error: {a} needs a value")
            if a == "--master":
                master = value
            else:
                confs.append(value)
        elif a.startswith("--master="):
            master = a.split("=", 1)[1]
        elif a.startswith("--conf="):
            confs.append(a.split("=", 1)[1])
        else:
            rest.append(a)
    for c in confs:
        if "=" not in c:
            raise SystemExit(f"rocketlake: error: --conf {c!r}: expected KEY=VALUE")
    return master, confs, rest


def _usage() -> str:
    lines = ["usage: rocketlake COMMAND [--master URL] [--conf KEY=VALUE ...] [options]",
             "       rocketlake --version", "", "commands:"]
    lines += [f"  {name:8s} {what}" for name, (_mod, what) in COMMANDS.items()]
    lines += ["", "rocketlake COMMAND --help says more. Without --master, Spark (when needed) runs local[*]."]
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(_usage(), file=sys.stderr)            # a command is required, as argparse would say
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("--version", "-V", "version"):
        import storelib
        print(f"rocketlake {storelib.__version__}")
        return 0
    master, confs, rest = split_spark_args(argv)
    if not rest:
        print(f"rocketlake: error: a command is required\n\n{_usage()}", file=sys.stderr)
        return 2
    cmd, args = rest[0], rest[1:]
    if cmd not in COMMANDS:
        print(f"rocketlake: error: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    from ..runtime.sparkenv import prepare_in_process
    prepare_in_process(master or "local[*]", confs)
    os.environ["ROCKETLAKE_PROG"] = f"rocketlake {cmd}"
    if master is None and cmd in ("ingest", "query") and not any(a == "--local" or a.startswith("--local=")
                                                                 for a in args):
        args = ["--local", "auto"] + args
    import importlib
    from . import common
    from ..runtime import interrupts
    interrupts.reset()          # a command run earlier in this process (tests call main()) left nothing
    common.on_signals()
    try:
        return int(importlib.import_module(COMMANDS[cmd][0]).main(args) or 0)
    except KeyboardInterrupt as e:
        return common.interrupted(e, "rerun the same command (a job never commits half a batch)")


def run() -> None:
    """The console script: the process ends once ``main`` returns (storelib.runtime.fastexit),
    without the interpreter's teardown of every module a command loaded."""
    from .common import exit_now
    exit_now(main())


if __name__ == "__main__":
    run()
