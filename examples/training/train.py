#!/usr/bin/python3
"""Trains the demo's model pair on this machine's C and C++ headers (issue #26; CPU, no downloads).

  /usr/bin/python3 examples/training/train.py [--config full|smoke] [--out DIR] [--stages ...] [--init DIR]

Stages, in order (each reads what the earlier ones wrote to --out):
  target      a byte-level LLaMA-style target (RMSNorm, RoPE rotate-half, GQA, SwiGLU, vocabulary 256),
              the architecture of examples/common/llama.hpp, trained from scratch on 512-byte windows;
  long        the target continued on 4K windows with the RoPE base raised to 5e5 (adjusted base frequency);
  long16      the target continued on 16K windows (attention blocks recomputed in the backward pass), so it
              keeps its held-out bits per byte to 16K of context;
  draft       a one-layer LongSpec draft (LongSpec §3.1: sliding-window self-attention, cache-free
              cross-attention into the target's last-layer KV, SwiGLU; the target's embedding, final norm
              and LM head shared and frozen), the architecture of examples/common/longspec_draft.hpp,
              trained with anchor-offset indices (§3.2, Algorithm 1) and flash noisy training (§3.2,
              Algorithm 2), the target frozen;
  ablation    the same draft trained with vanilla indices 0..n-1 (LongSpec Table 2's question);
  heads       TokenSwift residual heads (TokenSwift §3.2, Eq. 1, identity activation, as
              examples/common/tokenswift_draft.hpp runs them) on the frozen target's final-normed state.
--init DIR starts the drafts and heads from DIR's files (an earlier run) instead of random weights.

Data: every regular file under /usr/include/c++/<newest version>/ (the C++ standard library) and every
/usr/include/*.h (the C headers), minus HELD_OUT, which is only evaluated. Outputs (fp16 safetensors,
Hugging Face LLaMA names for the target so llama.hpp's loader reads them; the model geometry and the
training facts in the metadata): target.safetensors, longspec_draft.safetensors,
longspec_draft_vanilla.safetensors, and train_log.json with losses and held-out bits per byte.
Each file carries check tensors (a token sequence and the fp32 logits PyTorch computes from the fp16
weights) that tests/examples/test_trained_pair.cpp compares with the C++ models.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys
import time



def openblas_coretype_from_flags():
    """OpenBLAS picks its kernels from CPUID's family and model, and some hypervisors hide them: on a 2-core
    AVX-512 Xeon VM it reported "Prescott" (SSE3) and multiplied 2048^2 fp32 matrices at 26 GFLOP/s, against
    197 with OPENBLAS_CORETYPE=SKYLAKEX. So, unless the user has set it, name the kernel set from the CPU's
    feature flags (a set the CPU supports is always correct) before torch loads OpenBLAS."""
    if "OPENBLAS_CORETYPE" in os.environ or not os.path.exists("/proc/cpuinfo"):
        return
    with open("/proc/cpuinfo") as f:
        flags = next((set(l.split(":", 1)[1].split()) for l in f if l.startswith("flags")), set())
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SKYLAKEX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "HASWELL"


openblas_coretype_from_flags()
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specdec_indices as idx  # noqa: E402

# Held out of training, evaluated only (paths relative to the C++ include directory, or absolute).
HELD_OUT = ["bits/stl_list.h", "bits/stl_deque.h", "bits/stl_queue.h", "bits/stl_heap.h", "bits/stl_numeric.h",
            "/usr/include/stdio.h"]

CONFIGS = {
    # ~1 hour on 2 cores (see the README of examples/training for the measured times).
    "full": dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=768, seq=512, batch=16,
                 target_steps=800, lr=2e-3, eval_windows=48, max_len=32768,
                 long_seq=4096, long_batch=2, long_steps=180, long_lr=1e-3, long_theta=500000.0,
                 long16_seq=16384, long16_steps=24, long16_lr=5e-4,
                 draft_seq=4096, draft_batch=2, draft_steps=100, draft_lr=2e-3,
                 heads_seq=1024, heads_batch=8, heads_steps=100,
                 eval_contexts=[512, 1024, 2048, 4096, 8192, 16384], context_at=20000, context_span=256,
                 long_eval_windows=3, long_eval_tail=1024),
    # a few steps, for the test that keeps this script from rotting
    "smoke": dict(hidden=128, layers=2, heads=2, kv_heads=1, head_dim=64, ffn=128, seq=64, batch=2,
                  target_steps=3, lr=1e-3, eval_windows=2, max_len=1024,
                  long_seq=128, long_batch=2, long_steps=3, long_lr=1e-3, long_theta=50000.0,
                  long16_seq=256, long16_steps=2, long16_lr=1e-3,
                  draft_seq=96, draft_batch=2, draft_steps=3, draft_lr=1e-3,
                  heads_seq=64, heads_batch=2, heads_steps=3,
                  eval_contexts=[32, 128], context_at=20000, context_span=16, long_eval_windows=1,
                  long_eval_tail=32, attend_block=32, checkpoint_rows=128, window=48),
}
ROPE_THETA = 10000.0  # the short stage's RoPE base; the long stage raises it to c["long_theta"]
ATTEND_BLOCK = 1024   # query rows per block in attend()
CHECKPOINT_ROWS = 8192  # windows this long recompute attention scores in the backward pass
NORM_EPS = 1e-6
WINDOW = 512       # LongSpec's sliding window (§3.1)
GAMMA = 5          # Algorithm 2: j = RandomInt(1, 4), i.e. [1, gamma) with gamma = 5 (a depth-4 chain)
NUM_HEADS_TS = 3   # TokenSwift residual heads (gamma of TokenSwift §3.2)
SEED = 20261126


# ---------------------------------------------------------------------------------------------- data
def cxx_include_dir():
    dirs = [d for d in glob.glob("/usr/include/c++/*") if os.path.basename(d).isdigit()]
    if not dirs:
        raise SystemExit("train.py: no /usr/include/c++/<version> directory (install g++)")
    return max(dirs, key=lambda d: int(os.path.basename(d)))


def held_out_paths():
    base = cxx_include_dir()
    return [p if p.startswith("/") else os.path.join(base, p) for p in HELD_OUT]


def corpus():
    held = set(os.path.realpath(p) for p in held_out_paths())
    files = sorted(p for p in glob.glob(os.path.join(cxx_include_dir(), "**"), recursive=True) if os.path.isfile(p))
    files += sorted(glob.glob("/usr/include/*.h"))
    train, test = [], []
    for p in files:
        with open(p, "rb") as f:
            data = f.read()
        (test if os.path.realpath(p) in held else train).append(data)
    for p in held:
        if not os.path.exists(p):
            raise SystemExit(f"train.py: held-out file {p} is missing")
    return torch.tensor(list(b"\n".join(train)), dtype=torch.long), [torch.tensor(list(d), dtype=torch.long) for d in test]


def batch(data, n, seq, gen):
    starts = torch.randint(0, data.numel() - seq - 1, (n,), generator=gen)
    x = torch.stack([data[s:s + seq + 1] for s in starts.tolist()])
    return x[:, :-1], x[:, 1:]


# --------------------------------------------------------------------------------------------- model
def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def rope(x, pos, theta):
    """Rotate-half RoPE (specdec::rope_style::rotate_half) of x [B, T, heads, D] at positions pos [B, T]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (pos.to(torch.float64)[..., None] * inv).to(torch.float32)  # [B, T, D/2]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, :, None, :], torch.cat([ang.sin()] * 2, -1)[:, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Visibility:
    """A [B or 1, T, S] boolean mask (True = visible), prepared once per forward and shared by its layers: the
    additive bias attend() adds to the scores (0 or -inf, [B or 1, 1, T, S]), the key range each block of
    ATTEND_BLOCK query rows can see (a causal, windowed or shifted mask skips the keys above its diagonal:
    5/8 of the work of a 4K window in blocks of 1K), and whether some row sees no key at all."""

    def __init__(self, mask):
        seen = mask.any(-1, keepdim=True)  # [B or 1, T, 1]
        # a row that sees no key gets a zero bias (finite scores) and a zero output: -inf everywhere would
        # make its softmax NaN, and the NaN would reach the gradients of q and k through the product
        self.bias = torch.zeros(mask.shape).masked_fill_(~mask & seen, float("-inf"))[:, None]
        self.row_ok = seen.float()[:, None] if not bool(seen.all()) else None
        self.blocks = []
        for t0 in range(0, mask.shape[1], ATTEND_BLOCK):
            t1 = min(mask.shape[1], t0 + ATTEND_BLOCK)
            cols = mask[:, t0:t1].any(1).any(0).nonzero()
            k0, k1 = (int(cols[0]), int(cols[-1]) + 1) if cols.numel() else (0, 1)
            self.blocks.append((t0, t1, k0, k1))


def attend(q, k, v, vis):
    """q [B, T, Hq, D], k/v [B, S, Hkv, D] (GQA: query head h reads kv head h // (Hq / Hkv)), vis a Visibility.
    Rows without a visible key give 0 (Algorithm 2's zero padding). The queries go in blocks (Visibility), each
    against the keys it can see; q is scaled before the product and the mask added in place, since a 4K
    window's scores are 0.5 GB per layer and every extra pass over them shows in the step time."""
    g = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2) * (1.0 / math.sqrt(q.shape[-1]))
    kt = k.repeat_interleave(g, 2).permute(0, 2, 3, 1)  # [B, Hq, D, S]
    vh = v.repeat_interleave(g, 2).transpose(1, 2)      # [B, Hq, S, D]
    out = []
    def block(qb, kb, vb, bias):
        s = torch.matmul(qb, kb)
        s.add_(bias)
        return torch.matmul(torch.softmax(s, -1), vb)
    # above CHECKPOINT_ROWS rows, each block's scores are recomputed in the backward pass instead of kept
    # (a 16K window would keep 2 x 2 GB per layer): ~1.3x the time, a block's memory
    ckpt = torch.is_grad_enabled() and q.shape[1] >= CHECKPOINT_ROWS
    for t0, t1, k0, k1 in vis.blocks:
        args = (qh[:, :, t0:t1], kt[..., k0:k1], vh[:, :, k0:k1], vis.bias[:, :, t0:t1, k0:k1])
        o = torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False) if ckpt else block(*args)
        if vis.row_ok is not None:
            o = o * vis.row_ok[:, :, t0:t1]
        out.append(o)
    o = out[0] if len(out) == 1 else torch.cat(out, 2)
    return o.transpose(1, 2)


def causal_mask(t, window=None):
    """[1, t, t] causal mask; with a window W, query t sees keys t - W .. t: the W tokens before it and itself,
    as the C++ draft does (its ring holds the W newest committed tokens, and the token attends to those and
    to itself before it enters the ring; specdec::sliding_window_attention)."""
    i = torch.arange(t)
    m = i[None, :] <= i[:, None]
    if window is not None:
        m &= i[None, :] >= i[:, None] - window
    return m[None]


def param(*shape, scale=None):
    w = torch.empty(*shape)
    if len(shape) == 1:
        w.fill_(1.0)
    else:
        torch.nn.init.normal_(w, std=scale if scale is not None else shape[1] ** -0.5)
    return torch.nn.Parameter(w)


class Target(torch.nn.Module):
    """examples/common/llama.hpp's model (Hugging Face LLaMA names in state_dict order)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        H, D, Hq, Hkv, Fh = c["hidden"], c["head_dim"], c["heads"], c["kv_heads"], c["ffn"]
        self.embed = param(256, H, scale=1.0)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["layers"]):
            L = torch.nn.Module()
            L.attn_norm, L.wq, L.wk, L.wv = param(H), param(Hq * D, H), param(Hkv * D, H), param(Hkv * D, H)
            L.wo = param(H, Hq * D, scale=(Hq * D) ** -0.5 / math.sqrt(2 * c["layers"]))
            L.ffn_norm, L.w_gate, L.w_up = param(H), param(Fh, H), param(Fh, H)
            L.w_down = param(H, Fh, scale=Fh ** -0.5 / math.sqrt(2 * c["layers"]))
            self.layers.append(L)
        self.final_norm, self.lm_head = param(H), param(256, H)
        self.theta = ROPE_THETA  # RoPE base, raised by the long stage (saved as the rope_theta metadata)

    def forward(self, tokens, pos, want_kv=False):
        """Returns (final-normed hidden [B, T, H], logits, the last layer's post-RoPE K and V)."""
        c = self.c
        B, T = tokens.shape
        x = self.embed[tokens]
        vis = Visibility(causal_mask(T))
        for L in self.layers:
            h = rms_norm(x, L.attn_norm)
            q = rope((h @ L.wq.T).view(B, T, c["heads"], c["head_dim"]), pos, self.theta)
            k = rope((h @ L.wk.T).view(B, T, c["kv_heads"], c["head_dim"]), pos, self.theta)
            v = (h @ L.wv.T).view(B, T, c["kv_heads"], c["head_dim"])
            x = x + attend(q, k, v, vis).reshape(B, T, -1) @ L.wo.T
            h = rms_norm(x, L.ffn_norm)
            x = x + (F.silu(h @ L.w_gate.T) * (h @ L.w_up.T)) @ L.w_down.T
        hn = rms_norm(x, self.final_norm)
        return hn, hn @ self.lm_head.T, (k, v)

    def named_tensors(self):
        out = {"model.embed_tokens.weight": self.embed}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            out.update({p + "input_layernorm.weight": L.attn_norm, p + "self_attn.q_proj.weight": L.wq,
                        p + "self_attn.k_proj.weight": L.wk, p + "self_attn.v_proj.weight": L.wv,
                        p + "self_attn.o_proj.weight": L.wo, p + "post_attention_layernorm.weight": L.ffn_norm,
                        p + "mlp.gate_proj.weight": L.w_gate, p + "mlp.up_proj.weight": L.w_up,
                        p + "mlp.down_proj.weight": L.w_down})
        out.update({"model.norm.weight": self.final_norm, "lm_head.weight": self.lm_head})
        return out


class Draft(torch.nn.Module):
    """examples/common/longspec_draft.hpp's one-layer draft over a frozen target."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        H, D, Hq, Hkv, Fh = c["hidden"], c["head_dim"], c["heads"], c["kv_heads"], c["ffn"]
        self.attn_norm, self.wq, self.wk, self.wv = param(H), param(Hq * D, H), param(Hkv * D, H), param(Hkv * D, H)
        self.wo = param(H, Hq * D, scale=(Hq * D) ** -0.5 / 2)
        self.cross_norm, self.cq = param(H), param(Hq * D, H)
        self.co = param(H, Hq * D, scale=(Hq * D) ** -0.5 / 2)
        self.ffn_norm, self.w_gate, self.w_up = param(H), param(Fh, H), param(Fh, H)
        self.w_down = param(H, Fh, scale=Fh ** -0.5 / 2)

    def forward(self, target, tokens, pos, tk, tv, shift):
        """shift [B]: Algorithm 2's j per sequence; query t sees the target keys s <= t - j (none when t < j)."""
        c = self.c
        B, T = tokens.shape
        x = target.embed[tokens].detach()
        h = rms_norm(x, self.attn_norm)
        q = rope((h @ self.wq.T).view(B, T, c["heads"], c["head_dim"]), pos, target.theta)
        k = rope((h @ self.wk.T).view(B, T, c["kv_heads"], c["head_dim"]), pos, target.theta)
        v = (h @ self.wv.T).view(B, T, c["kv_heads"], c["head_dim"])
        x = x + attend(q, k, v, Visibility(causal_mask(T, WINDOW))).reshape(B, T, -1) @ self.wo.T
        h = rms_norm(x, self.cross_norm)
        q = rope((h @ self.cq.T).view(B, T, c["heads"], c["head_dim"]), pos, target.theta)
        i = torch.arange(T)
        noisy = i[None, None, :] <= (i[None, :, None] - shift[:, None, None])  # flash_noisy_visibility
        x = x + attend(q, tk, tv, Visibility(noisy)).reshape(B, T, -1) @ self.co.T
        h = rms_norm(x, self.ffn_norm)
        x = x + (F.silu(h @ self.w_gate.T) * (h @ self.w_up.T)) @ self.w_down.T
        return rms_norm(x, target.final_norm.detach()) @ target.lm_head.detach().T

    def named_tensors(self):
        p = "draft.layers.0."
        return {p + "input_layernorm.weight": self.attn_norm, p + "self_attn.q_proj.weight": self.wq,
                p + "self_attn.k_proj.weight": self.wk, p + "self_attn.v_proj.weight": self.wv,
                p + "self_attn.o_proj.weight": self.wo, p + "cross_attn_layernorm.weight": self.cross_norm,
                p + "cross_attn.q_proj.weight": self.cq, p + "cross_attn.o_proj.weight": self.co,
                p + "post_attention_layernorm.weight": self.ffn_norm, p + "mlp.gate_proj.weight": self.w_gate,
                p + "mlp.up_proj.weight": self.w_up, p + "mlp.down_proj.weight": self.w_down}


class Heads(torch.nn.Module):
    """TokenSwift Eq. 1 with identity activation: h_i = W_i h_{i-1} + b_i + h_{i-1}; logits_i = lm_head(h_i)."""

    def __init__(self, c, n):
        super().__init__()
        H = c["hidden"]
        self.w = torch.nn.Parameter(torch.zeros(n, H, H))
        self.b = torch.nn.Parameter(torch.zeros(n, H))

    def forward(self, h0, target):
        hs, h = [], h0
        for i in range(self.w.shape[0]):
            h = h @ self.w[i].T + self.b[i] + h
            hs.append(h @ target.lm_head.detach().T)
        return hs

    def named_tensors(self):
        return {"tokenswift.heads.weight": self.w, "tokenswift.heads.bias": self.b}


# ------------------------------------------------------------------------------------------ training
def lr_at(step, steps, peak):
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))


def positions(c, step, n_seq, T, anchor):
    """[B, T] position indices: Algorithm 1 (anchor-offset, MAX_LEN = max_len) or vanilla 0..T-1."""
    if not anchor:
        return torch.arange(T).expand(n_seq, T)
    flat, _ = idx.anchor_offset_indices_batch(SEED, step, c["max_len"], [T] * n_seq)
    return torch.tensor(flat, dtype=torch.long).view(n_seq, T)


def round_fp16_(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.half().float())


def train_loop(name, model, params, steps, peak, loss_fn, log):
    opt = torch.optim.AdamW(params, lr=peak, betas=(0.9, 0.95), weight_decay=0.01)
    t0, hist = time.time(), []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak)
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist.append(loss.item())
        if step % 10 == 0 or step == steps - 1:
            el = time.time() - t0
            print(f"[{name}] step {step + 1}/{steps} loss {loss.item():.4f} ({el:.0f} s, "
                  f"{el / (step + 1):.2f} s/step)", flush=True)
    log[name] = dict(steps=steps, seconds=round(time.time() - t0, 1), first_loss=hist[0], last_loss=hist[-1],
                     loss_every_10=[round(x, 4) for x in hist[::10]])


@torch.no_grad()
def eval_target(target, test, c, gen):
    """Held-out bits per byte of the target over windows of c["seq"] bytes (predictions of bytes 1..seq)."""
    tot, n = 0.0, 0
    for d in test:
        for _ in range(max(1, c["eval_windows"] // len(test))):
            s = int(torch.randint(0, d.numel() - c["seq"] - 1, (1,), generator=gen))
            x = d[s:s + c["seq"] + 1][None]
            _, logits, _ = target(x[:, :-1], torch.arange(c["seq"])[None])
            tot += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
            n += c["seq"]
    return tot / n / math.log(2)


@torch.no_grad()
def eval_context(target, test, c):
    """Held-out bits per byte of one fixed span of stl_deque.h (the c["context_span"] bytes after byte
    c["context_at"]), each predicted from at least ctx + 1 bytes before it, for each ctx in c["eval_contexts"]:
    does the target use, or at least survive, a long context?"""
    d, at, n = test[HELD_OUT.index("bits/stl_deque.h")], c["context_at"], c["context_span"]
    if not (max(c["eval_contexts"]) <= at and at + n + 1 <= d.numel()):
        raise SystemExit(f"train.py: eval_contexts up to {max(c['eval_contexts'])} and context_at {at} do not fit "
                         f"the {d.numel()}-byte stl_deque.h")
    res = {}
    for ctx in c["eval_contexts"]:
        x = d[at - ctx:at + n + 1][None]
        _, logits, _ = target(x[:, :-1], torch.arange(x.shape[1] - 1)[None])
        res[ctx] = round(F.cross_entropy(logits[0, ctx:], x[0, ctx + 1:], reduction="sum").item() / n / math.log(2), 4)
    return res


@torch.no_grad()
def eval_draft(target, draft, test, seq, windows, tail, gen):
    """Per shift j = 1..GAMMA-1 (the draft node's depth + 1): held-out bits per byte of the draft, and how
    often its argmax equals the target's argmax (a greedy chain's per-depth acceptance, given the prefix),
    over the last `tail` positions of `windows` windows of `seq` bytes (spread over the held-out files long
    enough for one)."""
    files = [d for d in test if d.numel() > seq + 1]
    if not files:
        raise SystemExit(f"train.py: no held-out file is longer than {seq + 1} bytes (eval_draft)")
    tot, agree, n = [0.0] * GAMMA, [0] * GAMMA, [0] * GAMMA
    g = torch.Generator().manual_seed(gen)
    for w in range(windows):
        d = files[w % len(files)]
        s = int(torch.randint(0, d.numel() - seq - 1, (1,), generator=g))
        x = d[s:s + seq + 1][None]
        pos = torch.arange(seq)[None]
        _, tl, (tk, tv) = target(x[:, :-1], pos)
        for j in range(1, GAMMA):
            dl = draft(target, x[:, :-1], pos, tk, tv, torch.tensor([j]))
            b = max(j, seq - tail)
            tot[j] += F.cross_entropy(dl[0, b:], x[0, 1 + b:], reduction="sum").item()
            agree[j] += (dl[0, b:].argmax(-1) == tl[0, b:].argmax(-1)).sum().item()
            n[j] += seq - b
    return {j: dict(bits_per_byte=round(tot[j] / n[j] / math.log(2), 4), argmax_agreement=round(agree[j] / n[j], 4))
            for j in range(1, GAMMA)}


# --------------------------------------------------------------------------------------- safetensors
def save_safetensors(path, tensors, metadata):
    """Writes the safetensors format (8-byte header length, JSON header, raw little-endian data)."""
    names = {torch.float16: "F16", torch.float32: "F32", torch.int32: "I32"}
    header, blobs, off = {"__metadata__": {k: str(v) for k, v in metadata.items()}}, [], 0
    for k, t in tensors.items():
        t = t.detach().contiguous()
        b = t.numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def geometry(c, theta):
    return dict(vocab_size=256, hidden=c["hidden"], layers=c["layers"], heads=c["heads"], kv_heads=c["kv_heads"],
                head_dim=c["head_dim"], ffn_hidden=c["ffn"], rope_theta=theta, norm_eps=NORM_EPS)


CHECK_TEXT = b"template <typename _Tp>\n  inline void\n  swap(_Tp& __a, _Tp& __b)\n  {\n"


def save_target(target, c, path, config, extra_meta=None):
    """The target's fp16 weights, with check tensors (logits PyTorch computes from them) and the geometry.
    TokenSwift heads already in the file are dropped with a warning: they were fitted to the old weights
    (the heads stage refits them)."""
    check = torch.tensor(list(CHECK_TEXT), dtype=torch.long)[None]
    with torch.no_grad():
        _, logits, _ = target(check, torch.arange(check.shape[1])[None])
    if os.path.exists(path) and "tokenswift.heads.weight" in from_file_raw(path):
        print(f"train.py: {path}'s TokenSwift heads were fitted to the old target and are dropped; run the heads "
              "stage to refit them", flush=True)
    t = {k: v.half() for k, v in target.named_tensors().items()}
    t["check.tokens"] = check[0].float()
    t["check.logits"] = logits[0].float()
    save_safetensors(path, t, dict(geometry(c, target.theta), format="specdec-byte-llama", config=config,
                                   **(extra_meta or {})))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="full")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
    ap.add_argument("--stages", nargs="+", default=["target", "long", "long16", "draft", "ablation", "heads"],
                    choices=["target", "long", "long16", "draft", "ablation", "heads"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--init", metavar="DIR", help="start the drafts and the TokenSwift heads from DIR's files (an "
                    "earlier run's weights, e.g. a short-context pair) instead of random weights")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(SEED)
    c = CONFIGS[a.config]
    # the smoke configuration shrinks these so its tiny windows take the same paths as the full run's:
    # several attention blocks, checkpointed blocks, a sliding window shorter than the draft's windows
    global ATTEND_BLOCK, CHECKPOINT_ROWS, WINDOW
    ATTEND_BLOCK, CHECKPOINT_ROWS, WINDOW = (c.get("attend_block", ATTEND_BLOCK), c.get("checkpoint_rows", CHECKPOINT_ROWS),
                                             c.get("window", WINDOW))
    os.makedirs(a.out, exist_ok=True)
    log_path = os.path.join(a.out, "train_log.json")
    log = json.load(open(log_path)) if os.path.exists(log_path) else {}
    log.update(config=a.config, held_out=HELD_OUT, include_dir=cxx_include_dir(), torch=torch.__version__,
               threads=a.threads)
    data, test = corpus()
    log["train_bytes"], log["held_out_bytes"] = int(data.numel()), int(sum(t.numel() for t in test))
    gen = torch.Generator().manual_seed(SEED)
    check = torch.tensor(list(CHECK_TEXT), dtype=torch.long)[None]
    check_pos = torch.arange(check.shape[1])[None]

    def save_log():  # after every stage, so a run stopped part-way keeps what it measured
        with open(log_path, "w") as f:
            json.dump(log, f, indent=1)

    if a.init:  # fail now, not after the target stages have trained
        for name in ["target.safetensors"] * ("heads" in a.stages) + \
                [f for st, f in (("draft", "longspec_draft.safetensors"),
                                 ("ablation", "longspec_draft_vanilla.safetensors")) if st in a.stages]:
            if not os.path.exists(os.path.join(a.init, name)):
                raise SystemExit(f"train.py: --init {a.init} has no {name}")
        if "heads" in a.stages and os.path.realpath(a.init) == os.path.realpath(a.out) and \
                ({"target", "long", "long16"} & set(a.stages)):
            raise SystemExit("train.py: --init is --out, whose target (and its heads) the target stages overwrite")

    target = Target(c)
    tpath = os.path.join(a.out, "target.safetensors")
    if "target" in a.stages:
        B, T = c["batch"], c["seq"]

        def target_loss(step):
            x, y = batch(data, B, T, gen)
            # half the batches with anchor-offset indices (LongSpec §3.2: the target shares the draft's
            # indices during draft training, so it should be in distribution under them)
            pos = positions(c, step, B, T, anchor=step % 2 == 1)
            return F.cross_entropy(target(x, pos)[1].reshape(-1, 256), y.reshape(-1))
        train_loop("target", target, list(target.parameters()), c["target_steps"], c["lr"], target_loss, log)
        round_fp16_(target)
        log["target_held_out_bits_per_byte"] = round(eval_target(target, test, c, torch.Generator().manual_seed(1)), 4)
        print("target held-out bits/byte:", log["target_held_out_bits_per_byte"], flush=True)
        save_target(target, c, tpath, a.config)
        save_log()
    else:
        from_file(target, tpath)

    # Long-context continued pre-training, in two phases: windows of long_seq bytes with the RoPE base raised
    # to long_theta (adjusted base frequency, as Code Llama §2.4 extends LLaMA 2 from 4K to 16K), then windows
    # of long16_seq bytes. The first phase alone works to its 4K windows and no further (bits/byte of a fixed
    # held-out span: 0.53 at 4K context, 1.01 at 8K, 2.05 at 16K), hence the second.
    for stage, T, B, steps, lr in (("long", c["long_seq"], c["long_batch"], c["long_steps"], c["long_lr"]),
                                   ("long16", c["long16_seq"], 1, c["long16_steps"], c["long16_lr"])):
        if stage not in a.stages:
            continue
        if stage == "long":
            log["target_short_context_bits_per_byte"] = eval_context(target, test, c)
            print("context bits/byte before the long stage:", log["target_short_context_bits_per_byte"], flush=True)
            target.theta = c["long_theta"]
        elif target.theta != c["long_theta"]:
            raise SystemExit("train.py: the long16 stage continues the long stage's target (rope_theta "
                             f"{c['long_theta']}); {tpath} has {target.theta}")
        for p in target.parameters():
            p.requires_grad_(True)
        lgen = torch.Generator().manual_seed(SEED + (4 if stage == "long" else 5))

        def long_loss(step, B=B, T=T, lgen=lgen):
            x, y = batch(data, B, T, lgen)
            pos = positions(c, step, B, T, anchor=step % 2 == 1)
            return F.cross_entropy(target(x, pos)[1].reshape(-1, 256), y.reshape(-1))
        train_loop("target_" + stage, target, list(target.parameters()), steps, lr, long_loss, log)
        round_fp16_(target)
        log[f"target_{stage}_held_out_bits_per_byte"] = round(
            eval_target(target, test, c, torch.Generator().manual_seed(1)), 4)
        log[f"target_{stage}_context_bits_per_byte"] = eval_context(target, test, c)
        print(f"context bits/byte after {stage}:", log[f"target_{stage}_context_bits_per_byte"], flush=True)
        save_target(target, c, tpath, a.config, dict(long_seq=T, long_theta=c["long_theta"]))
        save_log()
    log["geometry"] = geometry(c, target.theta)
    for p in target.parameters():
        p.requires_grad_(False)
    meta = dict(geometry(c, target.theta), format="specdec-byte-llama", config=a.config)

    for stage, anchor, fname in (("draft", True, "longspec_draft.safetensors"),
                                 ("ablation", False, "longspec_draft_vanilla.safetensors")):
        if stage not in a.stages:
            continue
        torch.manual_seed(SEED + 1)  # both drafts start from the same initial weights
        draft = Draft(c)
        if a.init:  # or each from its own earlier run (both lineages then began from the same weights)
            load_into(draft, os.path.join(a.init, fname))
        dgen = torch.Generator().manual_seed(SEED + 2)  # and see the same batches
        B, T = c["draft_batch"], c["draft_seq"]

        def draft_loss(step, draft=draft, anchor=anchor, dgen=dgen, B=B, T=T):
            x, y = batch(data, B, T, dgen)
            pos = positions(c, step, B, T, anchor)
            shifts = [s["shift"] for s in idx.flash_noisy_training_batch(SEED, step, GAMMA, [T] * B)]
            sh = torch.tensor(shifts)
            with torch.no_grad():
                _, _, (tk, tv) = target(x, pos)
            logits = draft(target, x, pos, tk, tv, sh)
            keep = torch.arange(T)[None, :] >= sh[:, None]  # Algorithm 2's padded rows carry no cross info
            return F.cross_entropy(logits[keep], y[keep])
        train_loop(stage, draft, list(draft.parameters()), c["draft_steps"], c["draft_lr"], draft_loss, log)
        round_fp16_(draft)
        log[stage + "_held_out"] = eval_draft(target, draft, test, T, c["eval_windows"], T, 7)
        log[stage + "_held_out_long"] = eval_draft(target, draft, test, c["eval_contexts"][-1],
                                                   c["long_eval_windows"], c["long_eval_tail"], 8)
        print(stage, "held-out:", log[stage + "_held_out"], "at", c["eval_contexts"][-1], "bytes:",
              log[stage + "_held_out_long"], flush=True)
        with torch.no_grad():
            _, _, (tk, tv) = target(check, check_pos)
            dl = draft(target, check, check_pos, tk, tv, torch.tensor([1]))
        t = {k: v.half() for k, v in draft.named_tensors().items()}
        t["check.tokens"] = check[0].float()
        t["check.logits"] = dl[0].float()
        save_safetensors(os.path.join(a.out, fname), t,
                         dict(meta, format="specdec-longspec-draft", draft_layers=1, window=WINDOW,
                              layer_map=c["layers"] - 1, anchor_offset=int(anchor), noisy_gamma=GAMMA,
                              anchor_max_len=c["max_len"], train_seq=T))
        save_log()

    if "heads" in a.stages:
        heads = Heads(c, NUM_HEADS_TS)
        if a.init:
            load_into(heads, os.path.join(a.init, "target.safetensors"))
        hgen = torch.Generator().manual_seed(SEED + 3)
        B, T = c["heads_batch"], c["heads_seq"]

        def heads_loss(step):
            x, y = batch(data, B, T + NUM_HEADS_TS, hgen)
            with torch.no_grad():
                hn, _, _ = target(x, torch.arange(x.shape[1]).expand_as(x))
            hs = heads(hn[:, :T], target)
            # head i (1-based) at position t predicts the byte at t + 1 + i
            return sum(F.cross_entropy(l.reshape(-1, 256), y[:, i + 1:i + 1 + T].reshape(-1))
                       for i, l in enumerate(hs)) / len(hs)
        train_loop("heads", heads, list(heads.parameters()), c["heads_steps"], c["lr"], heads_loss, log)
        round_fp16_(heads)
        with torch.no_grad():
            hn, _, _ = target(check, check_pos)
            hs = heads(hn, target)
        raw, file_meta = from_file_raw(tpath, with_metadata=True)
        raw.update({k: v.half() for k, v in heads.named_tensors().items()})
        raw["check.heads_logits"] = torch.stack(hs, 0)[:, 0].float()  # [heads, tokens, 256]
        save_safetensors(tpath, raw, dict(file_meta, tokenswift_heads=NUM_HEADS_TS))

    save_log()
    print("wrote", a.out)


def from_file_raw(path, with_metadata=False):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    types = {"F16": torch.float16, "F32": torch.float32, "I32": torch.int32}
    out = {}
    for k, e in header.items():
        if k == "__metadata__":
            continue
        b, e_ = e["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[b:e_]), dtype=types[e["dtype"]]).view(e["shape"])
    return (out, header.get("__metadata__", {})) if with_metadata else out


def load_into(module, path):
    """Copies the tensors of module.named_tensors() from the safetensors file at path."""
    raw = from_file_raw(path)
    with torch.no_grad():
        for k, p in module.named_tensors().items():
            if k not in raw or tuple(raw[k].shape) != tuple(p.shape):
                raise SystemExit(f"train.py: {path} has no tensor {k} of shape {tuple(p.shape)}")
            p.copy_(raw[k].float())


def from_file(target, path):
    load_into(target, path)
    target.theta = float(from_file_raw(path, with_metadata=True)[1].get("rope_theta", ROPE_THETA))


if __name__ == "__main__":
    main()
