"""Regenerate every chapter's printed output and figures, with provenance; `--check` compares without writing.

    python -m book.regen                 # run every scripts/chNN_*.py, write docs/outputs/ and docs/figures/
    python -m book.regen --check         # run them again, fail on any difference, write nothing
    python -m book.regen ch02_embedding  # only some scripts
    python -m book.regen --retime        # also refresh the measured times (which a plain run keeps)

With the official weights found (see qwen.weights.find_model) the scripts run on them; without, on the tiny test
model, and the outputs say so. An output made with the official weights is never overwritten by a tiny-model run.
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from book import tiny
from qwen.weights import REPO_ID, ModelNotFound, find_model

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
OUTPUTS = ROOT / "docs" / "outputs"
FIGURES = ROOT / "docs" / "figures"
TINY = "tiny test model"
THREADS = 1          # fixed so that results (and reductions inside matmuls) are the same on every run


def chapter_scripts(names=()):
    found = sorted(p.stem for p in SCRIPTS.glob("ch[0-9][0-9]_*.py"))
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(f"no such chapter script: {', '.join(unknown)} (known: {', '.join(found)})")
    return [n for n in found if not names or n in names]


def choose_model():
    """(folder, label): the official checkpoint when there is one, else the tiny test model."""
    try:
        folder = find_model()
        if not tiny.is_tiny(folder):
            return folder, REPO_ID
    except ModelNotFound:
        pass
    return tiny.path(), TINY


def weights_sha256(folder):
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.safetensors")):
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def run_script(name, folder, label, sha):
    """Run one script in a scratch folder; return (files: {relative path: bytes}, provenance) or raise."""
    import torch

    scratch = Path(tempfile.mkdtemp(prefix=f"regen-{name}-"))
    env = {**os.environ, "BOOK_OUT": str(scratch), "QWEN_MODEL": str(folder), "MPLBACKEND": "Agg",
           "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS), "PYTHONHASHSEED": "0",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"{name}.py failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        values_file = scratch / "values.json"
        values = json.loads(values_file.read_text()) if values_file.is_file() else {}
        files = {f"outputs/{name}.txt": proc.stdout.encode()}
        figures = sorted((scratch / "figures").glob("*.svg")) if (scratch / "figures").is_dir() else []
        for fig in figures:
            files[f"figures/{fig.name}"] = fig.read_bytes()
        provenance = {
            "script": f"scripts/{name}.py", "model": label, "weights_sha256": sha,
            "torch": torch.__version__, "python": platform.python_version(),
            "device": f"cpu ({platform.machine()}, {THREADS} thread)", "dtype": values.pop("dtype", "float32"),
            "seconds": round(seconds, 1), "values": values,
            "figures": sorted({f.stem.rsplit("_", 1)[0] for f in figures}),
        }
        return files, provenance
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def provenance_bytes(p):
    return (json.dumps(p, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode()


def same_except_time(old, new):
    return {**old, "seconds": None} == {**new, "seconds": None}


def write_atomically(files):
    """Stage every file next to its target, then rename: a failure leaves the old files, never half a set."""
    staged = []
    try:
        for rel, data in files.items():
            target = ROOT / "docs" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            staged.append((tmp, target))
        for tmp, target in staged:
            os.replace(tmp, target)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.remove(tmp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="*", help="script names like ch02_embedding (default: all)")
    ap.add_argument("--check", action="store_true", help="compare with the committed outputs; write nothing")
    ap.add_argument("--retime", action="store_true",
                    help="record this run's times even where the outputs are the same (run on a quiet machine)")
    args = ap.parse_args(argv)

    folder, label = choose_model()
    sha = weights_sha256(folder)
    print(f"model: {label} ({folder}), weights sha256 {sha[:12]}…")
    differences, failures, unverified = [], [], []
    for name in chapter_scripts(args.scripts):
        json_path = OUTPUTS / f"{name}.json"
        old = json.loads(json_path.read_text()) if json_path.is_file() else None
        try:
            files, prov = run_script(name, folder, label, sha)
        except RuntimeError as e:
            failures.append(name)
            print(f"FAIL  {name}\n{e}", file=sys.stderr)
            continue
        if old and old["model"] != TINY and label == TINY:     # official output, and only the tiny model here
            unverified.append(name)
            print(f"ran   {name} on the tiny model as a smoke test ({prov['seconds']} s); "
                  f"its committed output was made with {old['model']} and is kept")
            continue
        if old and same_except_time(old, prov) and not args.retime:
            prov["seconds"] = old["seconds"]                   # same result: keep the file byte for byte
        stale = [f"figures/{f}_{lang}.svg" for f in (old or {}).get("figures", []) if f not in prov["figures"]
                 for lang in ("zh", "en")]
        files[f"outputs/{name}.json"] = provenance_bytes(prov)
        changed = [rel for rel, data in files.items()
                   if not (ROOT / "docs" / rel).is_file() or (ROOT / "docs" / rel).read_bytes() != data]
        changed += [rel for rel in stale if (ROOT / "docs" / rel).is_file()]
        if args.check:
            # the time of a run is not a difference; everything else is
            real = [rel for rel in changed if not (rel.endswith(".json") and old and same_except_time(old, prov))]
            if real:
                differences.append((name, real))
            print(f"{'DIFF' if real else 'same'}  {name} ({prov['seconds']} s){': ' + ', '.join(real) if real else ''}")
        else:
            write_atomically({rel: files[rel] for rel in changed if rel in files})
            for rel in stale:
                (ROOT / "docs" / rel).unlink(missing_ok=True)
            print(f"{'wrote' if changed else 'same '} {name} ({prov['seconds']} s)"
                  f"{': ' + ', '.join(changed) if changed else ''}")
    if unverified:
        print(f"{len(unverified)} output(s) made with the official weights could not be verified here "
              f"(no weights): {', '.join(unverified)}")
    if failures:
        print(f"{len(failures)} script(s) failed: {', '.join(failures)}", file=sys.stderr)
    if differences:
        print(f"{len(differences)} script(s) differ from the committed outputs; run `python -m book.regen` "
              f"and commit the result", file=sys.stderr)
    return 1 if failures or differences else 0


if __name__ == "__main__":
    sys.exit(main())
