"""coop-rephrase (Co-rewarding-I's second view) over the fake OpenAI server and a tiny local model,
resume after kill -9, the loader reading the view back, the Co-rewarding configs, and
corewarding_1 training on rephrased GSM8K."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from absl.app import UsageError
from conftest import REPO, repo_config, save_tiny_hf_causal_lm
from fake_openai import FakeOpenAI

from coop_jax import config as config_lib
from coop_jax import data
from coop_jax.trainer import loop
from coop_jax.data import rephrase

ROOT = str(REPO)
QUESTIONS = ["Tom has 3 apples and buys 4 more. How many apples does he have?",
             "A box holds 6 pens. How many pens are in 2 boxes?",
             "Sam reads 5 pages a day. How many pages does he read in 3 days?",
             "Ann had 9 sweets and ate 2. How many are left?",
             "A bus has 10 seats and 7 are taken. How many are free?",
             "Lee runs 2 km a day. How far does he run in 4 days?"]
ANSWERS = ["7", "12", "15", "7", "3", "8"]


def _write_gsm8k(folder, n=len(QUESTIONS), rephrased=None):
    os.makedirs(folder, exist_ok=True)
    rows = [{"question": q, "answer": f"Work.\n#### {a}"} for q, a in zip(QUESTIONS, ANSWERS)]
    rows = (rows * (n // len(rows) + 1))[:n]
    if rephrased:
        rows = [dict(r, rephrased=rephrased(i, r["question"])) for i, r in enumerate(rows)]
    for split, part in (("train", rows), ("test", rows[:2])):
        with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in part)
    return str(folder)


def _question(body):
    return body["messages"][1]["content"].split("\n")[1]


def _argv(data_dir, out_dir, **extra):
    flags = dict(dataset="gsm8k", data_dir=data_dir, split="train", out_dir=out_dir) | extra
    return ["coop-rephrase"] + [f"--config.{k}={v}" for k, v in flags.items()]


def _jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_judge_keeps_only_new_nonempty_questions_without_answers():
    q = "Tom has 3 apples. How many?"
    assert rephrase.judge(q, "  Rewritten problem: Jo owns 3 pears. How many? ") == (
        "Jo owns 3 pears. How many?", None)
    assert rephrase.judge(q, '**Problem:** "Jo owns 3 pears."') == ("Jo owns 3 pears.", None)
    assert rephrase.judge(q, None) == (None, "no_reply")
    assert rephrase.judge(q, "  \n") == (None, "empty")
    assert rephrase.judge(q, "Rewritten problem:") == (None, "empty")
    assert rephrase.judge(q, "tom has 3   apples. how many?") == (None, "unchanged")
    assert rephrase.judge(q, "Jo has 3 pears... so 3. #### 3") == (None, "contains_answer")
    assert rephrase.judge(q, "Jo: \\boxed{3}") == (None, "contains_answer")
    assert rephrase.judge(q, "Jo owns 3 pears. The answer is 3.") == (None, "contains_answer")
    system, user = rephrase.rephrase_messages(" " + q + "\n")
    assert system == {"role": "system", "content": rephrase.REPHRASE_SYSTEM_PROMPT}
    assert user == {"role": "user", "content": f"Problem:\n{q}\n\nRewritten problem:"}


def _replies(body):
    q = _question(body)
    i = QUESTIONS.index(q)
    return [(200, f"Rewritten problem: In another story, {q.lower()}"),
            (200, "   "),                          # empty
            (200, q.upper()),                      # the same question
            (200, "Ann ate 2 of 9 sweets, 7 left. #### 7"),   # solves it
            (500, None),                           # endpoint error: retried by the next run
            (200, f"Variant: {q}")][i]


def test_http_endpoint_end_to_end_loader_reads_it_back_and_rerun_retries(tmp_path):
    data_dir = _write_gsm8k(tmp_path / "gsm8k")
    out = str(tmp_path / "out")
    with FakeOpenAI(_replies) as server:
        summary = rephrase.main(_argv(data_dir, out, url=server.url + "/v1", model="para-m",
                                      batch_size=4))
    assert [_question(b) for _, b in server.requests] == QUESTIONS
    for path, body in server.requests:
        assert path == "/v1/chat/completions" and body["model"] == "para-m"
        assert body["temperature"] == 0.7 and body["top_p"] == 0.8
        assert body["max_tokens"] == 384
        assert body["messages"] == rephrase.rephrase_messages(_question(body))
    assert summary["rows"] == 6 and summary["kept"] == 2 and summary["kept_fraction"] == 2 / 6
    assert summary["rejected"] == {"empty": 1, "unchanged": 1, "contains_answer": 1,
                                   "no_reply": 1}
    assert summary["this_run"]["attempted"] == 6
    assert json.load(open(os.path.join(out, "train.rephrase.json")))["kept"] == 2
    kept = _jsonl(os.path.join(out, "train.jsonl"))
    assert [r["id"] for r in kept] == ["gsm8k-train-0", "gsm8k-train-5"]
    assert kept[0] == {"question": QUESTIONS[0], "answer": "Work.\n#### 7", "id": "gsm8k-train-0",
                       "rephrased": f"In another story, {QUESTIONS[0].lower()}"}
    rejected = _jsonl(os.path.join(out, "train.rejected.jsonl"))
    assert [(r["id"], r["reason"]) for r in rejected] == [
        ("gsm8k-train-1", "empty"), ("gsm8k-train-2", "unchanged"),
        ("gsm8k-train-3", "contains_answer"), ("gsm8k-train-4", "no_reply")]
    assert os.path.realpath(os.path.join(out, "test.jsonl")) == os.path.join(data_dir,
                                                                             "test.jsonl")

    # The loader reads the view and the original ids back; a whole run can use OUT as data_dir.
    records = data.load_split("gsm8k", "train", data_dir=out)
    assert [(r["id"], r["question"], r["reference"]) for r in records] == [
        ("gsm8k-train-0", QUESTIONS[0], "7"), ("gsm8k-train-5", QUESTIONS[5], "8")]
    assert records[1]["rephrased"] == f"Variant: {QUESTIONS[5]}"
    data.sources.check_rephrased(records, "gsm8k")
    assert len(data.load_split("gsm8k", "test", data_dir=out)) == 2
    with pytest.raises(ValueError, match="'rephrased'.*dataset 'gsm8k'"):
        data.sources.check_rephrased(data.load_split("gsm8k", "train", data_dir=data_dir),
                                     "gsm8k")

    # A rerun asks only for the row that got no reply.
    with FakeOpenAI(lambda body: (200, "A reworded " + _question(body))) as server:
        summary = rephrase.main(_argv(data_dir, out, url=server.url, batch_size=4))
    assert [_question(b) for _, b in server.requests] == [QUESTIONS[4]]
    assert summary["kept"] == 3 and summary["rejected"]["no_reply"] == 0
    assert summary["this_run"] == {"attempted": 1, "kept": 1,
                                   "seconds": summary["this_run"]["seconds"]}
    assert [r["id"] for r in data.load_split("gsm8k", "train", data_dir=out)] == [
        "gsm8k-train-0", "gsm8k-train-5", "gsm8k-train-4"]


def test_kill9_mid_run_then_resume_finishes_each_row_once(tmp_path):
    n = 12
    data_dir = _write_gsm8k(tmp_path / "gsm8k", n=n)
    out = tmp_path / "out"

    def slow(body):
        time.sleep(0.25)
        return 200, "Reworded: " + _question(body)

    with FakeOpenAI(slow, max_requests=100) as server:
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        proc = subprocess.Popen([sys.executable, "-m", "coop_jax.data.rephrase",
                                 *_argv(data_dir, out, url=server.url, batch_size=1)[1:]],
                                env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        kept_path = out / "train.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if kept_path.exists() and len(kept_path.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    done_before = [r["id"] for r in _jsonl(kept_path)]
    assert 3 <= len(done_before) < n
    with open(kept_path, "a") as f:      # a crash in the middle of writing a line
        f.write('{"question": "torn')
    with FakeOpenAI(lambda body: (200, "Reworded: " + _question(body))) as server:
        summary = rephrase.main(_argv(data_dir, str(out), url=server.url, batch_size=1))
    assert len(server.requests) == n - len(done_before)
    ids = [r["id"] for r in _jsonl(kept_path)]
    assert sorted(ids) == sorted(f"gsm8k-train-{i}" for i in range(n)) and ids[:len(done_before)] \
        == done_before
    assert summary["kept"] == n and summary["kept_fraction"] == 1.0
    assert len(data.load_split("gsm8k", "train", data_dir=str(out))) == n


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    return save_tiny_hf_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def test_tiny_local_model_end_to_end_and_resume(tiny_hf_dir, tmp_path):
    data_dir = _write_gsm8k(tmp_path / "gsm8k", n=5)
    c = rephrase.get_config()
    c.update(data_dir=data_dir, out_dir=str(tmp_path / "out"), hf_path=tiny_hf_dir,
             num_examples=3, batch_size=2, max_new_tokens=12, max_prompt_len=640,
             keep_truncated=True)  # a random model rarely stops on its own
    rephrase.validate(c)
    summary = rephrase.rephrase_split(c)
    assert summary["rows"] == 3 and summary["this_run"]["attempted"] == 3
    kept = _jsonl(os.path.join(c.out_dir, "train.jsonl"))
    rejected = _jsonl(os.path.join(c.out_dir, "train.rejected.jsonl"))
    assert summary["kept"] == len(kept) >= 1 and len(kept) + len(rejected) == 3
    for row in kept:
        assert row["rephrased"] == rephrase.clean_reply(row["rephrased"]) and row["rephrased"]
        assert len(row["rephrased"]) <= 12 and row["rephrased"] != row["question"]
    assert {r["reason"] for r in rejected} <= {"empty", "unchanged", "contains_answer"}
    # Resumed with more rows: only the two new ones are generated (then stop: no model load).
    c.num_examples = 5
    calls = []
    summary = rephrase.rephrase_split(c, backend=lambda qs: calls.append(qs) or ["New " + q
                                                                               for q in qs])
    assert calls == [QUESTIONS[3:5]] and summary["rows"] == 5
    assert summary["kept"] == len(kept) + 2
    assert rephrase.rephrase_split(c, backend=lambda qs: pytest.fail("nothing left to do")
                                   )["this_run"]["attempted"] == 0


def test_config_errors(tmp_path):
    data_dir = _write_gsm8k(tmp_path / "gsm8k")
    with pytest.raises(UsageError, match="exactly one of config.hf_path"):
        rephrase.main(_argv(data_dir, str(tmp_path / "o")))
    with pytest.raises(UsageError, match="exactly one of config.hf_path"):
        rephrase.main(_argv(data_dir, str(tmp_path / "o"), url="http://x", hf_path="/m"))
    with pytest.raises(UsageError, match="config.out_dir is required"):
        rephrase.main(_argv(data_dir, "", url="http://x"))
    with pytest.raises(UsageError, match="config.dataset must be one of"):
        rephrase.main(_argv(data_dir, str(tmp_path / "o"), url="http://x", dataset="synthetic"))
    with pytest.raises(UsageError, match="holds the input file"):
        rephrase.main(_argv(data_dir, data_dir, url="http://x"))
    with pytest.raises(UsageError, match="config.batch_size must be >= 1"):
        rephrase.main(_argv(data_dir, str(tmp_path / "o"), url="http://x", batch_size=0))


@pytest.mark.parametrize("variant, kl", [("1", 0.005), ("2", 0.001)])
def test_corewarding_configs_follow_the_released_scripts(variant, kl):
    c = repo_config("corewarding_gsm8k", variant)
    config_lib.validate(c, device_count=8)
    assert c.reward.type == f"corewarding_{variant}" and c.rl.kl_coef == kl
    assert c.rollout.group_size == 8 and c.rl.kl_estimator == "low_var_kl"
    assert (c.optim.learning_rate, c.optim.schedule) == (3e-6, "cosine")
    assert c.optim.warmup_steps == int(0.1 * c.train.steps) == 17
    c.train.steps = 300                     # the 10% warm-up follows an overridden length
    assert c.optim.warmup_steps == 30
    assert c.data.data_dir.endswith("rephrased") == (variant == "1")
    with pytest.raises(ValueError, match="variant '1' or '2'"):
        repo_config("corewarding_gsm8k", "3")


def _tiny_gsm8k_config(data_dir):
    c = repo_config("tiny_test")
    c.reward.type = "corewarding_1"
    c.data.update(dataset="gsm8k", data_dir=data_dir, prompt_template="raw", max_prompt_len=80,
                  num_eval=2)
    return c


def test_corewarding_1_trains_on_rephrased_gsm8k_and_refuses_without_it(tmp_path, monkeypatch):
    plain = _write_gsm8k(tmp_path / "plain")
    with pytest.raises(ValueError, match="'rephrased'.*6 of 6 records of dataset 'gsm8k'"):
        loop.train(_tiny_gsm8k_config(plain), str(tmp_path / "refused"))
    views = _write_gsm8k(tmp_path / "views",
                         rephrased=lambda i, q: "In other words: " + q.replace("How", "how"))
    prompted = []
    format_prompt = data.format_prompt
    monkeypatch.setattr(data, "format_prompt",
                        lambda template, q, **kw: prompted.append(q) or format_prompt(template, q,
                                                                                      **kw))
    summary = loop.train(_tiny_gsm8k_config(views), str(tmp_path / "run"))
    # Both views were sampled: the rollouts of the second one start from the rephrased question.
    assert any(q.startswith("In other words: ") for q in prompted)
    assert any(q in QUESTIONS for q in prompted)
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [0, 1, 2] and summary["reward_type"] == "corewarding_1"
    assert all("pseudo_label_accuracy" in r and r["loss"] == r["loss"] for r in rows[1:])
