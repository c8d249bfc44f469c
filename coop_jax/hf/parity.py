"""Low-precision parity against fp32 truth, on both sides: coop_jax and transformers.

bf16 logits of the same checkpoint differ from transformers' bf16 logits by a few percent even
when nothing is wrong: each side rounds its own intermediates. So the question a user can answer
is not "do the two bf16 runs agree" but "is coop_jax's bf16 as close to the fp32 truth as
transformers' own bf16 is". Both sides run teacher-forced on the same tokens; the truth is
transformers' fp32 logits (coop_jax's fp32 is reported against it too, as a sanity row).

    python -m coop_jax.hf check PATH --dtype bfloat16 [--text FILE]
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

# coop_jax's bf16 counts as "within transformers' own distance" when its relative L2 from the
# truth is at most REL_L2_FACTOR times transformers' and its top-1 agreement at most
# TOP1_MARGIN below transformers' (measured on SmolLM2-135M, GSM8K text: 4.6% vs 3.9% relative
# L2, 97.9% vs 96.3% top-1; each side's rounding differs, so neither is exactly the other's)
REL_L2_FACTOR = 1.5
TOP1_MARGIN = 0.02
# used when no --text is given: arithmetic word problems with worked answers (GSM8K's style)
DEFAULT_TEXTS = (
    "Question: A baker makes 24 muffins in the morning and 18 in the afternoon. She sells 35 of "
    "them. How many muffins are left? Answer: She makes 24 + 18 = 42 muffins. After selling 35, "
    "she has 42 - 35 = 7 muffins left. #### 7",
    "Question: Tom reads 12 pages a day for 5 days and then 20 pages on the sixth day. How many "
    "pages did he read in total? Answer: In the first five days he reads 12 * 5 = 60 pages. "
    "With the sixth day that is 60 + 20 = 80 pages. #### 80",
    "Question: A box holds 6 rows of 8 pencils. A teacher gives away 3 boxes out of 10. How "
    "many pencils does she keep? Answer: One box holds 6 * 8 = 48 pencils. She keeps 10 - 3 = 7 "
    "boxes, so 7 * 48 = 336 pencils. #### 336",
    "Question: The price of a jacket is $80. It is on sale for 25% off. What is the sale price? "
    "Answer: The discount is 80 * 0.25 = $20, so the sale price is 80 - 20 = $60. #### 60",
)


@dataclasses.dataclass
class Side:
    """One run against the truth."""
    name: str
    rel_l2: float  # ||logits - truth|| / ||truth|| over the real positions
    top1: float  # share of real positions whose argmax equals the truth's


@dataclasses.dataclass
class Parity:
    dtype: str
    positions: int
    texts: int
    source: str
    sides: list[Side]

    def side(self, name: str) -> Side:
        return next(s for s in self.sides if s.name == name)

    @property
    def within(self) -> bool:
        """coop_jax's low-precision logits are within transformers' own distance from fp32."""
        ours, theirs = self.side(f"coop_jax {self.dtype}"), self.side(f"transformers {self.dtype}")
        return (ours.rel_l2 <= REL_L2_FACTOR * theirs.rel_l2
                and ours.top1 >= theirs.top1 - TOP1_MARGIN)

    def report(self) -> str:
        lines = [f"teacher-forced on {self.texts} texts, {self.positions} positions ({self.source});"
                 f" truth: transformers float32",
                 f"{'':22} {'rel L2 vs fp32':>15} {'top-1 agreement':>16}"]
        lines += [f"{s.name:22} {s.rel_l2:15.3e} {100 * s.top1:15.2f}%" for s in self.sides]
        if self.within:
            lines.append(f"verdict: ok - coop_jax {self.dtype} is within transformers' own "
                         f"{self.dtype} distance from fp32 (relative L2 <= {REL_L2_FACTOR}x, "
                         f"top-1 at most {100 * TOP1_MARGIN:.0f} points lower): "
                         "rounding noise, not a bug")
        else:
            lines.append(f"verdict: FAIL - coop_jax {self.dtype} is further from fp32 than "
                         f"transformers' own {self.dtype} (relative L2 > {REL_L2_FACTOR}x or "
                         f"top-1 more than {100 * TOP1_MARGIN:.0f} points lower)")
        return "\n".join(lines)


def read_texts(path: str) -> list[str]:
    """Texts of a file: JSON lines (GSM8K's question + answer, or a "text" / "prompt" field) or
    plain text (one text per non-empty paragraph)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--text: no such file {path!r}")
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    if path.endswith(".jsonl"):
        texts = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"--text: {path}:{n} is not JSON ({e.msg})") from None
            if "question" in row and "answer" in row:
                texts.append(f"Question: {row['question']} Answer: {row['answer']}")
            elif isinstance(row.get("text", row.get("prompt")), str):
                texts.append(row.get("text", row.get("prompt")))
            else:
                raise ValueError(f"--text: {path}:{n} has none of question+answer, text, prompt")
    else:
        texts = [p.strip() for p in raw.split("\n\n") if p.strip()]
    if not texts:
        raise ValueError(f"--text: {path} holds no text")
    return texts


def _tokens(folder: str, texts, length: int, vocab: int, seed: int):
    """([B, T] ids right-padded with 0, [B, T] mask, description): the texts through the
    folder's tokenizer, each cut to `length` tokens; random ids when the folder has none."""
    has_tokenizer = any(os.path.exists(os.path.join(folder, f))
                        for f in ("tokenizer.json", "tokenizer_config.json"))
    if not has_tokenizer:
        ids = np.random.default_rng(seed).integers(0, vocab, size=(len(texts), length))
        return ids, np.ones_like(ids), "random token ids: the model has no tokenizer"
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    rows = [tok(t, add_special_tokens=False)["input_ids"][:length] for t in texts]
    width = max(len(r) for r in rows)
    ids, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return ids, mask, "text through the model's tokenizer"


def measure(path: str, dtype: str = "bfloat16", texts=DEFAULT_TEXTS, length: int = 256,
            seed: int = 0, source: str = "built-in word problems") -> Parity:
    """coop_jax and transformers in `dtype`, and coop_jax in float32, against transformers'
    float32 logits, teacher-forced on `texts` (causal LMs)."""
    import torch
    import transformers

    from coop_jax import hf

    folder = hf.local_folder(path)
    lms = {"float32": hf.load(folder, dtype="float32")}
    if lms["float32"].config.is_reward_model:
        raise ValueError("the low-precision check compares next-token logits: it needs a causal "
                         "LM, not a reward model")
    lms[dtype] = hf.load(folder, dtype=dtype)
    ids, mask, how = _tokens(folder, list(texts), length, lms["float32"].config.vocab_size, seed)
    real = mask.astype(bool)

    def transformers_logits(torch_dtype):
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype)
        with torch.no_grad():
            out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
        return out.float().numpy()[real]

    truth = transformers_logits(torch.float32)
    vocab = truth.shape[-1]

    def side(name, logits):
        logits = np.asarray(logits, np.float32)[..., :vocab]
        rel = float(np.linalg.norm(logits - truth) / np.linalg.norm(truth))
        top1 = float(np.mean(np.argmax(logits, -1) == np.argmax(truth, -1)))
        return Side(name, rel, top1)

    sides = [side("coop_jax float32", np.asarray(lms["float32"].logits(ids, mask))[real])]
    if dtype != "float32":
        sides.append(side(f"coop_jax {dtype}", np.asarray(lms[dtype].logits(ids, mask))[real]))
        sides.append(side(f"transformers {dtype}",
                          transformers_logits(getattr(torch, dtype))))
    return Parity(dtype, int(real.sum()), len(ids), f"{source}, {how}", sides)
