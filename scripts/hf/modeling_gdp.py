"""gdp.c's Gated DeltaProduct model in plain PyTorch, for Hugging Face transformers.

This one file is the configuration and the model that scripts/export_hf.py copies into an exported
folder, where config.json's auto_map points at it, so that

    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads a checkpoint of either mode (householder or split; docs/spec.md), and
AutoModelForTokenClassification a model with a per-position classifier (gdp tasks). It has no dependency beyond
torch and transformers (no Triton, no fla) and runs on the CPU and the GPU in any floating dtype;
the recurrence is a per-token loop over the state (vectorised over batch and heads), held in at
least float32. It is a reference, not a fast kernel.

The model, as docs/spec.md §3-4 and layers/{model,gdp_layer,mlp}.c define it:

    token embedding -> N blocks [x + attn(RMSNorm(x)), then x + mlp(RMSNorm(x))] -> RMSNorm -> head

with the Gated DeltaProduct layer

    q, k, v = q_proj x, k_proj x, v_proj x           (householder: n slots of k and v, channel order
                                                      slot, head, dim; split: one of each)
    q, k, v = SiLU(causal depthwise conv(q, k, v))   (plain SiLU without short convs)
    q, k    = L2 norm per head (split: per slice of head_dim / r), y = x / sqrt(sum x^2 + 1e-6)
    beta    = sigmoid(b_proj x), times 2 with allow_neg_eigval
    g       = -exp(A_log) * softplus(a_proj x + dt_bias)   (with use_forget_gate; float32)
    o       = the recurrence of docs/spec.md §1.1 (householder) or §1.2 (split), scale head_dim^-1/2
    o       = RMSNorm(o) * w * SiLU(g_proj x) per head (use_output_gate), else RMSNorm(o) * w
    out     = o_proj o

and a SwiGLU MLP, down_proj(SiLU(gate_proj x) * up_proj x). Linear layers have no bias. Every
parameter has the name it has in a gdp.c checkpoint (fla's names; split mode adds
`model.layers.<i>.attn.mask` [H, r, r] with r = num_householder, absent when split_mask_trainable is
false: the mask is then the identity; a classifier is `classifier.weight`). A tied head has no tensor of its own: the logits are made with the embedding matrix.

generate(): there is no recurrent cache; every step runs the whole sequence again (O(T) per new
token, fine for checks and short samples). Padding is not supported: an attention_mask, if given,
must be all ones.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput, TokenClassifierOutput

L2NORM_EPS = 1e-6


class GdpConfig(PretrainedConfig):
    """The keys of a gdp.c model config (fla's GatedDeltaProductConfig names plus mode and
    split_mask_trainable). intermediate_size 0 means 256 * ceil(int(hidden * hidden_ratio * 2/3) / 256)."""

    model_type = "gdp"

    def __init__(self, hidden_size=2048, num_hidden_layers=21, num_heads=6, head_dim=256, expand_v=2.0,
                 num_householder=2, use_forget_gate=True, allow_neg_eigval=True, use_short_conv=True, conv_size=4,
                 use_output_gate=True, hidden_ratio=4, intermediate_size=0, vocab_size=32000, norm_eps=1e-6,
                 tie_word_embeddings=False, initializer_range=0.02, mode="householder", split_mask_trainable=True,
                 **kwargs):
        if mode not in ("householder", "split"):
            raise ValueError(f"mode = {mode!r}: use 'householder' or 'split'")
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.expand_v = expand_v
        self.num_householder = num_householder
        self.use_forget_gate = use_forget_gate
        self.allow_neg_eigval = allow_neg_eigval
        self.use_short_conv = use_short_conv
        self.conv_size = conv_size
        self.use_output_gate = use_output_gate
        self.hidden_ratio = hidden_ratio
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.norm_eps = norm_eps
        self.initializer_range = initializer_range
        self.mode = mode
        self.split_mask_trainable = split_mask_trainable
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
        head_v = self.expand_v * self.head_dim
        if abs(head_v - round(head_v)) > 1e-9 or round(head_v) < 1:
            raise ValueError(f"expand_v {expand_v} * head_dim {head_dim} must be a whole number")
        if mode == "split" and head_dim % num_householder:
            raise ValueError(f"split mode cuts head_dim {head_dim} into num_householder {num_householder} slices: "
                             "it must divide evenly")

    @property
    def head_v_dim(self):
        return int(round(self.expand_v * self.head_dim))

    @property
    def slots(self):
        """k and v slots per token in the projections: n_h in householder mode, 1 in split mode."""
        return self.num_householder if self.mode == "householder" else 1

    @property
    def mlp_size(self):
        if self.intermediate_size > 0:
            return self.intermediate_size
        h = int(self.hidden_size * self.hidden_ratio * 2 / 3)
        return 256 * ((h + 255) // 256)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim, computed in at least float32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x, gate=None):
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(x.dtype)
        if gate is not None:  # the output gate: times SiLU(gate)
            y = y * F.silu(gate.to(x.dtype))
        return y.to(dtype)


class ShortConv(nn.Module):
    """Depthwise causal convolution without bias, then SiLU: y_t = SiLU(sum_i w[c, 0, i] x_{t-W+1+i})."""

    def __init__(self, channels, width):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, width))

    def forward(self, x):  # [B, T, C]
        width = self.weight.shape[-1]
        y = F.conv1d(F.pad(x.transpose(1, 2), (width - 1, 0)), self.weight, groups=self.weight.shape[0])
        return F.silu(y.transpose(1, 2))


def l2norm(x, group):
    """x / sqrt(sum(x^2) + 1e-6) over each run of `group` elements of the last dim."""
    shape = x.shape
    x = x.reshape(*shape[:-1], shape[-1] // group, group)
    return (x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)).reshape(shape)


def householder_recurrence(q, k, v, beta, g, scale):
    """docs/spec.md §1.1. q [B,T,H,K], k [B,T,n,H,K], v [B,T,n,H,V], beta [B,T,n,H], g [B,T,H] or None
    -> o [B,T,H,V]. Per token: S <- e^g S; for each slot j, S <- S + beta_j k_j (v_j - S^T k_j)^T;
    o = scale S^T q. S is [B,H,K,V]; a key as a row [1,K] times S is S^T k."""
    B, T, n, H, K = k.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    k_row = k.unsqueeze(-2)                           # [B,T,n,H,1,K]
    bk_col = (beta.unsqueeze(-1) * k).unsqueeze(-1)   # [B,T,n,H,K,1]
    v_row = v.unsqueeze(-2)                           # [B,T,n,H,1,V]
    out = []
    for t in range(T):
        if g is not None:
            S = S * g[:, t].exp()[..., None, None]
        for j in range(n):
            S = S + bk_col[:, t, j] @ (v_row[:, t, j] - k_row[:, t, j] @ S)
        out.append(q[:, t].unsqueeze(-2) @ S)        # [B,H,1,V]
    return torch.cat(out, -2).transpose(1, 2) * scale


def split_recurrence(q, k, v, beta, g, mask, scale):
    """docs/spec.md §1.2. q, k [B,T,H,K], v [B,T,H,V], beta [B,T,H], g [B,T,H] or None, mask [H,r,r]
    -> o [B,T,H,V]. Per token, with k cut into r slices k^(a) and the state into row blocks S^(a):
    S <- e^g S; P[b] = k^(b)T S^(b); S^(a) <- S^(a) + beta k^(a) (v - sum_b M[a,b] P[b])^T;
    o = scale S^T q. S is [B,H,r,K/r,V]."""
    B, T, H, K = k.shape
    r = mask.shape[-1]
    V = v.shape[-1]
    S = q.new_zeros(B, H, r, K // r, V)
    k_sl = k.reshape(B, T, H, r, 1, K // r)                               # slice rows
    bk_sl = (beta[..., None] * k).reshape(B, T, H, r, K // r, 1)          # beta k^(a) as columns
    out = []
    for t in range(T):
        if g is not None:
            S = S * g[:, t].exp()[..., None, None, None]
        P = (k_sl[:, t] @ S).squeeze(-2)                                 # [B,H,r,V]: P[b] = k^(b)T S^(b)
        U = v[:, t].unsqueeze(-2) - mask @ P                               # [B,H,r,V]: U[a] = v - sum_b M[a,b] P[b]
        S = S + bk_sl[:, t] @ U.unsqueeze(-2)
        out.append(q[:, t].unsqueeze(-2) @ S.reshape(B, H, K, V))        # [B,H,1,V]
    return torch.cat(out, -2).transpose(1, 2) * scale


class GdpAttention(nn.Module):
    """The Gated DeltaProduct layer (docs/spec.md §3), parameters under fla's names."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        D, H, K, Vh, s = config.hidden_size, config.num_heads, config.head_dim, config.head_v_dim, config.slots
        kd, vd = H * K, H * Vh
        self.q_proj = nn.Linear(D, kd, bias=False)
        self.k_proj = nn.Linear(D, s * kd, bias=False)
        self.v_proj = nn.Linear(D, s * vd, bias=False)
        self.b_proj = nn.Linear(D, s * H, bias=False)
        if config.use_forget_gate:
            self.a_proj = nn.Linear(D, H, bias=False)
            self.A_log = nn.Parameter(torch.empty(H))
            self.dt_bias = nn.Parameter(torch.empty(H))
        if config.use_short_conv:
            self.q_conv1d = ShortConv(kd, config.conv_size)
            self.k_conv1d = ShortConv(s * kd, config.conv_size)
            self.v_conv1d = ShortConv(s * vd, config.conv_size)
        if config.mode == "split" and config.split_mask_trainable:
            self.mask = nn.Parameter(torch.empty(H, config.num_householder, config.num_householder))
        if config.use_output_gate:
            self.g_proj = nn.Linear(D, vd, bias=False)
        self.o_norm = RMSNorm(Vh, config.norm_eps)
        self.o_proj = nn.Linear(vd, D, bias=False)

    def forward(self, x):
        c = self.config
        B, T, _ = x.shape
        H, K, Vh, n = c.num_heads, c.head_dim, c.head_v_dim, c.num_householder
        split = c.mode == "split"
        if c.use_short_conv:
            q, k, v = self.q_conv1d(self.q_proj(x)), self.k_conv1d(self.k_proj(x)), self.v_conv1d(self.v_proj(x))
        else:
            q, k, v = F.silu(self.q_proj(x)), F.silu(self.k_proj(x)), F.silu(self.v_proj(x))
        group = K // n if split else K
        q, k = l2norm(q, group), l2norm(k, group)
        beta = torch.sigmoid(self.b_proj(x))
        if c.allow_neg_eigval:
            beta = beta * 2.0
        g = None
        if c.use_forget_gate:
            a = self.a_proj(x).float() + self.dt_bias.float()
            g = -self.A_log.float().exp() * F.softplus(a)

        rdtype = torch.promote_types(x.dtype, torch.float32)  # the state is kept in at least float32
        q = q.reshape(B, T, H, K).to(rdtype)
        if g is not None:
            g = g.to(rdtype)
        scale = K ** -0.5
        if split:
            if c.split_mask_trainable:
                mask = self.mask.to(rdtype)
            else:
                mask = torch.eye(n, dtype=rdtype, device=x.device).expand(H, n, n)
            o = split_recurrence(q, k.reshape(B, T, H, K).to(rdtype), v.reshape(B, T, H, Vh).to(rdtype),
                                 beta.to(rdtype), g, mask, scale)
        else:
            o = householder_recurrence(q, k.reshape(B, T, n, H, K).to(rdtype), v.reshape(B, T, n, H, Vh).to(rdtype),
                                       beta.reshape(B, T, n, H).to(rdtype), g, scale)
        o = o.to(x.dtype)
        gate = self.g_proj(x).reshape(B, T, H, Vh) if c.use_output_gate else None
        o = self.o_norm(o, gate)
        return self.o_proj(o.reshape(B, T, H * Vh))


class GdpMLP(nn.Module):
    """SwiGLU: down_proj(SiLU(gate_proj x) * up_proj x)."""

    def __init__(self, config):
        super().__init__()
        D, inter = config.hidden_size, config.mlp_size
        self.gate_proj = nn.Linear(D, inter, bias=False)
        self.up_proj = nn.Linear(D, inter, bias=False)
        self.down_proj = nn.Linear(inter, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GdpBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.attn = GdpAttention(config)
        self.mlp_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.mlp = GdpMLP(config)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GdpPreTrainedModel(PreTrainedModel):
    config_class = GdpConfig
    base_model_prefix = "model"
    _no_split_modules = ["GdpBlock"]

    @torch.no_grad()
    def _init_weights(self, module):
        """A fresh model as gdp.c initialises one (docs/spec.md §3-4); loading overwrites all of it."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding, ShortConv)):
            module.weight.normal_(0.0, std)
        elif isinstance(module, RMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, GdpAttention):
            if hasattr(module, "A_log"):
                module.A_log.copy_(torch.empty_like(module.A_log).uniform_(0, 16).clamp_(min=1e-4).log())
                dt = torch.exp(torch.empty_like(module.dt_bias).uniform_(math.log(1e-3), math.log(1e-1)))
                dt = dt.clamp(min=1e-4)
                module.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            if hasattr(module, "mask"):
                module.mask.copy_(torch.eye(module.mask.shape[-1]).expand_as(module.mask))

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # no key/value cache: generation runs the whole sequence every step


class GdpModel(GdpPreTrainedModel):
    """The embeddings, the blocks and the final norm: hidden states [B, T, hidden]."""

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([GdpBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings

    def set_input_embeddings(self, value):
        self.embeddings = value

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        if attention_mask is not None and not bool((attention_mask != 0).all()):
            raise ValueError("padding is not supported: attention_mask must be all ones (run prompts of "
                             "different lengths one at a time)")
        x = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        hidden = [x] if output_hidden_states else None
        for layer in self.layers:
            x = layer(x)
            if output_hidden_states:
                hidden.append(x)
        x = self.norm(x)
        if output_hidden_states:
            hidden[-1] = x
        hidden = tuple(hidden) if output_hidden_states else None
        if return_dict is False:
            return (x, hidden) if hidden else (x,)
        return BaseModelOutput(last_hidden_state=x, hidden_states=hidden)


class GdpForCausalLM(GdpPreTrainedModel, GenerationMixin):
    """The language model: logits [B, T, vocab] from the head (the embedding matrix when tied)."""

    def __init__(self, config):
        super().__init__(config)
        self.model = GdpModel(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                         bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embeddings

    def set_input_embeddings(self, value):
        self.model.embeddings = value

    def get_output_embeddings(self):
        return self.lm_head

    def tie_weights(self, *args, **kwargs):
        pass  # a tied head reads model.embeddings.weight directly: nothing to tie

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, inputs_embeds=None, **kwargs):
        """Without a cache every step feeds the whole sequence so far."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """labels [B, T]: the loss is the mean cross-entropy of logits[:, t] against labels[:, t + 1]
        (positions labelled -100 left out), as transformers' causal language models compute it."""
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states)
        x, hidden = out.last_hidden_state, out.hidden_states
        weight = self.model.embeddings.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, weight)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten().to(logits.device),
                                   ignore_index=-100)
        if return_dict is False:
            return tuple(t for t in (loss, logits, hidden) if t is not None)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=hidden)


class GdpForTokenClassification(GdpPreTrainedModel):
    """A label at every position (gdp tasks' models): logits [B, T, num_labels] from classifier.weight."""

    def __init__(self, config):
        super().__init__(config)
        self.model = GdpModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def tie_weights(self, *args, **kwargs):
        pass  # the classifier is a weight of its own: nothing to tie

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """labels [B, T]: the mean cross-entropy over the positions (-100 left out)."""
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states)
        x, hidden = out.last_hidden_state, out.hidden_states
        logits = self.classifier(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten().to(logits.device), ignore_index=-100)
        if return_dict is False:
            return tuple(t for t in (loss, logits, hidden) if t is not None)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=hidden)
