"""The objective registry: the signature is the schema; names, keys and ranges fail before training."""

import pytest

from quadrants.objectives import registry
from quadrants.objectives.batch import ObjectiveOutput
from quadrants.objectives.registry import (
    check_range,
    get_objective,
    known_objectives,
    register_objective,
    resolve_objective,
)

BUILTINS = [
    "adaptive_entropy",
    "archer",
    "cispo",
    "clip_cov",
    "dapo",
    "entroadv",
    "entroreg",
    "forking",
    "grpo",
    "gspo",
    "hapo",
    "kl_cov",
    "ktae",
    "steer",
    "w_reinforce",
]


def test_builtins_are_registered():
    assert set(BUILTINS) <= set(known_objectives())


def test_unknown_objective_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown objective 'grop'; known objectives: \[") as err:
        get_objective("grop")
    for name in BUILTINS:
        assert repr(name) in str(err.value)
    with pytest.raises(ValueError, match="unknown objective 'grop'"):
        resolve_objective("grop", {})


def test_misspelled_param_lists_accepted_keys():
    with pytest.raises(
        ValueError,
        match=r"objective 'grpo' got unknown parameter\(s\) \['clip_hgh'\]; "
        r"accepted: \['clip_high', 'clip_low', 'clip_ratio_c'\]",
    ):
        resolve_objective("grpo", {"clip_hgh": 0.3})
    with pytest.raises(
        ValueError,
        match=r"\['alph'\]; accepted: \['alpha', 'apply_to', 'clip_high', "
        r"'clip_low', 'clip_ratio_c', 'conserve', 'dynamic_sampling', 'phi'\]",
    ):
        resolve_objective("hapo", {"alph": 0.2})


@pytest.mark.parametrize("name", BUILTINS)
def test_defaults_resolve_and_fill_every_key(name):
    spec, full = resolve_objective(name, None)
    assert spec.name == name
    assert set(full) == set(spec.parameters())
    assert full == spec.defaults()


def test_resolve_merges_overrides_with_defaults():
    _, full = resolve_objective("dapo", {"clip_high": 0.3})
    assert full == {
        "clip_low": 0.2,
        "clip_high": 0.3,
        "clip_ratio_c": None,
        "dynamic_sampling": True,
    }


@pytest.fixture
def scratch_registry(monkeypatch):
    """A copy of the registry so test registrations never leak into other tests."""
    known_objectives()  # load the built-ins first
    monkeypatch.setattr(registry, "_OBJECTIVES", dict(registry._OBJECTIVES))


def test_duplicate_registration_rejected(scratch_registry):
    def toy(batch, policy, *, scale: float):
        return ObjectiveOutput(policy.logp * scale, {})

    with pytest.raises(ValueError, match="objective 'grpo' is already registered"):
        register_objective("grpo")(toy)
    assert get_objective("grpo").fn is not toy
    register_objective("toy_scale")(toy)
    with pytest.raises(ValueError, match="objective 'toy_scale' is already registered"):
        register_objective("toy_scale")(toy)


def test_missing_required_param_rejected(scratch_registry):
    @register_objective("toy_required")
    def toy(batch, policy, *, scale: float):
        return ObjectiveOutput(policy.logp * scale, {})

    with pytest.raises(
        ValueError, match=r"objective 'toy_required' needs parameter\(s\) \['scale'\]"
    ):
        resolve_objective("toy_required", {})
    assert resolve_objective("toy_required", {"scale": 2.0})[1] == {"scale": 2.0}


@pytest.mark.parametrize(
    "name, params, pattern",
    [
        ("grpo", {"clip_low": 1.0}, r"^clip_low=1.0 is out of range; allowed: \[0, 1\)$"),
        ("grpo", {"clip_low": -0.1}, r"^clip_low=-0.1 is out of range"),
        ("grpo", {"clip_high": -0.01}, r"^clip_high=-0.01 is out of range; allowed: \[0, inf\)$"),
        ("dapo", {"clip_low": 1.0}, r"^clip_low=1.0 is out of range"),
        ("hapo", {"alpha": 0.2, "phi": 0.1}, r"alpha/phi = 0.2/0.1 = 2 .*allowed: alpha/phi < 1"),
        ("hapo", {"phi": -1.0}, r"^phi=-1.0 is out of range"),
        ("entroreg", {"beta": -0.001}, r"^beta=-0.001 is out of range; allowed: \[0, inf\)$"),
        ("entroreg", {"clip_low": 1.5}, r"^clip_low=1.5 is out of range"),
        ("forking", {"rho": 0.0}, r"^rho=0.0 is out of range; allowed: \(0, 1\]$"),
        ("forking", {"rho": 2.0}, r"^rho=2.0 is out of range"),
        ("entroadv", {"kappa": 0.0}, r"^kappa=0.0 is out of range; allowed: \(0, inf\)$"),
        ("entroadv", {"alpha": -0.4}, r"^alpha=-0.4 is out of range"),
        ("clip_cov", {"fraction": 2.0}, r"^fraction=2.0 is out of range; allowed: \[0, 1\]$"),
        ("clip_cov", {"cov_lb": 5.0, "cov_ub": 5.0}, r"^cov_lb=5.0 must be < cov_ub=5.0$"),
        ("kl_cov", {"fraction": 2.0}, r"^fraction=2.0 is out of range; allowed: \(0, 1\]$"),
        ("kl_cov", {"fraction": 0.0}, r"^fraction=0.0 is out of range"),
        ("kl_cov", {"coef": -1.0}, r"^coef=-1.0 is out of range"),
        ("w_reinforce", {"lam": -0.1}, r"^lam=-0.1 is out of range; allowed: \[0, inf\)$"),
    ],
)
def test_out_of_range_values_name_the_key(name, params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective(name, params)


def test_every_builtin_has_a_range_check():
    for name in BUILTINS:
        assert get_objective(name).validate is not None, name


def test_check_range_formats_the_interval():
    check_range("x", 0.5, low=0.0, high=1.0, low_open=True)  # in range: no error
    with pytest.raises(ValueError, match=r"^x=0 is out of range; allowed: \(0, 1\]$"):
        check_range("x", 0, low=0, high=1, low_open=True)
    with pytest.raises(ValueError, match=r"^y=3 is out of range; allowed: \(-inf, 2\)$"):
        check_range("y", 3, high=2, high_open=True)
