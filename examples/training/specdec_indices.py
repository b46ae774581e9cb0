"""Position-index generators of LongSpec's training (§3.2), bit-identical to specdec's C++ ones.

- philox_stream: Philox4x32-10 (Salmon et al., SC'11) as in include/specdec/core/philox.hpp: key = the
  64-bit seed, counter = (64-bit block number, 64-bit stream id); word k of the stream is word k % 4 of
  block k // 4; below(n) is Lemire's multiply-shift.
- anchor_offset_indices*: LongSpec Algorithm 1 (Appendix G of the later version), as in
  include/specdec/position/anchor_offset.hpp.
- flash_noisy_*: LongSpec Algorithm 2, as in include/specdec/position/noisy_training.hpp.

tests/data/longspec_index_vectors.json holds vectors made by the C++ functions; test_indices.py
checks this module against them and tests/position/test_index_vectors.cpp checks the C++ side.
Plain Python (no NumPy, no PyTorch), so the check runs wherever python3 does.
"""

MASK32 = 0xFFFFFFFF
LONGSPEC_NUM_ANCHORS = 4  # Algorithm 1 line 5: the first four positions are attention-sink anchors


def philox4x32_10(ctr, k0, k1):
    """One Philox4x32-10 block: 10 rounds keyed by (k0, k1). ctr: four 32-bit words."""
    c0, c1, c2, c3 = ctr
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        hi0, lo0 = (p0 >> 32) & MASK32, p0 & MASK32
        hi1, lo1 = (p1 >> 32) & MASK32, p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return (c0, c1, c2, c3)


def stream_id(request, step):
    """The stream of a (request, step) pair, as specdec::stream_id."""
    return ((request & MASK32) << 32) | (step & MASK32)


class philox_stream:
    """A sequential view of one Philox stream (specdec::philox_stream)."""

    def __init__(self, seed, stream, offset=0):
        self.seed, self.stream, self.offset = seed, stream, offset
        self._block, self._cache = None, None

    def next_u32(self):
        block = self.offset >> 2
        if block != self._block:
            ctr = (block & MASK32, (block >> 32) & MASK32, self.stream & MASK32, (self.stream >> 32) & MASK32)
            self._cache = philox4x32_10(ctr, self.seed & MASK32, (self.seed >> 32) & MASK32)
            self._block = block
        word = self._cache[self.offset & 3]
        self.offset += 1
        return word

    def below(self, n):
        """Uniform integer in [0, n) (Lemire multiply-shift, bias < n / 2^32)."""
        return (self.next_u32() * n) >> 32


def anchor_offset_draw(n, max_len, rng):
    """Algorithm 1 line 4: o uniform in [0, max_len - n], both ends included."""
    if not 0 <= n <= max_len:
        raise ValueError(f"anchor_offset_draw: need 0 <= n <= max_len, got n={n}, max_len={max_len}")
    return rng.below(max_len - n + 1)


def anchor_offset_indices(offset, n, num_anchors=LONGSPEC_NUM_ANCHORS):
    """Algorithm 1 lines 3 and 5: [0, 1, ..., num_anchors - 1, num_anchors + offset, ..., n - 1 + offset]."""
    if offset < 0 or num_anchors < 0:
        raise ValueError("anchor_offset_indices: offset and num_anchors must be >= 0")
    return [i if i < num_anchors else i + offset for i in range(n)]


def anchor_offset_indices_batch(seed, step, max_len, lengths, num_anchors=LONGSPEC_NUM_ANCHORS):
    """Sequence b draws its offset from philox_stream(seed, stream_id(b, step)).
    Returns (indices of all sequences back to back, offsets)."""
    out, offsets = [], []
    for b, n in enumerate(lengths):
        rng = philox_stream(seed, stream_id(b, step))
        o = anchor_offset_draw(n, max_len, rng)
        offsets.append(o)
        out.extend(anchor_offset_indices(o, n, num_anchors))
    return out, offsets


def flash_noisy_draw_shift(gamma, rng):
    """Algorithm 2 line 3: j uniform in [1, gamma)."""
    if gamma < 2:
        raise ValueError(f"flash_noisy_draw_shift: need gamma >= 2, got {gamma}")
    return 1 + rng.below(gamma - 1)


def flash_noisy_slice_for(seq_len, shift):
    """Algorithm 2 lines 5-10 for shift j: Q[j:], K[:l-j], j zero rows in front, as a dict of the
    half-open ranges (the fields of specdec::flash_noisy_slice)."""
    if seq_len < 2 or not 1 <= shift <= seq_len - 1:
        raise ValueError(f"flash_noisy_slice_for: need seq_len >= 2 and 1 <= shift < seq_len, got {seq_len}, {shift}")
    return dict(shift=shift, query_begin=shift, query_end=seq_len, key_begin=0, key_end=seq_len - shift,
                pad_rows=shift)


def flash_noisy_training_batch(seed, step, gamma, seq_lens):
    """Sequence b draws its shift from philox_stream(seed, stream_id(b, step))."""
    out = []
    for b, n in enumerate(seq_lens):
        if n < gamma:
            raise ValueError(f"flash_noisy_training_batch: every length >= gamma = {gamma} (sequence {b}: {n})")
        rng = philox_stream(seed, stream_id(b, step))
        out.append(flash_noisy_slice_for(n, flash_noisy_draw_shift(gamma, rng)))
    return out
