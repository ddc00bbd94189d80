"""Choosing a kernel by timing it on this machine: the candidates take turns, round after round,
so that a slow moment of the machine (another process, a page cache filling) falls on all of them
alike; each one's median round is kept."""
import time


def rounds(runs, repeats=5, calls=1):
    """{name: [seconds per call, one per round]} for runs {name: f}: one warm-up call each, then in
    each of `repeats` rounds every f is called `calls` times in turn."""
    for f in runs.values():
        f()                                                          # warm-up
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, f in runs.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            times[name].append((time.perf_counter() - t0) / calls)
    return times


def alternately(runs, repeats=5, calls=1):
    """{name: milliseconds per call, the median of `repeats` rounds} for runs {name: f}."""
    return {name: 1e3 * sorted(t)[len(t) // 2] for name, t in rounds(runs, repeats, calls).items()}
