"""Chapter 12: chat.
The chat format as tokens, one turn of conversation, and what the next prompt keeps."""
import torch
from tokenizers import Tokenizer

from book.out import record
from book.tiny import is_tiny
from qwen.chat import Chat, chat_prompt
from qwen.generate import TextStream, generate
from qwen.model import from_pretrained
from qwen.weights import find_model

path = find_model()
model = from_pretrained(path, torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
if is_tiny(path):
    print("(the tiny test model: its weights are random, so its answers are random too)\n")

text = chat_prompt([{"role": "user", "content": "Hello, how are you?"}])
ids = tok.encode(text).ids
print(f"the prompt, {len(text)} characters:\n{text}")
print(f"as {len(ids)} tokens:")
print("   ", " ".join(f"{tok.id_to_token(i)}={i}" if i >= 248044 else f"{tok.decode([i])!r}"
                    for i in ids))
print("thinking on, it ends instead with: "
      f"{chat_prompt([{'role': 'user', 'content': 'Hi'}], thinking=True)[-30:]!r}")

chat = Chat()
question = "What is the capital of France? Answer in one word."
stream, answer, limit, n_answer = TextStream(tok), "", 24, 0
print(f"\nuser: {question}\nassistant: ", end="")
# greedy, stops at <|im_end|>
for token in generate(model, tok.encode(chat.ask(question)).ids, limit):
    n_answer += 1
    piece = stream.push(token)
    print(piece, end="")
    answer += piece
rest = stream.flush()
print(rest)
answer += rest
chat.answer(answer)
following = chat.ask("And of Germany?")
print(f"\nthe next prompt carries the history "
      f"({len(tok.encode(following).ids)} tokens):\n{following}")
record(hello_prompt_tokens=len(ids), answer_limit=limit, answer_tokens=n_answer)
