//! The TLS of an `httpGet` probe with `scheme: HTTPS`, as 1.28's kubelet speaks it: the prober's
//! HTTP client (`pkg/probe/http/http.go` `New`, used by `pkg/kubelet/prober/prober.go`
//! `newProber`) sets `tls.Config{InsecureSkipVerify: true}`, so a probe checks neither the
//! server's chain nor its name (the kubelet has no CA to check a pod's certificate against); the
//! handshake itself, and its signature by the certificate's key, is still a real TLS handshake.
//! An IP address as the server name sends no SNI, as Go's client does for an IP.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Accepts any server certificate (`InsecureSkipVerify`), checking only the handshake's
/// signatures with the provider's algorithms.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS session over `stream` to `addr`, not verifying the server (see the module docs).
pub async fn connect(stream: TcpStream, addr: SocketAddr) -> Result<TlsStream<TcpStream>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector.connect(ServerName::IpAddress(addr.ip().into()), stream).await.map_err(|e| e.to_string())
}
