"""Regeneration that passes on any CPU, fails on a real change, and cannot leave a mess."""

import copy
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from book import regen, tiny
from book.compare import compare_figure, compare_text, same_number
from tests.test_kernels import sse_scripts

ROOT = Path(__file__).resolve().parent.parent
# Another machine's kernels, on this one: no AVX in ATen's own loops, MKL and oneDNN on SSE only.
OTHER_KERNELS = regen.KERNELS["default"]  # SSE's kernels, as tests/test_kernels.py caps them
FIGURE_SCRIPTS = [
    "ch04_rope",
    "ch07_chunked",
    "ch09_model",
]  # the outputs whose SVGs move in the last bits


# ------------------------------------------------------------------------------------ what counts
# as the same
@pytest.mark.parametrize(
    "old, new, same",
    [
        ("0.62", "0.63", True),
        ("0.62", "0.64", False),
        ("1,117,326", "1,117,327", False),
        ("6", "7", False),
        ("1,117,326", "1,117,426", False),
        ("6.3e-05", "6.4e-05", True),
        ("6.3e-05", "6.5e-05", False),
        ("752,393,024", "752,393,024", True),
        ("-0.03", "-0.02", True),
        ("-0.03", "0.03", False),
    ],
)
def test_a_number_is_the_same_to_one_unit_of_its_last_digit(old, new, same):
    assert same_number(old, new) is same


def test_printed_text_compares_words_exactly_and_numbers_to_their_precision():
    old = "theta 1e+07: one turn takes 6.3 tokens, 1,117,326 at the slowest\n6 token ids"
    assert compare_text(old, old.replace("6.3", "6.4")) == []
    assert compare_text(old, old.replace("1,117,326", "1,117,325")), "an integer is a count: exact"
    assert compare_text(old, old.replace("6 token", "7 token"))
    assert compare_text(old, old.replace("slowest", "fastest"))
    assert compare_text(old, old + "\nanother line")
    assert (
        compare_text("max |diff| 3.0e-08", "max |diff| 9.1e-07", {"3.0e-08": 1e-5}) == []
    )  # below its bound
    assert compare_text("max |diff| 3.0e-08", "max |diff| 2.0e-05", {"3.0e-08": 1e-5})


def test_a_figure_is_its_texts_and_its_data_to_a_tenth_of_a_percent():
    fig = {"texts": {"en": {"title": "RMS"}}, "data": [[[0.0, 1.0, 2.0, 10.0]]]}
    moved = json.loads(json.dumps(fig))
    moved["data"][0][0][1] += 1e-4  # 1e-5 of the span: invisible
    assert compare_figure(fig, moved) == []
    moved["data"][0][0][1] += 0.1  # 1% of the span
    assert compare_figure(fig, moved)
    relabelled = json.loads(json.dumps(fig))
    relabelled["texts"]["en"]["title"] = "rms"
    assert compare_figure(fig, relabelled)


def test_a_kernel_dependent_value_is_held_to_its_tolerance_not_its_digits():
    """agreement 81.5% recorded with ±6 points, an error 5.98% with ±25%: a CPU that says 83.5% and
    5.56% passes, a change a reader would notice (70%, 9%) fails, in the text and in the values."""
    from book.compare import compare_values

    tol = {"81.5": (6, 0), "5.98": (0, 0.25)}
    old = "clear bf16   81.5%   5.98%"
    assert compare_text(old, "clear bf16   83.5%   5.56%", tolerances=tol) == []
    assert compare_text(old, "clear bf16   70.0%   5.56%", tolerances=tol)
    assert compare_text(old, "clear bf16   83.5%   9.00%", tolerances=tol)
    keys = {"agree": (6, 0), "err": (0, 0.25)}
    assert (
        compare_values(
            {"agree": "81.5%", "err": "5.98%"}, {"agree": "83.5%", "err": "5.56%"}, tolerances=keys
        )
        == []
    )
    assert compare_values(
        {"agree": "81.5%", "err": "5.98%"}, {"agree": "70.0%", "err": "5.56%"}, tolerances=keys
    )


# ------------------------------------------------------------------------------------ on the real
# outputs
# the limited-kernel checks of every such output: tests/test_kernels.py (a file of their own,
# so that the full tier's workers can run them beside the rest)


def committed_and_run(docs, name):
    """(committed provenance, committed text, one run's provenance, its text) of a script, for
    regen.differences, which `--check` reports: one run compared with several edits."""
    files, prov = regen.run_script(name, regen.choose_model())
    old = json.loads((docs / "outputs" / f"{name}.json").read_text())
    old_text = (docs / "outputs" / f"{name}.txt").read_text()
    return old, old_text, prov, files[f"outputs/{name}.txt"].decode()


def test_check_fails_on_a_one_unit_change_to_an_exact_number(tmp_path, monkeypatch):
    """752,393,024 parameters is config arithmetic: 752,393,025 is another model."""
    docs = _copy_outputs(tmp_path, monkeypatch, ["ch13_measuring"])
    old, old_text, new, new_text = committed_and_run(docs, "ch13_measuring")
    assert regen.differences(old, old_text, new, new_text) == []
    edited = old_text.replace("752,393,024", "752,393,025", 1)
    assert edited != old_text
    diffs = regen.differences(old, edited, new, new_text)
    assert diffs and "752,393,025" in " ".join(diffs)


# ------------------------------------------------------------------------------------ on the real
# outputs (figures)
def test_check_passes_with_another_cpus_kernels_and_those_kernels_really_differ(tmp_path):
    """With SSE-only kernels the SVG bytes of a figure differ from the native kernels' (shown
    here), and `--check` still passes with those kernels (tests/test_kernels.py runs it): it
    compares what a reader sees."""
    folder = tiny.path()
    svgs = {}
    for label, extra in (("native", {}), ("other", OTHER_KERNELS)):
        out = tmp_path / label
        env = {
            **os.environ,
            **extra,
            "BOOK_OUT": str(out),
            "QWEN_MODEL": str(folder),
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        subprocess.run(
            [sys.executable, "scripts/ch07_chunked.py"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        svgs[label] = (out / "figures" / "ch07_chunked_en.svg").read_bytes()
    assert svgs["native"] != svgs["other"], (
        "these kernels give the same bits here: the test proves nothing"
    )
    # `--check` of these scripts with the same kernels: tests/test_kernels.py, in the same run as
    # the other kernel-dependent scripts (one run of each script with SSE's kernels, not two)
    assert set(FIGURE_SCRIPTS) <= set(sse_scripts())


def _copy_outputs(tmp_path, monkeypatch, names):
    docs = tmp_path / "docs"
    for name in names:
        (docs / "outputs").mkdir(parents=True, exist_ok=True)
        (docs / "figures").mkdir(parents=True, exist_ok=True)
        for suffix in (".json", ".txt"):
            shutil.copy(ROOT / "docs" / "outputs" / f"{name}{suffix}", docs / "outputs")
        for fig in json.loads((docs / "outputs" / f"{name}.json").read_text())["figures"]:
            for lang in ("zh", "en"):
                shutil.copy(ROOT / "docs" / "figures" / f"{fig}_{lang}.svg", docs / "figures")
    monkeypatch.setattr(regen, "OUTPUTS", docs / "outputs")
    return docs


def test_check_fails_on_a_small_real_change(tmp_path, monkeypatch, capsys):
    docs = _copy_outputs(tmp_path, monkeypatch, ["ch04_rope"])
    old, old_text, new, new_text = committed_and_run(docs, "ch04_rope")
    assert regen.differences(old, old_text, new, new_text) == []

    def differs(prov=old, text=old_text):
        return " ".join(regen.differences(prov, text, new, new_text))

    moved = copy.deepcopy(old)
    series = moved["figure_data"]["ch04_rope_frequencies"]["data"][1][0]  # the right panel's curve
    span = max(series) - min(series)
    series[len(series) // 2] += 0.01 * span  # one point moved by 1% of the span
    assert "figure ch04_rope_frequencies" in differs(moved)
    retitled = json.loads(
        json.dumps(old).replace('"One query dotted with itself', '"A query dotted with itself')
    )
    assert retitled != old and "title" in differs(retitled)
    # and --check itself: it fails, names the difference, and writes nothing
    txt = docs / "outputs" / "ch04_rope.txt"
    txt.write_text(txt.read_text().replace("6.3 tokens", "6.5 tokens"))
    edited = txt.read_bytes()
    capsys.readouterr()
    assert regen.main(["--check", "ch04_rope"]) == 1
    assert "6.5 tokens" in capsys.readouterr().out
    assert txt.read_bytes() == edited


# ------------------------------------------------------------------------------------ no mess
def _fake_repo(tmp_path, monkeypatch, scripts):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    for name, body in scripts.items():
        (tmp_path / "scripts" / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.setattr(regen, "SCRIPTS", tmp_path / "scripts")
    monkeypatch.setattr(regen, "OUTPUTS", tmp_path / "docs" / "outputs")
    monkeypatch.setattr(regen, "EXTRA", {})
    return tmp_path / "docs"


TWO_FIGURES = """
import os
from book.out import save_figure
run = os.environ.get("RUN", "1")
print("run", run)
def draw(t):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(); ax.plot([1, 2, int(run)]); ax.set_title(t("第" + run, "run " + run))
    return fig
save_figure("ch98_fig", draw)
"""


def test_an_interrupted_replacement_is_all_or_nothing(tmp_path, monkeypatch, capsys):
    docs = _fake_repo(tmp_path, monkeypatch, {"ch98_fig": TWO_FIGURES})
    monkeypatch.setenv("RUN", "1")
    assert regen.main([]) == 0
    monkeypatch.setenv("RUN", "2")
    real_replace, calls = os.replace, []

    def killed_after_two(src, dst):  # the journal, then one file: then the power goes
        calls.append(dst)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(regen.os, "replace", killed_after_two)
    assert regen.main([]) == 130
    assert len(capsys.readouterr().err.strip().splitlines()) == 1  # Ctrl-C: one line
    monkeypatch.setattr(regen.os, "replace", real_replace)
    assert regen.main(["--check"]) == 1  # the check names the unfinished run
    assert "interrupted regeneration" in capsys.readouterr().err
    assert regen.main([]) == 0  # the next run finishes it
    files = {p.name for p in docs.rglob("*")}
    assert not [f for f in files if f.startswith(".")], files  # no journal, no staged file left
    assert (docs / "outputs" / "ch98_fig.txt").read_text() == "run 2\n"
    figure = json.loads((docs / "outputs" / "ch98_fig.json").read_text())["figure_data"]["ch98_fig"]
    for lang, title in (("zh", "第2"), ("en", "run 2")):  # both editions from the same run
        assert figure["texts"][lang]["axes"][0]["title"][1] == title
    assert regen.main(["--check"]) == 0


def test_an_output_records_its_kernels_and_only_a_run_with_others_relabels_it(
    tmp_path, monkeypatch, capsys
):
    """A written output says which kernels its values came from; `--kernels avx2` makes again the
    outputs made with others (the same by --check's measure, or not), and a plain run or a
    --retime that keeps the files keeps their record: it describes the values kept."""
    import torch

    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2: --kernels avx2 cannot run here")
    docs = _fake_repo(tmp_path, monkeypatch, {"ch98_k": "print('the same on every CPU')\n"})
    prov_path, env = docs / "outputs" / "ch98_k.json", dict(os.environ)

    def kernels():
        return json.loads(prov_path.read_text())["kernels"]

    assert regen.main(["ch98_k"]) == 0
    assert kernels() == regen.kernels_in_force()
    assert kernels()["aten"] == torch.backends.cpu.get_cpu_capability()
    capsys.readouterr()
    assert regen.main(["--kernels", "avx2", "ch98_k"]) == 0
    assert "made again with AVX2 kernels" in capsys.readouterr().out
    avx2 = {"aten": "AVX2", "onednn": "AVX2", "mkl": "AVX2"}
    assert kernels() == regen.kernels_of("avx2") == avx2
    assert dict(os.environ) == env  # the caps were this run's only
    before = prov_path.read_bytes()
    assert regen.main(["ch98_k"]) == 0  # the same with this CPU's own kernels: kept as it is
    assert prov_path.read_bytes() == before
    assert regen.main(["--kernels", "avx2", "ch98_k"]) == 0  # made with these already: kept
    assert prov_path.read_bytes() == before
    assert regen.main(["--retime", "ch98_k"]) == 0  # a new time, the values' record unchanged
    assert kernels() == regen.kernels_of("avx2")
    assert regen.main(["--check", "--kernels", "default", "ch98_k"]) == 0  # a check writes nothing
    assert kernels() == regen.kernels_of("avx2")
    # the page names them
    from book.pages import device_label

    prov = json.loads(prov_path.read_text())
    assert device_label(prov, "en") == "cpu (x86_64, 1 thread, AVX2 kernels)".replace(
        "x86_64", platform.machine()
    )
    assert device_label(prov, "zh").endswith(", AVX2 内核)")
    assert device_label({**prov, "kernels": None}, "en") == prov["device"]


def test_kernels_the_cpu_lacks_are_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """ATen quietly runs what the CPU has: --kernels says so rather than record kernels it did not
    run."""
    _fake_repo(tmp_path, monkeypatch, {"ch98_k": "print(1)\n"})
    monkeypatch.setattr(regen, "_KERNELS_SEEN", {})
    monkeypatch.setattr(
        regen.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, "DEFAULT\n", ""),
    )
    env = dict(os.environ)
    with pytest.raises(SystemExit, match="runs DEFAULT kernels, not AVX2"):
        regen.main(["--kernels", "avx2", "ch98_k"])
    assert dict(os.environ) == env
    assert not (tmp_path / "docs" / "outputs").exists()
    with pytest.raises(SystemExit):
        regen.main(["--kernels", "avx9"])
    assert "invalid choice: 'avx9'" in capsys.readouterr().err


def test_a_script_that_hangs_is_stopped_and_named(tmp_path, monkeypatch, capsys):
    _fake_repo(
        tmp_path,
        monkeypatch,
        {"ch98_slow": "import time\ntime.sleep(60)\n", "ch99_fast": "print('ok')\n"},
    )
    start = time.monotonic()
    assert regen.main(["--timeout", "2"]) == 1
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert "ch98_slow.py ran longer than 2 s and was stopped" in err


def test_invalid_utf8_is_reported_and_the_other_scripts_still_run(tmp_path, monkeypatch, capsys):
    docs = _fake_repo(
        tmp_path,
        monkeypatch,
        {
            "ch97_bytes": "import sys\nsys.stdout.buffer.write(b'caf\\xe9\\n')\n",
            "ch98_good": "print('fine')\n",
        },
    )
    assert regen.main([]) == 1
    assert "ch97_bytes.py printed invalid UTF-8 at byte 3" in capsys.readouterr().err
    assert (docs / "outputs" / "ch98_good.txt").read_text() == "fine\n"
    assert not (docs / "outputs" / "ch97_bytes.txt").exists()


@pytest.mark.parametrize("argv", [[], ["--check", "--jobs", "2"]], ids=["one", "two-at-a-time"])
def test_ctrl_c_ends_with_one_line_and_leaves_no_scratch_folder(tmp_path, argv):
    """Ctrl-C stops regen with one line, whether one script runs or two at once (--jobs): no
    scratch folder and no script process is left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "scripts").mkdir()
    for n in ("ch97_slow", "ch98_slow"):
        (tmp_path / "scripts" / f"{n}.py").write_text(
            "import os, time\n"
            f"open({str(tmp_path / n)!r} + '.pid', 'w').write(str(os.getpid()))\n"
            "print('started', flush=True)\ntime.sleep(60)\n"
        )
    driver = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from book import regen
        regen.SCRIPTS = Path({str(tmp_path / "scripts")!r})
        regen.OUTPUTS = Path({str(tmp_path / "docs" / "outputs")!r})
        regen.EXTRA = {{}}
        sys.exit(regen.main({argv!r}))
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", driver],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    first = "ch97_slow" if not argv else "ch98_slow"  # one at a time: the first; two: both
    while not (tmp_path / f"{first}.pid").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err, err
    assert list(scratch.iterdir()) == []
    pids = [int(f.read_text()) for f in tmp_path.glob("*.pid")]
    assert len(pids) == (1 if not argv else 2)
    for pid in pids:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists(), f"script {pid} still runs"


def test_jobs_must_be_a_whole_number_and_retime_runs_one_at_a_time(capsys):
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(SystemExit) as e:
            regen.main(["--check", "--jobs", bad, "ch01_weights"])
        assert e.value.code == 2
        assert "whole number of scripts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        regen.main(["--retime", "--jobs", "2", "ch01_weights"])
    assert "--jobs 1" in capsys.readouterr().err


def test_concurrent_tiny_builds_hand_out_only_complete_folders(tmp_path):
    env = {**os.environ, "BOOK_TINY_DIR": str(tmp_path)}
    code = "from book import tiny; import os; p = tiny.path(); print(p, sorted(os.listdir(p)))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]  # one folder, complete, for both callers
    assert "BUILD_KEY" in outs[0] and "tokenizer.json" in outs[0]
    assert [p.name for p in tmp_path.iterdir()] == [
        Path(outs[0].split(" ")[0]).name
    ]  # no half builds left


def test_a_checkpoint_that_is_not_official_is_labelled_by_its_folder_and_keeps_official_outputs(
    tmp_path, monkeypatch, capsys
):
    """A folder in the official layout whose weights are not the official files: labelled '<folder>
    (sha256 …)',
    never 'Qwen/Qwen3.5-0.8B'; and it does not overwrite an output made with the official
    weights."""
    other = tmp_path / "my-finetune"
    shutil.copytree(tiny.path(), other)
    config = json.loads((other / "config.json").read_text())
    config.pop("book_tiny_test_model")
    (other / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("QWEN_MODEL", str(other))
    docs = _fake_repo(
        tmp_path, monkeypatch, {"ch97_new": "print('hi')\n", "ch98_official": "print('hi')\n"}
    )
    (docs / "outputs").mkdir(parents=True)
    official = {
        "script": "scripts/ch98_official.py",
        "model": "Qwen/Qwen3.5-0.8B",
        "official": True,
        "values": {},
        "figures": [],
    }
    (docs / "outputs" / "ch98_official.json").write_text(json.dumps(official))
    (docs / "outputs" / "ch98_official.txt").write_text("the real model\n")
    assert regen.main([]) == 0
    prov = json.loads((docs / "outputs" / "ch97_new.json").read_text())
    assert prov["model"].startswith("my-finetune (sha256 ") and prov["official"] is False
    assert (docs / "outputs" / "ch98_official.txt").read_text() == "the real model\n"
    assert (
        "its committed output was made with Qwen/Qwen3.5-0.8B and is kept"
        in capsys.readouterr().out
    )


def test_an_explicit_qwen_model_that_is_not_there_is_an_error_not_a_fallback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "book.regen", "--check", "ch01_weights"],
        cwd=ROOT,
        env={**os.environ, "QWEN_MODEL": str(tmp_path / "typo")},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert f"QWEN_MODEL={tmp_path / 'typo'} does not exist" in proc.stderr
    assert "same" not in proc.stdout  # nothing ran on another model instead


def test_a_column_may_realign_around_a_kernel_dependent_number():
    """A right-aligned number one digit wider moves its padding; the words and the number's
    tolerance decide, not the spaces. A word that changes still fails."""
    from book.compare import compare_text

    tol = {"2.1e+16": (0.0, 0.04)}
    assert compare_text("bf16      2.1e+16  x", "bf16     2.11e+16  x", tolerances=tol) == []
    assert compare_text("bf16      2.1e+16  x", "bf16     2.11e+16  y", tolerances=tol) != []
    assert compare_text("bf16      2.1e+16  x", "bf16     2.31e+16  x", tolerances=tol) != []
