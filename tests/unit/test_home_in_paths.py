"""`~` in a path of an override is the user's home, as the shell expands it in `VAR=~/x` but does
not after a dotted key: Hydra's override grammar refuses an unquoted `~` with a bare
LexerNoViableAltException (hydra/grammar/OverrideLexer.g4). `launch/hydra_setup.py expand_home`
expands it before Hydra parses the command; a `~` that cannot be expanded is explained, and a
`task=dataset` with neither a file nor a Hub id is refused naming the keys. Compose only, in
process; $HOME is pointed at tmp_path (the cache root kept where it was)."""

from __future__ import annotations

import pytest

from quadrants.home import CACHE_ENV, default_cache_root
from quadrants.launch.hydra_setup import (
    check_home_in_uri,
    compose_run_config,
    expand_home,
    preflight,
    split_hydra_argv,
)
from quadrants.tasks import validate_task


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(default_cache_root()))  # the tiny model's cache stays put
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_expand_home_where_a_path_starts(home):
    h = str(home)
    assert expand_home("outputs=~/runs") == f"outputs={h}/runs"
    assert expand_home("task.params.path=~") == f"task.params.path={h}"
    assert (
        expand_home("tracking.uri=sqlite:///~/q/mlflow.db")
        == f"tracking.uri=sqlite:///{h}/q/mlflow.db"
    )
    assert expand_home("outputs=~/a,~/b") == f"outputs={h}/a,{h}/b"  # a multirun's items
    assert expand_home("x=[~/a,~/b]") == f"x=[{h}/a,{h}/b]"
    for left in ("~task.params.path", "~x=~/a", "x='~/a'", "x=a~b", "x=~user/a", "x=a/~/b"):
        assert expand_home(left) == left  # a delete, quoted, not a path's start, another user
    flags, overrides = split_hydra_argv(["-m", "outputs=~/r", "--cfg", "job"])
    assert flags == ["-m", "--cfg", "job"] and overrides == [f"outputs={h}/r"]


@pytest.mark.slow  # composes the tree (4.4 s on the loaded 2-core machine)
def test_a_dataset_path_and_outputs_with_a_tilde_compose(home):
    # 10 rows: 2 held out by task.heldout_size=2, 8 to train on
    rows = "".join(f'{{"problem": "{i}+1?", "answer": "{i + 1}"}}\n' for i in range(10))
    (home / "data.jsonl").write_text(rows)
    cfg = compose_run_config(
        [
            "task=dataset",
            "task.params.path=~/data.jsonl",
            "task.heldout_size=2",
            "outputs=~/runs",
            "tracking.uri=sqlite:///~/store/mlflow.db",
        ]
    )
    assert cfg.task.params["path"] == f"{home}/data.jsonl"
    assert cfg.outputs == f"{home}/runs"
    assert cfg.tracking.uri == f"sqlite:///{home}/store/mlflow.db"
    assert not (home / "runs").exists() and not (home / "store").exists()  # compose writes nothing


def test_a_tilde_mlflow_cannot_read_is_explained(home):
    with pytest.raises(ValueError, match=r"tracking.uri=sqlite:///~/q.db: MLflow does not expand"):
        check_home_in_uri("sqlite:///~/q.db")  # a quoted value reaches the config unexpanded
    check_home_in_uri(f"sqlite:///{home}/q.db")
    check_home_in_uri(None)
    with pytest.raises(ValueError) as refused:  # ~user: not expanded, Hydra's lexer refuses it
        preflight(["outputs=~nobody_here/runs"])
    said = str(refused.value)
    assert "LexerNoViableAltException" in said
    assert "cannot hold `~` but as the home directory at the start of a path" in said
    assert not (home / "outputs").exists()


def test_a_dataset_with_no_file_and_no_hub_id_names_both_keys():
    with pytest.raises(ValueError) as refused:
        validate_task("dataset", 1, {"path": None, "problem_key": "problem"})
    said = str(refused.value)
    assert "task dataset reads its problems from a file or the Hugging Face Hub" in said
    assert "Fix: task.params.path=FILE" in said and "task.params.hub=DATASET_ID" in said
