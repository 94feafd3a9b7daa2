"""The pre-norm transformer block of every compgen token model (MaskGIT, the DiT, GIVT, MAR), on diffusers' attention.

The attention is diffusers' ``Attention`` module, run by a processor that calls ``dispatch_attention_fn``:
``attn_processors`` and ``set_attn_processor`` see it, diffusers' standard processors run it, ``set_attention_backend``
chooses its kernel, and the weights pass through diffusers' layerwise casting hooks (fp8 storage). The block computes
what ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` computed, on which compgen's token models were
first built: ``x + attn(norm1(x))``, then ``x + ff(norm2(x))``. Weights saved in that older layout load through
:func:`convert_legacy_block_weights` (the fused ``self_attn.in_proj_weight`` split into ``attn.to_q``, ``to_k``,
``to_v``; ``linear1``, ``linear2`` renamed into ``ff``): the converted model's outputs equal the old one's up to float
rounding (``tests/unit/test_transformer_block.py``). One difference remains for ``dropout > 0`` (no preset uses it):
dropout acts on the attention's output, not on its weights.
"""

from __future__ import annotations

import re

import torch
from diffusers.models.attention import AttentionMixin, AttentionModuleMixin, FeedForward
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0
from torch import nn


class TokenAttnProcessor:
    """Self-attention over the token sequence through diffusers' attention dispatcher (the backend
    ``set_attention_backend`` chose; PyTorch's scaled dot-product attention by default)."""

    _attention_backend = None
    _parallel_config = None

    def __call__(self, attn: TokenAttention, hidden_states: torch.Tensor,
                 encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if encoder_hidden_states is not None:
            raise ValueError("compgen's token attention is self-attention: it takes no encoder_hidden_states")
        query, key, value = (projection(hidden_states).unflatten(-1, (attn.heads, -1))
                             for projection in (attn.to_q, attn.to_k, attn.to_v))
        hidden_states = dispatch_attention_fn(query, key, value, attn_mask=attention_mask,
                                              backend=self._attention_backend, parallel_config=self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        return attn.to_out[1](attn.to_out[0](hidden_states))


class TokenAttention(Attention, AttentionModuleMixin):
    """Multi-head self-attention with biases (``to_q``, ``to_k``, ``to_v``, ``to_out``): diffusers' ``Attention``,
    run by :class:`TokenAttnProcessor` by default. Being diffusers' own module, it runs diffusers' standard processors
    too (``AttnProcessor``, ``AttnProcessor2_0``, a user's own for attention maps), with the same outputs up to the
    kernel's rounding (``tests/unit/test_transformer_block.py``)."""

    _default_processor_cls = TokenAttnProcessor
    _available_processors = [TokenAttnProcessor, AttnProcessor, AttnProcessor2_0]
    _supports_qkv_fusion = False  # the default processor reads to_q, to_k and to_v

    def __init__(self, dim: int, heads: int, dropout: float = 0.0):
        if dim % heads:
            raise ValueError(f"the width {dim} must be a multiple of the number of heads {heads}")
        super().__init__(query_dim=dim, heads=heads, dim_head=dim // heads, dropout=dropout, bias=True,
                         out_bias=True, processor=TokenAttnProcessor())
        self.head_dim = dim // heads


class TokenAttentionMixin(AttentionMixin):
    """diffusers' ``AttentionMixin`` (``attn_processors``, ``set_attn_processor``) with the default processor back
    (``set_default_attn_processor``), for the models built of :class:`TransformerBlock`."""

    def set_default_attn_processor(self) -> None:
        """Every attention module back on :class:`TokenAttnProcessor` (PyTorch's attention by default)."""
        self.set_attn_processor(TokenAttnProcessor())


class TransformerBlock(nn.Module):
    """``x + attn(norm1(x))``, then ``x + ff(norm2(x))`` with a GELU MLP of ``mlp_ratio`` times the width."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TokenAttention(dim, num_heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, inner_dim=int(dim * mlp_ratio), dropout=dropout, activation_fn="gelu",
                              final_dropout=True)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.attn(self.norm1(hidden_states))
        return hidden_states + self.ff(self.norm2(hidden_states))


def transformer_blocks(hidden_size: int, num_layers: int, num_heads: int, mlp_ratio: float = 4.0,
                       dropout: float = 0.0) -> nn.ModuleList:
    """The blocks of every compgen token model: MaskGIT's, the DiT's, GIVT's and MAR's backbones are built by this
    one function, so they differ only in their inputs, outputs and objective."""
    return nn.ModuleList(TransformerBlock(hidden_size, num_heads, mlp_ratio, dropout) for _ in range(num_layers))


_LEGACY = re.compile(r"^(?P<prefix>.*)self_attn\.in_proj_weight$")
_RENAMES = {"self_attn.out_proj.": "attn.to_out.0.", "linear1.": "ff.net.0.proj.", "linear2.": "ff.net.2."}


def convert_legacy_block_weights(state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Rename, in place, the weights of blocks saved as ``nn.TransformerEncoderLayer`` (compgen's token models before
    :class:`TransformerBlock`) to this layout; returns the converted blocks' prefixes (empty: nothing to convert)."""
    prefixes = [match["prefix"] for key in list(state_dict) if (match := _LEGACY.match(key))]
    for prefix in prefixes:
        for kind in ("weight", "bias"):
            fused = state_dict.pop(f"{prefix}self_attn.in_proj_{kind}")
            for name, part in zip(("to_q", "to_k", "to_v"), fused.chunk(3, dim=0), strict=True):
                state_dict[f"{prefix}attn.{name}.{kind}"] = part.contiguous()
        for key in [k for k in state_dict if k.startswith(prefix)]:
            for old, new in _RENAMES.items():
                if key.startswith(prefix + old):
                    state_dict[prefix + new + key[len(prefix + old):]] = state_dict.pop(key)
    return prefixes


class LegacyBlockWeightsMixin:
    """For a ``ModelMixin`` built on :func:`transformer_blocks`: ``from_pretrained`` converts weights saved in the
    older ``nn.TransformerEncoderLayer`` layout (:func:`convert_legacy_block_weights`) through diffusers' own hook for
    renamed weights."""

    def _fix_state_dict_keys_on_load(self, state_dict) -> None:
        super()._fix_state_dict_keys_on_load(state_dict)
        convert_legacy_block_weights(state_dict)
