"""Drafting on perturbed ("anchor") KV and verifying on the exact KV reproduces, token for token, plain
decoding on the exact KV; injected drafts are accepted up to the first wrong one, which is corrected."""
from __future__ import annotations

import pytest
import torch

from kvt_engine.decode_worker import DecodeJob
from kvt_engine.generation import SamplingOptions, SequenceDecoder, withholds
from kvt_engine.model import Llama
from kvt_engine.paged_cache import PagedKvCache

PROMPT = [5, 17, 42, 8, 64, 3, 29, 77, 11, 50, 21, 9]


def _setup(tiny, dtype=torch.float64):
    cfg, w = tiny
    model = Llama(cfg, w, dtype=dtype)
    cache = PagedKvCache.allocate(cfg.num_layers, 16, 4, cfg.num_kv_heads, cfg.head_dim)
    table = torch.randperm(16, generator=torch.Generator().manual_seed(5))
    model.prefill(PROMPT[:-1], cache, table)
    return model, cache, table


def _monolithic(tiny, n: int) -> list[int]:
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    for _ in range(n):
        dec.step()
    return dec.token_ids


def _perturb_prompt_kv(cache: PagedKvCache, table: torch.Tensor, length: int, scale: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    saved = []
    for layer in range(cache.num_layers):
        k, v = cache.gather(layer, table, length)
        saved.append((k.clone(), v.clone()))
        cache.write(layer, table, 0, k.float() + scale * torch.randn(k.shape, generator=g),
                    v.float() + scale * torch.randn(v.shape, generator=g))
    return saved


def _restore(cache: PagedKvCache, table: torch.Tensor, saved) -> None:
    for layer, (k, v) in enumerate(saved):
        cache.write(layer, table, 0, k, v)


def test_drafts_on_perturbed_kv_then_verification_equal_plain_decoding(tiny):
    n = 12
    want = _monolithic(tiny, n)
    for scale, seed in [(0.05, 0), (0.5, 1), (3.0, 2)]:  # from mostly accepted to mostly rejected
        model, cache, table = _setup(tiny)
        saved = _perturb_prompt_kv(cache, table, len(PROMPT) - 1, scale, seed)
        dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
        for _ in range(7):
            dec.draft()
        _restore(cache, table, saved)  # "FULL_READY": the exact values overwrite the anchor ones in place
        dec.verify()
        while len(dec.tokens) < n:
            dec.step()
        assert dec.token_ids[:n] == want, (scale, dec.verifications)


def test_injected_drafts_are_accepted_up_to_the_first_wrong_one(tiny):
    want = _monolithic(tiny, 8)
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    wrong = (want[2] + 1) % 97
    dec.inject_drafts([want[0], want[1], wrong, want[3]])
    verdict = dec.verify()
    assert (verdict.accepted, verdict.next_token) == (2, want[2])
    assert [t.was_draft for t in dec.tokens] == [True, True, False]
    while len(dec.tokens) < 8:
        dec.step()
    assert dec.token_ids == want


def test_all_drafts_right_gives_a_bonus_token_and_verification_can_repeat(tiny):
    want = _monolithic(tiny, 9)
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    dec.inject_drafts(want[:3])
    assert dec.verify().accepted == 3
    dec.inject_drafts(want[4:6])
    assert dec.verify().accepted == 2
    dec.step()
    assert dec.token_ids == want[:len(dec.tokens)] and len(dec.tokens) == 8


def test_sampling_mode_verifies_its_own_drafts(tiny):
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1],
                          sampling=SamplingOptions(greedy=False, temperature=1.0, seed=3))
    for _ in range(4):
        dec.draft()
    v = dec.verify()  # same KV for drafts and target: p == q, so every draft is accepted
    assert v.accepted == 4 and len(dec.tokens) == 5


def test_draft_below_the_margin_is_withheld_and_output_is_unchanged(tiny):
    n = 10
    want = _monolithic(tiny, n)
    model, cache, table = _setup(tiny)
    saved = _perturb_prompt_kv(cache, table, len(PROMPT) - 1, 0.5, 1)
    free = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    for _ in range(6):
        free.draft()
    margins = list(free.draft_margins)
    assert len(margins) == 6 and all(m >= 0 for m in margins)
    tau = margins[3] + 1e-9  # just above the fourth draft's margin: drafting stops there or earlier
    first_below = next(i for i, m in enumerate(margins) if i > 0 and m < tau)  # the first draft always goes
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    got = [dec.draft(min_margin=tau) for _ in range(first_below + 1)]
    assert got[:first_below] == free.drafts[:first_below]
    assert got[first_below] is None  # withheld, not proposed
    assert dec.drafts == free.drafts[:first_below]
    assert dec.withheld_margin == margins[first_below]
    _restore(cache, table, saved)
    dec.verify()
    while len(dec.tokens) < n:
        dec.step()
    assert dec.token_ids[:n] == want
    assert dec.verifications[0].drafted == first_below


def test_margin_threshold_is_ignored_when_sampling(tiny):
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1],
                          sampling=SamplingOptions(greedy=False, temperature=1.0, seed=3))
    assert all(dec.draft(min_margin=1e9) is not None for _ in range(3))
    assert len(dec.drafts) == 3 and dec.withheld_margin is None


def test_the_first_draft_is_proposed_whatever_its_margin(tiny):
    model, cache, table = _setup(tiny)
    dec = SequenceDecoder(model, cache, table, base=len(PROMPT) - 1, first_input=PROMPT[-1])
    assert dec.draft(min_margin=1e9) is not None  # the user's first token
    assert dec.draft(min_margin=1e9) is None and dec.withheld_margin is not None
    assert len(dec.drafts) == 1
    assert withholds(0.1, 0.5, 1) and not withholds(0.1, 0.5, 0) and not withholds(0.5, 0.5, 3)


def test_engine_refuses_a_draft_margin_that_is_negative_or_not_finite(capsys):
    from kvt_engine.cli import main

    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit) as e:
            main(["--draft-min-margin", bad])
        assert e.value.code == 2
        assert "must be a finite number >= 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="draft_min_margin"):
        DecodeJob(request_id="r", num_tokens=1, last_prompt_token=0, scheme="lynx", new_tokens=1,
                  draft_min_margin=float("nan"))


def test_the_draft_study_refuses_empty_runs(capsys):
    from kvt_engine.draft_study import main

    for args in (["--prompts", "0"], ["--new-tokens", "0"], ["--prompt-tokens", "1"], ["--skip", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(args + ["--kvtctl", "/nonexistent"])
        assert e.value.code == 2
        assert "must be at least" in capsys.readouterr().err


def test_the_draft_study_counts_drafts_and_acceptances_as_the_engine_drafts():
    from kvt_engine.draft_study import outcome, summarize

    margins = [0.05, 2.0, 0.3, 1.5, 0.9, 0.2]
    # No rule: drafts up to the length; accepted up to where the anchor run parted from the full one.
    assert outcome(margins, parted_at=4, length=6, tau=0.0) == (6, 4)
    assert outcome(margins, parted_at=4, length=3, tau=0.0) == (3, 3)
    # The first draft is proposed whatever its margin; the first later one below tau ends drafting, withheld.
    assert outcome(margins, parted_at=6, length=6, tau=0.5) == (2, 2)
    assert outcome(margins, parted_at=1, length=6, tau=0.5) == (2, 1)
    assert outcome(margins, parted_at=6, length=6, tau=3.0) == (1, 1)
    # Fewer margins than the length: the run's end ends drafting.
    assert outcome(margins[:2], parted_at=0, length=8, tau=0.0) == (2, 0)
    table = summarize([{"anchor_margins": margins, "parted_at": 4}, {"anchor_margins": [1.0] * 40, "parted_at": 40}])
    row = table["8/0.5"]
    assert (row["drafted"], row["accepted"]) == (2 + 8, 2 + 8)
    assert row["ratio"] == 1.0
    assert table["32/0"]["drafted"] == 6 + 32 and table["32/0"]["accepted"] == 4 + 32
