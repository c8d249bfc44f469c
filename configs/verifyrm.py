"""The paper's VerifyRM recipe for `coop-train-rm` (ZJU-REAL/cooper `train_VerifyRM/train.py`,
`run.sh`, `accelerate_config.yaml`): Qwen2.5-Math-1.5B-Instruct with a scalar head, BCE with
logits, AdamW (lr 2e-5, weight decay 0.01 on every parameter but biases and norm weights, as HF
Trainer does), linear decay to 0 without warm-up, gradient clipping at 1.0, 3 epochs, bf16
compute.

    coop-train-rm --config=configs/verifyrm.py --config.rm_train.triples=TRAIN.jsonl \
        [--config.rm_train.heldout=HELD.jsonl] --config.rm_train.workdir=runs/verifyrm

Examples per optimiser step: the reference's 128 per device x 32 accumulation steps x 4 GPUs =
16,384; here `rm_train.batch_size` = 16,384 rows per step, accumulated over `micro_batches`
micro-batches (lax.scan), so a micro-batch is 16 rows over all devices. Every input is padded to
`max_len` = 8,192 tokens (the reference pads each micro-batch to its longest), so a device holds
16 / (data x fsdp devices) rows of 8,192 tokens at a time: 2 rows on 8 devices. `micro_batches`
x the data x fsdp device count must divide 16,384 (up to 16 devices as set; halve
`micro_batches` per doubling beyond that, or when memory allows). Inputs: the reference's
`<question>` is the dataset's question as is (`question_format="question"`), its tokens are cut
on the right past 8,192, no character cut inside the fields (`char_cut=False`), and triples whose
fields have more than 8,000 characters together are left out. The remaining differences from
the reference are in docs/ALGORITHMS.md §1.
"""
from coop_jax.rm.train.default_config import get_config as rm_train_config

MODEL = "Qwen/Qwen2.5-Math-1.5B-Instruct"
EXAMPLES_PER_STEP = 128 * 32 * 4  # per device x gradient accumulation x processes
ROWS_PER_MICRO_BATCH = 16


def get_config():
    c = rm_train_config()
    c.reward_model.update(hf_path=MODEL, param_dtype="float32", dtype="bfloat16", remat=True,
                          scan_layers=True)
    c.rm.update(question_format="question", truncation_side="right")
    c.rm_train.update(
        mode="train", epochs=3, learning_rate=2e-5, weight_decay=0.01,
        weight_decay_mask="no_bias_norm", warmup_ratio=0.0, schedule="linear", grad_clip=1.0,
        batch_size=EXAMPLES_PER_STEP, micro_batches=EXAMPLES_PER_STEP // ROWS_PER_MICRO_BATCH,
        max_len=8192, overlong="drop", max_chars=8000, char_cut=False,
        seed=42,  # HF TrainingArguments' default seed
        log_every=1, checkpoint_every=1)  # 4 steps an epoch on the paper's 58.7K triples
    c.eval.batch_size = 8  # held-out scoring at 8,192 tokens
    c.mesh.shape = (1, -1, 1)  # FSDP over every device (the reference: DeepSpeed ZeRO-2)
    return c
