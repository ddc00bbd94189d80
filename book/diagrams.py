"""The architecture diagrams (boxes, arrows, shapes), drawn from the official config.json:
BOOK_OUT=... python book/diagrams.py

Every shape on them is computed from book/data/qwen3.5-0.8b/config.json through qwen.weights.Config,
so a diagram cannot disagree with the model the chapters load. Each function draws one diagram for
one edition (t picks the label); book.out.save_figure writes it as docs-ready SVG, once per edition.
The drawing kit is book/drawing.py; the diagrams of each stage are book/diagrams_stage1.py (the
parts), diagrams_stage2.py (talking), diagrams_stage3.py (fast).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: python book/diagrams.py
    sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

from book import drawing  # noqa: E402
from book.diagrams_stage1 import (  # noqa: E402
    diagram_attention,
    diagram_caches,
    diagram_chunked,
    diagram_deltanet,
    diagram_embedding,
    diagram_rope,
    diagram_stack,
)
from book.diagrams_stage2 import (  # noqa: E402, F401 (TOKENIZED ... visible: for the tests)
    TOKENIZED,
    chat_messages,
    diagram_chat,
    diagram_prefill,
    diagram_tokenizer,
    visible,
)
from book.diagrams_stage3 import diagram_int8, diagram_loading  # noqa: E402
from book.out import save_figure  # noqa: E402

config = drawing.config  # every label is computed from it (a test replaces drawing.config)

DIAGRAMS = [
    diagram_stack,
    diagram_attention,
    diagram_deltanet,
    diagram_chunked,
    diagram_caches,
    diagram_rope,
    diagram_int8,
    diagram_tokenizer,
    diagram_chat,
    diagram_prefill,
    diagram_embedding,
    diagram_loading,
]


def main():
    for draw in DIAGRAMS:
        save_figure(draw.__name__, draw)


if __name__ == "__main__":
    main()
