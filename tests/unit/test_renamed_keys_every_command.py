"""Every command that reads a renamed key names its replacement, as the sweep does
(launch/hydra_setup.py REMOVED_KEYS), instead of Hydra's "Could not override ... append it with +"
or OmegaConf's "Key 'gpu_memory_gb' not in 'ClusterConfig'": `quadrants.evaluate` and
`quadrants.probe` (their overrides, composed by `compose_run_config`), and the counterfactual, which
reads a run's own config.yaml (a run written before the rename). `quadrants.plan` has its test in
tests/unit/memory/test_plan_renamed_key.py, the sweep in tests/unit/sweep/test_refusals.py.
`quadrants.export` reads only `model.*` of a run's config.yaml (eval/target.py `_from_checkpoint`,
launch/export.py), and no renamed key is under `model`, so it has none to name. All in process:
the renamed key is refused before Hydra composes anything."""

from __future__ import annotations

import pytest

from quadrants.launch.counterfactual import load_run_plan
from quadrants.launch.evaluate import main as evaluate_main
from quadrants.launch.hydra_setup import REMOVED_KEYS
from quadrants.launch.probe import main as probe_main

RENAMED = "cluster.gpu_memory_gb was removed; use cluster.gpu_memory_gib (usable GiB"


@pytest.mark.parametrize(
    ("main", "said"),
    [
        (evaluate_main, "quadrants: invalid evaluation, nothing was generated."),
        (probe_main, "quadrants: invalid probe, nothing was generated."),
    ],
)
def test_evaluate_and_probe_name_the_new_key(main, said):
    with pytest.raises(SystemExit) as refused:
        main(["tiny", "cluster.gpu_memory_gb=80"])
    message = str(refused.value.code)
    assert message.startswith(said)
    assert RENAMED in message
    with pytest.raises(SystemExit) as refused:  # another of the table, with a + prefix
        main(["tiny", "+train.cpu_matmul=onednn"])
    assert "train.cpu_matmul was removed; use train.cpu.matmul" in str(refused.value.code)


def test_the_counterfactual_names_the_new_key_of_an_old_runs_config(tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 0\ncluster:\n  gpu_memory_gb: 80\n")
    with pytest.raises(ValueError) as refused:
        load_run_plan(tmp_path)
    said = str(refused.value)
    assert f"{tmp_path / 'config.yaml'} sets cluster.gpu_memory_gb, which was removed; " in said
    assert "use cluster.gpu_memory_gib (usable GiB" in said
    assert "edit that line of the file" in said


@pytest.mark.parametrize("key", sorted(REMOVED_KEYS))
def test_every_renamed_key_of_a_runs_config_is_named(tmp_path, key):
    """Each key of the table, nested as config.yaml writes it (`a: {b: 1}` for `a.b`)."""
    section, name = key.split(".")
    (tmp_path / "config.yaml").write_text(f"{section}:\n  {name}: 1\n")
    with pytest.raises(ValueError, match=f"sets {key}, which was removed; use "):
        load_run_plan(tmp_path)
