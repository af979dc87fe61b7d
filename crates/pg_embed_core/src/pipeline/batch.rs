//! Batching, written once for every entry point: inputs grouped by length, packed end to
//! end, run on the compute threads with an interrupt check between batches.

use std::sync::atomic::Ordering::Relaxed;

use super::text::Encoded;
use super::Stats;
use crate::error::{Error, Result};
use crate::models::Batch;

impl Stats {
    /// One call of an entry point with `inputs` inputs of `tokens` tokens in all.
    pub(super) fn count_call(&self, inputs: usize, tokens: usize) {
        self.calls.fetch_add(1, Relaxed);
        self.inputs.fetch_add(inputs as u64, Relaxed);
        self.tokens.fetch_add(tokens as u64, Relaxed);
    }
}

/// `threads` for [`in_batches`]: no compute threads, each batch runs on the calling thread
/// (static models, whose batches cost little more than their tokenization).
pub(super) const CALLING_THREAD: usize = 0;

/// `run` over the inputs (of `lengths` tokens) in length-grouped batches of at most
/// `max_batch_tokens` padded-equivalent tokens (see [`length_batches`]), each on `threads`
/// compute threads (or on the calling thread: [`CALLING_THREAD`]), with `before_batch` on
/// the calling thread before each (interrupt checks); one result per input, in input order.
pub(super) fn in_batches<T: Send>(
    lengths: &[usize],
    max_batch_tokens: usize,
    threads: usize,
    before_batch: &mut dyn FnMut() -> Result<()>,
    run: impl Fn(&[usize]) -> Result<Vec<T>> + Sync,
) -> Result<Vec<T>> {
    let mut out: Vec<Option<T>> = std::iter::repeat_with(|| None).take(lengths.len()).collect();
    let batches = length_batches(lengths, max_batch_tokens);
    let mut all = |out: &mut Vec<Option<T>>| -> Result<()> {
        for batch in &batches {
            before_batch()?;
            let results = match threads {
                CALLING_THREAD => run(batch)?,
                _ => crate::threads::run(threads, || run(batch))??,
            };
            for (&i, r) in batch.iter().zip(results) {
                out[i] = Some(r);
            }
        }
        Ok(())
    };
    match threads {
        CALLING_THREAD => all(&mut out)?,
        _ if batches.len() < 2 => all(&mut out)?,
        // Several batches: the compute threads keep their activations from one to the next.
        _ => crate::threads::keeping_buffers(threads, crate::layers::release_activations, || all(&mut out))??,
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| Error::Inference("a batch returned fewer results than inputs".into())))
        .collect()
}

/// Encoded inputs laid end to end: what [`Batch`] borrows, and each input's pooling skip.
/// Token type ids are empty unless the rows carry them (the tokenizer passes none).
pub(super) struct Packed {
    pub(super) ids: Vec<u32>,
    pub(super) type_ids: Vec<u32>,
    pub(super) bounds: Vec<usize>,
    pub(super) skips: Vec<usize>,
    /// See [`Batch::pads_attended`].
    pub(super) pads_attended: bool,
}

impl Packed {
    /// Encoded rows; type ids are kept when every row has them, one per token.
    pub(super) fn of(rows: &[&Encoded]) -> Self {
        let tokens = rows.iter().map(|r| r.ids.len()).sum();
        let typed = !rows.is_empty() && rows.iter().all(|r| r.types.len() == r.ids.len());
        let mut packed = Packed {
            ids: Vec::with_capacity(tokens),
            type_ids: Vec::with_capacity(tokens),
            bounds: Vec::with_capacity(rows.len() + 1),
            skips: Vec::with_capacity(rows.len()),
            pads_attended: false,
        };
        packed.bounds.push(0);
        for row in rows {
            packed.ids.extend_from_slice(&row.ids);
            if typed {
                packed.type_ids.extend_from_slice(&row.types);
            }
            packed.bounds.push(packed.ids.len());
            packed.skips.push(row.skip);
        }
        packed
    }

    pub(super) fn batch(&self) -> Batch<'_> {
        Batch { pads_attended: self.pads_attended, ..Batch::text(&self.ids, &self.type_ids, &self.bounds) }
    }
}

/// Input indices grouped into batches by length: sorted by token count (ties in input
/// order), each batch as large as fits `max_batch_tokens` padded tokens (count x its
/// longest), at least one input each.
pub fn length_batches(lengths: &[usize], max_batch_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        // Sorted ascending: the newest input is the batch's longest.
        if !current.is_empty() && (current.len() + 1) * lengths[i] > max_batch_tokens {
            batches.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}
