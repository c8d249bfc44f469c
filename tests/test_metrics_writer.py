"""The metrics writer: metrics.jsonl (read back plain or kept as .xz) and an offline Weights &
Biases run whose history holds the metrics, with no network."""
import json
import lzma
import os
import struct

import pytest

from coop_jax.metrics_writer import MetricWriter, read_metrics

BLOCK = 32768  # the W&B datastore's record blocks (LevelDB's log format)
HEADER = 7     # ":W&B", 0xBEE1, version


def wandb_records(path):
    """The protobuf Records of an offline run's run-<id>.wandb file."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, chunks, records = HEADER, b"", []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
    return records


def wandb_history(folder):
    files = [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names
             if f.endswith(".wandb")]
    assert len(files) == 1, files
    return [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
             for i in r.history.item}
            for r in wandb_records(files[0]) if r.WhichOneof("record_type") == "history"]


def test_an_offline_wandb_run_holds_the_metrics(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    for key in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    writer = MetricWriter(workdir, tensorboard=False, wandb_project="coop-test",
                          wandb_mode="offline", wandb_config={"seed": 3})
    for step in (1, 2, 3):
        writer.write(step, {"proxy_reward_mean": 0.5 + step / 10, "rule_accuracy": 0.5,
                            "monitor/alarm/gap": 0.3 if step == 3 else None, "flag": True})
    writer.close()
    wandb.teardown()  # waits for W&B's service to write the run's file
    history = wandb_history(os.path.join(workdir, "wandb"))
    assert [(h["_step"], h["proxy_reward_mean"], h["rule_accuracy"]) for h in history] == [
        (1, pytest.approx(0.6), 0.5), (2, pytest.approx(0.7), 0.5), (3, pytest.approx(0.8), 0.5)]
    assert "monitor/alarm/gap" in history[2] and "flag" not in history[0]
    assert [r["step"] for r in read_metrics(workdir)] == [1, 2, 3]
    assert open(os.path.join(workdir, "wandb_run_id")).read().strip()


def test_read_metrics_reads_a_kept_xz_file(tmp_path):
    with lzma.open(tmp_path / "metrics.jsonl.xz", "wt") as fh:
        fh.write('{"step": 1, "loss": 0.5}\n')
    assert read_metrics(str(tmp_path)) == [{"step": 1, "loss": 0.5}]
    assert read_metrics(str(tmp_path / "none")) == []
