//! `DataChunk`: the batch of rows that flows through a pipeline.
//!
//! All vectors of a chunk have the same length. An optional selection vector lists the
//! positions of the rows that are still alive (sorted ascending): a filter narrows the
//! selection instead of copying the columns, and later operators read only selected rows.
//! Selections are the "vectors of tuple ids" that relaxed operator fusion passes between
//! stages.

use crate::vector::Vector;

#[derive(Clone, Debug, Default)]
pub struct DataChunk {
    pub columns: Vec<Vector>,
    /// Physical number of rows of every vector.
    len: usize,
    /// Live row positions; `None` means all `len` rows.
    selection: Option<Vec<u32>>,
}

impl DataChunk {
    pub fn new(columns: Vec<Vector>, len: usize) -> Self {
        debug_assert!(columns.iter().all(|c| c.len() == len), "columns of a chunk differ in length");
        DataChunk { columns, len, selection: None }
    }

    /// A chunk with no columns but `len` rows (e.g. `SELECT count(*)` inputs).
    pub fn empty_columns(len: usize) -> Self {
        DataChunk { columns: Vec::new(), len, selection: None }
    }

    pub fn with_selection(mut self, selection: Option<Vec<u32>>) -> Self {
        self.selection = selection;
        self
    }

    /// Physical row count (including unselected rows).
    #[inline]
    pub fn physical_len(&self) -> usize {
        self.len
    }

    /// Number of live rows.
    #[inline]
    pub fn row_count(&self) -> usize {
        self.selection.as_ref().map_or(self.len, |s| s.len())
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.row_count() == 0
    }

    #[inline]
    pub fn selection(&self) -> Option<&[u32]> {
        self.selection.as_deref()
    }

    pub fn take_selection(&mut self) -> Option<Vec<u32>> {
        self.selection.take()
    }

    pub fn set_selection(&mut self, selection: Option<Vec<u32>>) {
        self.selection = selection;
    }

    pub fn column(&self, idx: usize) -> &Vector {
        &self.columns[idx]
    }

    pub fn column_count(&self) -> usize {
        self.columns.len()
    }

    /// A chunk with only the live rows, in order, and no selection.
    pub fn compact(self) -> DataChunk {
        match self.selection {
            None => self,
            Some(selection) => {
                if selection.len() == self.len {
                    return DataChunk { columns: self.columns, len: self.len, selection: None };
                }
                let columns = self.columns.iter().map(|c| c.gather(&selection)).collect();
                DataChunk { columns, len: selection.len(), selection: None }
            }
        }
    }

    /// Keeps only the columns at `indices` (in that order).
    pub fn project(self, indices: &[usize]) -> DataChunk {
        let columns = indices.iter().map(|&i| self.columns[i].clone()).collect();
        DataChunk { columns, len: self.len, selection: self.selection }
    }
}
