import dataclasses
import json
import logging
import re
import threading

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from quadrants.models import warmup
from quadrants.models.warmup import (
    WarmupSettings,
    base_policy_dir,
    default_cache_root,
    ensure_base_policy,
    read_warmup_info,
)
from quadrants.tasks.synthetic import ArithmeticTask

# A few seconds on 2 cores: a 1-layer width-32 model, 3 steps of 4 sequences, 8 held-out problems.
FAST = WarmupSettings(
    task=ArithmeticTask(heldout_size=8),
    steps=3,
    batch_size=4,
    lr_warmup_steps=1,
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    intermediate_size=64,
    eval_size=8,
    max_new_tokens=12,
)


@pytest.fixture
def count_builds(monkeypatch):
    calls = []
    real_build = warmup._build

    def counting_build(settings, out_dir):
        calls.append(settings)
        return real_build(settings, out_dir)

    monkeypatch.setattr(warmup, "_build", counting_build)
    return calls


@pytest.mark.slow
def test_builds_once_then_reuses(tmp_path, count_builds, caplog, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    caplog.set_level(logging.INFO, logger="quadrants.models.warmup")
    first = ensure_base_policy(FAST, cache_root=tmp_path)
    assert "building" in caplog.text
    second = ensure_base_policy(FAST, cache_root=tmp_path)
    assert "reusing" in caplog.text
    assert first == second == base_policy_dir(FAST, tmp_path)
    assert len(count_builds) == 1
    # only the finished directory and its lock file are left behind
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name, first.name + ".lock"]
    assert first.stat().st_mode & 0o777 == 0o755  # readable by other users of a shared cache

    info = read_warmup_info(first)
    assert info["settings"] == dataclasses.asdict(FAST)
    assert info["cache_key"] == FAST.cache_key()
    assert set(info["heldout_accuracy"]) == {"greedy", "temperature_0.6", "temperature_1.0"}
    assert all(0.0 <= v <= 1.0 for v in info["heldout_accuracy"].values())
    model = AutoModelForCausalLM.from_pretrained(first, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(first, local_files_only=True)
    assert model.config.hidden_size == 32 and tokenizer.padding_side == "left"


def test_cache_key_follows_the_settings():
    assert FAST.cache_key() == dataclasses.replace(FAST).cache_key()
    changed = [
        dataclasses.replace(FAST, steps=4),
        dataclasses.replace(FAST, teacher_error_rate=0.1),
        dataclasses.replace(FAST, task=ArithmeticTask(heldout_size=8, num_terms=5)),
    ]
    keys = {FAST.cache_key()} | {s.cache_key() for s in changed}
    assert len(keys) == 4


def test_format_version_is_part_of_the_key(monkeypatch):
    before = FAST.cache_key()
    monkeypatch.setattr(warmup, "FORMAT_VERSION", warmup.FORMAT_VERSION + 1)
    assert FAST.cache_key() != before


@pytest.mark.slow
def test_changed_settings_build_a_new_policy(tmp_path, count_builds):
    first = ensure_base_policy(FAST, cache_root=tmp_path)
    other = ensure_base_policy(dataclasses.replace(FAST, seed=1), cache_root=tmp_path)
    assert first != other and len(count_builds) == 2
    assert json.loads((other / "warmup.json").read_text())["settings"]["seed"] == 1


@pytest.mark.slow
def test_concurrent_requests_build_once(tmp_path, count_builds):
    # flock locks belong to open file descriptions, so two threads exclude each other like two
    # processes would; the second waits on the lock and then reuses the first one's build
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ensure_base_policy(FAST, cache_root=tmp_path))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1]
    assert len(count_builds) == 1


def test_a_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def failing_build(settings, out_dir):
        (out_dir / "partial").write_text("x")
        raise RuntimeError("boom")

    monkeypatch.setattr(warmup, "_build", failing_build)
    with pytest.raises(RuntimeError, match="boom"):
        ensure_base_policy(FAST, cache_root=tmp_path)
    target = base_policy_dir(FAST, tmp_path)
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == [target.name + ".lock"]


def test_default_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("QUADRANTS_CACHE", str(tmp_path))
    assert default_cache_root() == tmp_path
    assert base_policy_dir(FAST).parent == tmp_path / "base_policy"
    monkeypatch.delenv("QUADRANTS_CACHE")
    assert default_cache_root().parts[-2:] == (".cache", "quadrants")


def test_off_a_terminal_the_warm_up_logs_a_line_every_ten_percent(caplog, capsys):
    # stderr captured by pytest is not a terminal, as in a SLURM log; logging set up at INFO, as a
    # sweep's job does: the lines go to the logger (which names the run there), none to stderr
    caplog.set_level(logging.INFO, logger="quadrants.models.warmup")
    settings = dataclasses.replace(FAST, steps=12)
    model, tokenizer = warmup.random_tiny_policy(
        settings.seed, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    warmup._train(model, tokenizer, settings)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warming up")]
    # 12 steps: done * 10 // 12 after steps 1..11 = 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, then the end:
    # a line after steps 2, 3, 4, 5, 6, 8, 9, 10, 11 and 12 (10 lines, not 12 bar redraws)
    assert [line.split(" (")[0] for line in lines] == [
        f"warming up the tiny base policy: {done}/12 steps"
        for done in (2, 3, 4, 5, 6, 8, 9, 10, 11, 12)
    ]
    # each with its elapsed time, ETA and the running loss, e.g. "..., ETA 0:00:00, loss 2.345"
    assert all(re.search(r" elapsed, ETA \d+:\d\d:\d\d, loss \d+\.\d{3}$", line) for line in lines)
    assert "\r" not in capsys.readouterr().err
