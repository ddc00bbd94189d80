"""The house's direction: the reader's library (qwen/) imports nothing of the book's machinery
(book/, scripts/, tests/), and no module of the tree imports one that imports it back."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("qwen", "book")


def module_name(file):
    parts = file.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(file):
    """Every module `file` imports, at the top or inside a function, absolute or relative."""
    tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    here = module_name(file).split(".") if file.is_relative_to(ROOT) else [file.stem]
    package = here if file.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from book import tiny`
    return found


def graph():
    files = [f for p in PACKAGES for f in (ROOT / p).rglob("*.py")]
    known = {module_name(f): f for f in files}
    return {m: {i for i in imports(f) if i in known and i != m} for m, f in known.items()}


def test_the_library_imports_nothing_of_the_book():
    for file in sorted((ROOT / "qwen").rglob("*.py")):
        bad = sorted(i for i in imports(file) if i.split(".")[0] in ("book", "scripts", "tests"))
        assert not bad, f"{file.relative_to(ROOT)} imports {bad}: qwen/ must stand on its own"


def test_no_import_circle():
    edges = graph()
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                circle = path[path.index(n) :] + [n]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_the_check_would_find_a_circle(tmp_path):
    """The scanner sees imports inside functions too: the one that once made qwen.pretrain and
    book.exercises a circle."""
    file = tmp_path / "x.py"
    file.write_text("def f():\n    from book.lessons import words_of\n")
    assert "book.lessons" in imports(file)
