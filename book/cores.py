"""The cores this process may run on, asked without importing torch: tests/conftest.py asks before
torch is imported (torch reads its thread counts once), book/regen.py and book/codeblocks.py to
share out their scripts and pages."""

import os


def available_cores():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
