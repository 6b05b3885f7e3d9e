//! Standard output for the CLI, whose reader may go away: `herald status | head` closes the
//! pipe after ten lines. `println!` panics on that (Rust ignores SIGPIPE, so the write returns
//! EPIPE); [`outln!`] and [`out!`] end the process quietly instead, with the exit status a
//! shell shows for a command stopped by SIGPIPE (141), as `cat` or `grep` would end. Any other
//! write error is one line on stderr and status 1.

/// `println!` that ends the process quietly when stdout is closed.
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that ends the process quietly when stdout is closed.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

/// The status of a process stopped by SIGPIPE, as shells report it (128 + 13).
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// Writes to stdout, or ends the process (see the module docs).
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let written = std::io::stdout().lock().write_fmt(args);
    if let Err(e) = written {
        stdout_failed(e);
    }
}

/// Raw bytes (a stored message) to stdout, ending the process the same way on a closed pipe.
pub fn write_bytes(bytes: &[u8]) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        stdout_failed(e);
    }
}

fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(EXIT_BROKEN_PIPE);
    }
    eprintln!("herald: cannot write to standard output: {e}");
    std::process::exit(1);
}
