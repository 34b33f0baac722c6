"""The adaptive I/J controllers keep a node learning: never I = 0, one default step size, the thesis rule as written.

A node with I = 0 generates no local completions, so it has no local reward and nothing to compare the pool
against; a controller that let J reach I + J would stay there for the rest of the run. These tests drive the
controllers the way `SwarmNode` does (`update(reward_local=..., reward_pool=...)`, with `reward_local=None` in a
round that had no local completions).
"""
import inspect, json, random

import pytest

from sapo_nb import sampler
from sapo_nb.config import CHOICES, SAPOConfig

MODES = ("off", "thesis", "gradient", "bandit")


def test_gradient_never_reaches_zero_local():
    g = sampler.GradientIJ(total=4, J=2.0)
    for _ in range(50):  # the swarm far better than us, round after round
        i, j = g.update(reward_local=0.1, reward_pool=0.9)
        assert i >= 1 and i + j == 4
    assert g.ij == (1, 3)
    assert sampler.GradientIJ(total=4, J=4.0).ij == (1, 3)  # built (or restored) at I = 0: back to I = 1
    assert sampler.make_controller("gradient", 0, 4).ij == (1, 3)
    assert sampler.GradientIJ(total=1, J=1.0, alpha=100.0).update(signal=1.0) == (1, 0)  # I + J = 1: J stays 0


def test_bandit_has_no_zero_local_arm():
    for total in range(1, 13):
        b = sampler.BanditIJ(total=total, J=total)
        assert b.arms and max(b.arms) <= total - 1 and b.ij[0] >= 1, (total, b.arms)
        for t in range(60):
            i, _ = b.update(reward_local=0.01 * t)
            assert i >= 1, (total, t)
    with pytest.raises(ValueError, match="I >= 1"):
        sampler.BanditIJ(total=4, arms=[0, 2, 4])


@pytest.mark.parametrize("mode", ["thesis", "gradient", "bandit"])
def test_update_with_no_local_reward_keeps_moving(mode):
    ctrl = sampler.make_controller(mode, 0, 4)  # a node configured with I = 0 (the config allows it)
    start = ctrl.ij
    assert start[0] >= 1
    for _ in range(3):  # rounds with nothing to compare: no crash, no move
        assert ctrl.update(reward_local=None, reward_pool=0.9) == start
    seen = set()
    for t in range(40):  # then what a node feeds: a local reward whenever it has local completions
        i, j = ctrl.ij
        assert i >= 1, (mode, t)
        seen.add(j)
        ctrl.update(reward_local=(0.6 + 0.01 * t) if i > 0 else None, reward_pool=0.2)
    assert len(seen) > 1, (mode, seen)
    if mode != "bandit": assert ctrl.ij[1] < start[1]  # the pool was worse: J went down


def test_thesis_rule_is_literal():
    c = sampler.make_controller("thesis", 4, 4, adaptive_alpha=0.1)
    assert isinstance(c, sampler.ThesisIJ) and c.alpha == 0.1
    for local, pool in [(0.3, 0.45), (0.5, 0.25), (0.1, 0.9), (0.2, 0.2)]:
        j0 = c.J
        c.update(reward_local=local, reward_pool=pool)
        assert c.J == j0 + 0.1 * (pool - local)
    # no baseline: the same advantage moves J by the same amount every round
    steady, moves = sampler.ThesisIJ(total=8, J=2.0, alpha=0.2), []
    for _ in range(5):
        j0 = steady.J
        steady.update(reward_local=0.2, reward_pool=0.7)
        moves.append(steady.J - j0)
    assert moves == pytest.approx([0.1] * 5)
    # clipped to [0, I+J-1]
    assert sampler.ThesisIJ(total=8, J=6.5, alpha=1.0).update(signal=3.0) == (1, 7)
    assert sampler.ThesisIJ(total=8, J=0.5, alpha=1.0).update(signal=-3.0) == (8, 0)


def test_one_default_alpha():
    cfg = SAPOConfig()
    params = inspect.signature(sampler.make_controller).parameters
    assert params["adaptive_alpha"].default == cfg.adaptive_alpha == sampler.GradientIJ().alpha
    assert sampler.ThesisIJ().alpha == cfg.adaptive_alpha
    assert sampler.make_controller("gradient").alpha == sampler.make_controller("thesis").alpha == cfg.adaptive_alpha
    assert params["adaptive_ema"].default == cfg.adaptive_ema == sampler.GradientIJ().ema


@pytest.mark.parametrize("mode", MODES)
def test_controller_roundtrip_dict(mode):
    assert set(CHOICES["adaptive"]) == set(sampler.ADAPTIVE) == set(MODES)
    rng = random.Random(0)
    c = sampler.make_controller(mode, 3, 3)
    for _ in range(7): c.update(reward_local=rng.random(), reward_pool=rng.random())
    d = json.loads(json.dumps(c.to_dict()))
    assert d["kind"] == mode
    back = sampler.controller_from_dict(d)
    assert back == c
    feed = [(rng.random(), rng.random()) for _ in range(10)]
    assert [back.update(*f) for f in feed] == [c.update(*f) for f in feed]


def test_checkpoint_saved_at_zero_local_resumes():
    g = sampler.controller_from_dict(dict(kind="gradient", total=4, J=4.0, alpha=2.0, ema=0.9, baseline=0.1, steps=4))
    assert g.ij == (1, 3) and g.update(reward_local=0.6, reward_pool=0.2)[1] < 3
    b = sampler.controller_from_dict(dict(kind="bandit", total=4, J=4, discount=0.98, explore=0.1, arms=[0, 1, 2, 3, 4],
                                          counts=[1.0] * 5, sums=[0.0, 0.1, 0.2, 0.3, 0.4], prev_J=4,
                                          last_reward=0.5, steps=5))
    assert (b.arms, b.counts, b.sums, b.ij) == ([0, 1, 2, 3], [1.0] * 4, [0.0, 0.1, 0.2, 0.3], (1, 3))
