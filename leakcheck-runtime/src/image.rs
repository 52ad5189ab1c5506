//! The loaded test executable: where it was loaded, which of its addresses are code, and
//! its build id, read from the program headers the dynamic loader reports.
//!
//! cargo-leakcheck finds a test's entry point in the executable file and passes its
//! address in the file (a virtual address of the ELF image); this module turns it into a
//! callable address, and refuses it unless it lies in an executable segment of the very
//! file that was analysed (same build id).

use std::ffi::{c_int, c_void};

/// What the first `dl_iterate_phdr` entry (always the main program) says.
struct Found {
    base: usize,
    /// The entry's address in the image, checked against the executable segments.
    want: usize,
    executable: bool,
    /// The address lies in a writable segment (a static).
    writable: bool,
    build_id: [u8; 64],
    build_id_len: usize,
    seen: bool,
    /// The calling thread's block of the program's static thread-local storage (0: none).
    tls_data: usize,
}

const NT_GNU_BUILD_ID: u32 = 3;

unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Found` passed below; `info` and its program headers are
    // valid for the duration of the callback (dl_iterate_phdr(3)).
    let (found, info) = unsafe { (&mut *data.cast::<Found>(), &*info) };
    found.seen = true;
    found.base = info.dlpi_addr as usize;
    found.tls_data = info.dlpi_tls_data as usize;
    // SAFETY: as above: dlpi_phnum headers at dlpi_phdr.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    for ph in phdrs {
        let start = ph.p_vaddr as usize;
        let end = start + ph.p_memsz as usize;
        if ph.p_type == libc::PT_LOAD && (start..end).contains(&found.want) {
            found.executable |= ph.p_flags & libc::PF_X != 0;
            found.writable |= ph.p_flags & libc::PF_W != 0;
        }
        if ph.p_type == libc::PT_NOTE {
            // SAFETY: a PT_NOTE segment is mapped (it lies in a loaded segment) and holds
            // p_memsz bytes of notes.
            let notes = unsafe {
                std::slice::from_raw_parts((found.base + start) as *const u8, ph.p_memsz as usize)
            };
            read_build_id(notes, found);
        }
    }
    // Stop after the main program.
    1
}

fn read_build_id(mut notes: &[u8], found: &mut Found) {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let (Some(namesz), Some(descsz), Some(kind)) =
            (word(notes, 0), word(notes, 4), word(notes, 8))
        else {
            return;
        };
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let desc_at = 12 + align4(namesz);
        let Some(desc) = notes.get(desc_at..desc_at + descsz) else {
            return;
        };
        if kind == NT_GNU_BUILD_ID
            && notes.get(12..12 + namesz) == Some(b"GNU\0")
            && desc.len() <= found.build_id.len()
        {
            found.build_id[..desc.len()].copy_from_slice(desc);
            found.build_id_len = desc.len();
            return;
        }
        notes = notes.get(desc_at + align4(descsz)..).unwrap_or(&[]);
    }
}

/// Why an entry point cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The loader reported no main program.
    NoImage,
    /// The address is not in an executable segment of the main program.
    NotCode,
    /// The address is not in a writable segment of the main program.
    NotData,
    /// The running executable is not the file cargo-leakcheck analysed.
    BuildId,
}

/// The callable address of `vaddr` in the main program, checked as described above.
/// `expected_build_id` is hexadecimal; empty means "the file had none".
pub fn resolve(vaddr: usize, expected_build_id: &str) -> Result<usize, Refusal> {
    let found = find(vaddr)?;
    if !found.executable {
        return Err(Refusal::NotCode);
    }
    same_build(&found, expected_build_id)?;
    Ok(found.base + vaddr)
}

/// The address of the static at `vaddr` in the main program, which must lie in one of its
/// writable segments (checked as [`resolve`] checks code).
pub fn resolve_data(vaddr: usize, expected_build_id: &str) -> Result<usize, Refusal> {
    let found = find(vaddr)?;
    if !found.writable {
        return Err(Refusal::NotData);
    }
    same_build(&found, expected_build_id)?;
    Ok(found.base + vaddr)
}

/// Where the main program is: its load bias, and how far below a thread's thread pointer
/// its static thread-local block starts (None: it has none); the build id is checked as for
/// [`resolve`]. Called on the main thread, whose thread pointer is `tp`.
pub fn program(expected_build_id: &str, tp: usize) -> Result<(usize, Option<usize>), Refusal> {
    let found = find(0)?;
    same_build(&found, expected_build_id)?;
    let below_tp =
        (found.tls_data != 0 && found.tls_data <= tp && tp != 0).then(|| tp - found.tls_data);
    Ok((found.base, below_tp))
}

fn same_build(found: &Found, expected_build_id: &str) -> Result<(), Refusal> {
    if hex_equals(&found.build_id[..found.build_id_len], expected_build_id) {
        Ok(())
    } else {
        Err(Refusal::BuildId)
    }
}

fn find(vaddr: usize) -> Result<Found, Refusal> {
    let mut found = Found {
        base: 0,
        want: vaddr,
        executable: false,
        writable: false,
        build_id: [0; 64],
        build_id_len: 0,
        seen: false,
        tls_data: 0,
    };
    // SAFETY: the callback only touches `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast()) };
    if !found.seen {
        return Err(Refusal::NoImage);
    }
    Ok(found)
}

fn hex_equals(bytes: &[u8], hex: &str) -> bool {
    let hex = hex.as_bytes();
    if hex.len() != bytes.len() * 2 {
        return false;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| match (digit(hex[2 * i]), digit(hex[2 * i + 1])) {
            (Some(h), Some(l)) => (h * 16 + l) as u8 == b,
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32).to_ne_bytes());
        v.extend((desc.len() as u32).to_ne_bytes());
        v.extend(kind.to_ne_bytes());
        v.extend(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    fn found() -> Found {
        Found {
            base: 0,
            want: 0,
            executable: false,
            writable: false,
            build_id: [0; 64],
            build_id_len: 0,
            seen: false,
            tls_data: 0,
        }
    }

    #[test]
    fn the_build_id_note_is_found_among_others() {
        let mut notes = note(b"GNU\0", 1, &[0, 0, 0, 0, 3, 2, 0, 0]); // ABI tag
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab, 0x01, 0xff]));
        let mut f = found();
        read_build_id(&notes, &mut f);
        assert_eq!(&f.build_id[..f.build_id_len], &[0xab, 0x01, 0xff]);
        assert!(hex_equals(&f.build_id[..f.build_id_len], "ab01ff"));
        assert!(hex_equals(&f.build_id[..f.build_id_len], "AB01FF"));
        assert!(!hex_equals(&f.build_id[..f.build_id_len], "ab01fe"));
        assert!(!hex_equals(&f.build_id[..f.build_id_len], "ab01"));
        // Truncated notes end the search without reading past the end.
        let mut g = found();
        read_build_id(&notes[..notes.len() - 2], &mut g);
        assert_eq!(g.build_id_len, 0);
    }

    #[test]
    fn an_address_outside_the_code_of_this_executable_is_refused() {
        // 0 is never code in a position-independent executable (its first page is headers).
        assert_eq!(resolve(0, ""), Err(Refusal::NotCode));
        assert_eq!(resolve_data(0, ""), Err(Refusal::NotData));
    }
}
