//! `Buffer<T>`: an immutable, reference-counted, sliceable array.
//!
//! Column stripes in storage are buffers; a scan hands out slices of them to vectors
//! without copying (a slice shares the allocation and records an offset and length).
//!
//! A buffer also keeps the address of its first element. Reading an element then needs
//! only the buffer's own fields: through the `Arc` it would reload the vector's pointer
//! and length from the shared allocation on every access, because the compiler cannot
//! prove that a store into an output vector in the same loop does not change them (the
//! key gathers of a hash-join probe spent most of their time on those reloads).

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

pub struct Buffer<T> {
    data: Arc<Vec<T>>,
    /// `data.as_ptr() + offset`: the vector is never modified or moved while shared, so
    /// the address stays valid as long as `data` is held.
    start: NonNull<T>,
    offset: usize,
    len: usize,
}

// SAFETY: a buffer is an `Arc<Vec<T>>` plus a read-only pointer into that vector; it is
// as thread-safe as the `Arc` (shared, immutable access to `T`).
unsafe impl<T: Send + Sync> Send for Buffer<T> {}
unsafe impl<T: Send + Sync> Sync for Buffer<T> {}

impl<T> Buffer<T> {
    pub fn from_vec(values: Vec<T>) -> Self {
        let len = values.len();
        let data = Arc::new(values);
        Buffer { start: Self::address(&data, 0), data, offset: 0, len }
    }

    /// The address of element `offset` of `data` (`offset <= data.len()`).
    fn address(data: &Arc<Vec<T>>, offset: usize) -> NonNull<T> {
        // A vector's pointer is never null (dangling but aligned when empty), and
        // `offset <= len` keeps the result inside or one past the allocation.
        NonNull::new(data.as_ptr().wrapping_add(offset).cast_mut()).expect("vector pointers are not null")
    }

    pub fn empty() -> Self {
        Buffer::from_vec(Vec::new())
    }

    /// A view of `len` elements starting at `offset` of this buffer (no copy).
    pub fn slice(&self, offset: usize, len: usize) -> Self {
        assert!(offset + len <= self.len, "slice {offset}+{len} out of buffer of {}", self.len);
        let offset = self.offset + offset;
        Buffer { start: Self::address(&self.data, offset), data: Arc::clone(&self.data), offset, len }
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
        // SAFETY: `start` points at element `offset` of the vector `data` keeps alive and
        // unmodified, and `offset + len <= data.len()` (checked when the buffer was made).
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
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
        Buffer { data: Arc::clone(&self.data), start: self.start, offset: self.offset, len: self.len }
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
