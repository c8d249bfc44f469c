"""Prompt templates (verl / Cooper / Co-rewarding conventions) and an optional chat wrapper."""
from __future__ import annotations

from typing import Any

from coop_jax.registry import Registry

# "{question}" is substituted with str.replace (not str.format) because questions and the boxed
# template itself contain literal braces.
PROMPT_TEMPLATES: Registry[str] = Registry("data.prompt_template")
PROMPT_TEMPLATES.register(
    "gsm8k", '{question} Let\'s think step by step and output the final answer after "####".',
    doc="Cooper / verl GSM8K convention")
PROMPT_TEMPLATES.register(
    "boxed", "{question} Let's think step by step and output the final answer within \\boxed{}.",
    doc="Co-rewarding / MATH convention")
PROMPT_TEMPLATES.register(
    "synthetic", "{question} = ",
    doc='minimal template for the tiny character-level demo model: "7+12-5 = "')
PROMPT_TEMPLATES.register("raw", "{question}", doc="the question alone")
PROMPT_TEMPLATES.register(
    "oneline",
    '{question} Answer with one line: the calculation, then "####" and the number.',
    doc="a stated one-line answer format (the real-model arithmetic task)")
# The template each dataset's answers are written for (the CLIs' default).
DEFAULT_TEMPLATES: dict[str, str] = {"synthetic": "synthetic", "gsm8k": "gsm8k",
                                     "math500": "boxed", "math": "boxed"}


def format_prompt(name: str, question: str, *, tokenizer: Any = None, chat: bool = False) -> str:
    """Fill template ``name`` with ``question``; with ``chat=True`` wrap it as one user turn.

    The chat form is ``tokenizer.apply_chat_template([{"role": "user", "content": text}],
    tokenize=False, add_generation_prompt=True)``; it already contains the model's special tokens,
    so tokenize it with ``add_special_tokens=False``.
    """
    if name not in PROMPT_TEMPLATES:
        raise ValueError(f"unknown prompt template {name!r}; allowed: {sorted(PROMPT_TEMPLATES)}")
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question must be a non-empty string")
    text = PROMPT_TEMPLATES[name].replace("{question}", question)
    if not chat:
        return text
    if tokenizer is None or not hasattr(tokenizer, "apply_chat_template"):
        raise ValueError("chat=True needs a tokenizer with apply_chat_template")
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    if not isinstance(out, str):
        raise TypeError(f"tokenizer.apply_chat_template returned {type(out).__name__}, not str")
    return out
