"""kvt_engine: a reference inference engine for kvt. A Llama model in plain PyTorch over a paged KV cache, a
prefill worker and a decode worker (separate processes, each beside its own kvtd, using the `kvt` client), and
the decode side's speculate-on-anchor / verify-on-full protocol (Lynx sections 4.2-4.3). docs/ENGINE.md."""

__version__ = "0.1.0"
