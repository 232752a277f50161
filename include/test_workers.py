"""How many pytest workers `make test` starts by default: one per core this process may use (its
CPU affinity, and a cgroup v2 quota when one is set: a container's `nproc` can name the host's
cores), at least 2 and at most 4 (each worker's Spark, Airflow and broker processes fill about a
core). Prints the number."""

from __future__ import annotations

import math
import os


def cores() -> int:
    n = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return n
    return n if quota == "max" else max(1, min(n, math.ceil(int(quota) / int(period))))


if __name__ == "__main__":
    print(max(2, min(4, cores())))
