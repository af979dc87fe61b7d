//! Attention over packed sequences: per sequence and head, softmax(scale Q K^T + bias) V,
//! with optional causal masks, rotary positions applied to Q and K beforehand, an additive
//! bias per head by relative position, and grouped-query heads (fewer K/V heads than Q
//! heads, each K/V head shared by a group of consecutive Q heads).

use rayon::prelude::*;

use super::math::{exp, exp_sum, max};
use super::scratch::{Buf, Share};
use crate::stages::{time, Stage};

/// An additive attention bias per head, [heads, size, size], read at [head, query, key]
/// for positions within each sequence: a sequence of length len reads the top-left len x
/// len block (MPNet's and T5's relative position bias).
pub struct AttentionBias<'a> {
    pub values: &'a [f32],
    pub size: usize,
}

/// A term added to the scores of one head of one sequence before the softmax, computed
/// from that sequence's queries and keys (DeBERTa's disentangled relative-position terms).
pub trait ScoreTerm: Send + Sync {
    /// Adds to `scores` [len, len] (query by key) of `head` in layer `layer`, for the
    /// sequence whose first token is token `offset` of the packed batch. Query i of the
    /// head is `q[i * stride..][..head_dim]`, key j `k[j * stride..][..head_dim]`.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        layer: usize,
        head: usize,
        offset: usize,
        q: &[f32],
        k: &[f32],
        stride: usize,
        len: usize,
        scores: &mut [f32],
    );
}

/// Added to a hidden key's scores: its softmax weight underflows to 0 beside any seen key.
pub const HIDDEN_KEY: f32 = -1e30;

/// A score term that keeps each sequence's keys to its first tokens: the tokens after them
/// are queries only (transformers' attention mask over padding that is still computed, as
/// ColBERT's query expansion tokens are).
pub struct KeyLimits {
    /// (first token in the batch, keys) of every sequence with tokens that are not keys,
    /// by first token ascending.
    limits: Vec<(usize, usize)>,
}

impl KeyLimits {
    /// `keys[i]` of the sequence at `bounds[i]..bounds[i + 1]` are keys.
    pub fn new(bounds: &[usize], keys: &[usize]) -> Self {
        let limits = bounds
            .windows(2)
            .zip(keys)
            .filter(|(b, &k)| k < b[1] - b[0])
            .map(|(b, &k)| (b[0], k.max(1)))
            .collect();
        KeyLimits { limits }
    }
}

impl ScoreTerm for KeyLimits {
    fn add(&self, _: usize, _: usize, offset: usize, _: &[f32], _: &[f32], _: usize, len: usize, scores: &mut [f32]) {
        if let Ok(i) = self.limits.binary_search_by_key(&offset, |(first, _)| *first) {
            let keys = self.limits[i].1.min(len);
            for row in scores.chunks_exact_mut(len) {
                row[keys..].iter_mut().for_each(|s| *s += HIDDEN_KEY);
            }
        }
    }
}

/// The relative-position bucket of transformers' T5 and MPNet (bidirectional): half the
/// buckets for keys after the query, exact buckets for the nearest positions and
/// logarithmic ones up to `max_distance`. Computed in float32 as torch computes it, so the
/// bucket boundaries fall where transformers puts them.
pub fn relative_position_bucket(relative_position: i64, num_buckets: usize, max_distance: usize) -> u32 {
    let half = (num_buckets / 2) as i64;
    let mut bucket = if relative_position > 0 { half } else { 0 };
    let n = relative_position.abs();
    let max_exact = half / 2;
    bucket += if n < max_exact {
        n
    } else {
        let scaled = (n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln()
            * (half - max_exact) as f32;
        (max_exact + scaled as i64).min(half - 1)
    };
    bucket as u32
}

/// A bias per head looked up by relative position in a bucket table (T5's and MPNet's
/// `relative_attention_bias`, [buckets, heads]).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct RelativeBias {
    table: crate::buffer::Floats,
    buckets: usize,
    heads: usize,
    max_distance: usize,
}

impl RelativeBias {
    /// `table` [buckets, heads] row-major.
    pub fn new(
        table: Vec<f32>,
        buckets: usize,
        heads: usize,
        max_distance: usize,
    ) -> candle_core::Result<Self> {
        if Some(table.len()) != buckets.checked_mul(heads) {
            candle_core::bail!(
                "a relative position table of {} values is not [{buckets}, {heads}]",
                table.len()
            );
        }
        if buckets / 4 == 0 || max_distance <= buckets / 4 {
            candle_core::bail!(
                "{buckets} relative position buckets do not cover a distance of {max_distance}"
            );
        }
        Ok(RelativeBias { table: table.into(), buckets, heads, max_distance })
    }

    pub fn heads(&self) -> usize {
        self.heads
    }

    /// The bias [heads, size, size] at [head, query, key] for key - query.
    pub fn values(&self, size: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.heads * size * size];
        for q in 0..size {
            for k in 0..size {
                let bucket =
                    relative_position_bucket(k as i64 - q as i64, self.buckets, self.max_distance) as usize;
                let row = &self.table[bucket * self.heads..(bucket + 1) * self.heads];
                for (head, b) in row.iter().enumerate() {
                    out[(head * size + q) * size + k] = *b;
                }
            }
        }
        out
    }
}

/// Rotary positions, non-interleaved (the two halves of each head rotated together, as
/// transformers' `rotate_half`), at positions 0..len-1 within each sequence. Scaled rotary
/// types (see `models/rotary.rs`, which computes the frequencies) give their own
/// frequencies, a factor on cos and sin, and, where the frequencies depend on a
/// sequence's length, what the longer sequences take ([`Long`]).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Rotary {
    /// 1 / theta^(2i / head_dim) for i < head_dim / 2 (unscaled).
    inv_freq: crate::buffer::Floats,
    /// cos and sin times this (transformers' `attention_scaling`: YaRN's and LongRoPE's).
    #[serde(default = "one")]
    scale: f32,
    /// The frequencies of the sequences longer than a length, when they differ.
    #[serde(default)]
    long: Option<Long>,
}

fn one() -> f32 {
    1.0
}

/// What a sequence longer than `above` tokens takes instead of a rotary's frequencies, as
/// transformers computes that sequence alone (its `dynamic_rope_update`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Long {
    /// These frequencies (LongRoPE's long factors).
    Frequencies { above: usize, inv_freq: Vec<f32> },
    /// The unscaled frequencies of the base theta (factor len / above - (factor - 1))^(d /
    /// (d - 2)) for a sequence of len tokens and heads of d (dynamic NTK), computed in
    /// float32 as torch does.
    Dynamic { above: usize, theta: f64, factor: f64 },
}

/// 1 / theta^(2i / head_dim) for i < head_dim / 2, in float32 as transformers computes it.
pub fn default_inv_freq(head_dim: usize, theta: f32) -> Vec<f32> {
    (0..head_dim).step_by(2).map(|i| 1.0 / theta.powf(i as f32 / head_dim as f32)).collect()
}

impl Rotary {
    pub fn new(head_dim: usize, theta: f64) -> Self {
        Rotary { inv_freq: default_inv_freq(head_dim, theta as f32).into(), scale: 1.0, long: None }
    }

    /// Frequencies computed elsewhere (`models/rotary.rs`), cos and sin times `scale`, and
    /// the longer sequences' own frequencies (`long`).
    pub fn scaled(inv_freq: Vec<f32>, scale: f32, long: Option<Long>) -> Self {
        Rotary { inv_freq: inv_freq.into(), scale, long }
    }

    /// Half the head width this rotates.
    pub fn half(&self) -> usize {
        self.inv_freq.len()
    }

    /// Whether a sequence's frequencies depend on its length.
    pub fn varies(&self) -> bool {
        self.long.is_some()
    }

    /// The frequencies of a sequence of `len` tokens.
    fn frequencies(&self, len: usize) -> std::borrow::Cow<'_, [f32]> {
        match &self.long {
            Some(Long::Frequencies { above, inv_freq }) if len > *above => inv_freq.into(),
            Some(Long::Dynamic { above, theta, factor }) if len > *above => {
                // torch: a float32 tensor from the int64 length, in this order.
                let (d, f) = (2 * self.half(), *factor as f32);
                let ratio = f * len as f32 / *above as f32 - (f - 1.0);
                let base = *theta as f32 * ratio.powf(d as f32 / (d as f32 - 2.0));
                default_inv_freq(d, base).into()
            }
            _ => (&self.inv_freq[..]).into(),
        }
    }

    /// (cos, sin) [positions, half] of the angles position x frequency, times the scale,
    /// for sequences of `positions` tokens.
    pub(crate) fn table(&self, positions: usize) -> (Vec<f32>, Vec<f32>) {
        let inv_freq = self.frequencies(positions);
        let angles: Vec<f32> = (0..positions).flat_map(|p| inv_freq.iter().map(move |f| p as f32 * f)).collect();
        let s = self.scale;
        let (cos, sin) = (angles.iter().map(|a| a.cos()), angles.iter().map(|a| a.sin()));
        if s == 1.0 {
            (cos.collect(), sin.collect())
        } else {
            (cos.map(|c| c * s).collect(), sin.map(|v| v * s).collect())
        }
    }

    /// (cos, sin) [tokens, half] of a packed batch: each sequence of `lengths` its own
    /// table (`table` of its length), token t of the batch at row t.
    pub(crate) fn rows(&self, lengths: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for &len in lengths {
            let (c, s) = self.table(len);
            cos.extend(c);
            sin.extend(s);
        }
        (cos, sin)
    }
}

/// Rotates `heads` heads of `head_dim` at the start of `row` for `position`: the first half
/// x1 and second half x2 of each become x1 cos - x2 sin and x1 sin + x2 cos.
pub(crate) fn rotate(row: &mut [f32], heads: usize, head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in row[..heads * head_dim].chunks_exact_mut(head_dim) {
        let (a, b) = head.split_at_mut(half);
        for (((x1, x2), c), s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
            let (u, v) = (*x1, *x2);
            *x1 = u * c - v * s;
            *x2 = u * s + v * c;
        }
    }
}

/// The shape of attention: `heads` query heads and `kv_heads` key/value heads of
/// `head_dim` each, `scale` on the scores, a causal mask or not, a sliding window (each
/// query sees the keys at most `window` positions away) or not. The packed Q, K and V of a
/// token are side by side: [heads head_dim | kv_heads head_dim | kv_heads head_dim].
#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub causal: bool,
    pub window: Option<usize>,
    /// Soft-capping of the scores: cap tanh(score / cap) after the scale, before masks and
    /// biases (Gemma 2's `attn_logit_softcapping`).
    #[serde(default)]
    pub softcap: Option<f32>,
}

impl Heads {
    /// The scores of a block, capped when the shape says so (`softcap`).
    #[inline]
    fn cap(&self, scores: &mut [f32]) {
        if let Some(cap) = self.softcap {
            let inv = 1.0 / cap;
            for s in scores {
                *s = cap * (*s * inv).tanh();
            }
        }
    }

    /// Width of a token's Q, K and V side by side.
    #[inline]
    pub fn qkv_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Width of a token's attended values (all query heads).
    #[inline]
    pub fn width(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// One task of attention: rows `rows` (queries) of head `head` of the sequence of `len`
/// tokens that starts at token `offset` of the packed batch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Task {
    pub offset: usize,
    pub len: usize,
    pub head: usize,
    pub rows: std::ops::Range<usize>,
}

/// The longest sequence whose heads attend whole: every query's scores against every key
/// in one block, one pass (the reference order). Longer sequences stream (`streamed`).
const WHOLE: usize = 512;

/// A streamed task's query rows, and the keys it scores at a time: a [512, 256] block of
/// scores (512 kB, within L2) and [512, head_dim] sums, so that memory is linear in the
/// sequence's length; each block of keys and values is read once per 512 queries.
/// (Measured on Qwen3-shaped inputs of 8k and 30k tokens, 2 threads: 64 x 512 took 20-50%
/// longer, 512 x 512 and 1024 x 256 5-10%.)
const QUERY_BLOCK: usize = 512;
const KEY_BLOCK: usize = 256;

/// The query rows per task of a sequence of `len` tokens (all of them when `whole`).
fn block_rows(len: usize, whole: bool) -> usize {
    if whole || len <= WHOLE {
        len
    } else {
        QUERY_BLOCK
    }
}

/// Attention's tasks for a packed batch: for every sequence and head, its query rows in
/// blocks (`block_rows`; one block per head when `whole`, which a score term needs).
pub(crate) fn attention_tasks(lengths: &[usize], heads: usize, whole: bool) -> Vec<Task> {
    let mut tasks = Vec::with_capacity(lengths.len() * heads);
    let mut offset = 0;
    for &len in lengths {
        if len > 0 {
            let per = block_rows(len, whole);
            for head in 0..heads {
                tasks.extend((0..len).step_by(per).map(|r| Task { offset, len, head, rows: r..(r + per).min(len) }));
            }
        }
        offset += len;
    }
    tasks
}

/// The keys query `row` of a sequence of `len` sees: all, up to itself when `causal`, within
/// `window` positions of it when sliding.
#[inline]
fn keys_of(row: usize, len: usize, causal: bool, window: Option<usize>) -> std::ops::Range<usize> {
    let mut end = if causal { (row + 1).min(len) } else { len };
    let mut start = 0;
    if let Some(w) = window {
        start = row.saturating_sub(w).min(end);
        end = end.min(row.saturating_add(w).saturating_add(1));
    }
    start..end
}

/// The scores of one query (`at`: the query's row, the first key's column, the sequence's
/// length) against the keys it sees, plus `add`'s row for them; its other scores set to 0.
#[inline(always)]
fn seen_scores<'a>(
    row: &'a mut [f32],
    (query, first_key, len): (usize, usize, usize),
    add: Option<(&[f32], usize)>,
    causal: bool,
    window: Option<usize>,
) -> &'a mut [f32] {
    let width = row.len();
    let seen = keys_of(query, len, causal, window);
    let start = seen.start.saturating_sub(first_key).min(width);
    let end = seen.end.saturating_sub(first_key).clamp(start, width);
    let (before, row) = row.split_at_mut(start);
    before.fill(0.0);
    let (row, masked) = row.split_at_mut(end - start);
    masked.fill(0.0);
    if let Some((add, stride)) = add {
        for (s, a) in row.iter_mut().zip(&add[query * stride + first_key + start..]) {
            *s += a;
        }
    }
    row
}

dispatch! {
    /// Each row i of `x` (`width` wide: the scores of query `first_row + i` against keys
    /// `first_key..first_key + width`, where `at` is (first_row, first_key, len)) plus `add`'s row, replaced by e^(x - its maximum);
    /// `inverse_sums` gets 1 / the sum of each row (the softmax is `x * inverse_sums`,
    /// applied after the product with V as torch's fused attention does). Keys the query
    /// does not see (`keys_of` a sequence of `len`) become 0.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn unnormalized_softmax_rows(
        x: &mut [f32],
        width: usize,
        at: (usize, usize, usize),
        add: Option<(&[f32], usize)>,
        causal: bool,
        window: Option<usize>,
        inverse_sums: &mut [f32],
    ) {
        let (first_row, first_key, len) = at;
        if width == 0 {
            return;
        }
        for ((i, row), inv) in x.chunks_exact_mut(width).enumerate().zip(inverse_sums.iter_mut()) {
            let row = seen_scores(row, (first_row + i, first_key, len), add, causal, window);
            // (A NaN score gives a NaN row.)
            *inv = 1.0 / exp_sum(row, max(row));
        }
    }
}

dispatch! {
    /// One key block of streamed attention (the online softmax): each row i of `x` (`width`
    /// wide: query `first_row + i` against keys `first_key..first_key + width`, where `at` is
    /// (first_row, first_key, len)) plus `add`'s row becomes e^(x - the row's running
    /// maximum over every key block so far), 0 for keys the query does not see. Where the
    /// block raises a row's maximum, its running sum and its [d] sums so far in `acc` are
    /// scaled down to the new one. `maxes` and `sums` start at -inf and 0.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn online_softmax_rows(
        x: &mut [f32],
        width: usize,
        at: (usize, usize, usize),
        add: Option<(&[f32], usize)>,
        causal: bool,
        window: Option<usize>,
        acc: &mut [f32],
        d: usize,
        maxes: &mut [f32],
        sums: &mut [f32],
    ) {
        let (first_row, first_key, len) = at;
        if width == 0 {
            return;
        }
        for (i, row) in x.chunks_exact_mut(width).enumerate() {
            let row = seen_scores(row, (first_row + i, first_key, len), add, causal, window);
            if row.is_empty() {
                continue;
            }
            let (old, block_max) = (maxes[i], max(row));
            let new = if block_max > old { block_max } else { old };
            let shrink = if old == f32::NEG_INFINITY { 0.0 } else { exp(old - new) };
            sums[i] = sums[i] * shrink + exp_sum(row, new);
            maxes[i] = new;
            if shrink != 1.0 {
                for v in &mut acc[i * d..(i + 1) * d] {
                    *v *= shrink;
                }
            }
        }
    }
}

/// Dot-product attention of every task (`attention_tasks`, with `whole` when `term` is
/// given): `qkv` [tokens, qkv width] as `Heads` lays it out, written to `out` [tokens,
/// heads head_dim]; in a team, chunks of the tasks. A task holds the scores of its query
/// rows against the keys they see only (causal and sliding masks skip the rest), so memory
/// is linear in a sequence's length beyond 512 tokens. Interrupted
/// (`crate::threads::interrupted`), the remaining tasks are skipped.
///
/// # Safety
/// `out` is valid for writes of [tokens, heads head_dim]; no other thread reads or writes
/// this share's blocks of it meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attention(
    qkv: &[f32],
    shape: Heads,
    lengths: &[usize],
    tasks: &[Task],
    bias: Option<&AttentionBias>,
    term: Option<(&dyn ScoreTerm, usize)>,
    out: Buf,
    share: Share,
) {
    let d = shape.head_dim;
    let stride = shape.qkv_width();
    let width = shape.width();
    let group = shape.heads / shape.kv_heads.max(1);
    let tokens: usize = lengths.iter().sum();
    assert_eq!(qkv.len(), tokens * stride, "qkv size");
    assert_eq!(out.len, tokens * width, "context size");
    assert!(group > 0 && shape.heads % group == 0 && shape.heads / group == shape.kv_heads, "kv heads");
    if let Some(b) = bias {
        let longest = lengths.iter().copied().max().unwrap_or(0);
        assert!(b.size >= longest && b.values.len() == shape.heads * b.size * b.size, "bias size");
    }
    let task = |t: &Task| {
        let Task { offset, len, head, ref rows } = *t;
        assert!(offset + len <= tokens && rows.end <= len && head < shape.heads, "attention task");
        assert!(term.is_none() || *rows == (0..len), "a score term takes whole heads");
        if rows.is_empty() || crate::threads::interrupted() {
            return;
        }
        let kv = head / group;
        let q = qkv[(offset + rows.start) * stride + head * d..].as_ptr();
        let k = qkv[offset * stride + width + kv * d..].as_ptr();
        let v = qkv[offset * stride + width + (shape.kv_heads + kv) * d..].as_ptr();
        let add = bias.map(|b| (&b.values[head * b.size * b.size..(head + 1) * b.size * b.size], b.size));
        // SAFETY: rows offset + rows of out exist (checked sizes).
        let context = unsafe { out.at((offset + rows.start) * width + head * d) };
        // SAFETY (both): q addresses rows offset + rows of qkv, k and v rows offset..offset +
        // len (checked sizes) at row stride `stride`, columns within one head; the context
        // block (rows offset + rows, columns head d..(head + 1) d of out) belongs to this
        // task alone.
        if *rows == (0..len) {
            let term = term.map(|(term, layer)| {
                let q = &qkv[offset * stride + head * d..];
                let k = &qkv[offset * stride + width + kv * d..];
                move |scores: &mut [f32]| term.add(layer, head, offset, q, k, stride, len, scores)
            });
            unsafe { whole(shape, stride, width, len, (q, k, v), term, add, context) }
        } else {
            unsafe { streamed(shape, stride, width, len, rows.clone(), (q, k, v), add, context) }
        }
    };
    share.split(tasks.len(), |part| {
        let mine = &tasks[part];
        if share.member.is_none() && share.threads > 1 && mine.len() > 1 {
            mine.par_iter().for_each(task);
        } else {
            mine.iter().for_each(task);
        }
    });
}

/// One head of one sequence whole, in one pass as the reference computes it: scores =
/// scale Q K^T (plus `term`'s and `add`'s), their unnormalized softmax, context = P V,
/// each row scaled by 1 / its sum.
///
/// # Safety
/// `q`, `k` and `v` are valid for reads of `len` rows `stride` apart, `d` values each;
/// `context` for writes of `len` rows `width` apart, `d` values each, this thread's alone.
#[allow(clippy::too_many_arguments)]
unsafe fn whole(
    shape: Heads,
    stride: usize,
    width: usize,
    len: usize,
    (q, k, v): (*const f32, *const f32, *const f32),
    term: Option<impl Fn(&mut [f32])>,
    add: Option<(&[f32], usize)>,
    context: *mut f32,
) {
    let d = shape.head_dim;
    SCORES.with_borrow_mut(|Scratch { scores, maxes: inverse_sums, .. }| {
        scores.clear();
        scores.resize(len * len, 0.0);
        inverse_sums.clear();
        inverse_sums.resize(len, 0.0);
        time(Stage::AttentionProducts, || unsafe {
            // scores = scale * Q K^T
            scores_product(len, len, d, scores.as_mut_ptr(), len, (q, stride), (k, stride), shape.scale);
        });
        shape.cap(scores);
        if let Some(term) = term {
            term(scores);
        }
        time(Stage::Softmax, || {
            unnormalized_softmax_rows(scores, len, (0, 0, len), add, shape.causal, shape.window, inverse_sums)
        });
        time(Stage::AttentionProducts, || unsafe {
            // context = P V
            context_product(len, d, len, context, width, (scores.as_ptr(), len), (v, stride), false);
            for (row, inv) in inverse_sums.iter().enumerate() {
                for x in std::slice::from_raw_parts_mut(context.add(row * width), d) {
                    *x *= inv;
                }
            }
        });
        if scores.capacity() > KEEP_SCORES {
            // A score term's whole head of a long sequence: not kept past the call.
            *scores = Vec::new();
        }
    })
}

/// Query rows `rows` of one head of a sequence of `len` tokens, streamed over blocks of
/// the keys they see (`KEY_BLOCK` at a time, with `online_softmax_rows`): memory in
/// [rows, KEY_BLOCK], whatever the length. Each key block's scores are the reference's;
/// the softmax's maximum and sum are taken block by block.
///
/// # Safety
/// As `whole`, for the query rows `rows` (`q` at the first of them, `context` too).
#[allow(clippy::too_many_arguments)]
unsafe fn streamed(
    shape: Heads,
    stride: usize,
    width: usize,
    len: usize,
    rows: std::ops::Range<usize>,
    (q, k, v): (*const f32, *const f32, *const f32),
    add: Option<(&[f32], usize)>,
    context: *mut f32,
) {
    let d = shape.head_dim;
    let m = rows.len();
    // The keys any of the rows sees.
    let (first, last) = (keys_of(rows.start, len, shape.causal, shape.window), keys_of(rows.end - 1, len, shape.causal, shape.window));
    let keys = first.start.min(last.start)..first.end.max(last.end);
    SCORES.with_borrow_mut(|Scratch { scores, maxes, sums, acc }| {
        scores.clear();
        scores.resize(m * KEY_BLOCK, 0.0);
        maxes.clear();
        maxes.resize(m, f32::NEG_INFINITY);
        sums.clear();
        sums.resize(m, 0.0);
        acc.clear();
        acc.resize(m * d, 0.0);
        for k0 in keys.clone().step_by(KEY_BLOCK) {
            let n = KEY_BLOCK.min(keys.end - k0);
            let scores = &mut scores[..m * n];
            time(Stage::AttentionProducts, || unsafe {
                // scores = scale * Q K^T for this block of keys
                scores_product(m, n, d, scores.as_mut_ptr(), n, (q, stride), (k.add(k0 * stride), stride), shape.scale);
            });
            shape.cap(scores);
            let at = (rows.start, k0, len);
            time(Stage::Softmax, || {
                online_softmax_rows(scores, n, at, add, shape.causal, shape.window, acc, d, maxes, sums)
            });
            time(Stage::AttentionProducts, || unsafe {
                // acc += P V for this block of keys
                context_product(m, d, n, acc.as_mut_ptr(), d, (scores.as_ptr(), n), (v.add(k0 * stride), stride), true);
            });
        }
        for (row, (sums, sum)) in acc.chunks_exact(d.max(1)).zip(sums.iter()).enumerate() {
            let inv = 1.0 / sum;
            // SAFETY: row < m: this task's rows of context.
            let out = unsafe { std::slice::from_raw_parts_mut(context.add(row * width), d) };
            for (o, s) in out.iter_mut().zip(sums) {
                *o = s * inv;
            }
        }
    })
}

/// dst [m, n] (row stride `ld`) = `scale` q [m, d] k [n, d]^T (rows of q and k at their
/// strides): `crate::kernels::attention` where the CPU has AVX-512F, the `gemm` crate
/// elsewhere.
///
/// # Safety
/// The pointers are valid for those reads and writes.
#[allow(clippy::too_many_arguments)]
unsafe fn scores_product(
    m: usize,
    n: usize,
    d: usize,
    dst: *mut f32,
    ld: usize,
    (q, q_rs): (*const f32, usize),
    (k, k_rs): (*const f32, usize),
    scale: f32,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::float32::available() {
        // SAFETY: AVX-512F (checked); as the caller promises.
        return unsafe { crate::kernels::attention::scores(m, n, d, q, q_rs, k, k_rs, scale, dst, ld) };
    }
    unsafe { product(m, n, d, dst, ld, (q, q_rs), (k, k_rs, 1), scale, false) }
}

/// dst [m, d] (row stride `ld`) = p [m, n] v [n, d] (rows of p and v at their strides),
/// plus dst when `add`: as `scores_product`.
///
/// # Safety
/// The pointers are valid for those reads and writes.
#[allow(clippy::too_many_arguments)]
unsafe fn context_product(
    m: usize,
    d: usize,
    n: usize,
    dst: *mut f32,
    ld: usize,
    (p, p_rs): (*const f32, usize),
    (v, v_rs): (*const f32, usize),
    add: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::float32::available() {
        // SAFETY: AVX-512F (checked); as the caller promises.
        return unsafe { crate::kernels::attention::context(m, d, n, p, p_rs, v, v_rs, dst, ld, add) };
    }
    unsafe { product(m, d, n, dst, ld, (p, p_rs), (v, 1, v_rs), 1.0, add) }
}

/// dst [m, n] (row stride `ld`) = `scale` lhs [m, k] rhs [k, n], plus dst when `add`, with
/// the `gemm` crate on this thread: lhs rows (pointer, row stride) with unit column
/// stride, rhs (pointer, column stride, row stride).
///
/// # Safety
/// The pointers are valid for those reads and writes.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    ld: usize,
    (lhs, lhs_rs): (*const f32, usize),
    (rhs, rhs_cs, rhs_rs): (*const f32, usize, usize),
    scale: f32,
    add: bool,
) {
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            ld as isize,
            add,
            lhs,
            1,
            lhs_rs as isize,
            rhs,
            rhs_cs as isize,
            rhs_rs as isize,
            if add { 1.0 } else { 0.0 },
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The most scores a thread keeps between tasks: a whole head of `WHOLE` tokens, and more.
const KEEP_SCORES: usize = 1 << 19;

/// A task's buffers, reused across tasks and calls on a thread: its scores; per query row
/// the running maximum (`whole`: the inverse sum) and sum; the streamed rows' [rows, d] sums.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    maxes: Vec<f32>,
    sums: Vec<f32>,
    acc: Vec<f32>,
}

thread_local! {
    static SCORES: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}
