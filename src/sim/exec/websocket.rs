//! The WebSocket transport of an exec session (kubectl 1.30+): the channel protocol of `channels`
//! on an upgraded connection.
//!
//! Rules:
//! 1. First an empty message on the lowest channel the client reads (stdout, else stderr, else
//!    error): "the connection is established" (`createWebSocketStreams` of apimachinery's
//!    `util/proxy/websocket.go`).
//! 2. The client's binary messages are read by `channels::read`; its pings are answered; a close,
//!    an error or a malformed close signal ends the client's side.
//! 3. After the session (`session`), its status goes on the error channel, then a normal close
//!    (1000); the client's close answer is awaited for at most [`CLOSE_WAIT`]. client-go reads
//!    every stream to its end when the connection closes, so the status comes before the close.

use std::time::Duration;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::sim::exec::channels::{self, FromClient, Protocol};
use crate::sim::exec::session::{self, Session, Writer};

/// Rule 3: how long the client's answer to the close is awaited.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

struct Sink<S>(SplitSink<WebSocketStream<S>, Message>);

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Writer for Sink<S> {
    async fn send(&mut self, channel: u8, data: &[u8]) -> bool {
        self.0.send(Message::binary(channels::frame(channel, data))).await.is_ok()
    }
}

/// Rule 1: the channel announced first.
fn first_channel(stdout: bool, stderr: bool) -> u8 {
    if stdout {
        channels::STDOUT
    } else if stderr {
        channels::STDERR
    } else {
        channels::ERROR
    }
}

/// Runs `session` on the upgraded connection `io` (rules 1–3).
pub async fn serve<S>(io: S, protocol: Protocol, session: Session)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (sink, source) = ws.split();
    let mut sink = Sink(sink);
    let first = first_channel(session.options.stdout, session.options.stderr);
    if !sink.send(first, &[]).await {
        return;
    }
    let gone = CancellationToken::new();
    let (events, received) = mpsc::channel(16);
    let reader = tokio::spawn(read(source, protocol, events, gone.clone().drop_guard()));
    let status = session::run(&mut sink, received, &gone, session).await;
    if let Some(status) = status
        && sink.send(channels::ERROR, status.to_string().as_bytes()).await
    {
        let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        if sink.0.send(Message::Close(Some(close))).await.is_ok() {
            let _ = tokio::time::timeout(CLOSE_WAIT, gone.cancelled()).await;
        }
    }
    reader.abort();
}

/// Rule 2: the client's messages, until it closes or breaks the protocol.
async fn read<S>(
    mut source: SplitStream<WebSocketStream<S>>,
    protocol: Protocol,
    events: mpsc::Sender<FromClient>,
    _gone: DropGuard,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = source.next().await {
        let data = match message {
            Message::Binary(data) => data,
            Message::Close(_) => return,
            _ => continue,
        };
        match channels::read(protocol, &data) {
            Ok(event) => {
                // The session may be over (its input stopped): keep reading for the close.
                let _ = events.send(event).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "exec client broke the channel protocol");
                return;
            }
        }
    }
}
