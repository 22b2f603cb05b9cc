//! Certificates for TLS tests, made at test time with rcgen (no private key is committed):
//! a CA, the broker's certificate for 127.0.0.1 and localhost, client certificates.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA, its certificate in `dir/ca.pem`, and the broker's certificate and key in
    /// `dir/broker.pem` and `dir/broker.key`.
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test CA");
        let key = KeyPair::generate().unwrap();
        std::fs::write(dir.join("ca.pem"), params.self_signed(&key).unwrap().pem()).unwrap();
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca: Issuer::new(params, key),
        };
        let broker = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        pki.issue("broker", broker);
        pki
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A client certificate with subject `CN=cn`, in `NAME.pem` and `NAME.key`.
    pub fn client(&self, name: &str, cn: &str) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(name, params);
    }

    fn issue(&self, name: &str, params: CertificateParams) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        std::fs::write(self.dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}
