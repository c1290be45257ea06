"""The OpenMP busy-wait default that `import quadrants` sets before torch loads (quadrants/__init__.py).

Each case runs a fresh interpreter: libgomp reads the variables once, when torch is first imported,
so the default only works if `quadrants` is imported first and leaves an explicit setting alone.
"""

import os
import subprocess
import sys

import pytest

PROBE = (
    "import os, sys, quadrants; "
    "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'), "
    "'torch' in sys.modules)"
)


def _probe(**extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(extra)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_unset_gets_the_bounded_spin_and_torch_is_not_loaded_yet():
    assert _probe() == "1000 None False"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"OMP_WAIT_POLICY": "PASSIVE"}, "None PASSIVE False"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "None ACTIVE False"),
        ({"GOMP_SPINCOUNT": "300000"}, "300000 None False"),
    ],
)
def test_an_explicit_setting_wins(extra, expected):
    assert _probe(**extra) == expected
