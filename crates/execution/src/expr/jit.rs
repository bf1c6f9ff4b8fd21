//! The JIT tier: integer expression programs compiled to machine code with Cranelift.
//!
//! The kernels of this module's siblings run one operation over a whole vector and hand
//! the result to the next (`price * (1 - discount)` is two passes and a temporary
//! vector). That is the fast shape when the vector is dense: each pass is a loop the
//! compiler vectorises. Over a sparse selection the passes are indexed loops that do not
//! vectorise, and every one writes a full-length temporary. A [`CompiledProgram`] instead
//! runs the whole tree per row in one loop (the relaxed-operator-fusion paper's compiled
//! stage, the micro-specialization paper's "query bee": constants, operand widths and
//! operators are baked into the code, so the loop has no dispatch).
//!
//! What is compiled is deliberately small and exact: 64-bit integer `+ - *`, negation and
//! multiplication by a constant power of ten over 16-, 32- and 64-bit operands, with
//! every operation's overflow flagged. The caller owns the semantics: on a flagged chunk
//! it runs the interpreter, which gives the exact answer or the error (see
//! `narrow_decimal`, the first user). The interpreter stays the reference; `SET jit =
//! off` never compiles, `on` compiles an expression once it has seen [`HOT_ROWS`] rows and
//! uses the code where it pays, and `always` compiles at once and uses it for every chunk
//! (for tests: it puts every chunk through the compiled path).
//!
//! Compiled code is cached per program shape (operators, widths, constants) for the life
//! of the process, so a query run again, or the same expression in another query, does
//! not compile again.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, LazyLock, Mutex};

use apiary_common::{internal_err, Result};
use apiary_types::{Vector, VectorData};
use cranelift_codegen::ir::{types, AbiParam, BlockArg, InstBuilder, MemFlags, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};

/// When expressions are compiled to machine code (`SET jit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitMode {
    /// Never: the kernels only.
    Off,
    /// Once an expression has seen [`HOT_ROWS`] rows, for the chunks where compiled
    /// code is faster than the kernels (see `narrow_decimal`).
    #[default]
    On,
    /// At once, for every chunk (tests: every answer through the compiled path).
    Always,
}

impl JitMode {
    pub fn parse(text: &str) -> Option<JitMode> {
        match text.to_ascii_lowercase().as_str() {
            "off" | "false" | "0" => Some(JitMode::Off),
            "on" | "true" | "1" => Some(JitMode::On),
            "always" => Some(JitMode::Always),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JitMode::Off => "off",
            JitMode::On => "on",
            JitMode::Always => "always",
        }
    }
}

/// Rows an expression evaluates with the kernels before it is compiled under `SET jit =
/// on`: compiling costs about a millisecond, which a small query would not win back.
pub const HOT_ROWS: u64 = 1 << 18;

/// Width of a leaf's values in memory; every leaf is sign-extended to 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeafWidth {
    I16,
    I32,
    I64,
}

impl LeafWidth {
    fn bytes(self) -> i64 {
        match self {
            LeafWidth::I16 => 2,
            LeafWidth::I32 => 4,
            LeafWidth::I64 => 8,
        }
    }

    fn matches(self, data: &VectorData) -> bool {
        matches!(
            (self, data),
            (LeafWidth::I16, VectorData::I16(_)) | (LeafWidth::I32, VectorData::I32(_)) | (LeafWidth::I64, VectorData::I64(_))
        )
    }
}

/// An integer program: the IR the JIT compiles. Leaves are numbered in the order the
/// caller passes their vectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Program {
    Leaf(usize, LeafWidth),
    Constant(i64),
    /// The child times a constant (a decimal cast to more places: a power of ten).
    Scale(Box<Program>, i64),
    Negate(Box<Program>),
    Add(Box<Program>, Box<Program>),
    Sub(Box<Program>, Box<Program>),
    Mul(Box<Program>, Box<Program>),
}

impl Program {
    fn leaf_widths(&self, out: &mut Vec<Option<LeafWidth>>) {
        match self {
            Program::Leaf(index, width) => {
                if out.len() <= *index {
                    out.resize(index + 1, None);
                }
                out[*index] = Some(*width);
            }
            Program::Constant(_) => {}
            Program::Scale(child, _) | Program::Negate(child) => child.leaf_widths(out),
            Program::Add(l, r) | Program::Sub(l, r) | Program::Mul(l, r) => {
                l.leaf_widths(out);
                r.leaf_widths(out);
            }
        }
    }
}

/// `fn(leaves, rows, n, out) -> overflow`: computes the program at `n` rows (row `k` is
/// `rows[k]`, or `k` itself in the dense variant), writes each row's value to `out[row]`
/// and returns 1 when any operation overflowed.
type ProgramFn = unsafe extern "C" fn(*const *const u8, *const u32, u64, *mut i64) -> u8;

/// Machine code for one [`Program`]: a dense variant (every row `0..n`) and one over a
/// selection.
pub struct CompiledProgram {
    dense: ProgramFn,
    selected: ProgramFn,
    widths: Vec<LeafWidth>,
    /// Owns the code; freed when the last user of the program is gone.
    module: ManuallyDrop<JITModule>,
}

// SAFETY: after `finalize_definitions` the module is never touched again except to free
// its memory in `drop`, which needs `&mut self` (no other reference then); the code it
// owns is immutable and position-independent, so calling it from any thread is sound.
unsafe impl Send for CompiledProgram {}
unsafe impl Sync for CompiledProgram {}

impl Drop for CompiledProgram {
    fn drop(&mut self) {
        // SAFETY: the module is taken once, here; no function pointer outlives `self`.
        let module = unsafe { ManuallyDrop::take(&mut self.module) };
        // SAFETY: no code of the module can run any more (see above).
        unsafe { module.free_memory() };
    }
}

impl std::fmt::Debug for CompiledProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledProgram").field("leaves", &self.widths).finish()
    }
}

impl CompiledProgram {
    /// Runs the program at the selected `rows` (all `len` rows when `None`) of `leaves`,
    /// writing `out[row]`. Returns whether some operation overflowed, or `None` when the
    /// leaves are not what the program was compiled for (the caller then uses the
    /// kernels).
    pub fn run(&self, leaves: &[&Vector], rows: Option<&[u32]>, len: usize, out: &mut [i64]) -> Option<bool> {
        if leaves.len() != self.widths.len() || out.len() < len {
            return None;
        }
        let mut pointers = Vec::with_capacity(leaves.len());
        for (vector, width) in leaves.iter().zip(&self.widths) {
            if !width.matches(&vector.data) {
                return None;
            }
            let (pointer, available) = match &vector.data {
                VectorData::I16(b) => (b.as_slice().as_ptr() as *const u8, b.as_slice().len()),
                VectorData::I32(b) => (b.as_slice().as_ptr() as *const u8, b.as_slice().len()),
                VectorData::I64(b) => (b.as_slice().as_ptr() as *const u8, b.as_slice().len()),
                _ => return None,
            };
            if available < len {
                return None;
            }
            pointers.push(pointer);
        }
        let overflow = match rows {
            None => {
                // SAFETY: every leaf holds at least `len` values of the width the code
                // reads, and `out` has room for `len`.
                unsafe { (self.dense)(pointers.as_ptr(), std::ptr::null(), len as u64, out.as_mut_ptr()) }
            }
            Some(rows) => {
                // The code indexes leaves and `out` by these rows without checks.
                if !rows.iter().all(|&r| (r as usize) < len) {
                    return None;
                }
                // SAFETY: as above, and every row is below `len`.
                unsafe { (self.selected)(pointers.as_ptr(), rows.as_ptr(), rows.len() as u64, out.as_mut_ptr()) }
            }
        };
        Some(overflow != 0)
    }
}

/// Most programs kept compiled; the cache starts over when full (a program in use stays
/// alive through its `Arc`).
const CACHE_CAPACITY: usize = 1024;

static CACHE: LazyLock<Mutex<HashMap<Program, Arc<CompiledProgram>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The compiled code for `program`, from the cache or compiled now.
pub fn compile(program: &Program) -> Result<Arc<CompiledProgram>> {
    if let Some(compiled) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(program) {
        return Ok(Arc::clone(compiled));
    }
    // Compiled outside the lock: two threads may both compile a new shape; one wins.
    let compiled = Arc::new(build(program)?);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CACHE_CAPACITY {
        cache.clear();
    }
    Ok(Arc::clone(cache.entry(program.clone()).or_insert(compiled)))
}

fn jit_error(what: &str, error: impl std::fmt::Display) -> apiary_common::ApiaryError {
    internal_err!("JIT: {what}: {error}")
}

fn build(program: &Program) -> Result<CompiledProgram> {
    let mut widths = Vec::new();
    program.leaf_widths(&mut widths);
    let widths: Vec<LeafWidth> =
        widths.into_iter().map(|w| w.ok_or_else(|| internal_err!("JIT: leaf numbers have a gap"))).collect::<Result<_>>()?;

    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| jit_error("settings", e))?;
    let isa = cranelift_native::builder()
        .map_err(|e| jit_error("this machine", e))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| jit_error("target", e))?;
    let pointer = isa.pointer_type();
    let mut module = JITModule::new(JITBuilder::with_isa(isa, cranelift_module::default_libcall_names()));

    let mut ids = Vec::new();
    for (name, selected) in [("dense", false), ("selected", true)] {
        let mut context = module.make_context();
        let signature = &mut context.func.signature;
        signature.params.extend([AbiParam::new(pointer), AbiParam::new(pointer), AbiParam::new(types::I64), AbiParam::new(pointer)]);
        signature.returns.push(AbiParam::new(types::I8));
        let mut builder_context = FunctionBuilderContext::new();
        emit_loop(FunctionBuilder::new(&mut context.func, &mut builder_context), program, &widths, pointer, selected);
        let id = module.declare_function(name, Linkage::Local, &context.func.signature).map_err(|e| jit_error("declare", e))?;
        module.define_function(id, &mut context).map_err(|e| jit_error("compile", e))?;
        module.clear_context(&mut context);
        ids.push(id);
    }
    module.finalize_definitions().map_err(|e| jit_error("finalize", e))?;
    // SAFETY: both functions were defined with `ProgramFn`'s signature (pointer-sized
    // arguments, an i8 result) in the host's default calling convention, which is
    // `extern "C"`.
    let (dense, selected) = unsafe {
        (
            std::mem::transmute::<*const u8, ProgramFn>(module.get_finalized_function(ids[0])),
            std::mem::transmute::<*const u8, ProgramFn>(module.get_finalized_function(ids[1])),
        )
    };
    Ok(CompiledProgram { dense, selected, widths, module: ManuallyDrop::new(module) })
}

/// The function body: a loop over `k in 0..n` computing the program at row `rows[k]` (or
/// `k`), storing it and OR-ing the overflow flags.
fn emit_loop(mut b: FunctionBuilder, program: &Program, widths: &[LeafWidth], pointer: types::Type, selected: bool) {
    let entry = b.create_block();
    let header = b.create_block();
    let body = b.create_block();
    let exit = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (leaves, rows, n, out) = (params[0], params[1], params[2], params[3]);
    let trusted = MemFlags::trusted();
    // The leaves' base addresses, loaded once.
    let bases: Vec<Value> = (0..widths.len()).map(|j| b.ins().load(pointer, trusted, leaves, (j * 8) as i32)).collect();
    let zero = b.ins().iconst(types::I64, 0);
    let no_overflow = b.ins().iconst(types::I8, 0);
    b.ins().jump(header, &[BlockArg::Value(zero), BlockArg::Value(no_overflow)]);

    b.append_block_param(header, types::I64);
    b.append_block_param(header, types::I8);
    b.append_block_param(exit, types::I8);
    b.switch_to_block(header);
    let (k, flag) = (b.block_params(header)[0], b.block_params(header)[1]);
    let more = b.ins().icmp(cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThan, k, n);
    b.ins().brif(more, body, &[], exit, &[BlockArg::Value(flag)]);

    b.switch_to_block(body);
    let row = if selected {
        let offset = b.ins().ishl_imm(k, 2);
        let address = b.ins().iadd(rows, offset);
        b.ins().uload32(trusted, address, 0)
    } else {
        k
    };
    let mut emitter = Emitter { b: &mut b, bases: &bases, widths, row, overflow: flag };
    let value = emitter.emit(program);
    let flag = emitter.overflow;
    let offset = b.ins().ishl_imm(row, 3);
    let address = b.ins().iadd(out, offset);
    b.ins().store(trusted, value, address, 0);
    let next = b.ins().iadd_imm(k, 1);
    b.ins().jump(header, &[BlockArg::Value(next), BlockArg::Value(flag)]);

    b.switch_to_block(exit);
    let result = b.block_params(exit)[0];
    b.ins().return_(&[result]);
    b.seal_all_blocks();
    b.finalize();
}

struct Emitter<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    bases: &'a [Value],
    widths: &'a [LeafWidth],
    row: Value,
    /// The OR of every overflow flag so far (an `i8`).
    overflow: Value,
}

impl Emitter<'_, '_> {
    fn emit(&mut self, program: &Program) -> Value {
        let trusted = MemFlags::trusted();
        match program {
            Program::Leaf(index, _) => {
                let width = self.widths[*index];
                let offset = self.b.ins().imul_imm(self.row, width.bytes());
                let address = self.b.ins().iadd(self.bases[*index], offset);
                match width {
                    LeafWidth::I16 => self.b.ins().sload16(types::I64, trusted, address, 0),
                    LeafWidth::I32 => self.b.ins().sload32(trusted, address, 0),
                    LeafWidth::I64 => self.b.ins().load(types::I64, trusted, address, 0),
                }
            }
            Program::Constant(c) => self.b.ins().iconst(types::I64, *c),
            Program::Scale(child, factor) => {
                let value = self.emit(child);
                let factor = self.b.ins().iconst(types::I64, *factor);
                let (product, overflow) = self.b.ins().smul_overflow(value, factor);
                self.flag(overflow);
                product
            }
            Program::Negate(child) => {
                let value = self.emit(child);
                let zero = self.b.ins().iconst(types::I64, 0);
                let (negated, overflow) = self.b.ins().ssub_overflow(zero, value);
                self.flag(overflow);
                negated
            }
            Program::Add(l, r) | Program::Sub(l, r) | Program::Mul(l, r) => {
                let (l, r) = (self.emit(l), self.emit(r));
                let (value, overflow) = match program {
                    Program::Add(..) => self.b.ins().sadd_overflow(l, r),
                    Program::Sub(..) => self.b.ins().ssub_overflow(l, r),
                    _ => self.b.ins().smul_overflow(l, r),
                };
                self.flag(overflow);
                value
            }
        }
    }

    fn flag(&mut self, overflow: Value) {
        self.overflow = self.b.ins().bor(self.overflow, overflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::DataType;

    fn vector<T: apiary_types::vector::NativeType>(data_type: DataType, values: Vec<T>) -> Vector {
        Vector::new(data_type, T::wrap(values.into()), None)
    }

    fn leaf(i: usize, w: LeafWidth) -> Box<Program> {
        Box::new(Program::Leaf(i, w))
    }

    /// `a * (100 - b) * (100 + c)` with a 64-bit, b 32-bit, c 16-bit: Q1's charge.
    fn charge() -> Program {
        Program::Mul(
            Box::new(Program::Mul(
                leaf(0, LeafWidth::I64),
                Box::new(Program::Sub(Box::new(Program::Constant(100)), leaf(1, LeafWidth::I32))),
            )),
            Box::new(Program::Add(Box::new(Program::Constant(100)), leaf(2, LeafWidth::I16))),
        )
    }

    fn interpret(program: &Program, values: &[i64]) -> Option<i64> {
        match program {
            Program::Leaf(i, _) => Some(values[*i]),
            Program::Constant(c) => Some(*c),
            Program::Scale(c, f) => interpret(c, values)?.checked_mul(*f),
            Program::Negate(c) => interpret(c, values)?.checked_neg(),
            Program::Add(l, r) => interpret(l, values)?.checked_add(interpret(r, values)?),
            Program::Sub(l, r) => interpret(l, values)?.checked_sub(interpret(r, values)?),
            Program::Mul(l, r) => interpret(l, values)?.checked_mul(interpret(r, values)?),
        }
    }

    #[test]
    fn compiled_programs_compute_what_checked_arithmetic_does() {
        let program = charge();
        let compiled = compile(&program).unwrap();
        let a: Vec<i64> = (0..1000).map(|i| i * 7919 - 3_000_000).collect();
        let b: Vec<i32> = (0..1000).map(|i| (i % 11) - 5).collect();
        let c: Vec<i16> = (0..1000).map(|i| (i % 9) as i16 - 4).collect();
        let vectors = [vector(DataType::BigInt, a.clone()), vector(DataType::Integer, b.clone()), vector(DataType::SmallInt, c.clone())];
        let leaves: Vec<&Vector> = vectors.iter().collect();
        let expected: Vec<i64> = (0..1000).map(|i| interpret(&program, &[a[i], b[i] as i64, c[i] as i64]).unwrap()).collect();
        let mut out = vec![0i64; 1000];
        assert_eq!(compiled.run(&leaves, None, 1000, &mut out), Some(false));
        assert_eq!(out, expected);
        let rows: Vec<u32> = (0..1000).filter(|r| r % 3 == 1).collect();
        let mut sparse = vec![0i64; 1000];
        assert_eq!(compiled.run(&leaves, Some(&rows), 1000, &mut sparse), Some(false));
        for &r in &rows {
            assert_eq!(sparse[r as usize], expected[r as usize]);
        }
        // The same shape again comes from the cache.
        assert!(Arc::ptr_eq(&compiled, &compile(&charge()).unwrap()));
    }

    #[test]
    fn every_operation_flags_its_overflow() {
        let big = vector(DataType::BigInt, vec![i64::MAX, 1, i64::MIN, 3]);
        let cases = [
            Program::Add(leaf(0, LeafWidth::I64), Box::new(Program::Constant(1))),
            Program::Sub(Box::new(Program::Constant(-2)), leaf(0, LeafWidth::I64)),
            Program::Mul(leaf(0, LeafWidth::I64), Box::new(Program::Constant(2))),
            Program::Scale(leaf(0, LeafWidth::I64), 10),
            Program::Negate(leaf(0, LeafWidth::I64)),
        ];
        for program in cases {
            let compiled = compile(&program).unwrap();
            let mut out = vec![0i64; 4];
            let overflows = (0..4).any(|i| interpret(&program, &[big.values::<i64>()[i]]).is_none());
            assert!(overflows, "{program:?}");
            assert_eq!(compiled.run(&[&big], None, 4, &mut out), Some(true), "{program:?}");
            // Rows without an overflowing value do not raise the flag.
            let fine: Vec<u32> = (0..4u32).filter(|&i| interpret(&program, &[big.values::<i64>()[i as usize]]).is_some()).collect();
            assert_eq!(compiled.run(&[&big], Some(&fine), 4, &mut out), Some(false), "{program:?}");
        }
    }

    #[test]
    fn leaves_of_another_width_or_too_short_are_refused() {
        let program = Program::Add(leaf(0, LeafWidth::I32), Box::new(Program::Constant(1)));
        let compiled = compile(&program).unwrap();
        let wide = vector(DataType::BigInt, vec![1i64, 2]);
        let narrow = vector(DataType::Integer, vec![1i32, 2]);
        let mut out = vec![0i64; 4];
        assert_eq!(compiled.run(&[&wide], None, 2, &mut out), None);
        assert_eq!(compiled.run(&[&narrow], None, 4, &mut out), None);
        assert_eq!(compiled.run(&[&narrow], Some(&[0, 5]), 2, &mut out), None);
        assert_eq!(compiled.run(&[&narrow], Some(&[1]), 2, &mut out), Some(false));
        assert_eq!(out[1], 3);
    }
}
