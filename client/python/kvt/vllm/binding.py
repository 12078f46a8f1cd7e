"""How one vLLM layer's paged KV tensor becomes a kvt region.

vLLM (FlashAttention/Triton backends) keeps each layer's KV as one tensor of logical shape
`[2, num_blocks, block_size, num_kv_heads, head_size]`, K at index 0 and V at 1, dense in NHD order or, with
`VLLM_KV_CACHE_LAYOUT=HND`, physically `[2, num_blocks, num_kv_heads, block_size, head_size]`. Both are a kvt
layout of one layer (`kv_stride_bytes` = one K tensor), so:
- a CUDA tensor is registered where it lies, through its CUDA IPC handle: kvtd reads the prefill blocks and writes
  the decode blocks in place (no copy in the engine);
- a host tensor (vLLM's CPU backend; the tests) is not in shared memory, which kvtd needs, so it gets a mirror in
  POSIX shared memory with the same block ids, and the connector copies a request's blocks into the mirror before
  offering them and out of it once they have landed.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kvt.client import Client
from kvt.errors import NotFound, Unavailable
from kvt.kv_cache import KvCache, cuda_ipc_handle, release_cuda_ipc
from kvt.layout import BlockOrder, KvLayout

_LAYER_NUMBER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def layer_order(names: Sequence[str]) -> List[str]:
    """vLLM's layer names ("model.layers.7.self_attn.attn") in layer order: by the first number in the name,
    names without one after them in the given order. ValueError for two layers with the same number."""
    numbered: Dict[int, str] = {}
    rest: List[str] = []
    for name in names:
        match = _LAYER_NUMBER.search(name)
        if match is None:
            rest.append(name)
            continue
        number = int(match.group(1))
        if number in numbered:
            raise ValueError(f"KvtConnector: layers {numbered[number]!r} and {name!r} have the same number")
        numbered[number] = name
    return [numbered[k] for k in sorted(numbered)] + rest


def layout_of(tensor: Any, head_begin: int = 0, total_kv_heads: int = 0) -> KvLayout:
    """The kvt layout of one vLLM layer tensor (holding heads [head_begin, head_begin + its heads) of the model's
    total_kv_heads, 0: unsharded); ValueError (saying what is supported) for anything else."""
    shape = tuple(tensor.shape)
    if len(shape) != 5 or shape[0] != 2:
        raise ValueError(f"KvtConnector supports vLLM KV tensors of shape [2, num_blocks, block_size, heads, "
                         f"head_size] (FlashAttention / Triton backends), got {list(shape)}")
    _, blocks, block_size, heads, head_size = shape
    if tensor.is_contiguous():
        order = "NHD"
    elif tensor.permute(0, 1, 3, 2, 4).is_contiguous():
        order = "HND"
    else:
        raise ValueError(f"KvtConnector: a KV tensor with strides {tuple(tensor.stride())} is neither NHD nor "
                         f"HND dense")
    dtype = str(tensor.dtype).replace("torch.", "")
    names = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    if dtype not in names:
        raise ValueError(f"KvtConnector moves bf16, fp16 or fp32 KV caches, got {dtype} (an fp8 KV cache is not "
                         f"supported yet)")
    if total_kv_heads and head_begin + heads > total_kv_heads:
        raise ValueError(f"KvtConnector: a layer of {heads} KV heads from head {head_begin} does not fit the "
                         f"model's {total_kv_heads}")
    return KvLayout(num_layers=1, num_blocks=blocks, block_tokens=block_size, num_kv_heads=heads,
                    head_dim=head_size, dtype=names[dtype], order=order, head_begin=head_begin,
                    total_kv_heads=total_kv_heads)


class LayerBinding:
    """One layer's region in the local kvtd."""

    def __init__(self, client: Client, region_id: str, tensor: Any, head_begin: int = 0,
                 total_kv_heads: int = 0) -> None:
        self.region_id = region_id
        self.layout = layout_of(tensor, head_begin, total_kv_heads)
        self._tensor = tensor
        self._mirror: Optional[KvCache] = None
        self._ipc: Optional[Tuple[bytes, int, Any]] = None
        if tensor.is_cuda:
            import torch
            torch.cuda.synchronize(tensor.device)
            self._ipc = cuda_ipc_handle(tensor)
            handle, offset, _ = self._ipc
            client.register_gpu_region(region_id, self.layout, ipc_handle=handle, size_bytes=self.layout.size_bytes,
                                       device=tensor.device.index, offset_bytes=offset)
        else:
            self._mirror = KvCache.allocate(self.layout)
            self._mirror.register(client, region_id)

    @property
    def on_gpu(self) -> bool:
        return self._mirror is None

    def _views(self) -> Tuple[Any, Any, Any, Any]:
        """(vLLM K, vLLM V, mirror K, mirror V) as [blocks, ...] tensors of the same axis order."""
        assert self._mirror is not None
        k, v = self._tensor[0], self._tensor[1]
        if self.layout.order is BlockOrder.HND:
            k, v = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        return k, v, self._mirror.k(0), self._mirror.v(0)

    def stage_out(self, block_ids: Sequence[int]) -> None:
        """Prefill, host tensors: copy the blocks into the mirror kvtd reads."""
        if self._mirror is None:
            return
        import torch
        index = torch.tensor(list(block_ids), dtype=torch.long)
        k, v, mk, mv = self._views()
        mk[index] = k[index]
        mv[index] = v[index]

    def stage_in(self, block_ids: Sequence[int], num_tokens: int) -> None:
        """Decode, host tensors: copy the landed tokens from the mirror into vLLM's tensor: whole blocks, then only
        the prompt's tokens of a partial last block (its other tokens are vLLM's own, decoded meanwhile)."""
        if self._mirror is None:
            return
        import torch
        block = self.layout.block_tokens
        whole, tail = divmod(num_tokens, block)
        k, v, mk, mv = self._views()
        if whole:
            index = torch.tensor(list(block_ids[:whole]), dtype=torch.long)
            k[index] = mk[index]
            v[index] = mv[index]
        if tail:
            last = block_ids[whole]
            token_axis = 1 if self.layout.order is BlockOrder.HND else 0  # within one block's view
            for dst, src in ((k[last], mk[last]), (v[last], mv[last])):
                dst.narrow(token_axis, 0, tail).copy_(src.narrow(token_axis, 0, tail))

    def close(self, client: Client) -> None:
        if self._mirror is not None:
            self._mirror.close()
        else:
            try:
                client.unregister_region(self.region_id)
            except (NotFound, Unavailable):
                pass  # the daemon no longer knows it, or is gone: it maps nothing
            if self._ipc is not None:  # the daemon no longer maps it: torch may free the block again
                release_cuda_ipc(self._ipc[2])
                self._ipc = None
