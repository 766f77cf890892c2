//! The demo's keys from stdin: when stdin is a terminal, it is switched to non-canonical input
//! without echo (a key counts when pressed, not after Enter; Ctrl-C still signals) for as long as
//! the [`KeyReader`] lives, then restored. Keys (bytes) arrive on a channel, read by a detached
//! thread: a blocking read of stdin never holds up the runtime's shutdown. Stdin that is a pipe
//! (a test) is read the same way; at its end the channel closes.

#![allow(unsafe_code, reason = "libc: termios settings of stdin")]

use std::io::{IsTerminal, Read};

use tokio::sync::mpsc;

/// Reads stdin's bytes into a channel; restores the terminal when dropped.
#[derive(Debug)]
pub struct KeyReader {
    saved: Option<libc::termios>,
}

impl KeyReader {
    /// Starts reading; the keys arrive on the returned receiver.
    pub fn start() -> (KeyReader, mpsc::Receiver<u8>) {
        let saved = std::io::stdin().is_terminal().then(key_at_a_time).flatten();
        let (keys, received) = mpsc::channel(16);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut byte = [0u8; 1];
            while let Ok(1) = stdin.read(&mut byte) {
                if keys.blocking_send(byte[0]).is_err() {
                    break;
                }
            }
        });
        (KeyReader { saved }, received)
    }
}

/// Switches stdin to one key at a time without echo; returns the settings to restore.
fn key_at_a_time() -> Option<libc::termios> {
    // SAFETY: `termios` is plain data; tcgetattr fills it for fd 0 or fails (then it is unused).
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd 0 is open for the process's lifetime; `saved` is a valid out pointer.
    if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
        return None;
    }
    let mut raw = saved;
    raw.c_lflag &= !(libc::ICANON | libc::ECHO);
    raw.c_cc[libc::VMIN] = 1;
    raw.c_cc[libc::VTIME] = 0;
    // SAFETY: as above; `raw` is a valid termios derived from the current one.
    (unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } == 0).then_some(saved)
}

impl Drop for KeyReader {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: restores the settings read from the same fd at start.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved) };
        }
    }
}
