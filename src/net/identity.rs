//! A node's TLS identity and the TLS configurations built on it.
//!
//! Every node has an Ed25519 key and a self-signed certificate made from it with rcgen. Its
//! [`NodeId`] is the first 16 bytes of SHA-256 over the certificate's SubjectPublicKeyInfo,
//! so an id cannot be claimed without the key. There is no CA: both sides of every QUIC
//! connection present a certificate, the verifiers below check the handshake signature
//! against it and derive the peer's id; admission to the overlay is decided afterwards by
//! the join-token proof ([`super::token`]).
//!
//! A dialer that knows whom it wants encodes the expected id in the server name
//! ([`server_name_for`]); the verifier rejects a certificate whose id differs, so a peer that
//! claims another node's id fails the TLS handshake.

use crate::proto::NodeId;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// ALPN protocol of the overlay.
pub const ALPN: &[u8] = b"phoenix-overlay/1";

/// Server name used when dialing an address whose node id is not known yet (joining).
pub const ANY_NODE: &str = "any.overlay";

/// Why an identity could not be created or loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the key file failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The key file exists but is not a usable key.
    #[error("{path}: not a valid node key: {reason}")]
    BadKey { path: String, reason: String },
    /// Key or certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(String),
    /// The TLS configuration could not be built.
    #[error("TLS configuration: {0}")]
    Tls(String),
}

/// A node's key, certificate and the id derived from them.
pub struct Identity {
    id: NodeId,
    key_pem: String,
    key_der: Vec<u8>,
    cert: CertificateDer<'static>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A fresh random identity.
    pub fn generate() -> Result<Identity, IdentityError> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)
            .map_err(|e| IdentityError::Generate(e.to_string()))?;
        Identity::from_key(key)
    }

    /// Loads the key in PEM from `path`, or creates it (mode 0600) if the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Identity, IdentityError> {
        let shown = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(pem) => {
                let key = rcgen::KeyPair::from_pem(&pem).map_err(|e| IdentityError::BadKey {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                Identity::from_key(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let identity = Identity::generate()?;
                write_private(path, identity.key_pem.as_bytes()).map_err(|source| {
                    IdentityError::Io {
                        path: shown,
                        source,
                    }
                })?;
                Ok(identity)
            }
            Err(source) => Err(IdentityError::Io {
                path: shown,
                source,
            }),
        }
    }

    fn from_key(key: rcgen::KeyPair) -> Result<Identity, IdentityError> {
        let params = rcgen::CertificateParams::new(vec!["overlay".to_string()])
            .map_err(|e| IdentityError::Generate(e.to_string()))?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| IdentityError::Generate(e.to_string()))?;
        let cert = cert.der().clone();
        let id = node_id_of(&cert).map_err(|e| IdentityError::Generate(e.to_string()))?;
        Ok(Identity {
            id,
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
            cert,
        })
    }

    /// The node id bound to this key.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The self-signed certificate.
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The private key in PKCS#8 DER (it signs membership records,
    /// [`super::record_auth`]).
    pub(crate) fn key_pkcs8(&self) -> &[u8] {
        &self.key_der
    }

    fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// The quinn server configuration: TLS 1.3, client certificates mandatory.
    pub fn server_config(&self) -> Result<quinn::ServerConfig, IdentityError> {
        let provider = provider();
        let verifier = Arc::new(PeerVerifier::new(&provider));
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| IdentityError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.private_key())
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(quic)))
    }

    /// The quinn client configuration: TLS 1.3, presents this node's certificate, checks
    /// the server's id against the one encoded in the server name.
    pub fn client_config(&self) -> Result<quinn::ClientConfig, IdentityError> {
        let provider = provider();
        let verifier = Arc::new(PeerVerifier::new(&provider));
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| IdentityError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(vec![self.cert.clone()], self.private_key())
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| IdentityError::Tls(e.to_string()))?;
        Ok(quinn::ClientConfig::new(Arc::new(quic)))
    }
}

/// The server name to dial a node whose id is known: the verifier checks it.
pub fn server_name_for(id: NodeId) -> String {
    format!("n{}.overlay", id.to_hex())
}

/// The id a server name asks for, if it names one.
fn expected_id(name: &ServerName<'_>) -> Option<NodeId> {
    let ServerName::DnsName(dns) = name else {
        return None;
    };
    NodeId::from_hex(dns.as_ref().strip_prefix('n')?.strip_suffix(".overlay")?)
}

/// The node id bound to a certificate: SHA-256 of its SubjectPublicKeyInfo, first 16 bytes.
pub fn node_id_of(cert: &CertificateDer<'_>) -> Result<NodeId, rustls::Error> {
    let parsed = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| rustls::Error::General(format!("unparsable certificate: {e:?}")))?;
    let spki = parsed.subject_public_key_info();
    let digest = ring::digest::digest(&ring::digest::SHA256, spki.as_ref());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    Ok(NodeId(bytes))
}

/// The id of the peer of an established connection, from its certificate.
pub fn peer_id(conn: &quinn::Connection) -> Option<NodeId> {
    let identity = conn.peer_identity()?;
    let certs = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    node_id_of(certs.first()?).ok()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Accepts any well-formed self-signed certificate whose handshake signature verifies;
/// as a client verifier it also checks the id the server name asks for.
#[derive(Debug)]
struct PeerVerifier {
    algorithms: WebPkiSupportedAlgorithms,
}

impl PeerVerifier {
    fn new(provider: &CryptoProvider) -> Self {
        PeerVerifier {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let id = node_id_of(end_entity)?;
        if let Some(expected) = expected_id(server_name)
            && expected != id
        {
            return Err(rustls::Error::General(format!(
                "peer presented the key of node {} where node {} was expected",
                id.short(),
                expected.short()
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not used".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ClientCertVerifier for PeerVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        node_id_of(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not used".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_stable_for_a_key_and_the_server_name_round_trips() {
        let dir = std::env::temp_dir().join(format!("overlay-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.key");
        let _ = std::fs::remove_file(&path);
        let a = Identity::load_or_create(&path).unwrap();
        let b = Identity::load_or_create(&path).unwrap();
        assert_eq!(a.id(), b.id(), "same key file, same id");
        assert_ne!(a.id(), Identity::generate().unwrap().id());
        let name = ServerName::try_from(server_name_for(a.id())).unwrap();
        assert_eq!(expected_id(&name), Some(a.id()));
        assert_eq!(expected_id(&ServerName::try_from(ANY_NODE).unwrap()), None);
        std::fs::write(&path, "garbage").unwrap();
        let err = Identity::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("not a valid node key"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
