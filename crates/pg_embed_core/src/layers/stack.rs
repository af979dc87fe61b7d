//! The stack of transformer layers over packed tokens, and how its work is shared out.
//!
//! A batch of several sequences is split into one group of whole sequences per compute
//! thread, each group on single-threaded products with no synchronisation between layers;
//! one or a few sequences run on all the threads as one team (`crate::threads::team`) that
//! shares out every step: columns of a product, rows of a norm, sequences and heads of
//! attention.

use rayon::prelude::*;

use super::activation::Activation;
use super::attention::{
    attention, attention_tasks, rotate, AttentionBias, Heads, RelativeBias, Rotary, ScoreTerm,
};
use super::linear::Linear;
use super::norm::Norm;
use super::scratch::{rows_shared, zeroed, Buf, Share, ACTIVATIONS, KEEP_ACTIVATIONS};

/// Where a layer's norms sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NormPosition {
    /// After each block's residual sum (BERT, NomicBERT): `attention_norm` after attention,
    /// `output_norm` after the MLP.
    Post,
    /// Before each block, on its input (T5, CLIP): `attention_norm` before attention,
    /// `output_norm` before the MLP; the residual stream itself is not normalised.
    Pre,
}

/// A layer's feed-forward block.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum Mlp {
    /// down(act(up(x))).
    Plain { up: Linear, down: Linear },
    /// down(act(gate(x)) * up(x)), with gate and up side by side in one product: `gate_up`
    /// [2 ff, hidden], the gate's ff outputs first.
    Gated { gate_up: Linear, down: Linear },
}

impl Mlp {
    /// Width of the first product's output.
    #[inline]
    fn inner(&self) -> usize {
        match self {
            Mlp::Plain { up, .. } => up.outputs(),
            Mlp::Gated { gate_up, .. } => gate_up.outputs(),
        }
    }

    /// Width of the gated values (0 for a plain MLP).
    #[inline]
    fn gated(&self) -> usize {
        match self {
            Mlp::Plain { .. } => 0,
            Mlp::Gated { gate_up, .. } => gate_up.outputs() / 2,
        }
    }
}

/// One transformer layer.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Layer {
    /// Q, K and V side by side: [heads head_dim + 2 kv_heads head_dim, hidden].
    pub qkv: Linear,
    pub attention_out: Linear,
    /// After attention (post-norm) or before it (pre-norm).
    pub attention_norm: Norm,
    pub mlp: Mlp,
    /// After the MLP (post-norm) or before it (pre-norm).
    pub output_norm: Norm,
    /// Norms over each query head and each key head (of `head_dim` values), before rotary
    /// positions (Qwen3's and Gemma 3's q_norm and k_norm).
    pub qk_norms: Option<(Norm, Norm)>,
    /// Norms over the attention block's output and the MLP's output, each before its
    /// residual sum (Gemma 3's post_attention_layernorm and post_feedforward_layernorm, in a
    /// pre-norm stack: the "sandwich").
    pub post_norms: Option<(Norm, Norm)>,
}

impl Layer {
    fn linears(&self) -> [&Linear; 4] {
        let (first, down) = match &self.mlp {
            Mlp::Plain { up, down } => (up, down),
            Mlp::Gated { gate_up, down } => (gate_up, down),
        };
        [&self.qkv, &self.attention_out, first, down]
    }
}

/// What a stack is, besides its layers.
pub struct StackSpec {
    pub hidden: usize,
    pub heads: usize,
    /// Key/value heads: `heads` for plain attention, fewer (dividing it) for grouped-query.
    pub kv_heads: usize,
    pub head_dim: usize,
    pub activation: Activation,
    pub norm_position: NormPosition,
    /// A norm over the last layer's output (pre-norm stacks).
    pub final_norm: Option<Norm>,
    /// Scores scaled by 1 / sqrt(head_dim) (T5's are not).
    pub scaled: bool,
    pub causal: bool,
    pub rotary: Option<Rotary>,
    /// A bias per head by relative position, added to every layer's scores.
    pub relative_bias: Option<RelativeBias>,
    /// Sliding-window attention in the layers between the global ones.
    pub sliding: Option<Sliding>,
    /// The scale of the scores instead of 1 / sqrt(head_dim) (with `scaled`).
    pub scale: Option<f32>,
    /// Soft-capping of the scores (Gemma 2): cap tanh(score / cap).
    pub softcap: Option<f32>,
}

/// Layers that attend within a window: each layer marked in `layers` sees only the keys
/// at most `window` positions from each query (the others attend globally), with its own
/// rotary positions when `rotary` is given (the stack's otherwise).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Sliding {
    /// Whether layer i slides, one per layer.
    pub layers: Vec<bool>,
    pub window: usize,
    pub rotary: Option<Rotary>,
}

impl Sliding {
    /// Every layer slides but every `global_every`-th from layer 0 (ModernBERT's pattern).
    pub fn between_global(global_every: usize, count: usize, window: usize, rotary: Option<Rotary>) -> Self {
        let layers = (0..count).map(|i| global_every == 0 || !i.is_multiple_of(global_every)).collect();
        Sliding { layers, window, rotary }
    }
}

impl StackSpec {
    /// The BERT family's: post-norm, scaled, bidirectional, no positions in the stack.
    pub fn post_norm(hidden: usize, heads: usize, activation: Activation) -> Self {
        StackSpec {
            hidden,
            heads,
            kv_heads: heads,
            head_dim: if heads == 0 { 0 } else { hidden / heads },
            activation,
            norm_position: NormPosition::Post,
            final_norm: None,
            scaled: true,
            causal: false,
            rotary: None,
            relative_bias: None,
            sliding: None,
            scale: None,
            softcap: None,
        }
    }
}

/// A stack of layers, every architecture's (see the module's parameters in `StackSpec`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Stack {
    pub layers: Vec<Layer>,
    pub hidden: usize,
    shape: Heads,
    activation: Activation,
    position: NormPosition,
    final_norm: Option<Norm>,
    pub(super) rotary: Option<Rotary>,
    pub(super) relative_bias: Option<RelativeBias>,
    sliding: Option<Sliding>,
}

/// What one call adds to the layers: the attention bias and the rotary table.
pub(super) struct Call<'a> {
    pub bias: Option<&'a AttentionBias<'a>>,
    /// (cos, sin) [longest, head_dim / 2].
    pub rope: Option<(&'a [f32], &'a [f32])>,
    /// The sliding-window layers' own (cos, sin), when they have their own.
    pub local_rope: Option<(&'a [f32], &'a [f32])>,
    /// A term added to the scores in this call, instead of the stack's own.
    pub term: Option<&'a dyn ScoreTerm>,
    /// The row of `rope` each token of the call takes, when the caller gives the rows
    /// (otherwise token i of a sequence takes row i).
    pub rope_rows: Option<&'a [u32]>,
}

/// A score term called for a group of sequences that starts at token `first` of the batch.
struct Shifted<'a> {
    term: &'a dyn ScoreTerm,
    first: usize,
}

impl ScoreTerm for Shifted<'_> {
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
    ) {
        self.term.add(layer, head, self.first + offset, q, k, stride, len, scores)
    }
}

impl Stack {
    /// The stack, with every width checked against the spec.
    pub fn new(layers: Vec<Layer>, spec: StackSpec) -> candle_core::Result<Self> {
        let StackSpec { hidden, heads, kv_heads, head_dim, .. } = spec;
        if hidden == 0 || heads == 0 || head_dim == 0 || kv_heads == 0 || heads % kv_heads != 0 {
            candle_core::bail!(
                "a stack of width {hidden} with {heads} heads of {head_dim} and {kv_heads} key/value heads"
            );
        }
        let shape = Heads {
            heads,
            kv_heads,
            head_dim,
            scale: match (spec.scaled, spec.scale) {
                (true, Some(scale)) => scale,
                (true, None) => 1.0 / (head_dim as f32).sqrt(),
                (false, _) => 1.0,
            },
            causal: spec.causal,
            window: None,
            softcap: spec.softcap,
        };
        if spec.softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            candle_core::bail!("a score soft-cap of {:?} is not a positive number", spec.softcap);
        }
        if spec.rotary.as_ref().is_some_and(|r| head_dim % 2 != 0 || r.half() != head_dim / 2) {
            candle_core::bail!("rotary positions need an even head width, not {head_dim}");
        }
        if let Some(s) = &spec.sliding {
            if s.layers.len() != layers.len() {
                candle_core::bail!("{} sliding-window flags for {} layers", s.layers.len(), layers.len());
            }
            if s.rotary.as_ref().is_some_and(|r| head_dim % 2 != 0 || r.half() != head_dim / 2) {
                candle_core::bail!("rotary positions need an even head width, not {head_dim}");
            }
        }
        if spec.relative_bias.as_ref().is_some_and(|b| b.heads() != heads) {
            candle_core::bail!("a relative position bias for other than {heads} heads");
        }
        if spec.final_norm.as_ref().is_some_and(|n| n.width() != hidden) {
            candle_core::bail!("a final norm of other than {hidden} values");
        }
        for (i, l) in layers.iter().enumerate() {
            let mlp_ok = match &l.mlp {
                Mlp::Plain { up, down } => {
                    up.inputs() == hidden && up.outputs() > 0 && down.inputs() == up.outputs()
                }
                Mlp::Gated { gate_up, down } => {
                    gate_up.inputs() == hidden
                        && gate_up.outputs() > 0
                        && gate_up.outputs() % 2 == 0
                        && down.inputs() == gate_up.outputs() / 2
                }
            };
            let down = l.linears()[3];
            let qk_ok =
                l.qk_norms.as_ref().is_none_or(|(q, k)| q.width() == head_dim && k.width() == head_dim);
            let post_ok =
                l.post_norms.as_ref().is_none_or(|(a, m)| a.width() == hidden && m.width() == hidden);
            if l.qkv.inputs() != hidden
                || l.qkv.outputs() != shape.qkv_width()
                || l.attention_out.inputs() != shape.width()
                || l.attention_out.outputs() != hidden
                || l.attention_norm.width() != hidden
                || l.output_norm.width() != hidden
                || !mlp_ok
                || down.outputs() != hidden
                || !qk_ok
                || !post_ok
            {
                candle_core::bail!(
                    "layer {i}'s sizes do not fit a stack of width {hidden} with {heads} heads"
                );
            }
        }
        Ok(Stack {
            layers,
            hidden,
            shape,
            activation: spec.activation,
            position: spec.norm_position,
            final_norm: spec.final_norm,
            rotary: spec.rotary,
            relative_bias: spec.relative_bias,
            sliding: spec.sliding,
        })
    }

    /// As `forward`, with the sizes checked first: `x` [tokens, hidden], the sequences of
    /// `lengths` end to end.
    pub fn try_forward(&self, x: &mut [f32], lengths: &[usize]) -> candle_core::Result<()> {
        self.try_forward_with(x, lengths, None)
    }

    /// As `try_forward`, with a score term (see `forward_with`).
    pub fn try_forward_with(
        &self,
        x: &mut [f32],
        lengths: &[usize],
        term: Option<&dyn ScoreTerm>,
    ) -> candle_core::Result<()> {
        let tokens = lengths.iter().try_fold(0usize, |a, l| a.checked_add(*l));
        if tokens.and_then(|t| t.checked_mul(self.hidden)) != Some(x.len()) {
            candle_core::bail!("{} values are not the {:?} tokens of width {}", x.len(), tokens, self.hidden);
        }
        self.forward_with(x, lengths, None, term);
        Ok(())
    }

    /// Runs every layer over `x`: [tokens, hidden], the sequences of `lengths` end to end.
    /// `bias`, when given, is added to every layer's scores instead of the stack's own
    /// relative position bias.
    pub fn forward(&self, x: &mut [f32], lengths: &[usize], bias: Option<&AttentionBias>) {
        self.forward_with(x, lengths, bias, None)
    }

    /// As `forward`, with `term` added to every layer's scores in this call (XLNet's
    /// relative attention, DeBERTa's disentangled attention).
    pub fn forward_with(
        &self,
        x: &mut [f32],
        lengths: &[usize],
        bias: Option<&AttentionBias>,
        term: Option<&dyn ScoreTerm>,
    ) {
        let tokens: usize = lengths.iter().sum();
        assert_eq!(x.len(), tokens * self.hidden, "packed input size");
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let own = match (bias, &self.relative_bias) {
            (None, Some(table)) => Some(table.values(longest)),
            _ => None,
        };
        let own = own.as_deref().map(|values| AttentionBias { values, size: longest });
        let local = self.sliding.as_ref().and_then(|s| s.rotary.as_ref());
        // Frequencies that depend on a sequence's length (dynamic NTK, LongRoPE): a table
        // of each sequence's own, token t at row t, so that a batch gives what each of its
        // sequences gives alone.
        let varies = self.rotary.iter().chain(local).any(Rotary::varies);
        let table = |r: &Rotary| if varies { r.rows(lengths) } else { r.table(longest) };
        let rope = self.rotary.as_ref().map(table);
        let local_rope = local.map(table);
        let rows: Option<Vec<u32>> = varies.then(|| (0..tokens as u32).collect());
        let call = Call {
            bias: bias.or(own.as_ref()),
            rope: rope.as_ref().map(|(c, s)| (&c[..], &s[..])),
            local_rope: local_rope.as_ref().map(|(c, s)| (&c[..], &s[..])),
            term,
            rope_rows: rows.as_deref(),
        };
        self.dispatch(x, lengths, &call);
    }

    /// As `try_forward`, with rotary positions the caller computes: token t of the batch is
    /// rotated by row `rows[t]` of (`cos`, `sin`), each [table rows, head_dim / 2] (DINOv3's
    /// 2-D positions over an image's patch grid; a row of cos 1 and sin 0 leaves a token as
    /// it is). The stack's own rotary table is not used.
    pub fn try_forward_rotated(
        &self,
        x: &mut [f32],
        lengths: &[usize],
        cos: &[f32],
        sin: &[f32],
        rows: &[u32],
    ) -> candle_core::Result<()> {
        let tokens = lengths.iter().try_fold(0usize, |a, l| a.checked_add(*l));
        if tokens.and_then(|t| t.checked_mul(self.hidden)) != Some(x.len()) || tokens != Some(rows.len()) {
            candle_core::bail!("{} values and {} rotary rows are not the {:?} tokens of width {}", x.len(), rows.len(), tokens, self.hidden);
        }
        let half = self.shape.head_dim / 2;
        if self.sliding.is_some() || self.shape.head_dim % 2 != 0 || cos.len() != sin.len() || cos.len() % half != 0 {
            candle_core::bail!("rotary tables of {} and {} values for heads of {}", cos.len(), sin.len(), self.shape.head_dim);
        }
        if rows.iter().any(|&r| r as usize >= cos.len() / half) {
            candle_core::bail!("a rotary row beyond the table's {} rows", cos.len() / half);
        }
        let call = Call { bias: None, rope: Some((cos, sin)), local_rope: None, term: None, rope_rows: Some(rows) };
        self.dispatch(x, lengths, &call);
        Ok(())
    }

    /// The layers over `x` as the threads are: several sequences in chunks, each on one
    /// thread, or one team over all of it.
    fn dispatch(&self, x: &mut [f32], lengths: &[usize], call: &Call) {
        let threads = rayon::current_num_threads().max(1);
        let tokens: usize = lengths.iter().sum();
        if threads > 1 && lengths.len() >= 2 * threads {
            // Chunks of whole sequences, at least two per thread, each run by one thread on
            // its own; the pool's threads take them as they come free, so that one slow
            // chunk does not hold the others up at the end. (Measured on 2 threads, all-
            // MiniLM-L6-v2 bfloat16 batches: the same as one group of equal tokens per
            // thread, 1,174-1,204 against 1,155-1,190 sentences/s; meant for many threads,
            // where a group per thread is a few sequences of unequal cost.)
            let most = CHUNK_TOKENS.min(tokens.div_ceil(2 * threads)).max(1);
            let chunks = chunks(x, lengths, self.hidden, most);
            chunks.into_par_iter().with_max_len(1).for_each(|(x, lengths, first)| self.run_chunk(x, lengths, call, first));
        } else if threads == 1 {
            for (x, lengths, first) in chunks(x, lengths, self.hidden, CHUNK_TOKENS) {
                self.run_chunk(x, lengths, call, first);
            }
        } else {
            self.run(x, lengths, call, threads);
        }
    }

    /// The layers over a chunk of whole sequences on this thread (`chunks`). `first`: the
    /// token the chunk starts at in the batch, which a score term sees its offsets from.
    fn run_chunk(&self, x: &mut [f32], lengths: &[usize], call: &Call, first: usize) {
        let shifted = call.term.map(|term| Shifted { term, first });
        let tokens: usize = lengths.iter().sum();
        let rope_rows = call.rope_rows.map(|rows| &rows[first..first + tokens]);
        let call = Call { term: shifted.as_ref().map(|s| s as &dyn ScoreTerm), rope_rows, ..*call };
        self.run(x, lengths, &call, 1);
    }

    /// The layers over `x` on `threads` threads. With several threads and packed weights,
    /// the pool's threads run the layers as one team (`crate::threads::team`) that splits
    /// every step into chunks and waits for them between steps, with no fork and join per
    /// step (measured, single-sentence p50 over the bench corpus on 2 threads: 7.5 ms
    /// against 10.4 ms with a fork and join per step, of which the product's prefetch,
    /// added at the same time, accounts for 12-15%); otherwise each step forks and joins.
    /// (Every weight kind runs in a team; torch-layout weights keep the fork and join,
    /// where the `gemm` crate shares each product out itself.)
    fn run(&self, x: &mut [f32], lengths: &[usize], call: &Call, threads: usize) {
        let teamed = threads > 1 && self.layers.iter().all(|l| l.linears().iter().all(|w| w.is_packed()));
        self.run_as(x, lengths, call, threads, teamed)
    }

    pub(super) fn run_as(&self, x: &mut [f32], lengths: &[usize], call: &Call, threads: usize, teamed: bool) {
        let tokens: usize = lengths.iter().sum();
        if tokens == 0 {
            return;
        }
        let h = self.hidden;
        let normed = if self.position == NormPosition::Pre { h } else { 0 };
        let inner = self.layers.iter().map(|l| l.mlp.inner()).max().unwrap_or(0);
        let gated = self.layers.iter().map(|l| l.mlp.gated()).max().unwrap_or(0);
        let need = tokens * (self.shape.qkv_width() + self.shape.width() + h + normed + inner + gated);
        let mut scratch = ACTIVATIONS.take();
        if scratch.capacity() < need {
            scratch = zeroed(need);
        }
        scratch.resize(need, 0.0);
        let (qkv, rest) = scratch.split_at_mut(tokens * self.shape.qkv_width());
        let (context, rest) = rest.split_at_mut(tokens * self.shape.width());
        let (attended, rest) = rest.split_at_mut(tokens * h);
        let (normed, rest) = rest.split_at_mut(tokens * normed);
        let (inner, glu) = rest.split_at_mut(tokens * inner);
        let buffers = Buffers {
            x: Buf::of(x),
            qkv: Buf::of(qkv),
            context: Buf::of(context),
            attended: Buf::of(attended),
            normed: Buf::of(normed),
            inner: Buf::of(inner),
            glu: Buf::of(glu),
        };
        let positions: std::borrow::Cow<[u32]> = match (call.rope_rows, call.rope.or(call.local_rope)) {
            (Some(rows), _) => rows.into(),
            (None, Some(_)) => lengths.iter().flat_map(|&len| 0..len as u32).collect::<Vec<_>>().into(),
            (None, None) => Vec::new().into(),
        };
        if teamed && threads == rayon::current_num_threads() {
            crate::threads::team(self.step_count(call), |member| {
                // SAFETY: the buffers outlive the team; every step's shares are disjoint
                // and the team meets between steps (see `steps`).
                unsafe {
                    self.steps(
                        &buffers,
                        lengths,
                        call,
                        &positions,
                        Share { member: Some(member), threads: 1 },
                    )
                }
            });
        } else {
            // SAFETY: this thread alone runs the steps; the buffers outlive them.
            unsafe { self.steps(&buffers, lengths, call, &positions, Share { member: None, threads }) }
        }
        if scratch.capacity() <= KEEP_ACTIVATIONS || crate::threads::keeps_buffers() {
            ACTIVATIONS.set(scratch);
        }
    }

    /// The steps `steps` takes in `call` (each `Share::split` one team step).
    fn step_count(&self, call: &Call) -> usize {
        let per_layer = |(i, l): (usize, &Layer)| {
            let rope = match self.window_of(i) {
                Some(Sliding { rotary: Some(_), .. }) => call.local_rope.is_some(),
                _ => call.rope.is_some(),
            };
            7 + usize::from(rope || l.qk_norms.is_some())
                + usize::from(l.mlp.gated() > 0)
                + 2 * usize::from(l.post_norms.is_some())
        };
        self.layers.iter().enumerate().map(per_layer).sum::<usize>() + usize::from(self.final_norm.is_some())
    }

    /// The window of the sliding layers (keys at most this many positions from each
    /// query), if any layer slides.
    pub fn sliding_window(&self) -> Option<usize> {
        self.sliding.as_ref().filter(|s| s.layers.iter().any(|&l| l)).map(|s| s.window)
    }

    /// The sliding window of layer `i`, if it slides.
    fn window_of(&self, i: usize) -> Option<&Sliding> {
        self.sliding.as_ref().filter(|s| s.layers.get(i) == Some(&true))
    }

    /// The layers, step by step: each step reads buffers no thread writes in it and writes
    /// chunks of one buffer (columns of a product, rows of a norm, sequences and heads of
    /// attention); in a team, a step ends when all its chunks are done.
    ///
    /// # Safety
    /// The buffers are valid, of the sizes `run` makes, and not used elsewhere meanwhile;
    /// every thread of the team runs this with the same arguments.
    unsafe fn steps(&self, b: &Buffers, lengths: &[usize], call: &Call, positions: &[u32], share: Share) {
        let h = self.hidden;
        let tokens = b.x.len / h;
        let act = self.activation;
        let activation = |rows: &mut [f32]| act.apply(rows);
        let tasks = attention_tasks(lengths, self.shape.heads, call.term.is_some());
        let pre = self.position == NormPosition::Pre;
        let Heads { heads, kv_heads, head_dim, .. } = self.shape;
        let (qkv_width, width) = (self.shape.qkv_width(), self.shape.width());
        unsafe {
            for (index, layer) in self.layers.iter().enumerate() {
                let sliding = self.window_of(index);
                let shape = Heads { window: sliding.map(|s| s.window), ..self.shape };
                let rope = match sliding {
                    Some(Sliding { rotary: Some(_), .. }) => call.local_rope,
                    _ => call.rope,
                };
                let input = if pre {
                    normed_rows(b.x, b.normed, h, share, &layer.attention_norm);
                    b.normed
                } else {
                    b.x
                };
                layer.qkv.forward_shared(input.get(), None, None, b.qkv, share);
                if rope.is_some() || layer.qk_norms.is_some() {
                    let half = head_dim / 2;
                    rows_shared(b.qkv, qkv_width, share, &|first, rows| {
                        for (i, row) in rows.chunks_exact_mut(qkv_width).enumerate() {
                            if let Some((q_norm, k_norm)) = &layer.qk_norms {
                                // Each head's values are one row of the norm.
                                q_norm.forward(&mut row[..width]);
                                k_norm.forward(&mut row[width..width + kv_heads * head_dim]);
                            }
                            if let Some((cos, sin)) = rope {
                                let p = positions[first + i] as usize;
                                let (cos, sin) =
                                    (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
                                rotate(row, heads, head_dim, cos, sin);
                                rotate(&mut row[width..], kv_heads, head_dim, cos, sin);
                            }
                        }
                    });
                }
                let term = call.term.map(|t| (t, index));
                attention(b.qkv.get(), shape, lengths, &tasks, call.bias, term, b.context, share);
                match &layer.post_norms {
                    None => layer.attention_out.forward_shared(
                        b.context.get(),
                        Some(b.x.get()),
                        None,
                        b.attended,
                        share,
                    ),
                    Some((after_attention, _)) => {
                        layer.attention_out.forward_shared(b.context.get(), None, None, b.attended, share);
                        normed_residual(b.attended, b.x, h, share, after_attention);
                    }
                }
                let mlp_input = if pre {
                    normed_rows(b.attended, b.normed, h, share, &layer.output_norm);
                    b.normed
                } else {
                    rows_shared(b.attended, h, share, &|_, rows| layer.attention_norm.forward(rows));
                    b.attended
                };
                match &layer.mlp {
                    Mlp::Plain { up, down } => {
                        let inner = Buf { ptr: b.inner.ptr, len: tokens * up.outputs() };
                        up.forward_shared(mlp_input.get(), None, Some(&activation), inner, share);
                        let residual = layer.post_norms.is_none().then(|| b.attended.get());
                        down.forward_shared(inner.get(), residual, None, b.x, share);
                    }
                    Mlp::Gated { gate_up, down } => {
                        let ff = gate_up.outputs() / 2;
                        let inner = Buf { ptr: b.inner.ptr, len: tokens * 2 * ff };
                        let glu = Buf { ptr: b.glu.ptr, len: tokens * ff };
                        gate_up.forward_shared(mlp_input.get(), None, None, inner, share);
                        let both = inner.get();
                        rows_shared(glu, ff, share, &|first, rows| {
                            let _activation = crate::stages::Timer::start(crate::stages::Stage::Activation);
                            for (i, row) in rows.chunks_exact_mut(ff).enumerate() {
                                let from = &both[(first + i) * 2 * ff..(first + i + 1) * 2 * ff];
                                act.gated(&from[..ff], &from[ff..], row);
                            }
                        });
                        let residual = layer.post_norms.is_none().then(|| b.attended.get());
                        down.forward_shared(glu.get(), residual, None, b.x, share);
                    }
                }
                if let Some((_, after_mlp)) = &layer.post_norms {
                    normed_residual(b.x, b.attended, h, share, after_mlp);
                }
                if !pre {
                    rows_shared(b.x, h, share, &|_, rows| layer.output_norm.forward(rows));
                }
            }
            if let Some(norm) = &self.final_norm {
                rows_shared(b.x, h, share, &|_, rows| norm.forward(rows));
            }
        }
    }
}

/// `x` ([tokens, width], the sequences of `lengths` end to end) cut into chunks of whole
/// sequences of at most `most` tokens each (a longer sequence alone), each with its
/// sequences' lengths and the token it starts at: a chunk's activations then stay in the
/// core's cache from one step to the next. (Every step works on rows, so the results are the
/// same in any chunking.)
fn chunks<'a>(
    x: &'a mut [f32],
    lengths: &'a [usize],
    width: usize,
    most: usize,
) -> Vec<(&'a mut [f32], &'a [usize], usize)> {
    let mut out = Vec::new();
    let (mut rest, mut rest_lengths, mut first) = (x, lengths, 0);
    while !rest_lengths.is_empty() {
        let mut count = 0;
        let mut taken = 0;
        while count < rest_lengths.len() && (count == 0 || taken + rest_lengths[count] <= most) {
            taken += rest_lengths[count];
            count += 1;
        }
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(taken * width);
        out.push((head, &rest_lengths[..count], first));
        rest = tail;
        rest_lengths = &rest_lengths[count..];
        first += taken;
    }
    out
}

/// The most tokens of a chunk (`chunks`): a chunk's
/// activations then stay in the core's L2 between steps (384 wide: 3.5 MB, mostly touched a
/// step at a time). (Measured, all-MiniLM-L6-v2 bfloat16 batches of the bench corpus, 2
/// threads of a Sapphire Rapids: 920-937 sentences/s with 256, 921-925 with 512, 839-913 with
/// 128, 818-877 with the whole group at once.)
const CHUNK_TOKENS: usize = 256;

/// The activations of one forward pass, shared by the threads of a team (`normed` and `glu`
/// empty where the stack has no use for them).
struct Buffers {
    x: Buf,
    qkv: Buf,
    context: Buf,
    attended: Buf,
    normed: Buf,
    inner: Buf,
    glu: Buf,
}

/// `to` = `norm`(`from`), row by row, shared as `share` says.
///
/// # Safety
/// As `rows_shared` for `to`; no thread writes `from` meanwhile; they do not overlap.
unsafe fn normed_rows(from: Buf, to: Buf, width: usize, share: Share, norm: &Norm) {
    unsafe {
        let from = from.get();
        rows_shared(to, width, share, &|first, rows| {
            rows.copy_from_slice(&from[first * width..first * width + rows.len()]);
            norm.forward(rows);
        })
    }
}

/// `to` = `norm`(`to`) + `residual`, row by row, shared as `share` says (a block's output
/// normalised before its residual sum).
///
/// # Safety
/// As `rows_shared` for `to`; no thread writes `residual` meanwhile; they do not overlap.
unsafe fn normed_residual(to: Buf, residual: Buf, width: usize, share: Share, norm: &Norm) {
    unsafe {
        let residual = residual.get();
        rows_shared(to, width, share, &|first, rows| {
            norm.forward(rows);
            for (v, r) in rows.iter_mut().zip(&residual[first * width..]) {
                *v += r;
            }
        })
    }
}
