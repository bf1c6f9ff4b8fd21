//! # apiary-common
//!
//! The bottom of the dependency stack: what every other crate needs and nothing that
//! knows about SQL types.
//!
//! ```text
//! error   ApiaryError / Result: typed user errors (parse, bind, type, execution, resource)
//!         and Internal for bugs; every variant maps to a SQLSTATE.
//! hash    the engine's hash functions (u64/u128 keys, byte strings) and hash combining.
//! bitmap  a growable bit vector used for validity (NULL) masks and match flags.
//! cpu     the instruction sets (AVX2, AVX-512) detected once, for kernels compiled for them.
//! parallel  independent pieces of work spread over a few threads, results in order.
//! ```

pub mod bitmap;
pub mod cpu;
pub mod error;
pub mod hash;
pub mod parallel;

pub use bitmap::Bitmap;
pub use error::{ApiaryError, Result};
