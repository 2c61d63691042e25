//! TLS for the streaming server (containerd's `enable_tls_streaming`): the
//! server's certificate and key, from PEM files or made at start
//! (self-signed), and the rustls configurations of the server and of a
//! client that trusts a given CA (for tests and tools).
//!
//! The crypto provider is ring, named explicitly, so nothing depends
//! on which providers other crates of the process enable.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::Error;

/// Largest certificate or key file read.
pub const MAX_PEM_FILE: u64 = 1 << 20;

/// The server's certificate chain and private key.
pub struct TlsIdentity {
    cert_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for TlsIdentity {
    fn clone(&self) -> Self {
        TlsIdentity {
            cert_pem: self.cert_pem.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl PartialEq for TlsIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.chain == other.chain && self.key.secret_der() == other.key.secret_der()
    }
}

impl Eq for TlsIdentity {}

impl std::fmt::Debug for TlsIdentity {
    /// The certificates only, never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

fn tls_err(message: impl Into<String>) -> Error {
    Error::Tls(message.into())
}

/// Reads a PEM file of at most [`MAX_PEM_FILE`] bytes.
fn read_pem(path: &Path) -> Result<Vec<u8>, Error> {
    let file_err = |source| Error::TlsFile {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(file_err)?;
    let mut data = Vec::new();
    file.take(MAX_PEM_FILE + 1)
        .read_to_end(&mut data)
        .map_err(file_err)?;
    if data.len() as u64 > MAX_PEM_FILE {
        return Err(tls_err(format!(
            "{}: larger than {MAX_PEM_FILE} bytes",
            path.display()
        )));
    }
    Ok(data)
}

/// The certificates of a PEM text (`what` names it in errors).
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("{what}: {e}")))?;
    if chain.is_empty() {
        return Err(tls_err(format!("{what}: no CERTIFICATE in it")));
    }
    Ok(chain)
}

impl TlsIdentity {
    /// From PEM text: the certificate chain (server's first) and its key
    /// (PKCS#8, PKCS#1 or SEC1). The key must match the certificate.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsIdentity, Error> {
        let chain = certificates(cert_pem, "the certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| tls_err(format!("the private key: {e}")))?;
        let identity = TlsIdentity {
            cert_pem: String::from_utf8_lossy(cert_pem).into_owned(),
            chain,
            key,
        };
        identity.server_config()?;
        Ok(identity)
    }

    /// From PEM files (at most [`MAX_PEM_FILE`] bytes each); errors name
    /// the file.
    pub fn from_files(cert: &Path, key: &Path) -> Result<TlsIdentity, Error> {
        let cert_pem = read_pem(cert)?;
        let key_pem = read_pem(key)?;
        let chain = certificates(&cert_pem, &cert.display().to_string())?;
        let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| tls_err(format!("{}: {e}", key.display())))?;
        let identity = TlsIdentity {
            cert_pem: String::from_utf8_lossy(&cert_pem).into_owned(),
            chain,
            key: key_der,
        };
        identity
            .server_config()
            .map_err(|e| tls_err(format!("{} and {}: {e}", cert.display(), key.display())))?;
        Ok(identity)
    }

    /// A new self-signed certificate (ECDSA P-256) for `names`: DNS names
    /// and IP addresses (written as text), the subject alternative names
    /// clients check.
    pub fn self_signed(names: &[String]) -> Result<TlsIdentity, Error> {
        let certified = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| tls_err(format!("making a self-signed certificate: {e}")))?;
        TlsIdentity::from_pem(
            certified.cert.pem().as_bytes(),
            certified.key_pair.serialize_pem().as_bytes(),
        )
    }

    /// The certificate chain as PEM (what a client may trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The server side: TLS 1.2 and 1.3, HTTP/1.1 (ALPN `http/1.1`).
    pub(crate) fn server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| tls_err(format!("certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A client configuration that trusts the certificates of `ca_pem` (a CA,
/// or a self-signed server certificate) and nothing else.
pub fn client_config(ca_pem: &[u8]) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca_pem, "the CA")? {
        roots
            .add(cert)
            .map_err(|e| tls_err(format!("the CA: {e}")))?;
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_identity_round_trips_through_pem() {
        let id = TlsIdentity::self_signed(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        assert!(id.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(client_config(id.cert_pem().as_bytes()).is_ok());
        assert!(!format!("{id:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).unwrap();
        let err = TlsIdentity::from_pem(
            a.cert.pem().as_bytes(),
            b.key_pair.serialize_pem().as_bytes(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("certificate and key"), "{err}");
        assert!(TlsIdentity::from_pem(b"nonsense", b"nonsense").is_err());
    }

    #[test]
    fn missing_and_oversized_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.crt");
        let err = TlsIdentity::from_files(&missing, &missing).unwrap_err();
        assert!(err.to_string().contains("nope.crt"), "{err}");
        let big = dir.path().join("big.crt");
        std::fs::write(&big, vec![b'a'; MAX_PEM_FILE as usize + 1]).unwrap();
        let err = TlsIdentity::from_files(&big, &big).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
    }
}
