//! Positional reads into a buffer's spare capacity: memory the read overwrites is not zero-filled first
//! (that cost as much as the read's own copy in profiles of large reads).

use bytes::BytesMut;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Appends up to `len` bytes of `file` at `offset` to `buf` (reserving the room first), stopping early only
/// at the end of the file. Returns how many bytes it read.
pub fn pread_append(file: &File, buf: &mut BytesMut, offset: u64, len: usize) -> io::Result<usize> {
    buf.reserve(len);
    let start = buf.len();
    let fd = file.as_raw_fd();
    while buf.len() - start < len {
        let done = buf.len() - start;
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        let spare = buf.spare_capacity_mut();
        // SAFETY: pread writes at most `len - done` bytes at the start of the spare capacity, which
        // `reserve(len)` made at least that long; `fd` is open for the whole call.
        let n = unsafe { libc::pread(fd, spare.as_mut_ptr().cast(), len - done, at) };
        match n {
            0 => break,
            // SAFETY: pread initialised those `n` bytes (n <= len - done).
            n if n > 0 => unsafe { buf.set_len(buf.len() + n as usize) },
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(buf.len() - start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_after_what_the_buffer_holds_and_stops_at_the_end() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let mut buf = BytesMut::from(&b"ab"[..]);
        assert_eq!(pread_append(&f, &mut buf, 3, 4).unwrap(), 4);
        assert_eq!(&buf[..], b"ab3456");
        assert_eq!(pread_append(&f, &mut buf, 8, 100).unwrap(), 2, "short at the end of the file");
        assert_eq!(&buf[..], b"ab345689");
        assert_eq!(pread_append(&f, &mut buf, 50, 10).unwrap(), 0);
    }
}
