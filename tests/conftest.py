"""Shared fixtures: the real Qwen3.5 tokenizer, built once per test session."""

import os

import pytest

from book.cores import available_cores


def worker_threads():
    """Threads for one pytest-xdist worker's torch (and what it starts): the cores shared out among
    the workers, at least one. `make test-all` runs one worker per core; torch's default (a thread
    per core in every worker) has more threads than cores, and an OpenMP team whose thread is
    waiting for a core spins at its barrier: a test that takes 20 s alone then takes minutes."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, available_cores() // max(1, workers))


if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported: it reads these once
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(worker_threads()))


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory):
    """Path of the rebuilt tokenizer.json: the tiny test model's copy if book.tiny exists, else a
    fresh build."""
    try:
        from book.tiny import path as tiny_path
    except ImportError:
        from book.tokenizer import build_tokenizer_json

        return build_tokenizer_json(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")
    return tiny_path() / "tokenizer.json"


@pytest.fixture(scope="session")
def tokenizer(tokenizer_json):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The book built once per session, as readers get it (`mkdocs build --strict`, the lesson
    notebooks shown with their stored outputs): shared by the site, provenance and browser tests.
    BOOK_SITE=<folder> checks a site built before instead."""
    import os
    from pathlib import Path

    if os.environ.get("BOOK_SITE"):
        return Path(os.environ["BOOK_SITE"])
    # under pytest-xdist (make test-all runs two workers) the workers share one build: the first
    # builds it in the session's temp folder (its workers' common parent), the other waits, reads it
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "built-site"
    with FileLock(str(shared / "built-site.lock")):
        if (out / "BUILT").is_file():
            return out
        _build_site(out)
        (out / "BUILT").write_text("mkdocs build --strict passed\n")
    return out


def _build_site(out):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    env = {**os.environ, "BOOK_EXECUTE_NOTEBOOKS": "false", "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    print(f"mkdocs build --strict: {time.perf_counter() - start:.1f} s")
    problems = [line for line in proc.stderr.splitlines() if line.startswith(("ERROR", "WARNING"))]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        problems or [proc.stderr[-3000:]]
    )


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny test model's folder (built once, cached under .cache/)."""
    from book.tiny import path

    return path()


# ------------------------------------------------------------------------------------ the two tiers
# `make test` (the fast tier, every change) deselects these; `make test-all` (and CI) runs them too.
# They run chapter code end to end, build the site, execute notebooks or start fresh Pythons.
SLOW_FIXTURES = {"site", "official_site", "built_site", "executed_lessons"}
SLOW = (
    "tests/test_book.py::test_committed_outputs_are_current",  # regen --check: every script
    "tests/test_book.py::test_every_code_block_runs",  # the pages' code blocks
    "tests/test_notebooks.py::test_the_notebook_runs_top_to_bottom",
    "tests/test_notebooks.py::test_the_first_cell_clones",  # a venv and a clone
    "tests/test_lessons.py::test_nbexec_runs_every_lesson",
    "tests/test_lessons.py::test_lesson_runs_with_the_solutions",
    "tests/test_lessons.py::test_positional_lesson_runs_with_the_solutions",
    "tests/test_provenance.py::test_with_tiny_outputs_pages_say_so",  # a site build
    "tests/test_provenance.py::test_outputs_and_values_render_as_text",
    "tests/test_regen.py::test_check_passes_with_another_cpus_kernels",
    "tests/test_kernels.py::test_check_passes_with_limited_kernels",  # SSE's kernels
    "tests/test_kernels_avx2.py",  # AVX2's
    "tests/test_vision.py::test_vision_tower_equals_transformers_at_the_08b_shapes",  # 0.8B shapes
    "tests/test_regen.py::test_concurrent_tiny_builds",
    "tests/test_fast.py::test_bench_smoke",  # bench.py in a subprocess
    "tests/test_train.py::test_bench_train_smoke",  # bench_train.py in a subprocess
    "tests/test_vision.py::test_bench_vision_smoke",  # bench_vision.py in a subprocess
    "tests/test_pretrain.py::test_the_smoke_run",  # pretrain.py --smoke in a subprocess (~15 s)
    "tests/test_mtp.py::test_the_training_run_smoke",  # mtp_train.py --smoke in a subprocess
    "tests/test_book.py::test_tiny_model_builds_byte_for_byte",
    "tests/test_book.py::test_tiny_model_is_the_books_whatever_kernels",  # a build in a subprocess
)


# Under pytest-xdist (make test-all: -n auto --dist loadfile) each test file goes whole to one
# worker (its module fixtures are made once); the longest files start first, in this order, so
# that the short ones fill in around them (--no-loadscope-reorder: else xdist starts the files
# with the most tests first, and a long file with one test can start last and run alone).
LONGEST_FIRST = (  # seconds each took in a full run on 2 cores (AMD EPYC, AVX-512; both busy)
    "tests/test_book.py",  # 367 (regen --check of every script: 285)
    "tests/test_browser_zh.py",  # 190 (its sweep alone: 83, on 1.5 cores)
    "tests/test_browser_en.py",  # 151
    "tests/test_kernels.py",  # 263 with ch18 and ch20 under SSE's kernels, about 150 without
    "tests/test_notebooks.py",  # 126
    "tests/test_mtp.py",  # 87
    "tests/test_regen.py",  # 82
    "tests/test_kernels_avx2.py",  # 90 where an output was made with other kernels, else skipped
    "tests/test_fast.py",  # 57
    "tests/test_lessons.py",  # 56
    "tests/test_main.py",  # 37
    "tests/test_bad_input.py",  # 32
    "tests/test_provenance.py",  # 23
    "tests/test_vision.py",  # 29 in the fast tier (the parity report runs it in the full one)
    "tests/test_pretrain.py",  # 11
    "tests/test_train.py",  # 23 in the fast tier
)


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        if item.nodeid.startswith(SLOW) or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(slow)
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


# The parity report (tests/parity_report.py, run by `book.regen --check` in test_book.py) runs these
# tests to record what they measure: where that check runs, they run there, once, and not again as
# themselves (a failure among them fails the check and shows pytest's report).
PARITY_REPORT_RUNS = (
    "tests/test_parity.py",
    "tests/test_train.py",  # the loss and the gradients (chapters 17, 18)
    # LoRA's merged checkpoint, loaded by transformers (chapter 20)
    "tests/test_lora.py::test_the_merged_checkpoint_loads_in_transformers",
    "tests/test_vision.py",  # the vision tower and images (chapters 23-26)
)
REGEN_CHECK = "tests/test_book.py::test_committed_outputs_are_current"


class RunParityTestsOnce:
    @pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they do
    def pytest_collection_modifyitems(self, config, items):
        if not any(item.nodeid == REGEN_CHECK for item in items):
            return
        again = [item for item in items if item.nodeid.startswith(PARITY_REPORT_RUNS)]
        if again:
            config.hook.pytest_deselected(items=again)
            items[:] = [item for item in items if item not in again]


def pytest_configure(config):
    config.pluginmanager.register(RunParityTestsOnce(), "run-parity-tests-once")
