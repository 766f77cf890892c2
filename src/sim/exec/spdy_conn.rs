//! The SPDY transport of an exec session (kubectl up to 1.29, and 1.30+ when WebSocket is
//! refused): the streams protocol of the kubelet's `remotecommand` server (pkg/kubelet/cri/
//! streaming/remotecommand/httpstream.go) on an upgraded connection.
//!
//! Rules:
//! 1. The client opens one stream per stream type (`streamtype` header: `error`, `stdin`,
//!    `stdout`, `stderr`, `resize`); each is accepted at once (SYN_REPLY). The session starts
//!    when every stream the options need has come (`error`, those asked for, `resize` with a
//!    terminal), within [`STREAM_CREATION_TIMEOUT`] (the kubelet's default), or not at all.
//! 2. Data on `stdin` goes to the command, its FIN (or a reset) closes it; `resize` carries
//!    `{"Width", "Height"}` JSON objects. Pings are answered.
//! 3. The command's output goes on `stdout`/`stderr`; after the session its status goes on
//!    `error`, then FIN on each server stream and a GOAWAY; the client's close is awaited for at
//!    most [`CLOSE_WAIT`] before the connection is dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::sim::exec::channels::{self, FromClient};
use crate::sim::exec::session::{self, Session, Writer};
use crate::sim::exec::spdy::{self, Frame, HeaderDeflater, HeaderInflater};

/// Rule 1: how long the client has to open its streams.
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Rule 3: how long the client's close is awaited.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The streams of a session by type.
type Streams = HashMap<String, u32>;

/// The connection's write side, shared by the reader (replies, pings) and the session.
struct Out<S> {
    io: WriteHalf<S>,
    deflater: HeaderDeflater,
}

type Shared<S> = Arc<Mutex<Out<S>>>;

async fn write<S: AsyncWrite>(out: &Shared<S>, frame: &[u8]) -> bool {
    let mut out = out.lock().await;
    out.io.write_all(frame).await.is_ok() && out.io.flush().await.is_ok()
}

/// Rule 1: the stream types a session with these options waits for.
fn expected(options: &crate::sim::kubelet::exec::ExecOptions) -> Vec<&'static str> {
    let asked = [
        ("stdin", options.stdin),
        ("stdout", options.stdout),
        ("stderr", options.stderr),
        ("resize", options.tty),
    ];
    std::iter::once("error").chain(asked.into_iter().filter(|(_, on)| *on).map(|(name, _)| name)).collect()
}

struct SpdyWriter<S> {
    out: Shared<S>,
    streams: Streams,
}

impl<S> SpdyWriter<S> {
    fn stream_of(&self, channel: u8) -> Option<u32> {
        let name = match channel {
            channels::STDOUT => "stdout",
            channels::STDERR => "stderr",
            _ => "error",
        };
        self.streams.get(name).copied()
    }
}

impl<S: AsyncWrite + Send> Writer for SpdyWriter<S> {
    async fn send(&mut self, channel: u8, data: &[u8]) -> bool {
        match self.stream_of(channel) {
            Some(stream) => write(&self.out, &spdy::data(stream, false, data)).await,
            None => true,
        }
    }
}

/// Runs `session` on the upgraded connection `io` (rules 1–3).
pub async fn serve<S>(io: S, session: Session)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(io);
    let out = Arc::new(Mutex::new(Out { io: writer, deflater: HeaderDeflater::default() }));
    let gone = CancellationToken::new();
    let (events, received) = mpsc::channel(16);
    let (ready, streams) = oneshot::channel();
    let wanted = expected(&session.options);
    let reading = tokio::spawn(read(reader, out.clone(), wanted, ready, events, gone.clone().drop_guard()));
    let streams = tokio::select! {
        streams = streams => streams.ok(),
        () = tokio::time::sleep(STREAM_CREATION_TIMEOUT) => None,
    };
    let Some(streams) = streams else {
        tracing::debug!("timed out waiting for client to create streams");
        reading.abort();
        return;
    };
    let last = streams.values().copied().max().unwrap_or(0);
    let mut writer = SpdyWriter { out: out.clone(), streams };
    if let Some(status) = session::run(&mut writer, received, &gone, session).await {
        writer.send(channels::ERROR, status.to_string().as_bytes()).await;
    }
    let mut closing = Vec::new();
    for channel in [channels::ERROR, channels::STDOUT, channels::STDERR] {
        if let Some(stream) = writer.stream_of(channel) {
            closing.extend(spdy::data(stream, true, &[]));
        }
    }
    closing.extend(spdy::goaway(last));
    if write(&out, &closing).await {
        let _ = out.lock().await.io.shutdown().await;
        let _ = tokio::time::timeout(CLOSE_WAIT, gone.cancelled()).await;
    }
    reading.abort();
}

/// Rules 1 and 2: the client's frames, until it goes away or breaks the protocol.
async fn read<S>(
    mut io: ReadHalf<S>,
    out: Shared<S>,
    wanted: Vec<&'static str>,
    ready: oneshot::Sender<Streams>,
    events: mpsc::Sender<FromClient>,
    _gone: DropGuard,
) where
    S: AsyncRead + AsyncWrite,
{
    let mut state = ReadState { streams: Streams::new(), ready: Some(ready), wanted };
    let (mut buf, mut inflater) = (Vec::new(), HeaderInflater::default());
    loop {
        loop {
            match spdy::parse(&buf, &mut inflater) {
                Ok(Some((frame, used))) => {
                    buf.drain(..used);
                    if !state.handle(frame, &out, &events).await {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "exec client broke SPDY");
                    return;
                }
            }
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// What the reader knows of the session's streams.
struct ReadState {
    streams: Streams,
    ready: Option<oneshot::Sender<Streams>>,
    wanted: Vec<&'static str>,
}

impl ReadState {
    fn is(&self, name: &str, stream: u32) -> bool {
        self.streams.get(name) == Some(&stream)
    }

    /// Acts on one frame; `false` when the client is going away.
    async fn handle<S: AsyncWrite>(
        &mut self,
        frame: Frame,
        out: &Shared<S>,
        events: &mpsc::Sender<FromClient>,
    ) -> bool {
        match frame {
            Frame::SynStream { stream, headers } => {
                let reply = {
                    let mut out = out.lock().await;
                    spdy::syn_reply(stream, &mut out.deflater)
                };
                if !write(out, &reply).await {
                    return false;
                }
                if let Some((_, kind)) = headers.iter().find(|(name, _)| name == "streamtype") {
                    self.streams.insert(kind.clone(), stream);
                }
                if self.wanted.iter().all(|w| self.streams.contains_key(*w))
                    && let Some(ready) = self.ready.take()
                {
                    let _ = ready.send(self.streams.clone());
                }
            }
            Frame::Data { stream, fin, data } if self.is("stdin", stream) => {
                if !data.is_empty() {
                    let _ = events.send(FromClient::Stdin(data)).await;
                }
                if fin {
                    let _ = events.send(FromClient::Closed(channels::STDIN)).await;
                }
            }
            Frame::Data { stream, data, .. } if self.is("resize", stream) => {
                for object in data.split(|b| *b == b'\n').filter(|o| !o.is_empty()) {
                    let message = channels::frame(channels::RESIZE, object);
                    if let Ok(event) = channels::read(channels::Protocol::V4, &message) {
                        let _ = events.send(event).await;
                    }
                }
            }
            Frame::RstStream { stream } if self.is("stdin", stream) => {
                let _ = events.send(FromClient::Closed(channels::STDIN)).await;
            }
            Frame::Ping { id } => return write(out, &spdy::ping(id)).await,
            Frame::GoAway => return false,
            Frame::Data { .. } | Frame::RstStream { .. } | Frame::Ignored => {}
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::kubelet::exec::ExecOptions;

    #[test]
    fn a_session_waits_for_the_streams_its_options_need() {
        let options =
            |stdin, stdout, stderr, tty| ExecOptions { stdin, stdout, stderr, tty, ..Default::default() };
        assert_eq!(expected(&options(false, true, true, false)), ["error", "stdout", "stderr"]);
        assert_eq!(expected(&options(true, true, false, true)), ["error", "stdin", "stdout", "resize"]);
    }
}
