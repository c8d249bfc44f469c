"""The RM's input: the <question> text (full prompt by default, as the reference; the raw question
as an option), the truncation side, and the settings a checkpoint's config records."""
import numpy as np
import pytest

from conftest import repo_config

from coop_jax.rm.train import input_format
from coop_jax.config import base_config, validate
from coop_jax.data import format_prompt
from coop_jax.hf.tokenizer import load_tokenizer
from coop_jax.rm.input import (RMInputFormat, format_rm_input, shared_prefix_lengths, split_at,
                               split_groups, tokenize_rm_inputs, trained_input_format)

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def test_the_rm_question_is_the_full_user_prompt_by_default():
    c = base_config()
    c.data.prompt_template = "gsm8k"
    text = RMInputFormat.from_config(c).text(QUESTION, "7", "3+4=7. #### 7")
    prompt = format_prompt("gsm8k", QUESTION)
    assert prompt != QUESTION and prompt.startswith(QUESTION)
    assert text == format_rm_input(prompt, "7", "3+4=7. #### 7")
    assert 'output the final answer after "####".</question>' in text
    c.rm.question_format = "question"
    assert RMInputFormat.from_config(c).text(QUESTION, "7", "c") == format_rm_input(QUESTION, "7", "c")


def test_the_character_cut_applies_unless_switched_off():
    long = "x" * 600 + "y" * 1000 + "z" * 400  # 2,000 characters: 500 x, then the last 1,000
    cut = format_rm_input("q", long, long)
    assert cut.count("x") == 2 * 500 and "y" * 600 + "z" * 400 in cut and len(cut) < 3100
    assert format_rm_input("q", long, long, char_cut=False) == (
        f"<question>q</question>\n<reference_answer>{long}</reference_answer>\n"
        f"<completion>{long}</completion>")
    fmt = RMInputFormat(max_len=8, template="synthetic", question_format="question")
    assert fmt.text("q", long, long) == cut
    assert RMInputFormat(max_len=8, template="synthetic", question_format="question",
                         char_cut=False).text("q", long, long) == format_rm_input(
        "q", long, long, char_cut=False)


def test_coop_train_rm_template_and_the_toy_experiment_pin():
    c = base_config()
    assert input_format(c).template == "synthetic"  # data.prompt_template
    c.rm_train.dataset = "gsm8k"
    assert input_format(c).template == "gsm8k"  # the dataset's template
    c.rm_train.update(template="boxed", max_len=77)
    assert (input_format(c).template, input_format(c).max_len) == ("boxed", 77)
    # the reward-hacking runs were made with raw questions and must stay reproducible
    assert repo_config("toy_hacking").rm.question_format == "question"


@pytest.mark.parametrize("side,kept", [("left", "tail"), ("right", "head")])
def test_truncation_side(side, kept):
    tok = load_tokenizer()  # one token per character
    text = format_rm_input("1+2", "3", "1+2=3. #### 3")
    ids, mask = tokenize_rm_inputs(tok, [text, "ab"], 20, truncation_side=side)
    full = tok(text, add_special_tokens=False)["input_ids"]
    np.testing.assert_array_equal(ids[0], full[-20:] if kept == "tail" else full[:20])
    assert mask[0].all() and mask[1].tolist() == [True] * 2 + [False] * 18  # right-padded
    decoded = tok.decode(ids[0])
    assert decoded.endswith("#### 3</completion>") == (side == "left")
    assert decoded.startswith("<question>") == (side == "right")
    fmt = RMInputFormat(max_len=20, template="raw", truncation_side=side)
    np.testing.assert_array_equal(fmt.tokenize(tok, [("1+2", "3", "1+2=3. #### 3")])[0], ids[:1])


def test_bad_settings_name_the_field():
    c = base_config()
    c.rm.truncation_side = "middle"
    with pytest.raises(ValueError, match=r"config.rm.truncation_side must be one of "
                                         r"\['left', 'right'\]"):
        validate(c)
    with pytest.raises(ValueError, match="config.reward_model.question_format"):
        RMInputFormat(max_len=8, template="raw", question_format="raw")
    with pytest.raises(ValueError, match="config.reward_model.truncation_side"):
        tokenize_rm_inputs(load_tokenizer(), ["x"], 4, truncation_side="tail")
    with pytest.raises(ValueError, match="unknown prompt template 'nope'"):
        RMInputFormat(max_len=8, template="nope")


def test_trained_input_format_of_old_and_new_checkpoints():
    # saved before the options existed: raw questions, the tail kept
    old = {"cooper": {"max_len": 64}, "data": {"prompt_template": "synthetic"},
           "reward_model": {"hidden_size": 32}}
    assert trained_input_format(old) == {"max_len": 64, "template": "synthetic",
                                         "question_format": "question", "truncation_side": "left"}
    new = base_config().to_dict()
    assert trained_input_format(new)["question_format"] == "prompt"


# ---------------------------------------------------------------------- the shared prefix
def _rows(*rows, width=8):
    tokens = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = r
    return tokens, tokens > 0


def test_a_group_shares_its_longest_common_prefix_and_every_row_keeps_a_token():
    tokens, mask = _rows([1, 2, 3, 4], [1, 2, 3, 5, 6],  # share 3 tokens
                         [1, 2], [1, 2],                 # identical: 1, so each keeps one
                         [7, 8, 9], [],                  # an empty row does not constrain
                         [4, 5], [6])                    # nothing shared
    assert shared_prefix_lengths(tokens, mask, 2).tolist() == [3, 1, 2, 0]


def test_split_rows_rebuild_each_whole_input_and_carry_their_groups_prefix():
    tokens, mask = _rows([1, 2, 3, 4], [1, 2, 3, 5, 6], [], [7, 8, 9])
    prefix, prefix_mask, suffix, suffix_mask = split_groups(tokens, mask, 2)
    assert prefix_mask.sum(axis=1).tolist() == [3, 3, 2, 2]  # left-padded, the group's prefix
    assert prefix[:2, -3:].tolist() == [[1, 2, 3]] * 2 and prefix[3, -2:].tolist() == [7, 8]
    for r in range(4):
        whole = tokens[r][mask[r]]
        rebuilt = np.concatenate([prefix[r][prefix_mask[r]], suffix[r][suffix_mask[r]]])
        assert (r == 2 and not suffix_mask[r].any()) or rebuilt.tolist() == whole.tolist()
    assert suffix[:2, :2].tolist() == [[4, 0], [5, 6]] and suffix_mask.shape == tokens.shape
    # a cut is never past a row's own length
    _, pm, _, sm = split_at(tokens, mask, np.array([9, 9, 9, 1]))
    assert pm.sum(1).tolist() == [4, 5, 0, 1] and sm.sum(1).tolist() == [0, 0, 0, 2]
