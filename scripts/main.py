"""Chat with Qwen3.5-0.8B in the terminal, on the model written in this book.

    python scripts/main.py                 # interactive chat (the official weights, see find_model)
    python scripts/main.py --prompt "你好"  # one question, one answer
    python scripts/main.py --tiny          # the tiny random test model: every code path, no meaning
    python scripts/main.py --image a.jpg --prompt "What is in this picture?"   # about an image
"""
import signal
import sys

signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # Ctrl-C while torch loads: no traceback

import argparse
import errno
import math
import os
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from qwen import fast, vlm
from qwen.chat import Chat
from qwen.generate import TextStream, generate
from qwen.image import ImageConfig, open_image, preprocess
from qwen.vision import VisionConfig
from qwen.weights import CheckpointError, ModelNotFound, find_model

signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is caught

LONG_PROMPT = 8192       # tokens: past this, say that the prefill may take a while
HELP = ("/think toggles thinking, /reset forgets the conversation, Ctrl-C stops an answer, "
        "Ctrl-D quits")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Abort(Exception):
    """A problem the user can fix: printed as one message, no traceback."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        """A bad option is one line too: what is wrong, and where the options are listed."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def number(kind, ok, rule):
    """An argparse type: the option's text as `kind`, refused unless ok(value)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule}, not {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, not {text}")
        return value
    return parse


def parse_args(argv):
    p = Parser(description="Chat with Qwen3.5-0.8B written by hand in PyTorch.")
    p.add_argument("--prompt",
                   help="ask one question, print the answer and exit ('-' reads it from stdin)")
    p.add_argument("--model", type=Path,
                   help="checkpoint folder (default: found by qwen.weights.find_model)")
    p.add_argument("--tiny", action="store_true",
                   help="use the book's tiny random test model (text is noise)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--quantize", choices=["int8", "w8a8", "int4"],
                   help="int8: int8 weights, half the bytes of bf16 to read per token; "
                        "w8a8: int8 weights and int8 activations when decoding; "
                        "int4: 4-bit weights in groups of 32 (chapter 16)")
    p.add_argument("--image", type=Path, action="append", metavar="PATH",
                   help="an image to talk about (PNG, JPEG, ...; repeat for more): it goes with "
                        "the first question (chapter 26)")
    p.add_argument("--think", action="store_true",
                   help="start with thinking on (toggle with /think)")
    p.add_argument("--system", help="a system prompt")
    at_least_1 = number(int, lambda n: n >= 1, "a whole number >= 1")
    p.add_argument("--max-new-tokens", type=at_least_1, default=1024)
    p.add_argument("--context", type=at_least_1,
                   help="most tokens per conversation (default: max_position_embeddings)")
    g = p.add_argument_group("sampling (defaults: the Qwen3.5 cards' non-thinking values; "
                             "--temperature 0 is greedy)")
    g.add_argument("--temperature", default=0.7, type=number(
        float, lambda t: math.isfinite(t) and t >= 0, "a finite number >= 0 (0 is greedy)"))
    g.add_argument("--top-k", default=20, help="0 keeps every token",
                   type=number(int, lambda k: k >= 0, "a whole number >= 0 (0 keeps every token)"))
    g.add_argument("--top-p", default=0.8,
                   type=number(float, lambda q: 0 < q <= 1, "a number in (0, 1]"))
    g.add_argument("--presence-penalty", default=1.5, help="0 turns it off", type=number(
        float, lambda x: math.isfinite(x) and x >= 0, "a finite number >= 0 (0 turns it off)"))
    g.add_argument("--repetition-penalty", default=1.0, help="1 turns it off", type=number(
        float, lambda x: math.isfinite(x) and x > 0, "a finite number > 0 (1 turns it off)"))
    g.add_argument("--seed", help="make sampling reproducible", type=number(
        int, lambda s: 0 <= s < 2**64, "a whole number from 0 to 2**64 - 1"))
    return p.parse_args(argv)


def utf8(text, where):
    """`text`, or an Abort if it came from bytes that are not UTF-8 (Python keeps those bytes as
    lone surrogates, which no tokenizer accepts)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = text[e.start].encode("utf-8", "surrogateescape")
        raise Abort(f"{where} is not valid UTF-8: byte 0x{byte.hex()} at character {e.start + 1}. "
                    "Is the terminal set to UTF-8?") from None
    return text


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
                        "python scripts/main.py --tiny") from None
    if not (folder / "tokenizer.json").is_file():
        raise Abort(f"{folder} has no tokenizer.json: the download is incomplete.")
    if args.image:                       # a checkpoint that cannot see is refused before loading
        try:
            vlm.vision_tokens(folder), VisionConfig.load(folder), ImageConfig.load(folder)
        except CheckpointError as e:
            raise Abort(f"--image: {e}") from None
    try:
        # the model made fast (chapters 14-16), on any device; w8a8 uses CPU kernels, int4 the
        # CPU's or CUDA's
        if args.quantize == "w8a8" and args.device != "cpu":
            raise Abort("--quantize w8a8 runs on CPU kernels: use --device cpu, "
                        "or --quantize int8")
        if args.quantize == "int4" and args.device == "mps":
            raise Abort("--quantize int4 has kernels for the CPU and CUDA: use --device cpu or "
                        "cuda, or --quantize int8")
        model = fast.from_pretrained(folder, DTYPES[args.dtype], args.device,
                                     quantize=args.quantize)
    except (CheckpointError, FileNotFoundError, ValueError) as e:    # each names the file
        raise Abort(str(e)) from None
    try:
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as e:                                 # the tokenizers library raises Exception
        raise Abort(f"{folder / 'tokenizer.json'} cannot be read ({e}): "
                    "download it again") from None
    from book.tiny import is_tiny  # the tiny model by its files' sha256

    return model, tok, folder, args.tiny or is_tiny(folder)


# --8<-- [start:reply]
def reply(model, tok, ids, args, context):
    """Stream the answer to the prompt `ids` to stdout; return (text, stats line).
    Ctrl-C ends it early."""
    if len(ids) >= context:
        raise Abort(f"the prompt is {len(ids)} tokens; the context holds {context} (--context, "
                    f"max_position_embeddings), and the answer needs room too.")
    if len(ids) > LONG_PROMPT:
        print(f"(reading a prompt of {len(ids)} tokens: on a CPU this can take minutes; "
              "Ctrl-C stops it)", file=sys.stderr, flush=True)
    tokens = generate(model, ids, min(args.max_new_tokens, context - len(ids)),
                      args.temperature, args.top_k, args.top_p, args.presence_penalty,
                      args.repetition_penalty, seed=args.seed)
    stream, text, n, stopped = TextStream(tok), "", 0, False
    start = time.perf_counter()
    first = last = None                  # when the first token and the latest one arrived
    try:
        for token in tokens:
            last = time.perf_counter()
            first = first or last        # the prompt is read and the first token chosen
            n += 1
            piece = stream.push(token)
            print(piece, end="", flush=True)
            text += piece
    except (ValueError, MemoryError, torch.OutOfMemoryError) as e:   # NaN scores, no memory
        tokens.close()
        raise Abort(f"{e or 'out of memory'} (after {n} tokens of the answer; "
                    f"the prompt was {len(ids)} tokens)") from None
    except KeyboardInterrupt:
        tokens.close()
        stopped = True
        piece = stream.flush()
        print(f"{piece} [stopped]", end="")
        text += piece
    else:
        piece = stream.flush()
        print(piece, end="")
        text += piece
    end = time.perf_counter()
    print(flush=True)
    if stopped and first is None:        # Ctrl-C before the prefill finished: no speed to report
        return text, f"[stopped during the prefill of {len(ids)} tokens, after {end - start:.1f} s]"
    first = first or end                 # no token: the first one chosen was a stop token
    stats = f"[prefill {len(ids)} tokens, {len(ids) / max(first - start, 1e-9):.1f} tok/s"
    if n > 1:                            # tokens 2..n came between the first and the last
        stats += f" | decode {n - 1} tokens, {(n - 1) / max(last - first, 1e-9):.1f} tok/s"
    return text, stats + "]"
# --8<-- [end:reply]


# --8<-- [start:chat_loop]
def chat_loop(model, tok, args, context, images=None):
    chat = new_chat(args, images)
    pending = images                 # the images go with the first question
    try:
        import readline  # noqa: F401  (line editing and history for input(), where available)
    except ImportError:
        pass
    while True:
        try:
            line = utf8(input("\n> "), "that line").strip()
        except KeyboardInterrupt:
            print("\n(Ctrl-D quits)")
            continue
        except EOFError:
            print()
            return
        except Abort as e:
            print(f"({e} Type it again.)")
            continue
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return
        if line == "/reset":
            chat.reset()
            pending = None
            print("(conversation cleared" + (", the images too)" if images is not None else ")"))
            continue
        if line == "/think":
            chat.thinking = not chat.thinking
            print(f"(thinking {'on' if chat.thinking else 'off'})")
            continue
        if line.startswith("/"):
            print(f"(unknown command {line.split()[0]}; {HELP})")
            continue
        seen = any(m.get("images") for m in chat.messages)      # images earlier in the talk
        ask(chat, line, pending)
        try:
            text, stats = reply(turn_model(model, images if seen or pending else None), tok,
                                prompt_ids(chat, tok, model), args, context)
        except Abort as e:
            chat.messages.pop()                               # forget the turn that did not fit
            print(f"({e} /reset starts a new conversation.)")
            continue
        pending = None
        chat.answer(text)
        print(stats, file=sys.stderr)
# --8<-- [end:chat_loop]


# --8<-- [start:images]
def open_images(files):
    """The --image files opened and checked, before anything is loaded: one line for a bad one."""
    try:
        return [open_image(f) for f in files]
    except ValueError as e:
        raise Abort(f"--image {e}") from None


def with_eyes(model, folder, args, pictures, context):
    """The text model with the checkpoint's vision tower around it (qwen.vlm), and the images
    as the tower's input; refused when the images alone would fill the context."""
    try:
        model = vlm.from_pretrained(folder, model, DTYPES[args.dtype], args.device)
        images = preprocess(pictures, ImageConfig.load(folder))
    except (CheckpointError, ValueError) as e:
        raise Abort(f"--image: {e}") from None
    n = sum(images.tokens()) + 2 * len(pictures)       # and <|vision_start|>, <|vision_end|>
    if n >= context:
        sizes = ", ".join(f"{k} tokens" for k in images.tokens())
        raise Abort(f"--image: the images take {n} tokens of the prompt ({sizes}) and the context "
                    f"holds {context}: give fewer or smaller images, or a larger --context")
    return model, images


def new_chat(args, images):
    """Chapter 12's conversation, or one whose turns can carry images."""
    kind = Chat if images is None else vlm.ImageChat
    return kind(system=args.system, thinking=args.think)


def ask(chat, text, images):
    if images is None:
        chat.ask(text)
    else:
        chat.ask(text, images.tokens())


def prompt_ids(chat, tok, model):
    return chat.ids(tok, model.tokens) if isinstance(chat, vlm.ImageChat) else chat.ids(tok)


def turn_model(model, images):
    """What answers a turn: the model with the images (every prompt that holds them reads them
    again from its first token), or without."""
    return vlm.WithImages(model, images) if images is not None else model
# --8<-- [end:images]


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:        # Ctrl-C while the model loads (an answer catches its own)
        print("\n(interrupted)", file=sys.stderr)
        return 130
    except BrokenPipeError:          # `| head` has read all it wants: stop quietly, as cat does
        silence(sys.stdout, sys.stderr)
        return 141                   # 128 + SIGPIPE, the status cat would end with
    except OSError as e:
        silence(sys.stdout)          # its buffer would fail again at exit
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):      # e.g. > /dev/full
            print(f"error: cannot write the answer to stdout ({e.strerror}): "
                  "free some space or write it elsewhere", file=sys.stderr)
        else:                        # a terminal that went away, a failing disk
            print(f"error: {e}", file=sys.stderr)
        return 1


def silence(*streams):
    """Point the streams at /dev/null: Python's last flush at exit must not fail again."""
    for stream in streams:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def console():
    """Text the console's encoding cannot show prints as '?' (said once), not as a crash."""
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        try:
            "你好🙂".encode(stream.encoding)
        except (UnicodeEncodeError, LookupError):
            stream.reconfigure(errors="replace")
            print(f"({name}'s encoding is {stream.encoding}: characters it cannot show print "
                  "as '?'; set PYTHONIOENCODING=utf-8 or a UTF-8 locale to see them)",
                  file=sys.stderr)
        except (AttributeError, TypeError):      # not a text file (None: closed)
            pass


def run(args):
    if sys.stderr is None:                     # 2>&-: the notes go nowhere, not into stdout
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:                     # >&-: the answer would go nowhere
        print("error: stdout is closed, so the answer has nowhere to go: "
              "run it without >&-", file=sys.stderr)
        return 1
    console()
    if sys.stdin is None and args.prompt in (None, "-"):      # started with stdin closed (<&-)
        print("error: stdin is closed, so there is nothing to read the conversation from: "
              "ask with --prompt \"your question\"", file=sys.stderr)
        return 1
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="surrogateescape")   # a bad byte is reported, not fatal
    try:
        if args.prompt == "-":
            args.prompt = utf8(sys.stdin.read(), "the prompt on stdin")
        for name in ("prompt", "system"):
            if getattr(args, name) is not None:
                utf8(getattr(args, name), f"--{name}")
        if args.prompt is not None and not args.prompt.strip():
            raise Abort("the prompt is empty: --prompt \"your question\"")
        check_device(args.device)
        pictures = open_images(args.image) if args.image else None
        model, tok, folder, tiny = load_model(args)
        context = min(args.context or model.cfg.max_position_embeddings,
                      model.cfg.max_position_embeddings)
        images = None
        if pictures:
            model, images = with_eyes(model, folder, args, pictures, context)
        if tiny:
            print("(the tiny test model: random weights, so the text is random)", file=sys.stderr)
        if args.prompt is not None:
            chat = new_chat(args, images)
            ask(chat, args.prompt, images)
            text, stats = reply(turn_model(model, images), tok, prompt_ids(chat, tok, model),
                                args, context)
            print(stats, file=sys.stderr)
            return 0
        print(f"{folder.name} on {args.device} ({args.dtype}), "
              f"thinking {'on' if args.think else 'off'}"
              + (f", {len(pictures)} image(s) with the first question" if pictures else "")
              + f". {HELP}.")
        chat_loop(model, tok, args, context, images)
        return 0
    except Abort as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
