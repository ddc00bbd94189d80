"""Download Qwen/Qwen3.5-0.8B into ./models/ with a progress bar
(Hugging Face, a mirror, or ModelScope).

    python scripts/download.py                        # from huggingface.co
    HF_ENDPOINT=https://hf-mirror.com python scripts/download.py
    python scripts/download.py --source modelscope    # needs `pip install modelscope`
"""

import signal
import sys

signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # Ctrl-C while torch loads: no traceback

import argparse
from pathlib import Path

from qwen.weights import REPO_ID, CheckpointError, weight_files

signal.signal(signal.SIGINT, signal.default_int_handler)

FILES = [
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
]


def main():
    ap = argparse.ArgumentParser(description="Download the official weights into ./models/")
    ap.add_argument("--source", choices=["huggingface", "modelscope"], default="huggingface")
    ap.add_argument("--dest", default=f"models/{REPO_ID.split('/')[-1]}")
    args = ap.parse_args()
    dest = Path(args.dest)
    try:
        if args.source == "modelscope":
            from modelscope import snapshot_download

            snapshot_download(REPO_ID, local_dir=str(dest), allow_patterns=FILES)
        else:
            from huggingface_hub import snapshot_download  # shows a tqdm bar per file

            snapshot_download(REPO_ID, local_dir=dest, allow_patterns=FILES)
    except ImportError as e:
        sys.exit(f"{e.name} is not installed: pip install {e.name}")
    except KeyboardInterrupt:
        sys.exit("interrupted: run the same command again, it goes on where it stopped")
    except Exception as e:  # network errors come in many classes
        sys.exit(
            f"download failed: {e}\nBehind a firewall? "
            "Try HF_ENDPOINT=https://hf-mirror.com or --source modelscope"
        )
    try:
        weight_files(dest)  # every file there, and whole
    except CheckpointError as e:
        sys.exit(f"downloaded, but the checkpoint is not whole: {e}")
    print(f"done: {dest.resolve()} (find_model() looks here)")


if __name__ == "__main__":
    main()
