"""Regenerate every chapter's printed output and figures, with provenance; `--check` compares
without writing.

    python -m book.regen                 # run every scripts/chNN_*.py, write docs/outputs/ and
                                         # docs/figures/
    python -m book.regen --check         # run them again, fail on any difference, write nothing
    python -m book.regen ch02_embedding  # only some scripts
    python -m book.regen --retime        # also refresh the measured times (which a plain run keeps)
    python -m book.regen --timeout 120   # stop a script that runs longer (seconds; default 600)
    python -m book.regen --check --jobs 2  # two scripts at a time (--check's default: one per core)
    python -m book.regen --kernels avx2 ch17_loss  # with AVX2's kernels on a CPU that has more

What counts as a difference is written in book/compare.py: words, labels and numbers to their
printed precision, figures by their texts and plotted data, never the last bits of a float, so
`--check` passes on any CPU. A run whose outputs are the same by that measure keeps the committed
files byte for byte.

Each written output records the kernels its values came from (ATen's CPU capability, the caps on
oneDNN and MKL): `--kernels avx2` or `--kernels default` runs the scripts with an older CPU's
kernels on this one (KERNELS), and a written run with them rewrites the outputs that were made with
other kernels, so that the record stays true; a run that only checks, or keeps the committed files
because they are the same, never relabels them.

The files of one script (its text, provenance, figures) are replaced together: they are staged
beside their targets and a journal lists the renames; an interrupted run leaves the journal, and the
next run finishes it.

With the official weights found (see qwen.weights.find_model) the scripts run on them; without, on
the tiny test model, and the outputs say so. An output made with the official weights is never
overwritten by a tiny-model run.
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from book import tiny, zygote
from book.checkpoint import TINY, identify
from book.compare import compare_figure, compare_text, compare_values, printed_number
from book.cores import available_cores
from qwen.weights import ModelNotFound, find_model

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
OUTPUTS = ROOT / "docs" / "outputs"
FIGURES = ROOT / "docs" / "figures"
THREADS = 1  # fixed so that results (and reductions inside matmuls) are the same on every run
TIMEOUT = 600  # seconds a script may run before it is stopped
EXTRA = {
    # figures drawn from the official config, not from a run
    "diagrams": ROOT / "book" / "diagrams.py",
    # the differences to transformers the tests measure
    "parity": ROOT / "tests" / "parity_report.py",
}
# scripts that read only the official config.json, whatever checkpoint is found: labelled so
CONFIG_ONLY = {"diagrams", "ch00_what_changed"}
REFERENCE = "tiny random reference models (tests/reference.py)"
CONFIG = ROOT / "book" / "data" / "qwen3.5-0.8b" / "config.json"
JOURNAL = ".regen-journal-{}.json"  # in docs/outputs while a script's files are being replaced
TEMP_SUFFIX = ".regen-tmp"
MACHINE_FIELDS = ("seconds", "device", "torch", "python")  # describe the run, not the result
# the CPU kinds a reader may have, run on a CPU that has more: ATen's own loops, oneDNN and MKL
# capped to what that CPU has ("default": ATen's scalar loops, SSE4 in the libraries)
KERNEL_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
KERNELS = {
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    },
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}


def chapter_scripts(names=()):
    found = sorted(p.stem for p in SCRIPTS.glob("ch[0-9][0-9]_*.py"))
    found += [n for n, p in EXTRA.items() if p.is_file()]
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(
            f"no such chapter script: {', '.join(unknown)} (known: {', '.join(found)})"
        )
    return [n for n in found if not names or n in names]


def script_path(name):
    return EXTRA.get(name, SCRIPTS / f"{name}.py")


class Model:
    """The checkpoint a run used: its folder, the label outputs carry, its weights' sha256, official
    or not."""

    def __init__(self, folder, label, sha256, official):
        self.folder, self.label, self.sha256, self.official = folder, label, sha256, official


def choose_model():
    """The checkpoint find_model() finds (labelled by what it is), else the tiny test model; an
    explicit $QWEN_MODEL that does not hold a checkpoint is an error, never a silent fallback."""
    try:
        folder = find_model()
    except ModelNotFound as e:
        if os.environ.get("QWEN_MODEL"):  # a folder named by hand that is not there: say so, stop
            raise SystemExit(f"error: {e}") from None
        folder = tiny.path()
    ck = identify(folder)
    return Model(folder, TINY if ck.tiny else ck.label, ck.sha256, ck.official)


def _config_model():
    return Model(
        CONFIG.parent,
        "Qwen/Qwen3.5-0.8B config.json (no weights)",
        hashlib.sha256(CONFIG.read_bytes()).hexdigest(),
        True,
    )


def _reference_model():
    return Model(
        ROOT / "tests",
        REFERENCE,
        hashlib.sha256((ROOT / "tests" / "reference.py").read_bytes()).hexdigest(),
        False,
    )


def script_env(**more):
    """The environment every script runs in (one thread, offline, the repository importable), with
    `more` (its output folder, its checkpoint)."""
    return {
        **os.environ,
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": str(THREADS),
        "MKL_NUM_THREADS": str(THREADS),
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **more,
    }


_KERNELS_SEEN = {}


def kernels_in_force():
    """The kernels a script here computes with, as its provenance records them: ATen's CPU
    capability as a fresh torch in script_env() reports it, and the caps on oneDNN and MKL (None:
    the CPU's own)."""
    caps = tuple(os.environ.get(k) for k in KERNEL_VARS)
    if caps not in _KERNELS_SEEN:
        code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
        proc = subprocess.run(
            [sys.executable, "-c", code], env=script_env(), capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"could not start torch to ask its kernels:\n{proc.stderr[-2000:]}")
        _KERNELS_SEEN[caps] = _kernels_record(proc.stdout.split()[-1], *caps[1:])
    return dict(_KERNELS_SEEN[caps])


def kernels_of(name):
    """The kernels KERNELS[name] gives, as a provenance records them."""
    aten, onednn, mkl = (KERNELS[name][k] for k in KERNEL_VARS)
    return _kernels_record(aten.upper(), onednn, mkl)


def _kernels_record(aten, onednn, mkl):
    return {"aten": aten, "onednn": onednn, "mkl": mkl}


@contextlib.contextmanager
def using_kernels(name):
    """Within: this process's scripts run with KERNELS[name] (none: as they were); a SystemExit that
    says so where this CPU cannot (ATen would quietly fall back to other kernels)."""
    saved = {k: os.environ.get(k) for k in KERNEL_VARS}
    try:
        if name:
            os.environ.update(KERNELS[name])
            got, want = kernels_in_force()["aten"], kernels_of(name)["aten"]
            if got != want:
                raise SystemExit(
                    f"--kernels {name}: this CPU's torch runs {got} kernels, not {want} (it lacks "
                    f"the instructions): leave --kernels out, or choose "
                    + " or ".join(k for k in KERNELS if k != name)
                )
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_script(name, model, timeout=TIMEOUT, starter=None):
    """Run one script in a scratch folder; return (files: {relative path: bytes}, provenance) or
    raise RuntimeError. With `starter` (a book.zygote.Zygote started with script_env()) the script
    runs in a forked copy of it, which has imported torch already; else in a fresh Python."""
    import torch

    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{name}-{os.getpid()}-"))
    env = script_env(BOOK_OUT=str(scratch), QWEN_MODEL=str(model.folder))
    script = script_path(name)
    try:
        start = time.perf_counter()
        try:
            if starter is not None:
                proc = starter.run(script, env, timeout, ROOT, _started, _ended)
            else:
                proc = run_group([sys.executable, str(script)], timeout, cwd=ROOT, env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"{script.name} ran longer than {timeout:g} s and was stopped "
                f"(a loop that never ends? or allow more with --timeout)"
            ) from None
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            raise RuntimeError(f"{script.name} failed (exit {proc.returncode}):\n{err[-4000:]}")
        try:
            stdout = proc.stdout.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RuntimeError(
                f"{script.name} printed invalid UTF-8 at byte {e.start} "
                f"({proc.stdout[max(0, e.start - 20) : e.start + 4]!r}): print text, not bytes"
            ) from None
        values_file = scratch / "values.json"
        values = json.loads(values_file.read_text()) if values_file.is_file() else {}
        bounds = values.pop("_error_bounds", {})
        tolerances = values.pop("_tolerances", {})
        files = {f"outputs/{name}.txt": stdout.encode()}
        figdir = scratch / "figures"
        figures = sorted(figdir.glob("*.svg")) if figdir.is_dir() else []
        for fig in figures:
            files[f"figures/{fig.name}"] = fig.read_bytes()
        names = sorted({f.stem.rsplit("_", 1)[0] for f in figures})
        figure_data = {
            n: json.loads((figdir / f"{n}.json").read_text())
            for n in names
            if (figdir / f"{n}.json").is_file()
        }
        provenance = {
            "script": script.relative_to(ROOT).as_posix()
            if script.is_relative_to(ROOT)
            else f"scripts/{script.name}",
            "model": model.label,
            "official": model.official,
            "weights_sha256": model.sha256,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": f"cpu ({platform.machine()}, {THREADS} thread)",
            "dtype": values.pop("dtype", "float32"),
            "seconds": round(seconds, 1),
            "values": values,
            "error_bounds": bounds,
            **({"tolerances": tolerances} if tolerances else {}),
            "figures": names,
            "figure_data": figure_data,
        }
        return files, provenance
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


SCRATCH = "regen-"  # scratch folders: regen-<script>-<pid of the regen>-<random>
_RUNNING = set()  # process groups of the scripts running now (several with --jobs)
_RUNNING_LOCK = threading.Lock()


def kill_running():
    """Kill every script still running (Ctrl-C while several run at once, with --jobs)."""
    with _RUNNING_LOCK:
        groups = list(_RUNNING)
    for pid in groups:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _started(pid):
    with _RUNNING_LOCK:
        _RUNNING.add(pid)


def _ended(pid):
    with _RUNNING_LOCK:
        _RUNNING.discard(pid)


def run_group(cmd, timeout, **popen):
    """subprocess.run(cmd, capture_output=True, timeout=timeout), but the command runs in a process
    group of its own, which is killed whole when it ends, times out, or regen is stopped
    (Ctrl-C, an error): nothing it started outlives it. If regen itself is killed (SIGKILL),
    Linux kills the command too (PR_SET_PDEATHSIG). The output goes to files, not pipes: a child
    left holding a pipe open would keep regen waiting after the script has ended."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=zygote.die_with_parent,
            **popen,
        )
        _started(proc.pid)
        try:
            proc.wait(timeout=timeout)
        finally:
            _ended(proc.pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group: its children too
            except (ProcessLookupError, PermissionError):  # already gone
                pass
            proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())


def sweep_scratch():
    """Remove the scratch folders of regen runs that were killed before they could clean up."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH}*-*-*"):
        pid = folder.name.split("-")[2]
        if (
            pid.isdigit()
            and folder.is_dir()
            and folder.stat().st_uid == os.getuid()
            and not zygote.alive(int(pid))
        ):
            shutil.rmtree(folder, ignore_errors=True)


def provenance_bytes(p):
    return (json.dumps(p, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode()


def differences(old, old_text, new, new_text):
    """What a reader would see differ between two runs of one script (book/compare.py); [] when
    nothing."""
    if old is None or old_text is None:
        return ["no committed output"]
    diffs = []
    for key in sorted(
        (set(old) | set(new))
        - {"values", "figure_data", "error_bounds", "kernels", *MACHINE_FIELDS}
    ):
        if old.get(key) != new.get(key):
            diffs.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    bounds = new.get("error_bounds", {})
    if old.get("error_bounds", {}) != bounds:
        diffs.append(f"error bounds: {old.get('error_bounds')} -> {bounds}")
    old_values = old.get("values", {})
    printed = {str(old_values[k]): b for k, b in bounds.items() if k in old_values}
    tolerances = {k: tuple(t) for k, t in old.get("tolerances", {}).items()}
    near = {printed_number(old_values[k]): t for k, t in tolerances.items() if k in old_values}
    diffs += compare_values(old_values, new.get("values", {}), bounds, tolerances)
    diffs += [f"printed output, {d}" for d in compare_text(old_text, new_text, printed, near)]
    old_figs, new_figs = old.get("figure_data", {}), new.get("figure_data", {})
    for name in sorted(set(old_figs) | set(new_figs)):
        if name not in old_figs or name not in new_figs:
            diffs.append(f"figure {name}: {'added' if name not in old_figs else 'removed'}")
        else:
            diffs += compare_figure(old_figs[name], new_figs[name], f"figure {name}")
    return diffs


# --------------------------------------------------------- replacing a set of files, all or nothing
def _journals(docs, names):
    return [j for j in (docs / "outputs" / JOURNAL.format(n) for n in names) if j.is_file()]


def finish_interrupted(docs, names):
    """For these scripts: complete the renames an interrupted run listed, remove staged files no
    journal names."""
    for journal in _journals(docs, names):
        plan = json.loads(journal.read_text())
        for tmp, target in plan["replace"]:
            if (docs / tmp).exists():
                os.replace(docs / tmp, docs / target)
        for rel in plan["delete"]:
            (docs / rel).unlink(missing_ok=True)
        journal.unlink()
    for folder in (docs / "outputs", docs / "figures"):
        for name in names:
            for stray in folder.glob(f".*.{name}{TEMP_SUFFIX}") if folder.is_dir() else ():
                stray.unlink()


def replace_set(docs, name, files, delete=()):
    """Replace `files` ({path under docs: bytes}) and delete `delete`, as one: after a crash, all or
    none."""
    staged = []
    try:
        for rel, data in files.items():
            target = docs / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{name}{TEMP_SUFFIX}")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            staged.append((tmp.relative_to(docs).as_posix(), rel))
        journal = docs / "outputs" / JOURNAL.format(name)
        pending = journal.with_name(f".{journal.name}.{name}{TEMP_SUFFIX}")
        pending.write_text(json.dumps({"replace": staged, "delete": sorted(delete)}))
        os.replace(pending, journal)  # from here on the set is committed
    except BaseException:
        for tmp, _ in staged:
            (docs / tmp).unlink(missing_ok=True)
        raise
    finish_interrupted(docs, [name])


def seconds(text):
    """--timeout's value: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text!r}")
    return value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    ap.add_argument("scripts", nargs="*", help="script names like ch02_embedding (default: all)")
    ap.add_argument(
        "--check", action="store_true", help="compare with the committed outputs; write nothing"
    )
    ap.add_argument(
        "--retime",
        action="store_true",
        help="record this run's times even where the outputs are the same (run on a quiet machine)",
    )
    ap.add_argument(
        "--timeout",
        type=seconds,
        default=TIMEOUT,
        metavar="S",
        help=f"stop a script that runs longer than S seconds (default {TIMEOUT})",
    )
    ap.add_argument(
        "--jobs",
        type=jobs_count,
        default=None,
        metavar="N",
        help="run N scripts at a time, each on one thread (default: one per core with --check, "
        "else 1; a measured time is recorded only with 1)",
    )
    ap.add_argument(
        "--kernels",
        choices=sorted(KERNELS),
        help="run the scripts with an older CPU's kernels (ATen's, oneDNN's and MKL's capped to "
        "AVX2 or to ATen's scalar loops and SSE4); writing, rewrite the outputs that were made "
        "with other kernels",
    )
    args = ap.parse_args(argv)
    with using_kernels(args.kernels):
        return _main(args, ap)


def _main(args, ap):
    if args.jobs is None:
        args.jobs = available_cores() if args.check else 1
    if args.retime and args.jobs > 1:
        ap.error("--retime records each script's time: run it with --jobs 1 (the default)")
    docs = OUTPUTS.parent
    names = chapter_scripts(args.scripts)
    if args.check and _journals(docs, names):
        print(
            "an interrupted regeneration "
            f"left {_journals(docs, names)[0].relative_to(docs.parent)}: run `python -m "
            "book.regen` to finish it",
            file=sys.stderr,
        )
        return 1
    if not args.check:
        finish_interrupted(docs, names)

    sweep_scratch()
    model = choose_model()
    print(f"model: {model.label} ({model.folder}), weights sha256 {model.sha256[:12]}…")
    try:
        return _run_all(args, docs, names, model)
    except KeyboardInterrupt:
        kill_running()
        print(
            "\ninterrupted: the script running was stopped and none of its files were written; "
            "outputs already reported are complete",
            file=sys.stderr,
        )
        return 130


def jobs_count(text):
    """--jobs' value: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of scripts >= 1, not {text!r}")
    return value


def last_seconds(name):
    """Seconds the script's committed run took (0 if none is recorded)."""
    try:
        return float(json.loads((OUTPUTS / f"{name}.json").read_text()).get("seconds") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def _runs(names, model, timeout, jobs, starter=None):
    """(name, run model, a function giving (files, provenance) or raising RuntimeError) in order;
    with jobs > 1 the scripts run that many at a time, each on THREADS threads, the longest started
    first, and are reported in order as they finish."""
    models = {
        n: _config_model() if n in CONFIG_ONLY else _reference_model() if n == "parity" else model
        for n in names
    }
    if jobs == 1:
        for n in names:
            yield n, models[n], lambda n=n: run_script(n, models[n], timeout, starter)
        return
    pool, futures = ThreadPoolExecutor(max_workers=min(jobs, len(names)) or 1), {}
    try:
        # the longest first (by their last recorded run), so that none starts last and runs alone
        for n in sorted(names, key=lambda n: -last_seconds(n)):
            futures[n] = pool.submit(run_script, n, models[n], timeout, starter)
        for n in names:
            yield n, models[n], futures[n].result
    finally:
        for f in futures.values():
            f.cancel()
        kill_running()
        pool.shutdown(wait=True)


def _starter(check):
    """--check starts its scripts from a zygote (book/zygote.py: torch imported once, not 38 times);
    a run that writes outputs starts a fresh Python per script, so that the seconds it records are
    a reader's, imports included. None where fork is not available, or with BOOK_ZYGOTE=0."""
    if not (check and zygote.available()) or os.environ.get("BOOK_ZYGOTE") == "0":
        return None
    try:
        return zygote.Zygote(script_env(), cwd=ROOT)
    except (OSError, RuntimeError) as e:
        print(f"(no zygote: {e}; a fresh Python per script)", file=sys.stderr)
        return None


def _run_all(args, docs, names, model):
    starter = _starter(args.check)
    try:
        return _check_or_write(args, docs, names, model, starter)
    finally:
        if starter is not None:
            starter.close()


def _check_or_write(args, docs, names, model, starter):
    found, failures, unverified = [], [], []
    for name, run_model, result in _runs(names, model, args.timeout, args.jobs, starter):
        json_path = docs / "outputs" / f"{name}.json"
        txt_path = docs / "outputs" / f"{name}.txt"
        old = json.loads(json_path.read_text()) if json_path.is_file() else None
        old_text = txt_path.read_text() if txt_path.is_file() else None
        try:
            files, prov = result()
        except RuntimeError as e:
            failures.append(name)
            print(f"FAIL  {name}\n{e}", file=sys.stderr)
            continue
        if old and old.get("official", old["model"] != TINY) and not run_model.official:
            unverified.append(name)  # an official output, and only another checkpoint here: keep it
            print(
                f"ran   {name} on the {run_model.label} as a smoke test ({prov['seconds']} s); "
                f"its committed output was made with {old['model']} and is kept"
            )
            continue
        diffs = differences(old, old_text, prov, files[f"outputs/{name}.txt"].decode())
        figure_files = [f"figures/{f}_{lang}.svg" for f in prov["figures"] for lang in ("zh", "en")]
        missing = [rel for rel in figure_files if not (docs / rel).is_file()]
        stale = [
            f"figures/{f}_{lang}.svg"
            for f in (old or {}).get("figures", [])
            if f not in prov["figures"]
            for lang in ("zh", "en")
            if (docs / "figures" / f"{f}_{lang}.svg").is_file()
        ]
        if args.check:
            real = diffs + [f"missing {rel}" for rel in missing]
            if real:
                found.append(name)
            print(f"{'DIFF' if real else 'same'}  {name} ({prov['seconds']} s)")
            for d in real[:12]:
                print(f"      {d}")
            if len(real) > 12:
                print(f"      … and {len(real) - 12} more")
            continue
        # with --kernels, values made with other kernels are made again with these: the record
        # says what the committed values came from (asked only where it is needed: a torch start)
        relabel = (
            bool(args.kernels) and old is not None and old.get("kernels") != kernels_in_force()
        )
        if not diffs and not missing and not args.retime and not relabel:
            print(f"same  {name} ({prov['seconds']} s)")
            continue
        if not diffs and not missing and not relabel:  # --retime: the committed files, this time
            kept = {**old, **{k: prov[k] for k in MACHINE_FIELDS}}
            replace_set(docs, name, {f"outputs/{name}.json": provenance_bytes(kept)})
            print(f"timed {name} ({prov['seconds']} s)")
            continue
        kernels = kernels_in_force()
        files[f"outputs/{name}.json"] = provenance_bytes({**prov, "kernels": kernels})
        replace_set(docs, name, files, stale)
        why = diffs[0] if diffs else "figures were missing" if missing else None
        print(
            f"wrote {name} ({prov['seconds']} s): "
            + (why or f"made again with {kernels['aten']} kernels (--kernels {args.kernels})")
            + (f" (+{len(diffs) - 1} more differences)" if len(diffs) > 1 else "")
        )
    if unverified:
        print(
            f"{len(unverified)} output(s) made with the official weights could not be verified "
            f"here (no weights): {', '.join(unverified)}"
        )
    if failures:
        print(f"{len(failures)} script(s) failed: {', '.join(failures)}", file=sys.stderr)
    if found:
        print(
            f"{len(found)} script(s) differ from the committed outputs: {', '.join(found)}; run "
            f"`python -m book.regen {' '.join(found)}` and commit the result",
            file=sys.stderr,
        )
    return 1 if failures or found else 0


if __name__ == "__main__":
    sys.exit(main())
