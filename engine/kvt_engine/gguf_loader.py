"""Reads a Llama-family GGUF file (llama.cpp's format) into a ModelConfig, dequantized torch weights and the
tokenizer's metadata, through the `gguf` package. Pure functions; the result is owned by the caller.

    model = read_gguf(path)                     # float32 weights on the CPU
    weights = model.weights.to(torch.float64)   # another dtype or device
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama model (what its GGUF `llama.*` keys say)."""

    num_layers: int
    hidden: int
    ffn_hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float
    rms_eps: float
    context_length: int


@dataclasses.dataclass
class LayerWeights:
    """One decoder layer. Linear weights are [out, in] (torch's F.linear convention); wq and wk are in the
    Hugging Face (rotate-half) channel order, not llama.cpp's interleaved one (see `_unpermute_rope`)."""

    attn_norm: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


@dataclasses.dataclass
class ModelWeights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: list[LayerWeights]
    final_norm: torch.Tensor
    lm_head: torch.Tensor  # [vocab, hidden]; the same tensor as `embed` when the model ties them

    def to(self, dtype: Optional[torch.dtype] = None, device: Optional[str | torch.device] = None) -> "ModelWeights":
        """A copy in `dtype` on `device` (None keeps each); a tied lm_head stays tied."""

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=dtype or t.dtype, device=device or t.device).contiguous()

        embed = cast(self.embed)
        layers = [LayerWeights(**{f.name: cast(getattr(l, f.name)) for f in dataclasses.fields(l)})
                  for l in self.layers]
        lm_head = embed if self.lm_head is self.embed else cast(self.lm_head)
        return ModelWeights(embed=embed, layers=layers, final_norm=cast(self.final_norm), lm_head=lm_head)


@dataclasses.dataclass
class TokenizerData:
    """The GGUF's `tokenizer.ggml.*` keys."""

    model: str  # "gpt2" for byte-level BPE
    pre: str  # llama.cpp's pre-tokenizer name ("smollm", "llama-bpe", ...)
    tokens: list[str]
    token_types: list[int]  # 1 normal, 3 control, ...
    merges: list[str]  # "a b", in rank order
    bos_id: Optional[int]
    eos_id: Optional[int]
    add_bos: bool
    chat_template: str


@dataclasses.dataclass
class GgufModel:
    config: ModelConfig
    weights: Optional[ModelWeights]  # None when read with with_weights=False
    tokenizer: TokenizerData
    name: str


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undoes llama.cpp's convert-time permutation of Q/K rows, which turns Hugging Face's rotate-half RoPE
    pairs (i, i + d/2) into adjacent pairs (2i, 2i + 1). Engines that serve Hugging Face checkpoints store K in
    the rotate-half order, so the KV this engine produces (and kvt carries) has the order a real engine's has."""
    out, inp = w.shape
    return w.reshape(n_heads, out // n_heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def read_config(reader: Any) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r}: only 'llama' is implemented")
    hidden = int(_field(reader, "llama.embedding_length"))
    heads = int(_field(reader, "llama.attention.head_count"))
    head_dim = int(_field(reader, "llama.rope.dimension_count", hidden // heads))
    vocab = _field(reader, "llama.vocab_size")
    if vocab is None:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return ModelConfig(
        num_layers=int(_field(reader, "llama.block_count")),
        hidden=hidden,
        ffn_hidden=int(_field(reader, "llama.feed_forward_length")),
        num_heads=heads,
        num_kv_heads=int(_field(reader, "llama.attention.head_count_kv", heads)),
        head_dim=head_dim,
        vocab_size=int(vocab),
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        context_length=int(_field(reader, "llama.context_length", 2048)),
    )


def read_gguf(path: str | os.PathLike, with_weights: bool = True) -> GgufModel:
    """Reads the config, the tokenizer metadata and (with_weights) every tensor dequantized to float32 (any
    type `gguf.quants` knows: Q4_1, Q8_0, F32, ...). Raises FileNotFoundError or ValueError (unsupported
    architecture, missing tensor)."""
    import gguf  # imported here so that modules that only need the dataclasses do not need the package

    reader = gguf.GGUFReader(os.fspath(path))
    cfg = read_config(reader)
    weights = _read_weights(reader, cfg, path) if with_weights else None
    return GgufModel(config=cfg, weights=weights, tokenizer=_read_tokenizer(reader),
                     name=str(_field(reader, "general.name", "")))


def _read_weights(reader: Any, cfg: ModelConfig, path: str | os.PathLike) -> ModelWeights:
    import gguf

    arrays: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        arrays[t.name] = np.array(a, dtype=np.float32)  # a copy: the reader maps the file read-only

    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise ValueError(f"{path}: tensor {name!r} missing")
        return torch.from_numpy(arrays[name])

    layers = []
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=get(p + "attn_norm.weight"),
            wq=torch.from_numpy(_unpermute_rope(arrays[p + "attn_q.weight"], cfg.num_heads)),
            wk=torch.from_numpy(_unpermute_rope(arrays[p + "attn_k.weight"], cfg.num_kv_heads)),
            wv=get(p + "attn_v.weight"),
            wo=get(p + "attn_output.weight"),
            ffn_norm=get(p + "ffn_norm.weight"),
            w_gate=get(p + "ffn_gate.weight"),
            w_up=get(p + "ffn_up.weight"),
            w_down=get(p + "ffn_down.weight"),
        ))
    embed = get("token_embd.weight")
    lm_head = get("output.weight") if "output.weight" in arrays else embed
    return ModelWeights(embed=embed, layers=layers, final_norm=get("output_norm.weight"), lm_head=lm_head)


def _read_tokenizer(reader: Any) -> TokenizerData:
    def opt_int(key: str) -> Optional[int]:
        v = _field(reader, key)
        return None if v is None else int(v)

    return TokenizerData(
        model=str(_field(reader, "tokenizer.ggml.model", "")),
        pre=str(_field(reader, "tokenizer.ggml.pre", "default")),
        tokens=list(_field(reader, "tokenizer.ggml.tokens", [])),
        token_types=[int(x) for x in _field(reader, "tokenizer.ggml.token_type", [])],
        merges=list(_field(reader, "tokenizer.ggml.merges", [])),
        bos_id=opt_int("tokenizer.ggml.bos_token_id"),
        eos_id=opt_int("tokenizer.ggml.eos_token_id"),
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        chat_template=str(_field(reader, "tokenizer.chat_template", "")),
    )
