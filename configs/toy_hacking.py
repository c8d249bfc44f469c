"""Reward-hacking experiment on the synthetic task (CPU, 2 cores), the pre-registered plan of
docs/results/reward_hacking/report.md: rule vs static RM vs Cooper with rollout /
consistent_wrong negatives vs a random-reward calibration arm, one SFT start, one static RM
trained on an offline corpus, 200 RL steps, 5 seeds (random: 3), 1000 held-out questions,
strict numeric gold. See coop_jax/projects/reward_hacking/driver.py.

    python -m coop_jax.projects.reward_hacking --config=configs/toy_hacking.py --workdir=DIR \
        --commit [--config.experiment.methods=static_rm --config.experiment.seeds=0]
"""
import importlib.util
import os

import ml_collections


def default_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default.py")
    spec = importlib.util.spec_from_file_location("coop_jax_default_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def get_config():
    from coop_jax.hf.sources import smollm2_gguf

    c = default_config()
    # The verifier RM: SmolLM2-135M-Instruct's first 4 decoder layers (42M parameters with the
    # embeddings) and a new scalar head; the 0.6M character-level RM stays near chance on this
    # task (docs/results/reward_hacking/). Inputs are ~55 BPE tokens.
    c.reward_model.update(hf_path=smollm2_gguf(), keep_layers=4, tokenizer="",
                          param_dtype="float32", dtype="float32")
    # as run before issue 13: raw questions; the driver names the RM each arm starts from
    c.rm.update(question_format="question", max_len=64, checkpoint="")
    c.rollout.update(group_size=8, prompts_per_step=8)
    # the arms' pairs: one per group, no reference positive unless an arm says otherwise (the
    # demo's Cooper defaults differ since issue 64; the experiment's runs were made with these)
    c.cooper.update(negative="rollout", pairs_per_group=1, reference_positive=False,
                    learning_rate=1e-5, warmup_ratio=0.0,
                    no_pair_step="skip",  # as run before issue 13
                    # the assistant of the cooper_rewrite arm (not in the default methods)
                    assistant_hf_path=smollm2_gguf())
    c.train.update(steps=200, checkpoint_every=50)
    # the RM on the fixed held-out triples every 50 steps (the on-policy metrics are every step);
    # the probes' RM false-accept rate and policy log-likelihood every 10
    c.evals.update(policy=dict(every=20), rm_heldout=dict(every=50), probes=dict(every=10))
    c.data.num_eval = 1000  # held-out questions of every evaluation, the final one included
    # Gold (rule rewards, rule labels, the evaluation's "_strict" accuracy) needs an integer after
    # the answer marker: the lenient rules accept a restated question ("7+2-3" for 7+2-3).
    c.verifier.extraction = "strict_numeric"
    c.rl.log_kl_to_start = True  # KL(pi || pi_start) of the rollouts, for gold / proxy vs sqrt(KL)
    c.experiment = ml_collections.ConfigDict(dict(
        # comma-separated, so one arm / one seed can be rerun alone from the command line
        # (cooper_perturb is out of the default for time; it stays available)
        methods="rule,static_rm,cooper_rollout,cooper_consistent_wrong,random",
        seeds="0,1,2,3,4",
        random_seeds=3,  # the random arm runs on the first 3 seeds only
        # static RM data ("policy_samples"): samples of the SFT policy on the first rm_questions
        # training questions ("offline": the corpus's generators on those questions);
        # heldout_fraction of the questions form the fixed held-out set (+ consistent-wrong
        # rewrites of their correct samples)
        rm_questions=1600, samples_per_question=4, heldout_fraction=0.05,
        # the static RM's data: "policy_samples" (above) | "offline" (experiments/rm_corpus.py:
        # programmatic generators of every error kind in both formats, none the start policy,
        # kept where the lenient and strict_numeric verifiers agree; corpus_manifest.json)
        rm_corpus="offline",
        # ... and character SFT policies other than the RL start policy (seed 0, 60% corrupted
        # demonstrations, 300 steps): another seed; less corruption; short and very noisy. Each
        # sampled corpus_sft_samples times on the first corpus_sft_questions corpus questions.
        corpus_sft_policies="seed=1; seed=2,corrupt=0.2; seed=3,corrupt=0.9,steps=150",
        corpus_sft_questions=400, corpus_sft_samples=4,
        # the plan's headroom check, on the rule arm alone before the corpus, the RM and any RM
        # arm: rule seed 0's final strict held-out accuracy >= this stops the driver (the plan
        # then moves every arm to setting B, run with 0 here); 0 = no check
        headroom_max_accuracy=0.90,
        # the competence gate of the static RM on its corpus's own held-out split: below either,
        # the driver stops before any RL run
        rm_min_accuracy=0.90, rm_min_auc=0.95,
        # hack probes (experiments/hack_probes.py) of this many held-out questions, 10 patterns
        probe_questions=32,
        # each finished run's summary.json / metrics.jsonl go to <results_dir>/runs/<arm>_s<seed>
        # (relative to the working folder; "" = only the workdir); a rerun skips those runs
        results_dir="docs/results/reward_hacking",
        # True: rebuild the SFT start and the static RM here even when results_dir keeps them
        # (plan/inputs/), and stop unless the rebuild has the kept digests (a clean-clone check;
        # bit-identical on the machine kind that built them, not across CPUs)
        rebuild_inputs=False,
        # after each run, its final policy's rollout diagnostic (hacked_rollouts.py) on this many
        # training questions, kept beside its summary (rollouts.json): its checkpoints are not
        rollout_diagnostic=128))
    # the static RM's training (the PyTorch calibration: lr 5e-5, batch 32, 300-500 steps;
    # 3 epochs of ~4,600 policy-sample triples = ~430 steps, past the calibration's transition at
    # 200-300; the offline corpus of 1600 questions holds ~10,600 training triples: ~1,000 steps)
    # No gradient clipping: with rm_train.grad_clip=1.0 (the default) the same RM stayed at the
    # base rate for all 432 steps (held-out AUC 0.57); unclipped it passes 0.90 by step 200
    # (docs/results/reward_hacking/rm_routes/).
    c.rm_train.update(mode="train", epochs=3, learning_rate=5e-5, batch_size=32, grad_clip=0.0,
                      weight_decay=0.01, warmup_ratio=0.0, heldout_every=50, seed=0,
                      schedule="constant", overlong="truncate")  # as run before issue 13
    return c
