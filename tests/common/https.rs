//! HTTPS clients for the operator's `--metrics-secure` listeners, verification always on: a GET
//! that trusts exactly the certificates given, a test CA with server certificates signed by it
//! (what cert-manager would put in the Secret), and the certificate a server presents, read from
//! a handshake that is then refused (so a test can trust exactly that certificate afterwards).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use dbcluster_operator::runtime::observe::tls;
use parking_lot::Mutex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// An HTTPS GET of `path` on `addr` for `server_name`, verified against exactly `trusted`, with a
/// bearer `token` if given: (status, content type, body), or the TLS error.
pub async fn https_get_as(
    addr: SocketAddr,
    server_name: &str,
    trusted: &[CertificateDer<'static>],
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String, String), String> {
    let connector = tls::client_connector(trusted).expect("a usable trusted certificate");
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(|e| e.to_string())?;
    let stream = connector.connect(name, stream).await.map_err(|e| e.to_string())?;
    super::http_exchange(stream, path, token).await.ok_or_else(|| format!("GET {path} on {addr}: no answer"))
}

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Its certificate, for clients to trust.
    pub certificate: CertificateDer<'static>,
    /// The same, PEM.
    pub pem: String,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages =
            vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let pem = certificate.pem();
        let certificate = certificate.der().clone();
        Self { issuer: rcgen::Issuer::new(params, key), certificate, pem }
    }

    /// A server certificate for `names` signed by this CA, written as `dir/tls.crt` and
    /// `dir/tls.key` (each replaced whole, as a Secret volume's update is); returns the leaf.
    pub fn issue_into(&self, dir: &Path, names: &[&str]) -> CertificateDer<'static> {
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.issuer).unwrap();
        replace(&dir.join(tls::CERT_FILE), &leaf.pem());
        replace(&dir.join(tls::KEY_FILE), &key.serialize_pem());
        leaf.der().clone()
    }
}

/// Writes `path` by renaming a written file over it, so a reader never sees half of it.
fn replace(path: &Path, text: &str) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// The leaf certificate the TLS server on `addr` presents (the handshake is refused after it).
pub async fn presented_certificate(addr: SocketAddr) -> CertificateDer<'static> {
    let recorder = Arc::new(Recorder::default());
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(recorder.clone())
            .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let refused = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), stream)
        .await;
    assert!(refused.is_err(), "the recorder refuses every certificate");
    recorder.0.lock().clone().expect("the server presented a certificate")
}

/// A verifier that records the server's certificate and refuses it.
#[derive(Debug, Default)]
struct Recorder(Mutex<Option<CertificateDer<'static>>>);

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock() = Some(end_entity.clone().into_owned());
        Err(refusal())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_tls13_signature(message, cert, dss)
    }

    /// Never reached: the certificate was refused first.
    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(refusal())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

fn refusal() -> rustls::Error {
    rustls::Error::General("recorded, not trusted".into())
}
