"""Datasets, prompt templates and the prompt pipeline.

A record is a plain dict ``{"id", "question", "reference", "solution", "rephrased"}`` (the last two
may be None). TFDS builders live in ``coop_jax.data.tfds_builders``, imported on demand only, so
importing this package never imports TensorFlow.
"""
from coop_jax.data.pipeline import PromptPipeline, to_global_array
from coop_jax.data.sources import (
    DATASETS,
    SkipStats,
    last_boxed,
    load_gsm8k_jsonl,
    load_math_jsonl,
    load_split,
)
from coop_jax.data.synthetic import SyntheticConfig, make_dataset, make_problem, make_rephrase
from coop_jax.data.templates import DEFAULT_TEMPLATES, PROMPT_TEMPLATES, format_prompt

__all__ = [
    "DATASETS",
    "DEFAULT_TEMPLATES",
    "PROMPT_TEMPLATES",
    "PromptPipeline",
    "SkipStats",
    "SyntheticConfig",
    "format_prompt",
    "last_boxed",
    "load_gsm8k_jsonl",
    "load_math_jsonl",
    "load_split",
    "make_dataset",
    "make_problem",
    "make_rephrase",
    "to_global_array",
]
