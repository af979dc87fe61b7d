//! [`Shared`]: the buffer every weight of a loaded model lives in. It is either this
//! process's own memory (a model built from its safetensors files) or a slice of a prepared
//! file mapped read-only and shared by every backend (see [`crate::prepared::file`]). The
//! kernels read it as a plain slice and never know which.
//!
//! Serializing a `Shared` (inside [`crate::prepared::file::write`]) records the buffer to be
//! written in the file's data section and emits only `[offset, length]`; deserializing one
//! (inside [`crate::prepared::file::Mapped::restore`]) turns `[offset, length]` back into a
//! slice of the mapping, checked against its bounds and alignment. Outside those two calls
//! both are an error.

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Plain element types a buffer may hold: any bit pattern is a valid value, no padding, no
/// pointers.
///
/// # Safety
/// Implement only for `Copy` types without padding or invalid bit patterns.
pub unsafe trait Element: Copy + Send + Sync + 'static {}

// SAFETY: every bit pattern is an f32; no padding.
unsafe impl Element for f32 {}

/// Where the data section of a file being written or mapped starts, and the alignment of
/// every buffer in it (a cache line: the kernels' 512-bit loads).
pub const ALIGN: usize = 64;

/// A read-only buffer of `T`: owned, or a slice of a shared mapping.
pub struct Shared<T: Element> {
    repr: Repr<T>,
}

enum Repr<T: Element> {
    Owned(Vec<T>),
    Mapped {
        /// Keeps the mapping (and its file lock) alive while the slice is in use.
        _map: Arc<dyn Region>,
        ptr: *const T,
        len: usize,
    },
}

/// Memory that outlives every buffer made from it.
pub trait Region: Send + Sync {
    fn bytes(&self) -> &[u8];
}

// SAFETY: a mapped buffer is an immutable slice of a region kept alive by the Arc; the
// region is never written while mapped.
unsafe impl<T: Element> Send for Shared<T> {}
// SAFETY: as above, only shared reads.
unsafe impl<T: Element> Sync for Shared<T> {}

impl<T: Element> Shared<T> {
    /// Whether the data lives in a shared mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.repr, Repr::Mapped { .. })
    }

    /// The buffer's own memory as bytes.
    fn as_bytes(&self) -> &[u8] {
        let values: &[T] = self;
        // SAFETY: T is plain data (Element); the byte view covers exactly the values.
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
    }
}

impl<T: Element> Deref for Shared<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: checked in bounds and aligned when made; the region outlives self.
            Repr::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl<T: Element> From<Vec<T>> for Shared<T> {
    fn from(v: Vec<T>) -> Self {
        Shared { repr: Repr::Owned(v) }
    }
}

impl<T: Element> Default for Shared<T> {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl<T: Element + std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared<{}>[{}{}]", std::any::type_name::<T>(), self.len(), if self.is_mapped() { ", mapped" } else { "" })
    }
}

/// Float buffers, the common case.
pub type Floats = Shared<f32>;

/// The buffers of one file being written: where each one goes in the data section.
pub(crate) struct Collector {
    /// (start, length in bytes) of each buffer's memory, in data-section order.
    pub segments: Vec<(*const u8, usize)>,
    /// Bytes of the data section so far (padding included).
    pub len: usize,
}

/// The mapping buffers are restored from.
pub(crate) struct Source {
    pub region: Arc<dyn Region>,
    /// Where the data section starts in `region`'s bytes, and its length.
    pub start: usize,
    pub len: usize,
    /// Bytes of buffers restored so far.
    pub restored: usize,
}

thread_local! {
    static COLLECTOR: RefCell<Option<Collector>> = const { RefCell::new(None) };
    static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) };
}

/// Runs `f` with buffers serialized into a new collector; returns `f`'s result and the
/// collector. The buffers `f` serializes must outlive the collector's use (the caller holds
/// the value being serialized while it writes the segments).
pub(crate) fn collecting<R>(f: impl FnOnce() -> R) -> (R, Collector) {
    let previous = COLLECTOR.replace(Some(Collector { segments: Vec::new(), len: 0 }));
    let out = f();
    let collector = COLLECTOR.replace(previous).unwrap_or(Collector { segments: Vec::new(), len: 0 });
    (out, collector)
}

/// Runs `f` with buffers deserialized from `source`; returns `f`'s result and the bytes of
/// buffers it restored.
pub(crate) fn restoring<R>(source: Source, f: impl FnOnce() -> R) -> (R, usize) {
    let previous = SOURCE.replace(Some(source));
    let out = f();
    let restored = SOURCE.replace(previous).map_or(0, |s| s.restored);
    (out, restored)
}

impl<T: Element> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.as_bytes();
        let offset = COLLECTOR.with_borrow_mut(|c| {
            let c = c.as_mut()?;
            let offset = c.len.next_multiple_of(ALIGN);
            c.segments.push((bytes.as_ptr(), bytes.len()));
            c.len = offset + bytes.len();
            Some(offset)
        });
        let offset = offset.ok_or_else(|| S::Error::custom("a weight buffer is serialized only into a prepared file"))?;
        [offset, self.len()].serialize(serializer)
    }
}

impl<'de, T: Element> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let [offset, len] = <[usize; 2]>::deserialize(deserializer)?;
        SOURCE.with_borrow_mut(|s| {
            let s = s.as_mut().ok_or_else(|| D::Error::custom("a weight buffer is restored only from a prepared file"))?;
            let bytes = len
                .checked_mul(std::mem::size_of::<T>())
                .filter(|b| offset.checked_add(*b).is_some_and(|end| end <= s.len))
                .ok_or_else(|| D::Error::custom(format!("buffer [{offset}, {len}] lies outside the data section of {} bytes", s.len)))?;
            if offset % ALIGN != 0 {
                return Err(D::Error::custom(format!("buffer at {offset} is not {ALIGN}-byte aligned")));
            }
            let all = s.region.bytes();
            let ptr = all[s.start + offset..].as_ptr();
            if ptr.align_offset(std::mem::align_of::<T>()) != 0 {
                return Err(D::Error::custom(format!("buffer at {offset} is not aligned for its type")));
            }
            s.restored += bytes;
            Ok(Shared { repr: Repr::Mapped { _map: s.region.clone(), ptr: ptr.cast::<T>(), len } })
        })
    }
}
