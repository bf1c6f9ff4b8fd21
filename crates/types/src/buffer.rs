//! `Buffer<T>`: an immutable, reference-counted, sliceable array.
//!
//! Column stripes in storage are buffers; a scan hands out slices of them to vectors
//! without copying (a slice shares the allocation and records an offset and length).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

pub struct Buffer<T> {
    data: Arc<Vec<T>>,
    offset: usize,
    len: usize,
}

impl<T> Buffer<T> {
    pub fn from_vec(values: Vec<T>) -> Self {
        let len = values.len();
        Buffer { data: Arc::new(values), offset: 0, len }
    }

    pub fn empty() -> Self {
        Buffer::from_vec(Vec::new())
    }

    /// A view of `len` elements starting at `offset` of this buffer (no copy).
    pub fn slice(&self, offset: usize, len: usize) -> Self {
        assert!(offset + len <= self.len, "slice {offset}+{len} out of buffer of {}", self.len);
        Buffer { data: Arc::clone(&self.data), offset: self.offset + offset, len }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        &self.data[self.offset..self.offset + self.len]
    }

    /// The values as an owned vector: free when this buffer is the only owner of a whole
    /// allocation, otherwise a copy.
    pub fn into_vec(self) -> Vec<T>
    where
        T: Clone,
    {
        if self.offset == 0 && self.len == self.data.len() {
            match Arc::try_unwrap(self.data) {
                Ok(values) => values,
                Err(shared) => shared[..].to_vec(),
            }
        } else {
            self.as_slice().to_vec()
        }
    }

    /// Bytes of memory held by the underlying allocation (shared allocations count fully).
    pub fn allocated_bytes(&self) -> usize {
        self.data.capacity() * size_of::<T>()
    }
}

impl<T> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer { data: Arc::clone(&self.data), offset: self.offset, len: self.len }
    }
}

impl<T> Deref for Buffer<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    fn from(values: Vec<T>) -> Self {
        Buffer::from_vec(values)
    }
}

impl<T: fmt::Debug> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice().iter()).finish()
    }
}
