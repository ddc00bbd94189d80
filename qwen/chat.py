"""The chat format: ChatML turns, then the assistant's turn opened with an empty think block
unless it may think."""


def strip_thinking(text):
    """The answer minus its <think>…</think> block: earlier turns keep only what the user saw."""
    return text.split("</think>")[-1].lstrip("\n")


# --8<-- [start:chat_prompt]
def chat_prompt(messages, thinking=False):
    """The prompt for {"role", "content"} turns, ending where the assistant starts to answer."""
    text = ""
    for m in messages:
        content = strip_thinking(m["content"]) if m["role"] == "assistant" else m["content"]
        text += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
    text += "<|im_start|>assistant\n"
    # thinking off: the think block is already closed
    return text + ("<think>\n" if thinking else "<think>\n\n</think>\n\n")
# --8<-- [end:chat_prompt]


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

    def answer(self, text):
        """Add the assistant's answer (its thinking is dropped from the next prompts)."""
        self.messages.append({"role": "assistant", "content": text})
