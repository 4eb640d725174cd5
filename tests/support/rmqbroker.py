"""A real RocketMQ name server + broker + client over a store directory (tests/rocketmq/src/broker).

    with Broker(store_root, work_dir, config) as b:
        queues, messages = b.consume("topic")
        b.query(topic, key, max_num, begin, end); b.view(topic, offset_msg_id)

One JVM (its own process group) holds the name server and the broker, both on 127.0.0.1 with
ephemeral ports, and a DefaultMQPullConsumer that talks to them over TCP. ``ha=True`` starts
RocketMQ's HA service, its listener on 127.0.0.1 too (``addresses``: name server, broker port,
HA port); a slave's JVM is given its master's name server (``namesrv=`` in ``config``) and starts
none of its own. The 4.9 line (src/broker4, 4.9.7's broker: Maven Central has none at 4.9.8)
cannot bind to one address: its JVM runs in a network namespace of its own holding only the
loopback interface (unshare -rn).
Leaving the block sends ``quit`` (clean shutdown: RocketMQ's store and broker take about
10 s for it); whatever happens, the process group is killed afterwards. ``clean_exit=False``
only kills it: for a last broker whose store nothing looks at afterwards.
"""
from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading

from support import rmqjars

TIMEOUT = 120
ANSWERS = {"ready", "queue", "msg", "pull", "error", "route", "produced", "offsets"}


def _b64(s: str) -> str:
    return base64.b64decode(s).decode("utf-8")


def parse_msg(line: str) -> dict:
    f = line.split("\t")
    assert f[0] == "msg", line
    props = {}
    for kv in f[16:]:
        k, v = kv.split(":", 1)
        props[_b64(k)] = _b64(v)
    return {"topic": _b64(f[1]), "queue_id": int(f[2]), "queue_offset": int(f[3]), "commitlog_offset": int(f[4]),
            "offset_msg_id": f[5], "msg_id": f[6], "flag": int(f[7]), "sys_flag": int(f[8]),
            "born_timestamp": int(f[9]), "born_host": f[10], "store_timestamp": int(f[11]), "store_host": f[12],
            "reconsume_times": int(f[13]), "prepared_transaction_offset": int(f[14]),
            "body": base64.b64decode(f[15]), "properties": props}


class Broker:
    def __init__(self, store_root: str, work: str, config: dict, version: str = rmqjars.V5,
                 clean_exit: bool = True, ha: bool = False):
        self.line4 = version.startswith("4.")
        self.cp = rmqjars.classpath(version, "broker4" if self.line4 else "broker")
        self.store_root, self.work, self.config = store_root, work, config
        self.clean_exit = clean_exit
        self.ha = ha
        self.proc = None
        self.log = os.path.join(work, "broker-jvm.log")

    def __enter__(self):
        os.makedirs(self.work, exist_ok=True)
        home = os.path.join(self.work, "home")
        os.makedirs(home, exist_ok=True)
        cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Duser.home={home}",
               f"-Drocketmq.home.dir={home}", "-Drocketmq.client.logRoot=" + os.path.join(home, "logs"),
               "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
               *(["-Drocketlake.ha=loopback"] if self.ha else []),
               "-cp", self.cp, "rocketlake.brokercheck.BrokerCheck", self.store_root, self.work,
               *[f"{k}={v}" for k, v in self.config.items()]]
        if self.line4:
            # 4.9's store frees its mapped files through jdk.internal.ref.Cleaner
            i = cmd.index("-cp")
            cmd[i:i] = ["--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
                        "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED"]
            # 4.9's name server and broker bind every interface (no bind address to set): the JVM
            # gets a network namespace of its own with only the loopback interface up, and its
            # ports go with it
            cmd = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
        self._err = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True, encoding="utf-8", start_new_session=True, cwd=self.work)
        ready = self._answer()
        if not ready or not ready[0].startswith("ready"):
            raise RuntimeError(f"broker did not start: {ready}; log {self.log}:\n{self.tail()}")
        self.addresses = ready[0].split()[1:]
        return self

    def tail(self) -> str:
        try:
            return open(self.log, encoding="utf-8", errors="replace").read()[-3000:]
        except OSError:
            return ""

    def _answer(self) -> list[str]:
        lines = []
        timer = threading.Timer(TIMEOUT, self.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                if line == "end":
                    return lines
                if line.split("\t", 1)[0].split(" ", 1)[0] in ANSWERS:   # not RocketMQ's logging
                    lines.append(line)
        finally:
            timer.cancel()
        raise RuntimeError(f"broker JVM ended (exit {self.proc.poll()}); log:\n{self.tail()}")

    def ask(self, *words) -> list[str]:
        self.proc.stdin.write("\t".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def consume(self, topic: str, nqueues: int):
        """({queue: (min, max)}, messages, other answer lines): every queue from its min offset."""
        queues, msgs, other = {}, [], []
        for line in self.ask("consume", topic, nqueues):
            if line.startswith("queue\t"):
                _, q, lo, hi = line.split("\t")
                queues[int(q)] = (int(lo), int(hi))
            elif line.startswith("msg\t"):
                msgs.append(parse_msg(line))
            else:
                other.append(line)
        return queues, msgs, other

    def offsets(self) -> tuple[int, int]:
        """The store's (min, max) CommitLog offset."""
        _, lo, hi = self._checked(self.ask("offsets"))[0].split("\t")
        return int(lo), int(hi)

    def query(self, topic, key, max_num, begin, end) -> list[dict]:
        return [parse_msg(x) for x in self._checked(self.ask("query", topic, key, max_num, begin, end))]

    def view(self, topic, offset_msg_id) -> dict:
        return parse_msg(self._checked(self.ask("view", topic, offset_msg_id))[0])

    @staticmethod
    def _checked(lines):
        for x in lines:
            if x.startswith("error"):
                raise RuntimeError(x)
        return lines

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        """Shut the JVM down (cleanly unless ``clean_exit=False``); again: nothing."""
        if self.proc is None or self._err.closed:
            return
        try:
            if self.clean_exit and self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - killed below
            pass
        finally:
            self.kill()
            self.proc.wait()
            self._err.close()

    def __exit__(self, *exc):
        self.stop()
        return False
