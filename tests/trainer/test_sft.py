"""SFT helpers: the noisy-demonstration corruption and response tokenisation."""
import numpy as np
import pytest

from coop_jax.trainer import sft
from coop_jax.hf.tokenizer import load_tokenizer


def test_corrupt_final_answer_changes_only_the_final_answer():
    assert sft.corrupt_final_answer("7+5=12. 12-3=9. #### 9", "9") == "7+5=12. 12-3=9. #### 10"
    assert sft.corrupt_final_answer("0-3=-3. #### -3", "-3") == "0-3=-3. #### -2"
    assert sft.corrupt_final_answer("so \\boxed{\\frac12}", "\\frac12") == "so \\boxed{\\frac12}"


def test_tokenize_responses_appends_eos_and_pads_right():
    tok = load_tokenizer()
    ids, mask = sft.tokenize_responses(tok, ["12", "1234567"], 5)
    assert ids[0, :3].tolist() == tok.encode("12", add_special_tokens=False) + [tok.eos_token_id]
    assert mask[0].tolist() == [True, True, True, False, False]
    assert mask[1].all() and ids[1, -1] == tok.eos_token_id  # cut to fit, EOS kept
    assert np.all(ids[0, 3:] == tok.pad_token_id)


def test_warm_start_rejects_bad_corrupt_fraction():
    with pytest.raises(ValueError, match="corrupt_fraction"):
        sft.warm_start({}, None, load_tokenizer(), [{"question": "1+1", "solution": "2",
                                                     "reference": "2"}],
                       template="synthetic", steps=1, batch_size=1, learning_rate=1e-3,
                       warmup_steps=0, max_prompt_len=8, max_len=16, seed=0,
                       corrupt_fraction=1.0)
