//! The padded seam of the backbones that run on packed tokens: a right-padded [batch, seq]
//! batch is packed (its real tokens end to end), run, and spread back to [batch, seq,
//! hidden] with zeros at the padding. Kept while the pipeline still pads.

use candle_core::Tensor;

/// `packed(ids, type_ids, bounds)` over the real tokens of the right-padded `ids` and
/// `type_ids` ([batch, seq], `mask` 1 on real tokens), spread back to [batch, seq, hidden].
pub(crate) fn forward(
    ids: &Tensor,
    type_ids: &Tensor,
    mask: &Tensor,
    hidden: usize,
    packed: impl FnOnce(&[u32], &[u32], &[usize]) -> candle_core::Result<Vec<f32>>,
) -> candle_core::Result<Tensor> {
    let (batch, seq) = ids.dims2()?;
    let lengths = super::encoder::row_lengths(mask)?;
    let ids_host = ids.flatten_all()?.to_vec1::<u32>()?;
    let types_host = type_ids.flatten_all()?.to_vec1::<u32>()?;
    if types_host.len() != ids_host.len() {
        candle_core::bail!("token type ids of shape {:?} for ids of shape {:?}", type_ids.dims(), ids.dims());
    }
    let tokens: usize = lengths.iter().sum();
    let (mut p_ids, mut p_types) = (Vec::with_capacity(tokens), Vec::with_capacity(tokens));
    let mut bounds = Vec::with_capacity(batch + 1);
    bounds.push(0);
    for (row, &len) in lengths.iter().enumerate() {
        p_ids.extend_from_slice(&ids_host[row * seq..row * seq + len]);
        p_types.extend_from_slice(&types_host[row * seq..row * seq + len]);
        bounds.push(p_ids.len());
    }
    let states = packed(&p_ids, &p_types, &bounds)?;
    if states.len() != tokens * hidden {
        candle_core::bail!("{} hidden values for {tokens} tokens of width {hidden}", states.len());
    }
    let mut out = vec![0f32; batch * seq * hidden];
    for (row, (&len, &at)) in lengths.iter().zip(&bounds).enumerate() {
        out[row * seq * hidden..(row * seq + len) * hidden]
            .copy_from_slice(&states[at * hidden..(at + len) * hidden]);
    }
    Tensor::from_vec(out, (batch, seq, hidden), ids.device())
}
