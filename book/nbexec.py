"""Execute the lesson notebooks top to bottom and store their outputs: python -m book.nbexec
[--solutions] [LESSON...]

Without arguments it runs every docs/*/lessons/*.ipynb in place (each lesson in both editions), so
the outputs a reader downloads come from a real run. A LESSON is a notebook's path or a lesson's
name: `python -m book.nbexec positional` runs docs/zh/lessons/positional.ipynb and
docs/en/lessons/positional.ipynb. With --solutions, each cell tagged "exercise" is replaced by an
import of the same function from book/solutions/<notebook stem>.py, and the result goes to
out/lessons/ instead (the stored notebooks keep their TODOs).
"""

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(ROOT.glob("docs/*/lessons/*.ipynb"))


def inject_solutions(nb, module):
    """Replace each exercise cell by `from <module> import <the function it defines>`."""
    for cell in nb.cells:
        if "exercise" in cell.metadata.get("tags", []):
            names = re.findall(r"^def (\w+)\(", cell.source, flags=re.M)
            if not names:
                raise ValueError(f"an exercise cell defines no function:\n{cell.source}")
            cell.source = f"from {module} import {', '.join(names)}"
    return nb


def execute(path, solutions=False, timeout=600):
    """The notebook at `path` after a fresh top-to-bottom run in its own folder, and the seconds it
    took."""
    nb = nbformat.read(path, as_version=4)
    if solutions:
        inject_solutions(nb, f"book.solutions.{Path(path).stem}")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        "PYTHONHASHSEED": "0",
    }
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    start = time.perf_counter()
    client.execute(env=env)  # passed on to the kernel manager's start_kernel
    seconds = time.perf_counter() - start
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    return nb, seconds


def merge_streams(outputs):
    """Join consecutive pieces of the same stream, which arrive split wherever the kernel
    flushed."""
    merged = []
    for out in outputs:
        if (
            merged
            and out.output_type == "stream"
            and merged[-1].output_type == "stream"
            and merged[-1].name == out.name
        ):
            merged[-1].text += out.text
        else:
            merged.append(out)
    return merged


def write(nb, path):
    """Write atomically: a failed run never leaves half a notebook."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8"
    ) as f:
        nbformat.write(nb, f)
    os.chmod(f.name, 0o644)  # a temporary file is private; the notebook is not
    os.replace(f.name, path)


def notebooks(names):
    """The notebooks meant by each argument: a path as given, or a lesson's name in both
    editions."""
    paths = []
    for name in names:
        if name.endswith(".ipynb"):
            paths.append(Path(name))
            continue
        found = [p for p in LESSONS if p.stem == name]
        if not found:
            lessons = ", ".join(sorted({p.stem for p in LESSONS}))
            raise SystemExit(
                f"no lesson called {name!r}: the lessons are {lessons} (or give a notebook's path)"
            )
        paths.extend(found)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument(
        "lessons", nargs="*", help="notebook paths or lesson names (default: every lesson)"
    )
    parser.add_argument(
        "--solutions", action="store_true", help="run with the solutions, into out/lessons/"
    )
    args = parser.parse_args(argv)
    for path in notebooks(args.lessons) if args.lessons else LESSONS:
        path = path.resolve()
        nb, seconds = execute(path, solutions=args.solutions)
        target = (
            ROOT / "out" / "lessons" / path.parent.parent.name / path.name
            if args.solutions
            else path
        )
        write(nb, target)
        print(
            f"{path.relative_to(ROOT)}: executed in {seconds:.0f} s -> {target.relative_to(ROOT)}"
        )


if __name__ == "__main__":
    sys.exit(main())
