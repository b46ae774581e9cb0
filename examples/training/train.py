#!/usr/bin/python3
"""Trains the demo's model pair on this machine's C and C++ headers (issue #26; CPU, no downloads).

  /usr/bin/python3 examples/training/train.py [--config full|smoke] [--out DIR] [--stages ...]

Stages, in order (each reads what the earlier ones wrote to --out):
  target      a byte-level LLaMA-style target (RMSNorm, RoPE rotate-half, GQA, SwiGLU, vocabulary 256),
              the architecture of examples/common/llama.hpp, trained from scratch;
  draft       a one-layer LongSpec draft (LongSpec §3.1: sliding-window self-attention, cache-free
              cross-attention into the target's last-layer KV, SwiGLU; the target's embedding, final norm
              and LM head shared and frozen), the architecture of examples/common/longspec_draft.hpp,
              trained with anchor-offset indices (§3.2, Algorithm 1) and flash noisy training (§3.2,
              Algorithm 2), the target frozen;
  ablation    the same draft trained with vanilla indices 0..n-1 (LongSpec Table 2's question);
  heads       TokenSwift residual heads (TokenSwift §3.2, Eq. 1, identity activation, as
              examples/common/tokenswift_draft.hpp runs them) on the frozen target's final-normed state.

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

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specdec_indices as idx  # noqa: E402

# Held out of training, evaluated only (paths relative to the C++ include directory, or absolute).
HELD_OUT = ["bits/stl_list.h", "bits/stl_deque.h", "bits/stl_queue.h", "bits/stl_heap.h", "bits/stl_numeric.h",
            "/usr/include/stdio.h"]

CONFIGS = {
    # ~1 hour on 2 cores (see the README of examples/training for the measured times).
    "full": dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=768, seq=512, batch=16,
                 target_steps=800, draft_steps=400, heads_steps=200, lr=2e-3, draft_lr=2e-3,
                 eval_windows=48, max_len=32768),
    # a few steps, for the test that keeps this script from rotting
    "smoke": dict(hidden=128, layers=2, heads=2, kv_heads=1, head_dim=64, ffn=128, seq=64, batch=2,
                  target_steps=3, draft_steps=3, heads_steps=3, lr=1e-3, draft_lr=1e-3, eval_windows=2,
                  max_len=1024),
}
ROPE_THETA = 10000.0
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


def rope(x, pos):
    """Rotate-half RoPE (specdec::rope_style::rotate_half) of x [B, T, heads, D] at positions pos [B, T]."""
    d = x.shape[-1]
    inv = ROPE_THETA ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (pos.to(torch.float64)[..., None] * inv).to(torch.float32)  # [B, T, D/2]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, :, None, :], torch.cat([ang.sin()] * 2, -1)[:, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attend(q, k, v, mask):
    """q [B, T, Hq, D], k/v [B, S, Hkv, D] (GQA: query head h reads kv head h // (Hq / Hkv)), mask [B or 1, T, S]
    (True = visible). Rows without a visible key give 0 (Algorithm 2's zero padding)."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, 2), v.repeat_interleave(g, 2)
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("bhts,bshd->bthd", p, v)


def causal_mask(t, window=None):
    i = torch.arange(t)
    m = i[None, :] <= i[:, None]
    if window is not None:
        m &= i[None, :] > i[:, None] - window
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

    def forward(self, tokens, pos, want_kv=False):
        """Returns (final-normed hidden [B, T, H], logits, the last layer's post-RoPE K and V)."""
        c = self.c
        B, T = tokens.shape
        x = self.embed[tokens]
        mask = causal_mask(T)
        for L in self.layers:
            h = rms_norm(x, L.attn_norm)
            q = rope((h @ L.wq.T).view(B, T, c["heads"], c["head_dim"]), pos)
            k = rope((h @ L.wk.T).view(B, T, c["kv_heads"], c["head_dim"]), pos)
            v = (h @ L.wv.T).view(B, T, c["kv_heads"], c["head_dim"])
            x = x + attend(q, k, v, mask).reshape(B, T, -1) @ L.wo.T
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
        q = rope((h @ self.wq.T).view(B, T, c["heads"], c["head_dim"]), pos)
        k = rope((h @ self.wk.T).view(B, T, c["kv_heads"], c["head_dim"]), pos)
        v = (h @ self.wv.T).view(B, T, c["kv_heads"], c["head_dim"])
        x = x + attend(q, k, v, causal_mask(T, WINDOW)).reshape(B, T, -1) @ self.wo.T
        h = rms_norm(x, self.cross_norm)
        q = rope((h @ self.cq.T).view(B, T, c["heads"], c["head_dim"]), pos)
        i = torch.arange(T)
        noisy = i[None, None, :] <= (i[None, :, None] - shift[:, None, None])  # flash_noisy_visibility
        x = x + attend(q, tk, tv, noisy).reshape(B, T, -1) @ self.co.T
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


def positions(c, step, n_seq, anchor):
    """[B, T] position indices: Algorithm 1 (anchor-offset, MAX_LEN = max_len) or vanilla 0..T-1."""
    T = c["seq"]
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
def eval_draft(target, draft, test, c, gen):
    """Per shift j = 1..GAMMA-1 (the draft node's depth + 1): held-out bits per byte of the draft, and how
    often its argmax equals the target's argmax (a greedy chain's per-depth acceptance, given the prefix)."""
    res = {}
    for j in range(1, GAMMA):
        tot, agree, n = 0.0, 0, 0
        g = torch.Generator().manual_seed(gen)
        for d in test:
            for _ in range(max(1, c["eval_windows"] // len(test))):
                s = int(torch.randint(0, d.numel() - c["seq"] - 1, (1,), generator=g))
                x = d[s:s + c["seq"] + 1][None]
                pos = torch.arange(c["seq"])[None]
                _, tl, (tk, tv) = target(x[:, :-1], pos)
                dl = draft(target, x[:, :-1], pos, tk, tv, torch.tensor([j]))
                tot += F.cross_entropy(dl[0, j:], x[0, 1 + j:], reduction="sum").item()
                agree += (dl[0, j:].argmax(-1) == tl[0, j:].argmax(-1)).sum().item()
                n += c["seq"] - j
        res[j] = dict(bits_per_byte=round(tot / n / math.log(2), 4), argmax_agreement=round(agree / n, 4))
    return res


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


def geometry(c):
    return dict(vocab_size=256, hidden=c["hidden"], layers=c["layers"], heads=c["heads"], kv_heads=c["kv_heads"],
                head_dim=c["head_dim"], ffn_hidden=c["ffn"], rope_theta=ROPE_THETA, norm_eps=NORM_EPS)


CHECK_TEXT = b"template <typename _Tp>\n  inline void\n  swap(_Tp& __a, _Tp& __b)\n  {\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="full")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
    ap.add_argument("--stages", nargs="+", default=["target", "draft", "ablation", "heads"],
                    choices=["target", "draft", "ablation", "heads"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(SEED)
    c = CONFIGS[a.config]
    os.makedirs(a.out, exist_ok=True)
    log_path = os.path.join(a.out, "train_log.json")
    log = json.load(open(log_path)) if os.path.exists(log_path) else {}
    log.update(config=a.config, geometry=geometry(c), held_out=HELD_OUT, include_dir=cxx_include_dir(),
               torch=torch.__version__, threads=a.threads)
    data, test = corpus()
    log["train_bytes"], log["held_out_bytes"] = int(data.numel()), int(sum(t.numel() for t in test))
    gen = torch.Generator().manual_seed(SEED)
    B, T = c["batch"], c["seq"]
    check = torch.tensor(list(CHECK_TEXT), dtype=torch.long)[None]
    check_pos = torch.arange(check.shape[1])[None]
    meta = dict(geometry(c), format="specdec-byte-llama", config=a.config)

    target = Target(c)
    tpath = os.path.join(a.out, "target.safetensors")
    if "target" in a.stages:
        def target_loss(step):
            x, y = batch(data, B, T, gen)
            # half the batches with anchor-offset indices (LongSpec §3.2: the target shares the draft's
            # indices during draft training, so it should be in distribution under them)
            pos = positions(c, step, B, anchor=step % 2 == 1)
            return F.cross_entropy(target(x, pos)[1].reshape(-1, 256), y.reshape(-1))
        train_loop("target", target, list(target.parameters()), c["target_steps"], c["lr"], target_loss, log)
        round_fp16_(target)
        log["target_held_out_bits_per_byte"] = round(eval_target(target, test, c, torch.Generator().manual_seed(1)), 4)
        print("target held-out bits/byte:", log["target_held_out_bits_per_byte"], flush=True)
        with torch.no_grad():
            _, logits, _ = target(check, check_pos)
        t = {k: v.half() for k, v in target.named_tensors().items()}
        t["check.tokens"] = check[0].float()
        t["check.logits"] = logits[0].float()
        save_safetensors(tpath, t, meta)
    else:
        from_file(target, tpath)
    for p in target.parameters():
        p.requires_grad_(False)

    for stage, anchor, fname in (("draft", True, "longspec_draft.safetensors"),
                                 ("ablation", False, "longspec_draft_vanilla.safetensors")):
        if stage not in a.stages:
            continue
        torch.manual_seed(SEED + 1)  # both drafts start from the same initial weights
        draft = Draft(c)
        dgen = torch.Generator().manual_seed(SEED + 2)  # and see the same batches

        def draft_loss(step, draft=draft, anchor=anchor, dgen=dgen):
            x, y = batch(data, B, T, dgen)
            pos = positions(c, step, B, anchor)
            shifts = [s["shift"] for s in idx.flash_noisy_training_batch(SEED, step, GAMMA, [T] * B)]
            sh = torch.tensor(shifts)
            with torch.no_grad():
                _, _, (tk, tv) = target(x, pos)
            logits = draft(target, x, pos, tk, tv, sh)
            keep = torch.arange(T)[None, :] >= sh[:, None]  # Algorithm 2's padded rows carry no cross info
            return F.cross_entropy(logits[keep], y[keep])
        train_loop(stage, draft, list(draft.parameters()), c["draft_steps"], c["draft_lr"], draft_loss, log)
        round_fp16_(draft)
        log[stage + "_held_out"] = eval_draft(target, draft, test, c, 7)
        print(stage, "held-out:", log[stage + "_held_out"], flush=True)
        with torch.no_grad():
            _, _, (tk, tv) = target(check, check_pos)
            dl = draft(target, check, check_pos, tk, tv, torch.tensor([1]))
        t = {k: v.half() for k, v in draft.named_tensors().items()}
        t["check.tokens"] = check[0].float()
        t["check.logits"] = dl[0].float()
        save_safetensors(os.path.join(a.out, fname), t,
                         dict(meta, format="specdec-longspec-draft", draft_layers=1, window=WINDOW,
                              layer_map=c["layers"] - 1, anchor_offset=int(anchor), noisy_gamma=GAMMA,
                              anchor_max_len=c["max_len"]))

    if "heads" in a.stages:
        heads = Heads(c, NUM_HEADS_TS)
        hgen = torch.Generator().manual_seed(SEED + 3)

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
        tensors = {k: v for k, v in from_file_raw(tpath).items()}
        tensors.update({k: v.half() for k, v in heads.named_tensors().items()})
        tensors["check.heads_logits"] = torch.stack(hs, 0)[:, 0].float()  # [heads, tokens, 256]
        save_safetensors(tpath, tensors, dict(meta, tokenswift_heads=NUM_HEADS_TS))

    with open(log_path, "w") as f:
        json.dump(log, f, indent=1)
    print("wrote", a.out)


def from_file_raw(path):
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
    return out


def from_file(target, path):
    raw = from_file_raw(path)
    with torch.no_grad():
        for k, p in target.named_tensors().items():
            p.copy_(raw[k].float())


if __name__ == "__main__":
    main()
