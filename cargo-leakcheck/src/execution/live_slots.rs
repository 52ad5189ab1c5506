//! Which words of a stack frame hold a variable still in scope, from the executable's debug
//! information: what the runtime's reachability scan keeps of the frames of a test thread
//! that ended the process with `exit`.
//!
//! Such a thread never returns to any of its frames, so a word there matters only if it is
//! a variable the code could still have used (`let local = vec![…]; exit(0)`): a value
//! moved away (`mem::forget(vec![…])`) leaves a stale copy of its pointer in a slot that no
//! variable covers, and counting that slot as a root would call the forgotten buffer
//! reachable. For each function whose every variable sits at a fixed offset from the stack
//! pointer (unoptimised code: `DW_AT_frame_base` is `DW_OP_reg7`, every location a single
//! `DW_OP_fbreg`), the table lists each variable's slot, and the slots where the function
//! saves callee-saved registers (from `.eh_frame`), which may hold a caller's live values.
//! A variable counts over the whole function whatever its scope: the compiler ends a scope
//! before a call that never returns, so a variable that is alive in the source at the call
//! of `exit` is out of every scope it describes there. So a named variable keeps what it
//! points to (a value moved out of it too: conservative), a temporary does not. A function described any other way (optimised
//! code, location lists) is left out, and the runtime keeps its whole frame, as before.
//!
//! The table is written as text for the runtime, one `leakcheck_protocol::slots::Slot` per
//! line: a function's code, then its register save slots and its variables.

use addr2line::gimli;
use leakcheck_protocol::slots::Slot;
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;

type Slice<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;

/// One function's slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Function {
    /// Its code, `[lo, hi)`.
    pub lo: u64,
    pub hi: u64,
    /// Where it saves callee-saved registers, relative to its CFA.
    pub saved: Vec<i64>,
    /// Its variables: code range in scope, offset from the stack pointer, size.
    pub vars: Vec<(u64, u64, i64, u64)>,
}

/// Why an executable's functions cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveSlotsError {
    /// Not an object file at all.
    #[error("not an executable: {0}")]
    NotExecutable(object::Error),
    /// Its debug information cannot be loaded.
    #[error("{0}")]
    Dwarf(gimli::Error),
}

/// The functions an executable describes well enough.
pub fn read(data: &[u8]) -> Result<Vec<Function>, LiveSlotsError> {
    let file = object::File::parse(data).map_err(LiveSlotsError::NotExecutable)?;
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let sections = gimli::DwarfSections::load(load).map_err(LiveSlotsError::Dwarf)?;
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let saved = register_saves(&file);
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let Ok(mut tree) = unit.entries_tree(None) else {
            continue;
        };
        let Ok(root) = tree.root() else { continue };
        let _ = visit(&dwarf, &unit, root, &saved, &mut out);
    }
    out.sort_by_key(|f| f.lo);
    Ok(out)
}

/// The text the runtime reads (see the module's documentation).
pub fn render(functions: &[Function]) -> String {
    let mut s = String::new();
    let mut line = |slot: Slot| {
        let _ = writeln!(s, "{slot}");
    };
    for f in functions {
        line(Slot::Function { lo: f.lo, hi: f.hi });
        for &offset in &f.saved {
            line(Slot::Saved { offset });
        }
        for &(lo, hi, offset, size) in &f.vars {
            line(Slot::Var {
                lo,
                hi,
                offset,
                size,
            });
        }
    }
    s
}

fn visit<'a>(
    dwarf: &gimli::Dwarf<Slice<'a>>,
    unit: &gimli::Unit<Slice<'a>>,
    node: gimli::EntriesTreeNode<Slice<'a>>,
    saved: &HashMap<u64, Vec<i64>>,
    out: &mut Vec<Function>,
) -> gimli::Result<()> {
    let mut children = node.children();
    while let Some(child) = children.next()? {
        if child.entry().tag() == gimli::DW_TAG_subprogram {
            if let Some(f) = function(dwarf, unit, child, saved)? {
                out.push(f);
            }
        } else {
            visit(dwarf, unit, child, saved, out)?;
        }
    }
    Ok(())
}

/// A concrete function with a stack-pointer frame base, or None (not described well enough:
/// the runtime keeps its whole frame).
fn function<'a>(
    dwarf: &gimli::Dwarf<Slice<'a>>,
    unit: &gimli::Unit<Slice<'a>>,
    node: gimli::EntriesTreeNode<Slice<'a>>,
    saved: &HashMap<u64, Vec<i64>>,
) -> gimli::Result<Option<Function>> {
    let entry = node.entry();
    let rsp_based = matches!(
        entry.attr_value(gimli::DW_AT_frame_base),
        Some(gimli::AttributeValue::Exprloc(e)) if e.0.slice() == [gimli::constants::DW_OP_reg7.0]
    );
    let ranges = ranges_of(dwarf, unit, entry)?;
    let (Some(lo), Some(hi)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.1).max(),
    ) else {
        return Ok(None);
    };
    // A function the linker discarded keeps its DWARF at address 0.
    if !rsp_based || ranges.len() != 1 || lo == 0 {
        return Ok(None);
    }
    let mut f = Function {
        lo,
        hi,
        saved: saved.get(&lo).cloned().unwrap_or_default(),
        vars: Vec::new(),
    };
    // Every variable counts over the whole function, not only over its scope's code: a
    // scope ends before a call that never returns (`exit`), so at that call the variables
    // still alive in the source are out of every scope the compiler describes.
    if !variables(unit, node, &mut f)? {
        return Ok(None);
    }
    Ok(Some(f))
}

/// Adds the variables under `node`, nested scopes and inlined calls included, each over
/// the whole function. False: one of them is not at a fixed slot, so the function is not
/// described well enough.
fn variables<'a>(
    unit: &gimli::Unit<Slice<'a>>,
    node: gimli::EntriesTreeNode<Slice<'a>>,
    f: &mut Function,
) -> gimli::Result<bool> {
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        let tag = entry.tag();
        if tag == gimli::DW_TAG_variable || tag == gimli::DW_TAG_formal_parameter {
            let Some(location) = entry.attr_value(gimli::DW_AT_location) else {
                continue; // optimised out: nothing holds it
            };
            let Some(offset) = fbreg(&location) else {
                return Ok(false);
            };
            let Some(size) = size_of_variable(unit, entry) else {
                return Ok(false);
            };
            // A zero-sized value holds nothing.
            if size > 0 {
                f.vars.push((f.lo, f.hi, offset, size));
            }
        } else if (tag == gimli::DW_TAG_lexical_block || tag == gimli::DW_TAG_inlined_subroutine)
            && !variables(unit, child, f)?
        {
            return Ok(false);
        }
        // A nested function has a frame of its own, described on its own.
    }
    Ok(true)
}

/// The offset of a location that is exactly `DW_OP_fbreg <offset>`.
fn fbreg(location: &gimli::AttributeValue<Slice<'_>>) -> Option<i64> {
    let gimli::AttributeValue::Exprloc(expr) = location else {
        return None;
    };
    let mut bytes = expr.0;
    let op = gimli::Reader::read_u8(&mut bytes).ok()?;
    if op != gimli::constants::DW_OP_fbreg.0 {
        return None;
    }
    let offset = gimli::Reader::read_sleb128(&mut bytes).ok()?;
    gimli::Reader::is_empty(&bytes).then_some(offset)
}

/// The size of a variable's type, following its abstract origin (inlined code) and
/// typedefs; None when it cannot be told.
fn size_of_variable<'a>(
    unit: &gimli::Unit<Slice<'a>>,
    entry: &gimli::DebuggingInformationEntry<Slice<'a>>,
) -> Option<u64> {
    let typ = match entry.attr_value(gimli::DW_AT_type) {
        Some(t) => t,
        None => {
            let gimli::AttributeValue::UnitRef(origin) =
                entry.attr_value(gimli::DW_AT_abstract_origin)?
            else {
                return None;
            };
            unit.entry(origin).ok()?.attr_value(gimli::DW_AT_type)?
        }
    };
    let mut at = typ;
    for _ in 0..16 {
        let gimli::AttributeValue::UnitRef(offset) = at else {
            return None;
        };
        let t = unit.entry(offset).ok()?;
        if let Some(size) = t
            .attr_value(gimli::DW_AT_byte_size)
            .and_then(|v| v.udata_value())
        {
            return Some(size);
        }
        match t.tag() {
            gimli::DW_TAG_array_type => return array_size(unit, &t),
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => return Some(8),
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => at = t.attr_value(gimli::DW_AT_type)?,
            _ => return None,
        }
    }
    None
}

/// An array type's size: its element's size times the count of each dimension.
fn array_size<'a>(
    unit: &gimli::Unit<Slice<'a>>,
    array: &gimli::DebuggingInformationEntry<Slice<'a>>,
) -> Option<u64> {
    let element = {
        let gimli::AttributeValue::UnitRef(offset) = array.attr_value(gimli::DW_AT_type)? else {
            return None;
        };
        let e = unit.entry(offset).ok()?;
        e.attr_value(gimli::DW_AT_byte_size)?.udata_value()?
    };
    let mut tree = unit.entries_tree(Some(array.offset())).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    let mut total = element;
    while let Ok(Some(child)) = children.next() {
        let e = child.entry();
        if e.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let count = match (
            e.attr_value(gimli::DW_AT_count)
                .and_then(|v| v.udata_value()),
            e.attr_value(gimli::DW_AT_upper_bound)
                .and_then(|v| v.udata_value()),
        ) {
            (Some(c), _) => c,
            (None, Some(upper)) => upper + 1,
            (None, None) => return None,
        };
        total = total.checked_mul(count)?;
    }
    Some(total)
}

fn ranges_of<'a>(
    dwarf: &gimli::Dwarf<Slice<'a>>,
    unit: &gimli::Unit<Slice<'a>>,
    entry: &gimli::DebuggingInformationEntry<Slice<'a>>,
) -> gimli::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut ranges = dwarf.die_ranges(unit, entry)?;
    while let Some(r) = ranges.next()? {
        if r.begin < r.end {
            out.push((r.begin, r.end));
        }
    }
    Ok(out)
}

/// Per function start: the CFA-relative slots where its unwind rows say callee-saved
/// registers (rbx, rbp, r12–r15) are saved.
fn register_saves(file: &object::File) -> HashMap<u64, Vec<i64>> {
    use gimli::UnwindSection;
    let mut out = HashMap::new();
    let Some(section) = file.section_by_name(".eh_frame") else {
        return out;
    };
    let Ok(bytes) = section.data() else {
        return out;
    };
    let eh = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    let mut ctx = gimli::UnwindContext::new();
    let mut entries = eh.entries(&bases);
    let callee_saved = [3u16, 6, 12, 13, 14, 15];
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else {
            continue;
        };
        let mut slots: Vec<i64> = Vec::new();
        if let Ok(mut rows) = fde.rows(&eh, &bases, &mut ctx) {
            while let Ok(Some(row)) = rows.next_row() {
                for (reg, rule) in row.registers() {
                    if let gimli::RegisterRule::Offset(o) = rule {
                        if callee_saved.contains(&reg.0) && !slots.contains(o) {
                            slots.push(*o);
                        }
                    }
                }
            }
        }
        out.insert(fde.initial_address(), slots);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_describes_its_unoptimised_functions() {
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let functions = read(&data).unwrap();
        // The test binary is built without optimisation: its own functions are described,
        // each within its code range, and some have variables.
        assert!(functions.len() > 100, "{}", functions.len());
        assert!(functions.iter().all(|f| f.lo < f.hi));
        let with_vars = functions.iter().filter(|f| !f.vars.is_empty()).count();
        assert!(with_vars > 50, "{with_vars}");
        for f in &functions {
            for &(lo, hi, _, size) in &f.vars {
                assert!(lo < hi && size > 0, "{f:?}");
            }
        }
        let text = render(&functions[..2]);
        assert!(text.starts_with(&format!("f {} {}\n", functions[0].lo, functions[0].hi)));
    }

    #[test]
    fn only_a_single_fbreg_is_a_fixed_slot() {
        let expr = |bytes: &'static [u8]| {
            gimli::AttributeValue::Exprloc(gimli::Expression(gimli::EndianSlice::new(
                bytes,
                gimli::LittleEndian,
            )))
        };
        assert_eq!(fbreg(&expr(&[0x91, 0x88, 0x01])), Some(136));
        assert_eq!(fbreg(&expr(&[0x91, 0x78])), Some(-8));
        // fbreg then a piece, or a register: not a fixed slot.
        assert_eq!(fbreg(&expr(&[0x91, 0x08, 0x93, 0x08])), None);
        assert_eq!(fbreg(&expr(&[0x50])), None);
    }
}
