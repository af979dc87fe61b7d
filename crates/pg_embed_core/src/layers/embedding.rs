//! Embedding lookups on the host (plain row copies from the table) and the checks of a
//! packed batch's sequence boundaries.

/// A table of `rows` embeddings of `width` values.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Embedding {
    table: crate::buffer::Floats,
    rows: usize,
    width: usize,
}

impl Embedding {
    /// `table` [rows, width] row-major.
    pub fn new(table: Vec<f32>, rows: usize, width: usize) -> candle_core::Result<Self> {
        if Some(table.len()) != rows.checked_mul(width) {
            candle_core::bail!("an embedding table of {} values is not [{rows}, {width}]", table.len());
        }
        Ok(Embedding { table: table.into(), rows, width })
    }

    /// From a [rows, width] tensor, copied once: straight into the prepared file when a
    /// model is being built into one (the largest tensor of most models is this table).
    pub fn from_tensor(t: &candle_core::Tensor) -> candle_core::Result<Self> {
        let (rows, width) = t.dims2()?;
        let t = t.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (storage, layout) = t.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("an embedding table is read on the CPU")
        };
        let values = &cpu.as_slice::<f32>()?[layout.start_offset()..][..rows * width];
        let table = crate::buffer::Floats::filled(values.len(), |dst| dst.copy_from_slice(values));
        Ok(Embedding { table, rows, width })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn width(&self) -> usize {
        self.width
    }

    fn row(&self, id: u32) -> candle_core::Result<&[f32]> {
        let id = id as usize;
        if id >= self.rows {
            candle_core::bail!("index {id} is outside an embedding of {} rows", self.rows);
        }
        Ok(&self.table[id * self.width..(id + 1) * self.width])
    }

    /// Token `t`'s row, the row of `ids[t]`, read in place: what `gather(ids)` holds at
    /// [t], without the copy. An error (as `gather`'s) for an id outside the table.
    pub fn rows_of<'a>(&'a self, ids: &'a [u32]) -> candle_core::Result<impl Fn(usize) -> &'a [f32] + 'a> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.rows) {
            self.row(id)?;
        }
        let (table, width) = (&self.table[..], self.width);
        Ok(move |t: usize| {
            let id = ids[t] as usize;
            &table[id * width..(id + 1) * width]
        })
    }

    /// The rows of `ids`, end to end: [ids, width].
    pub fn gather(&self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(ids.len() * self.width);
        for &id in ids {
            out.extend_from_slice(self.row(id)?);
        }
        Ok(out)
    }

    /// x[i] += the row of ids[i], for every row of `x` ([ids, width]).
    pub fn add(&self, ids: impl IntoIterator<Item = u32>, x: &mut [f32]) -> candle_core::Result<()> {
        let mut rows = x.chunks_exact_mut(self.width.max(1));
        for id in ids {
            let Some(out) = rows.next() else { candle_core::bail!("more ids than rows") };
            for (o, v) in out.iter_mut().zip(self.row(id)?) {
                *o += v;
            }
        }
        Ok(())
    }
}

/// The lengths of the sequences of a packed batch of `tokens` tokens from its cumulative
/// boundaries (`bounds[0]` = 0, sequence i is tokens bounds[i]..bounds[i + 1], the last
/// bound `tokens`).
pub fn lengths_of(bounds: &[usize], tokens: usize) -> candle_core::Result<Vec<usize>> {
    match bounds {
        [] if tokens == 0 => return Ok(Vec::new()),
        [0, ..] if bounds.last() == Some(&tokens) => {}
        _ => candle_core::bail!("sequence boundaries {bounds:?} do not run from 0 to {tokens}"),
    }
    bounds
        .windows(2)
        .map(|w| match w[1].checked_sub(w[0]) {
            Some(len) => Ok(len),
            None => candle_core::bail!("sequence boundaries {bounds:?} go backwards"),
        })
        .collect()
}
