"""Chat with Qwen3.5-0.8B in the terminal, on the model written in this book.

    python scripts/main.py                 # interactive chat (the official weights, see find_model)
    python scripts/main.py --prompt "你好"  # one question, one answer
    python scripts/main.py --tiny          # the tiny random test model: every code path, no meaning
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from qwen.chat import Chat
from qwen.generate import TextStream, generate
from qwen.model import from_pretrained
from qwen.weights import ModelNotFound, find_model

HELP = ("/think toggles thinking, /reset forgets the conversation, Ctrl-C stops an answer, "
        "Ctrl-D quits")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Abort(Exception):
    """A problem the user can fix: printed as one message, no traceback."""


def parse_args(argv):
    p = argparse.ArgumentParser(description="Chat with Qwen3.5-0.8B written by hand in PyTorch.")
    p.add_argument("--prompt",
                   help="ask one question, print the answer and exit ('-' reads it from stdin)")
    p.add_argument("--model", type=Path,
                   help="checkpoint folder (default: found by qwen.weights.find_model)")
    p.add_argument("--tiny", action="store_true",
                   help="use the book's tiny random test model (text is noise)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--think", action="store_true",
                   help="start with thinking on (toggle with /think)")
    p.add_argument("--system", help="a system prompt")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--context", type=int,
                   help="most tokens per conversation (default: max_position_embeddings)")
    g = p.add_argument_group("sampling (defaults: the Qwen3.5 cards' non-thinking values; "
                             "--temperature 0 is greedy)")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-k", type=int, default=20, help="0 keeps every token")
    g.add_argument("--top-p", type=float, default=0.8)
    g.add_argument("--presence-penalty", type=float, default=1.5)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, help="make sampling reproducible")
    return p.parse_args(argv)


def check_device(device):
    if device == "cuda" and not torch.cuda.is_available():
        raise Abort(f"--device cuda: no CUDA GPU is visible to torch {torch.__version__}. "
                    "Use --device cpu.")
    if device == "mps" and not torch.backends.mps.is_available():
        raise Abort("--device mps: Apple's Metal backend is not available here. Use --device cpu.")


def load_model(args):
    """(model, tokenizer, folder, is_tiny) for the folder the options name."""
    if args.tiny:
        from book.tiny import path as tiny_path
        folder = tiny_path()
    elif args.model:
        folder = args.model.expanduser()
        if not (folder / "config.json").is_file():
            raise Abort(f"--model {folder}: no config.json there; "
                        "give the folder that holds the checkpoint.")
    else:
        try:
            folder = find_model()
        except ModelNotFound as e:
            raise Abort(f"{e}\nOr try the program on the tiny test model: "
                        "python scripts/main.py --tiny")
    if not (folder / "tokenizer.json").is_file():
        raise Abort(f"{folder} has no tokenizer.json: the download is incomplete.")
    try:
        model = from_pretrained(folder, DTYPES[args.dtype], args.device)
    except (FileNotFoundError, ValueError) as e:
        raise Abort(str(e))
    tiny = json.loads((folder / "config.json").read_text()).get("book_tiny_test_model", False)
    return model, Tokenizer.from_file(str(folder / "tokenizer.json")), folder, tiny


# --8<-- [start:reply]
def reply(model, tok, prompt, args, context):
    """Stream the answer to `prompt` to stdout; return (text, stats line). Ctrl-C ends it early."""
    ids = tok.encode(prompt).ids
    if len(ids) >= context:
        raise Abort(f"the prompt is {len(ids)} tokens; the context holds {context} (--context, "
                    f"max_position_embeddings), and the answer needs room too.")
    tokens = generate(model, ids, min(args.max_new_tokens, context - len(ids)),
                      args.temperature, args.top_k, args.top_p, args.presence_penalty,
                      args.repetition_penalty, seed=args.seed)
    stream, text, n = TextStream(tok), "", 0
    t0 = t1 = time.perf_counter()
    try:
        for token in tokens:
            if n == 0:
                t1 = time.perf_counter()  # the prompt is read and the first token chosen
            n += 1
            piece = stream.push(token)
            print(piece, end="", flush=True)
            text += piece
    except KeyboardInterrupt:
        tokens.close()
        piece = stream.flush()
        print(f"{piece} [stopped]", end="")
        text += piece
    else:
        piece = stream.flush()
        print(piece, end="")
        text += piece
    t2 = time.perf_counter()
    print(flush=True)
    t1 = t1 if n else t2
    stats = f"[prefill {len(ids)} tokens, {len(ids) / max(t1 - t0, 1e-9):.1f} tok/s"
    if n > 1:
        stats += f" | decode {n - 1} tokens, {(n - 1) / max(t2 - t1, 1e-9):.1f} tok/s"
    return text, stats + "]"
# --8<-- [end:reply]


# --8<-- [start:chat_loop]
def chat_loop(model, tok, args, context):
    chat = Chat(system=args.system, thinking=args.think)
    try:
        import readline  # noqa: F401  (line editing and history for input(), where available)
    except ImportError:
        pass
    while True:
        try:
            line = input("\n> ").strip()
        except KeyboardInterrupt:
            print("\n(Ctrl-D quits)")
            continue
        except EOFError:
            print()
            return
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return
        if line == "/reset":
            chat.reset()
            print("(conversation cleared)")
            continue
        if line == "/think":
            chat.thinking = not chat.thinking
            print(f"(thinking {'on' if chat.thinking else 'off'})")
            continue
        if line.startswith("/"):
            print(f"(unknown command {line.split()[0]}; {HELP})")
            continue
        try:
            text, stats = reply(model, tok, chat.ask(line), args, context)
        except Abort as e:
            chat.messages.pop()                               # forget the turn that did not fit
            print(f"({e} /reset starts a new conversation.)")
            continue
        chat.answer(text)
        print(stats, file=sys.stderr)
# --8<-- [end:chat_loop]


def main(argv=None):
    args = parse_args(argv)
    try:
        if args.prompt == "-":
            args.prompt = sys.stdin.read()
        if args.prompt is not None and not args.prompt.strip():
            raise Abort("the prompt is empty: --prompt \"your question\"")
        if args.max_new_tokens < 1:
            raise Abort("--max-new-tokens must be at least 1")
        check_device(args.device)
        model, tok, folder, tiny = load_model(args)
        context = min(args.context or model.cfg.max_position_embeddings,
                      model.cfg.max_position_embeddings)
        if tiny:
            print("(the tiny test model: random weights, so the text is random)", file=sys.stderr)
        if args.prompt is not None:
            chat = Chat(system=args.system, thinking=args.think)
            text, stats = reply(model, tok, chat.ask(args.prompt), args, context)
            print(stats, file=sys.stderr)
            return 0
        print(f"{folder.name} on {args.device} ({args.dtype}), "
              f"thinking {'on' if args.think else 'off'}. {HELP}.")
        chat_loop(model, tok, args, context)
        return 0
    except Abort as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
