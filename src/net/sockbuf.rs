//! Larger UDP socket buffers. The kernel's default receive buffer (about 200 KiB) holds a
//! few hundred datagrams; a node that is not scheduled for a few milliseconds while its
//! peers' bursts arrive loses the rest, and QUIC then waits out retransmission timers. The
//! loss is invisible to the protocol but looks like latency, so every socket asks for more.

use std::os::fd::AsRawFd;

/// What this module asks for, per direction. The kernel caps it at `net.core.rmem_max` /
/// `wmem_max` unless the process may override the cap (`CAP_NET_ADMIN`).
pub const SOCKET_BUFFER: usize = 4 * 1024 * 1024;

/// Asks for [`SOCKET_BUFFER`] bytes of receive and send buffer; returns the receive
/// buffer the kernel granted. Failing to enlarge is not an error: the socket still works.
pub fn enlarge(socket: &std::net::UdpSocket) -> usize {
    let fd = socket.as_raw_fd();
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        // The forcing variant exceeds the system cap when permitted; else the plain one.
        if !set(fd, force, SOCKET_BUFFER) {
            set(fd, plain, SOCKET_BUFFER);
        }
    }
    get(fd, libc::SO_RCVBUF)
}

fn set(fd: i32, option: libc::c_int, bytes: usize) -> bool {
    let value = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: a valid fd and a pointer to a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

fn get(fd: i32, option: libc::c_int) -> usize {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid fd, and pointers to a live c_int and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 { value.max(0) as usize } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_buffer_grows_beyond_the_default() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = get(socket.as_raw_fd(), libc::SO_RCVBUF);
        let after = enlarge(&socket);
        // Linux reports twice the value set; the cap may be the default itself, so only
        // "not smaller" holds everywhere.
        assert!(after >= before, "{after} < {before}");
    }
}
