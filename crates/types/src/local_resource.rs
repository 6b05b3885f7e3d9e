//! Errors that say "this machine is short of something", not "the peer is at fault": out of
//! file descriptors (process or system), out of kernel memory or socket buffers, or no local
//! port/address left to connect from. The one place such an [`std::io::Error`] is recognised,
//! by its `raw_os_error` (through rustix's typed errno) or its `ErrorKind`, never by its text.
//!
//! Why it matters: a connect that fails with EMFILE says nothing about the receiver. Counted
//! against the host, it marks healthy hosts down and delays their mail by minutes (a full-disk
//! pause once left ~980 sockets open and 12 healthy hosts down). Callers back off globally and
//! count it instead.

use std::io;

/// A local resource that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalResource {
    /// EMFILE: this process's open-file limit (`RLIMIT_NOFILE`).
    ProcessFiles,
    /// ENFILE: the system's open-file table.
    SystemFiles,
    /// ENOMEM: kernel memory.
    Memory,
    /// ENOBUFS: socket buffer space.
    Buffers,
    /// EADDRNOTAVAIL: no local address or ephemeral port to connect from.
    LocalAddress,
}

impl LocalResource {
    /// Every kind, in the order of the `/metrics` series.
    pub const ALL: [LocalResource; 5] = [
        LocalResource::ProcessFiles,
        LocalResource::SystemFiles,
        LocalResource::Memory,
        LocalResource::Buffers,
        LocalResource::LocalAddress,
    ];

    /// The kind of `e`, when it is a local shortage; `None` for anything else (refused,
    /// unreachable, reset, timed out: the peer's or the network's doing).
    pub fn of(e: &io::Error) -> Option<LocalResource> {
        use rustix::io::Errno;
        if let Some(errno) = Errno::from_io_error(e) {
            return match errno {
                Errno::MFILE => Some(LocalResource::ProcessFiles),
                Errno::NFILE => Some(LocalResource::SystemFiles),
                Errno::NOMEM => Some(LocalResource::Memory),
                Errno::NOBUFS => Some(LocalResource::Buffers),
                Errno::ADDRNOTAVAIL => Some(LocalResource::LocalAddress),
                _ => None,
            };
        }
        // Errors built without an OS code (wrapped by a library) keep their kind.
        match e.kind() {
            io::ErrorKind::OutOfMemory => Some(LocalResource::Memory),
            io::ErrorKind::AddrNotAvailable => Some(LocalResource::LocalAddress),
            _ => None,
        }
    }

    /// The `resource` label of `/metrics` and the word in the log.
    pub fn word(self) -> &'static str {
        match self {
            LocalResource::ProcessFiles => "process_files",
            LocalResource::SystemFiles => "system_files",
            LocalResource::Memory => "memory",
            LocalResource::Buffers => "socket_buffers",
            LocalResource::LocalAddress => "local_address",
        }
    }

    /// Position in [`LocalResource::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::io::Errno;

    #[test]
    fn local_shortages_are_recognised_by_their_code() {
        let os = |e: Errno| io::Error::from_raw_os_error(e.raw_os_error());
        assert_eq!(
            LocalResource::of(&os(Errno::MFILE)),
            Some(LocalResource::ProcessFiles)
        );
        assert_eq!(
            LocalResource::of(&os(Errno::NFILE)),
            Some(LocalResource::SystemFiles)
        );
        assert_eq!(
            LocalResource::of(&os(Errno::NOMEM)),
            Some(LocalResource::Memory)
        );
        assert_eq!(
            LocalResource::of(&os(Errno::NOBUFS)),
            Some(LocalResource::Buffers)
        );
        assert_eq!(
            LocalResource::of(&os(Errno::ADDRNOTAVAIL)),
            Some(LocalResource::LocalAddress)
        );
        for peer in [
            Errno::CONNREFUSED,
            Errno::HOSTUNREACH,
            Errno::CONNRESET,
            Errno::TIMEDOUT,
        ] {
            assert_eq!(LocalResource::of(&os(peer)), None, "{peer:?}");
        }
        // The text is never read: a peer's error that mentions files is still the peer's.
        let text = io::Error::other("Too many open files");
        assert_eq!(LocalResource::of(&text), None);
        let kind = io::Error::from(io::ErrorKind::AddrNotAvailable);
        assert_eq!(LocalResource::of(&kind), Some(LocalResource::LocalAddress));
    }

    #[test]
    fn words_follow_the_metric_order() {
        for (i, r) in LocalResource::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(!r.word().is_empty());
        }
    }
}
