"""A single Kafka broker in KRaft mode (broker and controller in one JVM) for the streaming tests.

    with KafkaBroker(workdir) as k:          # 127.0.0.1, two ephemeral ports, killed on exit
        k.produce("events", ["key\\tvalue", ...])
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", k.bootstrap)

The jars come from tests/support/kafkajars.py (Maven Central). The log directory is formatted with
``kafka.tools.StorageTool`` first; ``produce`` runs Kafka's ConsoleProducer (keys before a tab),
acks=all, so the messages are in the log, with their CreateTime timestamps, when it returns.
"""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid

from support import kafkajars

__all__ = ["KafkaBroker", "free_port"]

_JVM = ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    def __init__(self, work: str, start_timeout: float = 90.0):
        self.work, self.start_timeout = work, start_timeout
        self.cp = kafkajars.broker_classpath()
        self.proc = None

    def _props(self) -> str:
        self.port, cport = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        props = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": os.path.join(self.work, "kafka-logs"), "num.partitions": "1",
            "auto.create.topics.enable": "true", "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": "-1",
        }
        path = os.path.join(self.work, "server.properties")
        with open(path, "w") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in props.items())
        with open(os.path.join(self.work, "log4j.properties"), "w") as fh:
            fh.write("log4j.rootLogger=WARN, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.stderr.layout.ConversionPattern=%d %p %c: %m%n\n")
        return path

    def java(self, *args) -> list:
        return [*_JVM, f"-Dlog4j.configuration=file:{os.path.join(self.work, 'log4j.properties')}",
                "-cp", self.cp, *args]

    def __enter__(self):
        os.makedirs(self.work, exist_ok=True)
        props = self._props()
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        r = subprocess.run(self.java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", props),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {r.stdout}{r.stderr}")
        self.log = os.path.join(self.work, "broker.log")
        self._out = open(self.log, "w")
        self.proc = subprocess.Popen(self.java("kafka.Kafka", props), stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.work)
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka broker exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"kafka broker did not listen on {self.bootstrap} in {self.start_timeout:.0f}s:\n{self.tail()}")

    def tail(self) -> str:
        try:
            return open(self.log, errors="replace").read()[-3000:]
        except OSError:
            return ""

    def produce(self, topic: str, lines: list) -> None:
        """Each line ``key<TAB>value`` as one message of ``topic`` (created on first use)."""
        cmd = self.java("kafka.tools.ConsoleProducer", "--bootstrap-server", self.bootstrap, "--topic", topic,
                         "--producer-property", "acks=all", "--producer-property", "linger.ms=5",
                         "--property", "parse.key=true", "--property", "key.separator=\t")
        r = subprocess.run(cmd, input="".join(f"{ln}\n" for ln in lines), capture_output=True, text=True,
                           timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"kafka console producer failed ({r.returncode}):\n{r.stderr[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        if getattr(self, "_out", None):
            self._out.close()

    def __exit__(self, *exc):
        self.kill()
