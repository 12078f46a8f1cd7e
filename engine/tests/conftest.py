"""Fixtures: a tiny random-weight Llama (fast, always available) and the real SmolLM2-135M (skipped with a
message when `./kvt engine fetch` has not put it in the cache folder)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvt_engine.gguf_loader import LayerWeights, ModelConfig, ModelWeights  # noqa: E402
from kvt_engine import model_files  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

TINY = ModelConfig(num_layers=2, hidden=64, ffn_hidden=96, num_heads=4, num_kv_heads=2, head_dim=16,
                   vocab_size=97, rope_theta=10000.0, rms_eps=1e-5, context_length=512)


def random_weights(cfg: ModelConfig, seed: int = 0) -> ModelWeights:
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    layers = [LayerWeights(attn_norm=1 + w(cfg.hidden, scale=0.1), wq=w(q, cfg.hidden), wk=w(kv, cfg.hidden),
                           wv=w(kv, cfg.hidden), wo=w(cfg.hidden, q), ffn_norm=1 + w(cfg.hidden, scale=0.1),
                           w_gate=w(cfg.ffn_hidden, cfg.hidden), w_up=w(cfg.ffn_hidden, cfg.hidden),
                           w_down=w(cfg.hidden, cfg.ffn_hidden))
              for _ in range(cfg.num_layers)]
    embed = w(cfg.vocab_size, cfg.hidden, scale=1.0)
    return ModelWeights(embed=embed, layers=layers, final_norm=1 + w(cfg.hidden, scale=0.1), lm_head=embed)


@pytest.fixture(scope="session")
def tiny() -> tuple[ModelConfig, ModelWeights]:
    return TINY, random_weights(TINY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kvt-cache-dir", default=None, help="the folder ./kvt engine fetch fills (~/.cache/kvt)")
    parser.addoption("--kvtd", default=None, help="the kvtd binary for end-to-end tests (default: on PATH)")


@pytest.fixture(scope="session")
def kvtd_path(request: pytest.FixtureRequest) -> str:
    kvt = pytest.importorskip("kvt", reason="the kvt client package (client/python) is not importable")
    try:
        return kvt.find_kvtd(request.config.getoption("--kvtd"))
    except kvt.KvtError as e:
        pytest.skip(f"no kvtd: {e}")


@pytest.fixture(scope="session")
def real_model_path(request: pytest.FixtureRequest) -> Path:
    try:
        return model_files.find_model("smollm2-135m", request.config.getoption("--kvt-cache-dir"))
    except model_files.ModelMissing as e:
        pytest.skip(f"real model absent: {e}")


@pytest.fixture(scope="session")
def smollm2(real_model_path: Path):
    """The real model, read once per session (about 4 s)."""
    from kvt_engine.gguf_loader import read_gguf

    return read_gguf(real_model_path)
