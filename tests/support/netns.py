"""Hosts made of Linux namespaces, for multi-host tests (root only).

``Hosts(n)`` makes a control namespace (the driver, the Spark master, the S3 server) and ``n``
worker namespaces, joined by veth pairs on a bridge inside the control namespace; every address
(10.77.0.0/24) exists only inside them, never in the namespace the tests run in. A worker process
also gets its own mount namespace (``worker_shell``): a private ``/tmp``, and ``/work`` and the
checkout (wherever it lies) hidden but for the virtual environment, whose editable install of storelib is masked,
so the worker sees nothing of the driver's disk and cannot import storelib unless it is shipped.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

__all__ = ["unavailable", "Hosts", "CTL_IP", "worker_ip"]

SUBNET = "10.77.0"
CTL_IP = f"{SUBNET}.1"
VENV = os.path.dirname(os.path.dirname(sys.executable))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _under(path: str, top: str) -> bool:
    return os.path.abspath(path) == top or os.path.abspath(path).startswith(top.rstrip("/") + "/")


def worker_ip(k: int) -> str:
    return f"{SUBNET}.{k + 2}"


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def unavailable() -> str | None:
    """Why namespaces cannot be made here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "needs root to make network and mount namespaces (ip netns, unshare)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    name = f"rlprobe{os.getpid()}"
    try:
        _ip("netns", "add", name)
        _ip("netns", "del", name)
        r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /tmp"], capture_output=True, text=True)
        if r.returncode:
            return f"cannot make a mount namespace: {r.stderr.strip()}"
    except RuntimeError as e:
        return f"cannot make a network namespace: {e}"
    return None


class Hosts:
    def __init__(self, workers: int):
        tag = f"{os.getpid() % 100000}"
        self.ctl = f"rl{tag}c"
        self.workers = [f"rl{tag}w{k}" for k in range(workers)]

    def up(self) -> "Hosts":
        for ns in [self.ctl] + self.workers:
            _ip("netns", "add", ns)
        _ip("-n", self.ctl, "link", "set", "lo", "up")
        _ip("-n", self.ctl, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.ctl, "addr", "add", f"{CTL_IP}/24", "dev", "br0")
        _ip("-n", self.ctl, "link", "set", "br0", "up")
        for k, ns in enumerate(self.workers):
            _ip("link", "add", f"v{k}", "netns", self.ctl, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.ctl, "link", "set", f"v{k}", "master", "br0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{worker_ip(k)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        return self

    def down(self) -> None:
        for ns in [self.ctl] + self.workers:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def in_ctl(self, argv: list) -> list:
        return ["ip", "netns", "exec", self.ctl, *argv]

    def worker_shell(self, k: int, env: dict, argv: list) -> list:
        """argv run in worker k's namespaces: its own network, /tmp and view of /work, and only ``env``."""
        pth = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(VENV, "lib")) for f in fs
               if f.startswith("__editable__") and f.endswith(".pth")]
        # The checkout may lie anywhere (under /tmp, /work, a home): the venv is first bound to a
        # mount point of this namespace's own, then /tmp, /work and the checkout are hidden, and the
        # venv is bound back at its own path inside the empty tmpfs that hides it.
        hide = ["/tmp"] + [d for d in ("/work", ROOT) if os.path.isdir(d) and not _under(d, "/tmp")
                           and not (d == ROOT and _under(ROOT, "/work"))]
        script = "\n".join([
            "set -e",
            "mount --make-rprivate /",
            "mkdir -p /mnt",
            "mount -t tmpfs tmpfs /mnt",
            "mkdir -p /mnt/keep",
            f"mount --bind {shlex.quote(VENV)} /mnt/keep",
            *[f"mount -t tmpfs tmpfs {shlex.quote(d)}" for d in hide],
            "mkdir -p /tmp/home",
            f"mkdir -p {shlex.quote(VENV)}",
            f"mount --bind /mnt/keep {shlex.quote(VENV)}",
            "umount /mnt/keep",
            "umount /mnt",
            *[f"mount --bind /dev/null {shlex.quote(p)}" for p in pth],
            "exec env -i " + " ".join(shlex.quote(f"{k2}={v}") for k2, v in env.items()) + " "
            + " ".join(shlex.quote(a) for a in argv),
        ])
        return ["ip", "netns", "exec", self.workers[k], "unshare", "-m", "sh", "-c", script]
