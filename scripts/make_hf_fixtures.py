#!/usr/bin/env python3
"""Writes tiny Hugging Face model folders with reference values for strata's C++ tests.

Each folder under --out (default tests/fixtures/hf) is laid out as save_pretrained lays it out:
config.json as transformers writes it for that model_type, model.safetensors (or shards with
model.safetensors.index.json) under HF's tensor names and layouts, and reference.safetensors:

  input_ids           I32 [B, T]     random tokens (B = 2, T = 8)
  logits              F32 [B, T, V]  the forward computed in float64 from the stored weights
                                     (after their rounding to the file's dtype), then stored F32
  loss                F32 [1]        mean next-token cross-entropy over positions 0..T-2
                                     predicting input_ids[:, 1:] (HF's labels=input_ids)
  grad:<hf name>      F32            d loss / d that weight, float64 then stored F32
  inv_freq            F32 [hd / 2]   Llama family only: the rotary inverse frequencies as
                                     transformers' rotary embedding holds them (fp32)
  adamw:<hf name>     F32            every parameter after ADAMW_STEPS steps of torch.optim.AdamW
                                     (lr ADAMW_LR, betas (0.9, 0.999), eps ADAMW_EPS, weight decay
                                     ADAMW_DECAY on every parameter, one group, as DeepSpeed and
                                     strata apply it) on the same batch, in float64, no clipping

Folders: gpt2 (F32, transformer. prefix, the old causal-mask buffers), gpt2_noprefix (the same
weights in F16 under the Hub's openai-community/gpt2 names), llama (BF16, GQA, untied head),
llama3 (F32, tied, llama3 rope_scaling), qwen2 (F32, q/k/v biases), mistral (F32, the
rope_parameters form of the rope settings), llama_sharded (llama's weights in two shards).

The forwards are written by hand in torch, mirroring transformers' modeling code (each part
names the HF function it follows), so neither transformers nor safetensors is needed: the
safetensors files are written by the format's letter, and read back to check them.

Regenerate with `python3 scripts/make_hf_fixtures.py` (needs Debian's python3-torch and
python3-numpy); the output is deterministic. The C++ tests only read the committed files.
"""

import argparse
import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import torch

B, T = 2, 8
# eps 1e-4, not AdamW's usual 1e-8: with 1e-8 a gradient near zero makes m / (sqrt(v) + eps)
# amplify fp32 rounding (torch's own fp32 run then differs from its float64 run by 2e-3 after 5
# steps, past any tolerance), while 1e-4 keeps fp32 within 4e-7 of float64.
ADAMW_STEPS, ADAMW_LR, ADAMW_EPS, ADAMW_DECAY = 5, 1e-3, 1e-4, 0.1

# ---------------------------------------------------------------------------------------------
# safetensors, by the format's letter
# ---------------------------------------------------------------------------------------------

# safetensors dtype -> (torch dtype, numpy dtype of the same width used for the raw bytes)
DTYPES = {
    "F64": (torch.float64, np.float64),
    "F32": (torch.float32, np.float32),
    "F16": (torch.float16, np.float16),
    "BF16": (torch.bfloat16, np.int16),  # numpy has no bfloat16: move its bits as int16
    "I64": (torch.int64, np.int64),
    "I32": (torch.int32, np.int32),
}
TORCH_TO_ST = {torch_dtype: name for name, (torch_dtype, _) in DTYPES.items()}


def tensor_bytes(tensor):
    _, np_dtype = DTYPES[TORCH_TO_ST[tensor.dtype]]
    t = tensor.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().astype(np_dtype, copy=False).tobytes()


def read_safetensors(path):
    """Returns ({name: tensor}, metadata or None)."""
    raw = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length].decode("utf-8"))
    data = raw[8 + length :]
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        torch_dtype, np_dtype = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np_dtype).copy()
        t = torch.from_numpy(array)
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        tensors[name] = t.reshape(entry["shape"])
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """8-byte little-endian header length, the JSON header padded with spaces to a multiple of 8,
    then the tensors' little-endian bytes (in name order). Asserts the file reads back the same."""
    assert sys.byteorder == "little"
    header, chunks, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {
            "dtype": TORCH_TO_ST[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        chunks.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))

    back, back_metadata = read_safetensors(path)
    assert back_metadata == metadata, path
    assert sorted(back) == sorted(tensors), path
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, (path, name)
        assert torch.equal(back[name], t.detach()), (path, name)


def write_json(path, value):
    # PretrainedConfig.to_json_string: json.dumps(..., indent=2, sort_keys=True) + "\n"
    Path(path).write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


def normal(gen, shape, std):
    return torch.randn(shape, generator=gen, dtype=torch.float64) * std


def linear_weight(gen, out_features, in_features):
    # Larger than HF's 0.02 init so that attention and the nonlinearities do real work.
    return normal(gen, (out_features, in_features), 1.0 / math.sqrt(in_features))


def norm_weight(gen, n):
    return 1.0 + normal(gen, (n,), 0.1)


def bias(gen, n):
    return normal(gen, (n,), 0.1)


def gpt2_weights(cfg, gen):
    """GPT2LMHeadModel's parameters under names without the transformer. prefix. Conv1D keeps
    its weight as [in, out]; c_attn's output is q, k, v concatenated."""
    d, v, p = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    w = {"wte.weight": normal(gen, (v, d), 0.3), "wpe.weight": normal(gen, (p, d), 0.2)}
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        w[h + "ln_1.weight"], w[h + "ln_1.bias"] = norm_weight(gen, d), bias(gen, d)
        w[h + "attn.c_attn.weight"] = linear_weight(gen, 3 * d, d).T.contiguous()
        w[h + "attn.c_attn.bias"] = bias(gen, 3 * d)
        w[h + "attn.c_proj.weight"] = linear_weight(gen, d, d).T.contiguous()
        w[h + "attn.c_proj.bias"] = bias(gen, d)
        w[h + "ln_2.weight"], w[h + "ln_2.bias"] = norm_weight(gen, d), bias(gen, d)
        w[h + "mlp.c_fc.weight"] = linear_weight(gen, 4 * d, d).T.contiguous()
        w[h + "mlp.c_fc.bias"] = bias(gen, 4 * d)
        w[h + "mlp.c_proj.weight"] = linear_weight(gen, d, 4 * d).T.contiguous()
        w[h + "mlp.c_proj.bias"] = bias(gen, d)
    w["ln_f.weight"], w["ln_f.bias"] = norm_weight(gen, d), bias(gen, d)
    return w


def llama_weights(cfg, gen, qkv_bias=False):
    """LlamaForCausalLM's (and Mistral's, Qwen2's) parameters: nn.Linear weights [out, in];
    q_proj has num_attention_heads * head_dim rows, k_proj and v_proj num_key_value_heads *
    head_dim, head h at rows h * head_dim .. (h + 1) * head_dim."""
    d, v, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    hd = d // cfg["num_attention_heads"]
    q_rows, kv_rows = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    w = {"model.embed_tokens.weight": normal(gen, (v, d), 0.3)}
    for i in range(cfg["num_hidden_layers"]):
        l = f"model.layers.{i}."
        w[l + "input_layernorm.weight"] = norm_weight(gen, d)
        for name, rows in (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)):
            w[l + f"self_attn.{name}.weight"] = linear_weight(gen, rows, d)
            if qkv_bias:
                w[l + f"self_attn.{name}.bias"] = bias(gen, rows)
        w[l + "self_attn.o_proj.weight"] = linear_weight(gen, d, q_rows)
        w[l + "post_attention_layernorm.weight"] = norm_weight(gen, d)
        w[l + "mlp.gate_proj.weight"] = linear_weight(gen, ff, d)
        w[l + "mlp.up_proj.weight"] = linear_weight(gen, ff, d)
        w[l + "mlp.down_proj.weight"] = linear_weight(gen, d, ff)
    w["model.norm.weight"] = norm_weight(gen, d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = normal(gen, (v, d), 0.3)
    return w


# ---------------------------------------------------------------------------------------------
# GPT-2 forward (transformers/models/gpt2/modeling_gpt2.py), float64
# ---------------------------------------------------------------------------------------------


def gelu_new(x):
    # activations.NewGELUActivation ("gelu_new"): GELU's tanh approximation.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def conv1d(x, weight, b):
    # pytorch_utils.Conv1D.forward: x @ weight + bias, weight stored [in, out].
    return x @ weight + b


def gpt2_forward(w, ids, cfg, prefix=""):
    """GPT2LMHeadModel.forward; `w` maps HF names (with `prefix`) to float64 tensors."""
    P = lambda name: w[prefix + name]  # noqa: E731
    eps, n_head = cfg["layer_norm_epsilon"], cfg["n_head"]
    d = cfg["n_embd"]
    hd = d // n_head
    bsz, seq = ids.shape

    def ln(x, n):  # nn.LayerNorm(n_embd, eps=layer_norm_epsilon)
        return torch.nn.functional.layer_norm(x, (d,), P(n + ".weight"), P(n + ".bias"), eps)


    # GPT2Model.forward: inputs_embeds + position_embeds (position_ids = arange(T)).
    x = P("wte.weight")[ids.long()] + P("wpe.weight")[torch.arange(seq)]
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        # GPT2Block.forward: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
        a = ln(x, h + "ln_1")
        qkv = conv1d(a, P(h + "attn.c_attn.weight"), P(h + "attn.c_attn.bias"))
        # GPT2Attention.forward: c_attn(...).split(n_embd, dim=2); _split_heads -> [B, H, T, hd].
        q, k, v = (t.view(bsz, seq, n_head, hd).transpose(1, 2) for t in qkv.split(d, dim=2))
        # GPT2Attention._attn: scores / sqrt(hd) (scale_attn_weights), causal mask, softmax.
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1) @ v
        # GPT2Attention._merge_heads, then c_proj.
        attn = attn.transpose(1, 2).reshape(bsz, seq, d)
        x = x + conv1d(attn, P(h + "attn.c_proj.weight"), P(h + "attn.c_proj.bias"))
        m = ln(x, h + "ln_2")
        # GPT2MLP.forward: c_proj(act(c_fc(x))), act = gelu_new.
        m = gelu_new(conv1d(m, P(h + "mlp.c_fc.weight"), P(h + "mlp.c_fc.bias")))
        x = x + conv1d(m, P(h + "mlp.c_proj.weight"), P(h + "mlp.c_proj.bias"))
    x = ln(x, "ln_f")
    # GPT2LMHeadModel: lm_head tied to wte.
    return x @ P("wte.weight").T


# ---------------------------------------------------------------------------------------------
# Llama / Mistral / Qwen2 forward (transformers/models/llama/modeling_llama.py), float64
# ---------------------------------------------------------------------------------------------


def rope_settings(cfg):
    """(rope_theta, rope_scaling dict or None) from either form: the top-level rope_theta and
    rope_scaling, or the newer rope_parameters dict holding rope_theta and the type."""
    if isinstance(cfg.get("rope_parameters"), dict):
        params = cfg["rope_parameters"]
        return params["rope_theta"], params
    return cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling")


def rope_inv_freq(cfg):
    """The fp32 inv_freq buffer of LlamaRotaryEmbedding, computed as transformers does."""
    theta, scaling = rope_settings(cfg)
    dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    # modeling_rope_utils._compute_default_rope_parameters (fp32, as HF's buffer is).
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rope_type = "default" if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if rope_type == "default":
        return inv_freq
    assert rope_type == "llama3", rope_type
    # modeling_rope_utils._compute_llama3_parameters.
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # wavelen < high_freq_wavelen: unchanged; wavelen > low_freq_wavelen: divided by factor.
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # In between: a smooth interpolation of the two.
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rms_norm(x, weight, eps):
    # LlamaRMSNorm.forward: variance in float32 (here float64), weight * x * rsqrt(var + eps).
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    # modeling_llama.rotate_half
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    # modeling_llama.apply_rotary_pos_emb, unsqueeze_dim=1 (cos, sin: [B, T, hd] -> [B, 1, T, hd])
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    # modeling_llama.repeat_kv: kv head j serves query heads j * n_rep .. (j + 1) * n_rep - 1.
    bsz, n_kv, seq, hd = x.shape
    return x[:, :, None].expand(bsz, n_kv, n_rep, seq, hd).reshape(bsz, n_kv * n_rep, seq, hd)


def llama_forward(w, ids, cfg):
    """LlamaForCausalLM.forward (MistralForCausalLM and Qwen2ForCausalLM are the same here:
    Mistral's sliding_window is null, Qwen2 adds the q/k/v biases when the file has them)."""
    d, n_head, n_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // n_head, cfg["rms_norm_eps"]
    bsz, seq = ids.shape

    def lin(x, n):  # nn.Linear: x W^T (+ b where the file has the bias)
        return x @ w[n + ".weight"].T + (w[n + ".bias"] if n + ".bias" in w else 0)


    # LlamaRotaryEmbedding.forward: freqs = inv_freq (fp32 buffer) x positions, emb = cat(freqs,
    # freqs), cos and sin (attention_scaling is 1 for default and llama3); here in float64.
    inv_freq = rope_inv_freq(cfg).double()
    freqs = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None].expand(bsz, -1, -1), emb.sin()[None].expand(bsz, -1, -1)
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))

    x = w["model.embed_tokens.weight"][ids.long()]
    for i in range(cfg["num_hidden_layers"]):
        l = f"model.layers.{i}."
        # LlamaDecoderLayer.forward: x + self_attn(input_layernorm(x)),
        # then x + mlp(post_attention_layernorm(x)).
        a = rms_norm(x, w[l + "input_layernorm.weight"], eps)
        # LlamaAttention.forward: view(B, T, -1, head_dim).transpose(1, 2).
        q = lin(a, l + "self_attn.q_proj").view(bsz, seq, n_head, hd).transpose(1, 2)
        k = lin(a, l + "self_attn.k_proj").view(bsz, seq, n_kv, hd).transpose(1, 2)
        v = lin(a, l + "self_attn.v_proj").view(bsz, seq, n_kv, hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        # eager_attention_forward: repeat_kv, q k^T * head_dim**-0.5, causal mask, softmax, @ v.
        k, v = repeat_kv(k, n_head // n_kv), repeat_kv(v, n_head // n_kv)
        scores = (q @ k.transpose(2, 3)) * hd**-0.5
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(bsz, seq, n_head * hd)
        x = x + lin(attn, l + "self_attn.o_proj")
        m = rms_norm(x, w[l + "post_attention_layernorm.weight"], eps)
        # LlamaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn = silu.
        m = torch.nn.functional.silu(lin(m, l + "mlp.gate_proj")) * lin(m, l + "mlp.up_proj")
        x = x + lin(m, l + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


# ---------------------------------------------------------------------------------------------
# Reference values
# ---------------------------------------------------------------------------------------------


def reference(forward, stored, ids, grad_names, extra=None):
    """Runs `forward` in float64 on the stored (already rounded) weights; returns the tensors of
    reference.safetensors."""
    w = {name: t.double().requires_grad_(True) for name, t in stored.items()}
    logits = forward(w, ids)
    # The loss of *ForCausalLM with labels=input_ids (loss_utils.ForCausalLMLoss): shift by one,
    # cross-entropy averaged over the B * (T - 1) predicted positions.
    vocab = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1).long()
    )
    loss.backward()
    out = {
        "input_ids": ids,
        "logits": logits.detach().float(),
        "loss": loss.detach().float().reshape(1),
    }
    for name in grad_names:
        out["grad:" + name] = w[name].grad.float()
    out.update(extra or {})
    for name, value in adamw_steps(forward, stored, ids).items():
        out["adamw:" + name] = value
    return out, loss.item()


def causal_lm_loss(logits, ids):
    vocab = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1).long()
    )


def adamw_steps(forward, stored, ids):
    """Every parameter after ADAMW_STEPS steps of torch.optim.AdamW on the batch `ids`, in
    float64, with one parameter group: weight decay on every tensor, as DeepSpeed's optimizer
    applies it to model.parameters() and strata to every parameter."""
    w = {name: t.double().clone().requires_grad_(True) for name, t in stored.items()}
    optimizer = torch.optim.AdamW(list(w.values()), lr=ADAMW_LR, betas=(0.9, 0.999),
                                  eps=ADAMW_EPS, weight_decay=ADAMW_DECAY)
    for _ in range(ADAMW_STEPS):
        optimizer.zero_grad()
        causal_lm_loss(forward(w, ids), ids).backward()
        optimizer.step()
    return {name: t.detach().float() for name, t in w.items()}


def write_folder(folder, config, stored, ref, shards=None):
    """Writes config.json, the weights (one model.safetensors, or `shards`: a list of name lists,
    one per file, with model.safetensors.index.json) and reference.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", config)
    metadata = {"format": "pt"}  # what save_pretrained puts in __metadata__
    if shards is None:
        write_safetensors(folder / "model.safetensors", stored, metadata)
    else:
        assert sorted(sum(shards, [])) == sorted(stored)
        weight_map, total = {}, 0
        for i, names in enumerate(shards):
            file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(folder / file, {n: stored[n] for n in names}, metadata)
            for n in names:
                weight_map[n] = file
                total += stored[n].numel() * stored[n].element_size()
        # modeling_utils.save_pretrained: {"metadata": {"total_size": bytes}, "weight_map": ...}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_json(folder / "model.safetensors.index.json", index)
    write_safetensors(folder / "reference.safetensors", ref)


def random_ids(gen, vocab):
    return torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int64).to(torch.int32)


# ---------------------------------------------------------------------------------------------
# The fixtures
# ---------------------------------------------------------------------------------------------


def gpt2_config(vocab, n_embd, n_head, n_layer, n_positions):
    # GPT2Config as transformers 4.30 saved it (the last versions whose GPT-2 kept the attn.bias
    # and attn.masked_bias buffers in the state dict).
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": vocab - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": vocab - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_embd": n_embd,
        "n_head": n_head,
        "n_inner": None,
        "n_layer": n_layer,
        "n_positions": n_positions,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": "4.30.2",
        "use_cache": True,
        "vocab_size": vocab,
    }


def make_gpt2(out):
    gen = torch.Generator().manual_seed(2)
    cfg = gpt2_config(vocab=80, n_embd=24, n_head=4, n_layer=2, n_positions=16)
    weights = gpt2_weights(cfg, gen)
    ids = random_ids(gen, cfg["vocab_size"])
    forward = lambda w, i: gpt2_forward(w, i, cfg)  # noqa: E731
    grads = ["wte.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.0.ln_1.weight",
             "ln_f.weight"]
    n = cfg["n_positions"]
    mask = torch.tril(torch.ones(n, n, dtype=torch.float32)).view(1, 1, n, n)
    results = {}

    # gpt2: F32 under GPT2LMHeadModel's state-dict names (transformer. prefix, lm_head tied and
    # so absent), with the old non-parameter buffers: attn.bias, the causal mask [1, 1, n, n],
    # and attn.masked_bias, the scalar -1e4.
    params = {"transformer." + k: t.float() for k, t in weights.items()}
    stored = dict(params)
    for i in range(cfg["n_layer"]):
        stored[f"transformer.h.{i}.attn.bias"] = mask
        stored[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
    forward_prefixed = lambda w, i: gpt2_forward(w, i, cfg, "transformer.")  # noqa: E731
    ref, loss = reference(forward_prefixed, params, ids, ["transformer." + g for g in grads])
    write_folder(out / "gpt2", cfg, stored, ref)
    results["gpt2"] = loss

    # gpt2_noprefix: the same weights in F16 under GPT2Model's names, as the Hub's
    # openai-community/gpt2 model.safetensors has them (h.N.attn.bias kept, no masked_bias).
    cfg16 = dict(cfg, torch_dtype="float16")
    params16 = {k: t.half() for k, t in weights.items()}
    stored16 = dict(params16)
    for i in range(cfg["n_layer"]):
        stored16[f"h.{i}.attn.bias"] = mask.half()
    ref, loss = reference(forward, params16, ids, grads)
    write_folder(out / "gpt2_noprefix", cfg16, stored16, ref)
    results["gpt2_noprefix"] = loss
    return results


def llama_config(architecture, model_type, vocab, hidden, heads, kv_heads, ff, **extra):
    # LlamaConfig (and MistralConfig, Qwen2Config) as transformers 4.46 saves it.
    cfg = {
        "architectures": [architecture],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": ff,
        "max_position_embeddings": 64,
        "model_type": model_type,
        "num_attention_heads": heads,
        "num_hidden_layers": 2,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if model_type == "llama":
        cfg.update(attention_bias=False, head_dim=hidden // heads, mlp_bias=False, pretraining_tp=1)
    cfg.update(extra)
    return cfg


def llama_grads(cfg, qkv_bias=False):
    names = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.norm.weight",
    ]
    if qkv_bias:
        names += ["model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.v_proj.bias"]
    if not cfg["tie_word_embeddings"]:
        names.append("lm_head.weight")
    return names


def make_llama_family(name, cfg, seed, dtype, out, qkv_bias=False):
    """Writes folder `name` for a Llama-family config; returns (stored weights, reference, loss)."""
    gen = torch.Generator().manual_seed(seed)
    stored = {k: t.to(dtype) for k, t in llama_weights(cfg, gen, qkv_bias).items()}
    ids = random_ids(gen, cfg["vocab_size"])
    extra = {"inv_freq": rope_inv_freq(cfg).float()}
    forward = lambda w, i: llama_forward(w, i, cfg)  # noqa: E731
    ref, loss = reference(forward, stored, ids, llama_grads(cfg, qkv_bias), extra)
    write_folder(out / name, cfg, stored, ref)
    return stored, ref, loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/fixtures/hf",
                        help="output folder (default %(default)s)")
    out = Path(parser.parse_args().out)
    torch.use_deterministic_algorithms(True)
    for name in ("gpt2", "gpt2_noprefix", "llama", "llama3", "qwen2", "mistral", "llama_sharded"):
        shutil.rmtree(out / name, ignore_errors=True)
    losses = make_gpt2(out)

    # llama: BF16, GQA 4 query heads over 2 kv heads, untied head, rope_theta 10000.
    llama = llama_config("LlamaForCausalLM", "llama", vocab=64, hidden=32, heads=4, kv_heads=2,
                         ff=64, torch_dtype="bfloat16")
    stored, ref, losses["llama"] = make_llama_family("llama", llama, 3, torch.bfloat16, out)
    # llama_sharded: the same weights and reference, the embedding and layer 0 in the first
    # shard, layer 1, the final norm and lm_head in the second.
    first = sorted(n for n in stored if n.startswith(("model.embed_tokens.", "model.layers.0.")))
    second = sorted(n for n in stored if n not in first)
    write_folder(out / "llama_sharded", llama, stored, ref, shards=[first, second])
    losses["llama_sharded"] = losses["llama"]

    # llama3: F32, tied embeddings, Llama 3.1's rope_scaling. With head_dim 8 and rope_theta
    # 500000 the wavelengths 2 pi / inv_freq are 6.3, 167, 4443 and 118600 positions; with
    # original_max_position_embeddings 256 (high_freq_wavelen 64, low_freq_wavelen 256) the first
    # stays, the second is interpolated and the last two are divided by the factor 8, so all
    # three branches of _compute_llama3_parameters act. max_position_embeddings is 8 times the
    # original, as in Llama 3.1's own config.
    llama3 = llama_config(
        "LlamaForCausalLM", "llama", vocab=64, hidden=32, heads=4, kv_heads=2, ff=64,
        bos_token_id=60, eos_token_id=61, max_position_embeddings=2048, rope_theta=500000.0,
        tie_word_embeddings=True,
        rope_scaling={
            "factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 256, "rope_type": "llama3",
        },
    )
    _, _, losses["llama3"] = make_llama_family("llama3", llama3, 4, torch.float32, out)
    plain = dict(llama3, rope_scaling=None)
    changed = (rope_inv_freq(llama3) != rope_inv_freq(plain)).sum().item()
    assert changed == 3, changed  # all but the highest frequency

    # qwen2: F32, q/k/v biases (o_proj none), GQA 4 over 1, untied. use_sliding_window false
    # with a sliding_window number, as the Qwen2 configs on the Hub have.
    qwen2 = llama_config(
        "Qwen2ForCausalLM", "qwen2", vocab=80, hidden=32, heads=4, kv_heads=1, ff=48,
        max_window_layers=2, rms_norm_eps=1e-06, rope_theta=1000000.0, sliding_window=4096,
        use_sliding_window=False,
    )
    _, _, losses["qwen2"] = make_llama_family("qwen2", qwen2, 5, torch.float32, out, qkv_bias=True)

    # mistral: F32, GQA 8 over 2 (head_dim 4), sliding_window null, and the rope settings in the
    # rope_parameters form that transformers 5 writes (no top-level rope_theta or rope_scaling;
    # "dtype" in place of "torch_dtype").
    mistral = llama_config("MistralForCausalLM", "mistral", vocab=72, hidden=32, heads=8,
                           kv_heads=2, ff=56, head_dim=4, sliding_window=None,
                           transformers_version="5.0.0")
    del mistral["rope_theta"], mistral["rope_scaling"], mistral["torch_dtype"]
    mistral.update(dtype="float32", rope_parameters={"rope_theta": 10000.0, "rope_type": "default"})
    _, _, losses["mistral"] = make_llama_family("mistral", mistral, 6, torch.float32, out)

    for name, loss in losses.items():
        size = sum(f.stat().st_size for f in (out / name).iterdir())
        print(f"{name:14s} loss {loss:.6f}  {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
