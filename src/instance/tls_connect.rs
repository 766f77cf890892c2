//! TLS for the manager's own TCP sessions (`tokio-postgres`), with rustls on the ring provider:
//! the server's certificate verified against the cluster's CA and its name (libpq's
//! `verify-full`). [`Verified::from_ca_file`] reads the CA; [`super::local::session_with`] connects
//! with it.
//!
//! No channel binding is offered (`ChannelBinding::none`): SCRAM then runs without it, as libpq's
//! default `channel_binding=prefer` does with a server that cannot bind; the TLS verification is
//! what authenticates the server.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// Connects with TLS, verifying the server against one CA.
#[derive(Clone, Debug)]
pub struct Verified {
    config: Arc<rustls::ClientConfig>,
}

impl Verified {
    /// Trusting the certificates of the PEM file `path` only.
    pub fn from_ca_file(path: &Path) -> io::Result<Verified> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path).map_err(io::Error::other)? {
            roots.add(cert.map_err(io::Error::other)?).map_err(io::Error::other)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Verified { config: Arc::new(config) })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for Verified {
    type Stream = Stream<S>;
    type TlsConnect = ConnectTo;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<ConnectTo> {
        let name = ServerName::try_from(domain.to_owned()).map_err(io::Error::other)?;
        Ok(ConnectTo { config: self.config.clone(), name })
    }
}

/// One connection's handshake with the server named `name`.
#[derive(Debug)]
pub struct ConnectTo {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for ConnectTo {
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move { connector.connect(self.name, stream).await.map(Stream) })
    }
}

/// An encrypted session's stream.
#[derive(Debug)]
pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
