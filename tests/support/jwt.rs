//! Tokens for the quickstart's jwt_authn provider (envoy/quickstart.yaml): HS256 with its demo
//! key, signed here the way an identity provider would.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The demo key of envoy/quickstart.yaml's local JWKS (its `k`, decoded).
pub const QUICKSTART_KEY: &[u8] = b"mom-router-quickstart-demo-signing-key-not-for-production";

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// A compact JWS (HS256, kid `quickstart`) carrying `claims`, signed with `key`.
pub fn token(claims: &serde_json::Value, key: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"quickstart"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = URL_SAFE_NO_PAD.encode(hmac_sha256(key, signed.as_bytes()));
    format!("{signed}.{signature}")
}
