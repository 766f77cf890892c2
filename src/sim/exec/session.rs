//! One exec session, whatever carries it (`websocket` or `spdy`): the command's output to the
//! client, the client's stdin and resizes to the command, and the final status.
//!
//! Rules:
//! 1. stdout and stderr are sent as the command writes them, until each is closed by the command
//!    and every process that inherited it (as containerd drains an exec's output). stdin is
//!    written to the command as it comes; the client closing stdin closes it (EOF).
//! 2. When the command has exited and its output is drained, the session's result is its status
//!    (`channels` rule 4), which the transport sends on the error channel before it closes.
//! 3. A command that could not start, or a container that does not run here, is an
//!    `InternalError` status.
//! 4. The client going away, the container stopping or the simulator shutting down end the
//!    command (its process group, SIGKILL); only the container stopping still gives a status (the
//!    command's, killed: 137).

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::sim::exec::channels::{self, FromClient};
use crate::sim::kubelet::exec::{self, ExecOptions, Input, Output, Process, Target, Terminal};

/// The most bytes sent in one message of output.
const CHUNK: usize = 32 * 1024;

/// What one session needs.
#[derive(Debug)]
pub struct Session {
    /// The request's options.
    pub options: ExecOptions,
    /// The container, or what the kubelet says when it does not run it (rule 3).
    pub target: Result<Target, String>,
    /// The simulator's shutdown.
    pub shutdown: CancellationToken,
}

/// Where a session's output goes: one channel (`channels::STDOUT`, `STDERR`, `ERROR`) of the
/// transport.
pub trait Writer: Send {
    /// Sends `data` on `channel`; `false` once the client cannot be written to.
    fn send(&mut self, channel: u8, data: &[u8]) -> impl Future<Output = bool> + Send;
}

/// Runs the session: the client's messages arrive on `events` (the transport's reader ends
/// `gone` when the client has gone); the status to send (rule 2), or `None` when the session
/// ended without one (rule 4).
pub async fn run<W: Writer>(
    writer: &mut W,
    events: mpsc::Receiver<FromClient>,
    gone: &CancellationToken,
    session: Session,
) -> Option<Value> {
    let started = session.target.and_then(|target| {
        exec::start(&target, &session.options)
            .map(|p| (p, target))
            .map_err(|e| format!("error executing command in container: failed to exec in container: {e}"))
    });
    match started {
        Err(why) => Some(channels::internal_error(&why)),
        Ok((mut process, target)) => {
            let input = tokio::spawn(input(events, process.stdin.take(), process.terminal.take()));
            let ends = Ends { client_gone: gone, container_done: &target.done, shutdown: &session.shutdown };
            let status = pump(writer, process, &session.options.command, ends).await;
            input.abort();
            status
        }
    }
}

/// What ends a session early (rule 4).
struct Ends<'a> {
    client_gone: &'a CancellationToken,
    container_done: &'a CancellationToken,
    shutdown: &'a CancellationToken,
}

/// Rules 1, 2 and 4: sends the output until the command is done; its status, or `None`.
async fn pump<W: Writer>(
    writer: &mut W,
    mut process: Process,
    command: &[String],
    ends: Ends<'_>,
) -> Option<Value> {
    let (tx, mut rx) = mpsc::channel::<(u8, Vec<u8>)>(8);
    for (output, channel) in
        [(process.stdout.take(), channels::STDOUT), (process.stderr.take(), channels::STDERR)]
    {
        if let Some(output) = output {
            tokio::spawn(copy(output, channel, tx.clone()));
        }
    }
    drop(tx);
    let (mut exit, mut drained) = (None, false);
    while exit.is_none() || !drained {
        tokio::select! {
            chunk = rx.recv(), if !drained => match chunk {
                Some((channel, data)) => {
                    if !writer.send(channel, &data).await {
                        process.kill().await;
                        return None;
                    }
                }
                None => drained = true,
            },
            code = process.wait(), if exit.is_none() => exit = Some(code.unwrap_or(255)),
            () = ends.client_gone.cancelled() => {
                process.kill().await;
                return None;
            }
            () = ends.container_done.cancelled(), if exit.is_none() => {
                process.kill().await;
                exit = Some(process.wait().await.unwrap_or(137));
            }
            () = ends.shutdown.cancelled() => {
                process.kill().await;
                return None;
            }
        }
    }
    Some(match exit {
        Some(0) => channels::success(),
        Some(code) => channels::exit_status(command, code),
        None => channels::internal_error("the command's exit was not seen"),
    })
}

/// Rule 1: one output stream to the client.
async fn copy(mut from: Output, channel: u8, to: mpsc::Sender<(u8, Vec<u8>)>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send((channel, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Rule 1: the client's messages to the command.
async fn input(mut events: mpsc::Receiver<FromClient>, mut stdin: Option<Input>, terminal: Option<Terminal>) {
    while let Some(event) = events.recv().await {
        match event {
            FromClient::Stdin(bytes) => {
                if let Some(writer) = stdin.as_mut()
                    && (writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err())
                {
                    stdin = None;
                }
            }
            FromClient::Closed(channels::STDIN) => stdin = None,
            FromClient::Resize(width, height) => {
                if let Some(terminal) = &terminal {
                    terminal.resize(width, height);
                }
            }
            FromClient::Closed(_) | FromClient::Ignored => {}
        }
    }
}
