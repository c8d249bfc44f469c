"""`coop-train-rm`: VerifyRM training on labelled (question, reference, completion) triples.

    triples.py         build / label (rule verifier + judge) / split / filter triples
    loop.py            train_reward_model: the training stages, RMState, its checkpoints
    cli.py             the command line (`run`, `main`)
    default_config.py  the config without --config

The `rm_train` config section and its validation are the schema's (`coop_jax.config`:
`rm_train_section`, `validate_rm_train`); the RM's optimiser is `coop_jax.rm.optim`'s (one
builder with Cooper's), its weight-decay masks `coop_jax.optim`'s. Triples files are read and
written by `coop_jax.rm.input` (`read_triples`, `write_triples`).
"""
from coop_jax.rm.train.loop import (Progress, RMSetup, RMState, TrainingData, build_state,
                                    input_format, prepare_data, starting_rm, train_epochs,
                                    train_reward_model)
from coop_jax.rm.train.triples import (JUDGE_SYSTEM_PROMPT, build_triples, drop_overlong,
                                       http_judge, judge_user_message, label_balance, label_triples,
                                       parse_judge_verdict, split_triples)
from coop_jax.rm.train.cli import main, run

__all__ = ["JUDGE_SYSTEM_PROMPT", "Progress", "RMSetup", "RMState", "TrainingData", "build_state",
           "build_triples", "drop_overlong", "http_judge", "input_format", "judge_user_message",
           "label_balance", "label_triples", "main", "parse_judge_verdict", "prepare_data",
           "run", "split_triples", "starting_rm", "train_epochs", "train_reward_model"]
