"""The chat format: ChatML turns, then the assistant's turn opened with an empty think block
unless it may think."""


def strip_thinking(text):
    """The answer minus its <think>…</think> block: earlier turns keep only what the user saw."""
    return text.split("</think>")[-1].lstrip("\n")


# --8<-- [start:chat_prompt]
def content(message):
    """What a turn shows: its text trimmed (as the official template does), an answer without
    its thinking."""
    text = message["content"].strip()
    return strip_thinking(text) if message["role"] == "assistant" else text


def opening(thinking):
    """The assistant's turn, opened; thinking off: the think block is already closed."""
    return "<|im_start|>assistant\n" + ("<think>\n" if thinking else "<think>\n\n</think>\n\n")


def chat_prompt(messages, thinking=False):
    """The prompt for {"role", "content"} turns, ending where the assistant starts to answer."""
    turns = "".join(f"<|im_start|>{m['role']}\n{content(m)}<|im_end|>\n" for m in messages)
    return turns + opening(thinking)
# --8<-- [end:chat_prompt]


# --8<-- [start:chat_ids]
def plain_ids(tokenizer, text):
    """Token ids of `text` with no special token: a typed `<|im_end|>` stays ten characters."""
    text = tokenizer.normalizer.normalize_str(text)
    # the tokenizer's own steps, minus the one that matches special tokens in the text
    return [t.id for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)
            for t in tokenizer.model.tokenize(piece)]


def chat_ids(tokenizer, messages, thinking=False):
    """The token ids of chat_prompt: the template's markup, and each turn's content as plain text
    (so no message can end its turn early or forge another)."""
    ids = []
    for m in messages:
        ids += tokenizer.encode(f"<|im_start|>{m['role']}\n").ids      # markup: special tokens
        ids += plain_ids(tokenizer, content(m))
        ids += tokenizer.encode("<|im_end|>\n").ids
    return ids + tokenizer.encode(opening(thinking)).ids
# --8<-- [end:chat_ids]


class Chat:
    """A conversation: the turns so far, rendered into one prompt each time the user speaks."""

    def __init__(self, system=None, thinking=False):
        self.system, self.thinking = system, thinking
        self.reset()

    def reset(self):
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def ask(self, text):
        """Add the user's turn; return the whole prompt for the model to continue."""
        self.messages.append({"role": "user", "content": text})
        return chat_prompt(self.messages, self.thinking)

    def ids(self, tokenizer):
        """The whole prompt as token ids (chat_ids)."""
        return chat_ids(tokenizer, self.messages, self.thinking)

    def answer(self, text):
        """Add the assistant's answer (its thinking is dropped from the next prompts)."""
        self.messages.append({"role": "assistant", "content": text})
