//! The database file: a header, two root slots and extents of column stripes and catalog
//! metadata.
//!
//! ```text
//! [0, 4K)      header: magic "APIARYDB", format version, checksum
//! [4K, 8K)     root slot A ┐ generation, metadata extent + checksum, checksum of the slot;
//! [8K, 12K)    root slot B ┘ the valid slot with the higher generation is the database
//! [12K, ...)   extents: encoded column stripes (each with its checksum in the metadata)
//!              and the catalog metadata of each checkpoint
//! ```
//!
//! Shadow paging: a checkpoint writes new stripes and new metadata into free space, syncs,
//! then writes the *other* root slot and syncs again. A crash at any point leaves one
//! valid root describing a complete database. Space is reused only once no durable root
//! and no in-memory stripe refers to it (see [`Space`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apiary_common::{ApiaryError, Result};

use crate::codec::{checksum, Reader, Writer};
use crate::encoding::Encoding;
use crate::pool::BufferPool;

/// The version of the file format this build writes.
pub const FORMAT_VERSION: u32 = 8;
/// The oldest format this version reads (format 1 had no UNIQUE constraints, format 2 no
/// views, format 3 no TIMESTAMPTZ or TIME columns, format 4 no deleted rows).
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// The format that added views: a file of an older format gets this version in its
/// header before a view is written into it, so older builds refuse it instead of
/// misreading it.
pub const VIEWS_FORMAT_VERSION: u32 = 3;
/// The format that added TIMESTAMPTZ and TIME columns (type codes older builds do not
/// know), raised the same way before a table with such a column is written.
pub const TIME_ZONE_TYPES_FORMAT_VERSION: u32 = 4;
/// The format that added deleted rows to blocks (DELETE, UPDATE), raised the same way
/// before a block with deleted rows is written.
pub const DELETIONS_FORMAT_VERSION: u32 = 5;

/// The first format whose table definitions may hold DEFAULT expressions and CHECK
/// constraints.
pub const DEFAULTS_AND_CHECKS_FORMAT_VERSION: u32 = 6;

/// The first format with sequences (CREATE SEQUENCE, SERIAL and identity columns) and
/// FOREIGN KEY constraints.
pub const SEQUENCES_FORMAT_VERSION: u32 = 7;

/// The first format whose FOREIGN KEYs may have ON DELETE / ON UPDATE actions (stored in
/// the high bits of the key's width, which older builds would misread as corrupt).
pub const REFERENTIAL_ACTIONS_FORMAT_VERSION: u32 = 8;
const MAGIC: &[u8; 8] = b"APIARYDB";
const ROOT_MAGIC: &[u8; 8] = b"APIROOT\0";
const SLOT_SIZE: u64 = 4096;
/// First byte after the header and the two root slots.
pub(crate) const DATA_START: u64 = 3 * SLOT_SIZE;

/// A byte range of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
}

/// Where a column stripe is stored.
#[derive(Clone)]
pub struct StoredStripe {
    pub file: Arc<DatabaseFile>,
    pub extent: Extent,
    pub checksum: u64,
    pub encoding: Encoding,
    /// Names the stripe in error messages: `table "t", block 3, column "c"`.
    pub label: Arc<str>,
}

impl std::fmt::Debug for StoredStripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}+{} ({})", self.label, self.extent.offset, self.extent.len, self.encoding)
    }
}

/// The root: which metadata extent describes the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    pub generation: u64,
    pub metadata: Extent,
    pub metadata_checksum: u64,
}

/// Free-space bookkeeping.
///
/// An extent is reusable when the durable root does not reference it *and* no in-memory
/// stripe does (a running query may still read a dropped table's stripes, and a crash
/// must find everything the durable root references intact).
#[derive(Default)]
struct Space {
    /// Free ranges by offset (coalesced).
    free: BTreeMap<u64, u64>,
    /// End of the used part of the file.
    end: u64,
    /// Extents the durable root references.
    durable: HashSet<u64>,
    /// Extents the durable root references whose stripes were dropped from memory.
    dead: HashMap<u64, u64>,
}

impl Space {
    fn allocate(&mut self, len: u64) -> u64 {
        let fit = self.free.iter().find(|(_, &free_len)| free_len >= len).map(|(&offset, &free_len)| (offset, free_len));
        if let Some((offset, free_len)) = fit {
            self.free.remove(&offset);
            if free_len > len {
                self.free.insert(offset + len, free_len - len);
            }
            return offset;
        }
        let offset = self.end;
        self.end += len;
        offset
    }

    fn release(&mut self, extent: Extent) {
        if extent.len == 0 {
            return;
        }
        let mut offset = extent.offset;
        let mut len = extent.len;
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            if before + before_len == offset {
                self.free.remove(&before);
                offset = before;
                len += before_len;
            }
        }
        if let Some(&after_len) = self.free.get(&(offset + len)) {
            self.free.remove(&(offset + len));
            len += after_len;
        }
        if offset + len == self.end {
            self.end = offset;
        } else {
            self.free.insert(offset, len);
        }
    }
}

pub struct DatabaseFile {
    path: PathBuf,
    file: File,
    pub pool: Arc<BufferPool>,
    space: Mutex<Space>,
    /// The format version in the file's header.
    format: std::sync::atomic::AtomicU32,
}

fn io_error(path: &Path, action: &str, e: std::io::Error) -> ApiaryError {
    ApiaryError::Io(format!("{action} \"{}\": {e}", path.display()))
}

impl DatabaseFile {
    /// Opens (or creates) the file and takes its write lock. Returns the file and the
    /// current root (`None` for a new, empty file).
    pub fn open(path: &Path, pool: Arc<BufferPool>) -> Result<(Arc<DatabaseFile>, Option<Root>)> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_error(path, "cannot open database file", e))?;
        // SAFETY: flock on a valid descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(ApiaryError::Io(format!(
                "database file \"{}\" is already open in another process (only one process may open it at a time)",
                path.display()
            )));
        }
        let length = file.metadata().map_err(|e| io_error(path, "cannot read", e))?.len();
        let database = DatabaseFile { path: path.to_path_buf(), file, pool, space: Mutex::default(), format: FORMAT_VERSION.into() };
        let root = if length == 0 {
            database.write_header(FORMAT_VERSION, true)?;
            sync_parent_directory(path)?;
            None
        } else {
            let version = database.check_header(length)?;
            database.format.store(version, std::sync::atomic::Ordering::Relaxed);
            database.read_root()?
        };
        database.space.lock().unwrap_or_else(|e| e.into_inner()).end = DATA_START;
        Ok((Arc::new(database), root))
    }

    /// Writes the header block. A new file gets empty root slots with it; an existing
    /// file's root slots are left alone (they hold its last checkpoint).
    fn write_header(&self, version: u32, new_file: bool) -> Result<()> {
        let mut writer = Writer::new();
        writer.bytes.extend_from_slice(MAGIC);
        writer.u32(version);
        let sum = checksum(&writer.bytes);
        writer.u64(sum);
        writer.bytes.resize(if new_file { DATA_START } else { SLOT_SIZE } as usize, 0);
        self.write_at(&writer.bytes, 0)?;
        self.sync()
    }

    /// Raises the header of a file of an older format to `version` (before something
    /// only `version` and later can read goes into it), so older builds refuse the file
    /// instead of misreading it; newer builds still see the oldest format that reads it.
    pub fn require_format(&self, version: u32) -> Result<()> {
        if self.format.load(std::sync::atomic::Ordering::Relaxed) >= version {
            return Ok(());
        }
        self.write_header(version, false)?;
        self.format.store(version, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The format version of the file (its header).
    pub fn format_version(&self) -> u32 {
        self.format.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Checks the header; returns the file's format version.
    fn check_header(&self, length: u64) -> Result<u32> {
        let name = self.path.display();
        if length < DATA_START {
            return Err(ApiaryError::Corruption(format!("\"{name}\" is truncated ({length} bytes): the file header is incomplete")));
        }
        let mut header = [0u8; 20];
        self.read_at(&mut header, 0)?;
        if &header[..8] != MAGIC {
            return Err(ApiaryError::Corruption(format!("\"{name}\" is not an Apiary database file")));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
        let stored_sum = u64::from_le_bytes(header[12..20].try_into().unwrap());
        if checksum(&header[..12]) != stored_sum {
            return Err(ApiaryError::Corruption(format!("\"{name}\": the file header is damaged (checksum mismatch)")));
        }
        if version > FORMAT_VERSION {
            return Err(ApiaryError::Corruption(format!(
                "\"{name}\" was written by a newer version of Apiary (file format {version}; this version reads format {FORMAT_VERSION}). \
                 Open it with a newer Apiary, or export it there with COPY ... TO"
            )));
        }
        if version < OLDEST_FORMAT_VERSION {
            return Err(ApiaryError::Corruption(format!("\"{name}\" has file format {version}, which this version cannot read")));
        }
        Ok(version)
    }

    /// The valid root slot with the highest generation.
    fn read_root(&self) -> Result<Option<Root>> {
        let mut best: Option<Root> = None;
        let mut damaged = 0;
        for slot in 0..2u64 {
            let mut bytes = vec![0u8; 48];
            self.read_at(&mut bytes, SLOT_SIZE * (1 + slot))?;
            if bytes.iter().all(|&b| b == 0) {
                continue; // never written
            }
            match parse_root(&bytes) {
                Some(root) => {
                    if best.is_none_or(|b| root.generation > b.generation) {
                        best = Some(root);
                    }
                }
                None => damaged += 1,
            }
        }
        if best.is_none() && damaged > 0 {
            return Err(ApiaryError::Corruption(format!("\"{}\": both root slots are damaged", self.path.display())));
        }
        Ok(best)
    }

    /// Writes `root` into the slot its generation selects and syncs: the commit point of a
    /// checkpoint.
    pub fn write_root(&self, root: Root) -> Result<()> {
        let mut writer = Writer::new();
        writer.bytes.extend_from_slice(ROOT_MAGIC);
        writer.u64(root.generation);
        writer.u64(root.metadata.offset);
        writer.u64(root.metadata.len);
        writer.u64(root.metadata_checksum);
        let sum = checksum(&writer.bytes);
        writer.u64(sum);
        self.write_at(&writer.bytes, SLOT_SIZE * (1 + root.generation % 2))?;
        self.sync()
    }

    /// Reads an extent and checks its checksum; `label` names it in errors.
    pub fn read_extent(&self, extent: Extent, expected: u64, label: &str) -> Result<Vec<u8>> {
        let length = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        // Checked before allocating: a damaged length must not ask for more than the file.
        let end = extent.offset.checked_add(extent.len).filter(|&end| end <= length);
        let Some(end) = end else {
            return Err(ApiaryError::Corruption(format!(
                "{label}: the file is truncated (the data is at bytes {}..{}, the file has {length} bytes)",
                extent.offset,
                extent.offset as u128 + extent.len as u128
            )));
        };
        if extent.offset < DATA_START {
            return Err(ApiaryError::Corruption(format!("{label}: the data would overlap the file header (offset {})", extent.offset)));
        }
        let mut bytes = vec![0u8; (end - extent.offset) as usize];
        self.read_at(&mut bytes, extent.offset)?;
        if checksum(&bytes) != expected {
            return Err(ApiaryError::Corruption(format!(
                "{label}: checksum mismatch (bytes {}..{} of \"{}\" are damaged)",
                extent.offset,
                extent.offset + extent.len,
                self.path.display()
            )));
        }
        Ok(bytes)
    }

    /// Writes `bytes` into free space; returns where.
    pub fn write_extent(&self, bytes: &[u8]) -> Result<Extent> {
        let len = bytes.len() as u64;
        let offset = self.space.lock().unwrap_or_else(|e| e.into_inner()).allocate(len);
        let extent = Extent { offset, len };
        if let Err(e) = self.write_at(bytes, offset) {
            self.space.lock().unwrap_or_else(|e| e.into_inner()).release(extent);
            return Err(e);
        }
        Ok(extent)
    }

    /// Marks the used space at open: every extent the root references (metadata
    /// included) is durable, the gaps between them are free.
    pub fn init_space(&self, used: &[Extent]) {
        let mut space = self.space.lock().unwrap_or_else(|e| e.into_inner());
        let mut sorted: Vec<Extent> = used.to_vec();
        sorted.sort_unstable_by_key(|e| e.offset);
        let mut position = DATA_START;
        for extent in &sorted {
            if extent.offset > position {
                space.free.insert(position, extent.offset - position);
            }
            position = position.max(extent.offset + extent.len);
        }
        space.end = position;
        space.durable = sorted.iter().map(|e| e.offset).collect();
    }

    /// After a new root is durable: `used` is everything it references. Extents only the
    /// previous root referenced become free once no stripe in memory needs them.
    pub fn root_replaced(&self, used: &[Extent], old_metadata: Option<Extent>) {
        let mut space = self.space.lock().unwrap_or_else(|e| e.into_inner());
        let durable: HashSet<u64> = used.iter().map(|e| e.offset).collect();
        if let Some(old) = old_metadata {
            if !durable.contains(&old.offset) {
                space.dead.insert(old.offset, old.len);
            }
        }
        let released: Vec<(u64, u64)> = space.dead.iter().filter(|(offset, _)| !durable.contains(offset)).map(|(&o, &l)| (o, l)).collect();
        for (offset, len) in released {
            space.dead.remove(&offset);
            space.release(Extent { offset, len });
        }
        space.durable = durable;
    }

    /// Frees an extent nothing refers to (metadata of a checkpoint that failed).
    pub(crate) fn release_unused(&self, extent: Extent) {
        self.space.lock().unwrap_or_else(|e| e.into_inner()).release(extent);
    }

    /// A stripe left memory (its table was dropped or rewritten, or the append that wrote
    /// it failed): its extent is free unless the durable root still references it.
    pub(crate) fn stripe_dropped(&self, stored: &StoredStripe, resident_bytes: usize) {
        self.pool.released(stored, resident_bytes);
        let mut space = self.space.lock().unwrap_or_else(|e| e.into_inner());
        if space.durable.contains(&stored.extent.offset) {
            space.dead.insert(stored.extent.offset, stored.extent.len);
        } else {
            space.release(stored.extent);
        }
    }

    /// Whether the file holds anything beyond its header and root slots.
    pub fn has_data(&self) -> Result<bool> {
        let length = self.file.metadata().map_err(|e| io_error(&self.path, "cannot read", e))?.len();
        Ok(length > DATA_START)
    }

    /// Bytes of the file in use (the end of the last extent).
    pub fn used_bytes(&self) -> u64 {
        self.space.lock().unwrap_or_else(|e| e.into_inner()).end
    }

    /// Shrinks the file to its used part (after a checkpoint freed its tail).
    pub fn trim(&self) -> Result<()> {
        let end = self.used_bytes();
        let length = self.file.metadata().map_err(|e| io_error(&self.path, "cannot read", e))?.len();
        if end < length {
            self.file.set_len(end).map_err(|e| io_error(&self.path, "cannot shrink", e))?;
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| io_error(&self.path, "cannot sync", e))
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> Result<()> {
        self.file.write_all_at(bytes, offset).map_err(|e| io_error(&self.path, "cannot write to", e))
    }

    fn read_at(&self, bytes: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(bytes, offset).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                ApiaryError::Corruption(format!("\"{}\" is truncated (reading bytes at offset {offset})", self.path.display()))
            }
            _ => io_error(&self.path, "cannot read", e),
        })
    }
}

/// Makes a newly created file's directory entry durable (a crash right after creating a
/// database must not lose the file itself).
pub(crate) fn sync_parent_directory(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let directory = File::open(parent).map_err(|e| io_error(parent, "cannot open the directory of", e))?;
    directory.sync_all().map_err(|e| io_error(parent, "cannot sync the directory of", e))
}

fn parse_root(bytes: &[u8]) -> Option<Root> {
    let mut reader = Reader::new(bytes, "root");
    if reader.take(8).ok()? != ROOT_MAGIC {
        return None;
    }
    let generation = reader.u64().ok()?;
    let metadata = Extent { offset: reader.u64().ok()?, len: reader.u64().ok()? };
    let metadata_checksum = reader.u64().ok()?;
    let body = reader.position();
    let stored = reader.u64().ok()?;
    (checksum(&bytes[..body]) == stored).then_some(Root { generation, metadata, metadata_checksum })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_reused_and_coalesced() {
        let mut space = Space { end: DATA_START, ..Default::default() };
        let a = space.allocate(100);
        let b = space.allocate(50);
        let c = space.allocate(10);
        assert_eq!((a, b, c), (DATA_START, DATA_START + 100, DATA_START + 150));
        space.release(Extent { offset: a, len: 100 });
        space.release(Extent { offset: b, len: 50 });
        assert_eq!(space.free.get(&a), Some(&150), "neighbours coalesce");
        assert_eq!(space.allocate(120), a, "first fit");
        space.release(Extent { offset: c, len: 10 });
        assert_eq!(space.end, DATA_START + 120, "a freed tail (with its free neighbour) shrinks the used part");
        assert!(space.free.is_empty());
    }
}
