"""The verification rules: greedy keeps the longest matching prefix plus the target's token; speculative
sampling's accept/reject yields tokens distributed as the target, whatever the draft distribution."""
from __future__ import annotations

import math

import pytest
import torch

from kvt_engine.speculative import verify_greedy, verify_sampling


def _one_hot_logits(tokens: list[int], vocab: int = 8) -> torch.Tensor:
    out = torch.zeros(len(tokens), vocab)
    out[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return out


def test_greedy_accepts_every_matching_draft_and_adds_the_bonus_token():
    v = verify_greedy([3, 1, 4], _one_hot_logits([3, 1, 4, 1]))
    assert (v.accepted, v.next_token) == (3, 1)


def test_greedy_stops_at_the_first_mismatch_and_corrects_it():
    v = verify_greedy([3, 1, 4], _one_hot_logits([3, 2, 4, 1]))
    assert (v.accepted, v.next_token) == (1, 2)


def test_greedy_with_no_drafts_is_one_step():
    v = verify_greedy([], _one_hot_logits([6]))
    assert (v.accepted, v.next_token) == (0, 6)


def test_greedy_rejects_a_row_count_that_does_not_fit_the_drafts():
    with pytest.raises(ValueError):
        verify_greedy([1, 2], _one_hot_logits([1, 2]))


def _chi_square(counts: torch.Tensor, probs: torch.Tensor, n: int) -> float:
    expected = probs * n
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_sampling_rule_output_follows_the_target_distribution(seed):
    # Small vocabulary, a draft distribution q far from the target p. One draft per trial: the first output
    # token (the accepted draft or the resampled correction) must be distributed as p[0].
    vocab, trials = 5, 20000
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(2, vocab, generator=g) * 1.5, dim=-1).double()
    q = torch.softmax(torch.randn(1, vocab, generator=g) * 1.5, dim=-1).double()
    counts = torch.zeros(vocab)
    accepted = 0
    for _ in range(trials):
        x = int(torch.multinomial(q[0], 1, generator=g))
        v = verify_sampling([x], q, p, generator=g)
        first = x if v.accepted == 1 else v.next_token
        counts[first] += 1
        accepted += v.accepted
    chi2 = _chi_square(counts.double(), p[0], trials)
    # 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
    assert chi2 < 18.47, (counts / trials, p[0])
    # The acceptance rate is sum_x min(p, q).
    expected_rate = float(torch.minimum(p[0], q[0]).sum())
    assert abs(accepted / trials - expected_rate) < 4 * math.sqrt(expected_rate * (1 - expected_rate) / trials)


def test_two_drafts_give_the_target_joint_distribution_of_two_tokens():
    # Rows independent of the prefix (the rule does not care). After a rejection at the first draft the
    # engine's next step samples from the target, so the pair is (correction, x ~ p[1]).
    vocab, trials = 4, 20000
    g = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(3, vocab, generator=g) * 1.5, dim=-1).double()
    q = torch.softmax(torch.randn(2, vocab, generator=g) * 1.5, dim=-1).double()
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    for _ in range(trials):
        drafts = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        v = verify_sampling(drafts, q, p, generator=g)
        out = drafts[:v.accepted] + [v.next_token]
        if len(out) < 2:
            out.append(int(torch.multinomial(p[1], 1, generator=g)))
        counts[out[0], out[1]] += 1
    joint = p[0][:, None] * p[1][None, :]
    # 15 degrees of freedom: P(chi2 > 37.70) = 0.001.
    assert _chi_square(counts.flatten(), joint.flatten(), trials) < 37.70


def test_sampling_rule_accepts_everything_when_draft_and_target_agree():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 6, generator=g), dim=-1).double()
    v = verify_sampling([1, 4], p[:2], p, generator=g)
    assert v.accepted == 2


def test_sampling_rule_never_emits_a_token_the_target_rules_out():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    for _ in range(200):
        v = verify_sampling([0], q, p, generator=g)
        assert v.accepted == 0 and v.next_token in (1, 2)
