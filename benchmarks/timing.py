"""How the benchmark times one run function: shared by bench.py and the originals' worker
(originals_worker.py, which runs in another environment), so both are timed alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(run: Callable[[], Any], repeats: int, min_time: float = 0.2, warm_up: bool = True) -> float:
    """Median wall time of ``run()`` over at least ``repeats`` runs, after one warm-up run unless
    ``warm_up`` is false, and more (up to 10x repeats) until ``min_time`` seconds have passed."""
    if warm_up:
        run()
    times: list[float] = []
    start_all = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start_all < min_time and len(times) < 10 * repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
