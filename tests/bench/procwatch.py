"""Peak memory and lifetime of the Spark driver JVMs under a process, sampled from /proc.

A ``spark-submit`` is a shell script that ``exec``s ``spark-class``, which runs a short-lived
launcher JVM (``org.apache.spark.launcher.Main``) and then ``exec``s the driver JVM
(``org.apache.spark.deploy.SparkSubmit``): the driver keeps the pid that was forked for
``spark-submit``, so its creation time is the start of the whole spark-submit process. Under
Airflow that pid is a grandchild or deeper, and ``getrusage(RUSAGE_CHILDREN)`` would mix every
process the run ever waited for (Airflow itself, the launcher, the Python driver and workers).

``JvmWatch(root_pid)`` looks at ``root_pid`` and its descendants every ``interval`` seconds.
For each driver JVM it keeps the kernel's own high-water mark of its resident set
(``VmHWM`` in /proc/<pid>/status: exact up to the last sample before the JVM exits), its
creation time and the first sample that finds it gone (or a zombie): its wall time is known to
within one interval. It also keeps the peak, over samples, of the summed RSS of the JVM and
its descendants (the Python driver and the Python workers of local mode).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import psutil

DRIVER_CLASS = "org.apache.spark.deploy.SparkSubmit"
LAUNCHER_CLASS = "org.apache.spark.launcher.Main"


@dataclass
class Jvm:
    pid: int
    name: str  # the --name / app argument, for telling several apart
    started: float  # epoch seconds (the fork of its spark-submit)
    ended: float | None = None
    hwm_kib: int = 0
    tree_peak_kib: int = 0

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started

    @property
    def peak_rss_mib(self) -> int:
        return round(self.hwm_kib / 1024)

    @property
    def tree_peak_rss_mib(self) -> int:
        return round(self.tree_peak_kib / 1024)


def _status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _is_driver(cmdline: list[str]) -> bool:
    return bool(cmdline) and cmdline[0].endswith("java") and DRIVER_CLASS in cmdline and \
        LAUNCHER_CLASS not in cmdline


def _app_name(cmdline: list[str]) -> str:
    if "--name" in cmdline:
        i = cmdline.index("--name")
        if i + 1 < len(cmdline):
            return cmdline[i + 1]
    return next((a for a in cmdline if a.endswith(".py")), "?")


def _tree_rss_kib(p: psutil.Process) -> int:
    total = 0
    for c in [p, *p.children(recursive=True)]:
        try:
            total += c.memory_info().rss
        except psutil.Error:  # a Python worker that just ended
            pass
    return total // 1024


class JvmWatch:
    def __init__(self, root_pid: int, interval: float = 0.1):
        self.root_pid = root_pid
        self.interval = interval
        self.jvms: dict[int, Jvm] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jvmwatch-{root_pid}", daemon=True)

    def __enter__(self) -> "JvmWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        now = time.time()
        for j in self.jvms.values():  # the root was waited for: every JVM under it is gone by now
            if j.ended is None:
                j.ended = now

    def _processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _sample(self) -> None:
        now = time.time()
        for p in self._processes():
            if p.pid in self.jvms:
                continue
            try:
                # a process the JVM forks (jspawnhelper, on its way to exec a Python worker) shows
                # the JVM's command line for a moment: a driver's child is never a driver
                if _is_driver(p.cmdline()) and p.ppid() not in self.jvms and not _is_driver(p.parent().cmdline()):
                    self.jvms[p.pid] = Jvm(p.pid, _app_name(p.cmdline()), p.create_time())
            except (psutil.Error, AttributeError):  # gone, or no parent any more
                continue
        for j in self.jvms.values():
            if j.ended is not None:
                continue
            try:
                p = psutil.Process(j.pid)
                if p.status() == psutil.STATUS_ZOMBIE or abs(p.create_time() - j.started) > 1:
                    raise psutil.NoSuchProcess(j.pid)
                hwm = _status_kib(j.pid, "VmHWM")
                if hwm is None:
                    raise psutil.NoSuchProcess(j.pid)
                j.hwm_kib = max(j.hwm_kib, hwm)
                j.tree_peak_kib = max(j.tree_peak_kib, _tree_rss_kib(p))
            except psutil.Error:
                j.ended = now

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def drivers(self) -> list[Jvm]:
        return sorted(self.jvms.values(), key=lambda j: j.started)
