//! Who may connect: the users file and SCRAM-SHA-256 (RFC 5802 / RFC 7677), the
//! password exchange PostgreSQL clients speak, in which the password never crosses the
//! wire and the server keeps only verifiers.
//!
//! ```text
//!  client                                   server
//!  SASLInitialResponse  n,,n=,r=CNONCE   ─▶
//!                                         ◀─ SASLContinue  r=CNONCE+SNONCE,s=SALT,i=ITER
//!  SASLResponse  c=biws,r=NONCE,p=PROOF  ─▶  check: H(PROOF xor HMAC(StoredKey, AuthMessage))
//!                                                        == StoredKey
//!                                         ◀─ SASLFinal  v=HMAC(ServerKey, AuthMessage)
//! ```
//!
//! Users file (`--users FILE`): one `name:secret` per line, `#` comments. The secret is
//! either a password in clear text or a PostgreSQL SCRAM verifier as `pg_authid` stores
//! it (`SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>`, base64 parts), so a file can
//! be built without clear-text passwords (e.g. from PostgreSQL's
//! `SELECT rolpassword FROM pg_authid`).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::SecureRandom;
use ring::{digest, hmac, pbkdf2};

/// PBKDF2 iterations for verifiers built from clear-text passwords (PostgreSQL's default).
const DEFAULT_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations a verifier may ask for: a users-file line cannot make every
/// login burn minutes of CPU.
const MAX_ITERATIONS: u32 = 1_000_000;
const SALT_BYTES: usize = 16;
const NONCE_BYTES: usize = 18;
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// What the server keeps of a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier { .. }")
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let tag = hmac::sign(&key, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

fn random_bytes(len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    // The system random source failing is not something a login can recover from; a
    // zero salt/nonce would be weak, so fall back to a time-derived hash rather than panic.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let hash = sha256(&now.to_le_bytes());
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = hash[i % 32];
        }
    }
    bytes
}

impl Verifier {
    /// The verifier of a clear-text password with a fresh salt.
    pub fn from_password(password: &str) -> Verifier {
        Self::derive(password, random_bytes(SALT_BYTES), DEFAULT_ITERATIONS)
    }

    fn derive(password: &str, salt: Vec<u8>, iterations: u32) -> Verifier {
        let mut salted = [0u8; 32];
        let rounds = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
        pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, rounds, &salt, password.as_bytes(), &mut salted);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier { iterations, salt, stored_key: sha256(&client_key), server_key: hmac_sha256(&salted, b"Server Key") }
    }

    /// Parses `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok().filter(|i| (1..=MAX_ITERATIONS).contains(i))?;
        let salt = BASE64.decode(salt).ok()?;
        let stored_key = BASE64.decode(stored).ok()?.try_into().ok()?;
        let server_key = BASE64.decode(server).ok()?.try_into().ok()?;
        Some(Verifier { iterations, salt, stored_key, server_key })
    }

    /// The text form [`Verifier::parse`] reads.
    pub fn to_text(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

/// The users the server accepts.
#[derive(Debug, Clone, Default)]
pub struct Users {
    verifiers: HashMap<String, Verifier>,
}

impl Users {
    pub fn single(user: &str, password: &str) -> Users {
        let mut verifiers = HashMap::new();
        verifiers.insert(user.to_string(), Verifier::from_password(password));
        Users { verifiers }
    }

    /// Reads a users file (see the module documentation).
    pub fn from_file(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read users file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("users file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Users, String> {
        let mut verifiers = HashMap::new();
        for (idx, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, secret)) = line.split_once(':') else {
                return Err(format!("line {}: expected name:password or name:SCRAM-SHA-256$...", idx + 1));
            };
            if user.is_empty() {
                return Err(format!("line {}: empty user name", idx + 1));
            }
            let verifier = if secret.starts_with("SCRAM-SHA-256$") {
                Verifier::parse(secret).ok_or_else(|| format!("line {}: malformed SCRAM-SHA-256 verifier", idx + 1))?
            } else {
                Verifier::from_password(secret)
            };
            verifiers.insert(user.to_string(), verifier);
        }
        if verifiers.is_empty() {
            return Err("no users".to_string());
        }
        Ok(Users { verifiers })
    }

    pub fn len(&self) -> usize {
        self.verifiers.len()
    }

    /// Starts the exchange for `user`. An unknown user goes through the same exchange
    /// with a made-up verifier (and fails at the end), so a client cannot tell unknown
    /// users from wrong passwords, as in PostgreSQL.
    pub fn start(&self, user: &str) -> ScramExchange {
        let (verifier, known) = match self.verifiers.get(user) {
            Some(v) => (v.clone(), true),
            None => {
                let salt = sha256(format!("apiary mock salt {user}").as_bytes())[..SALT_BYTES].to_vec();
                (Verifier { iterations: DEFAULT_ITERATIONS, salt, stored_key: [0; 32], server_key: [0; 32] }, false)
            }
        };
        ScramExchange { verifier, known, state: ScramState::Initial }
    }
}

/// Why an exchange failed: a malformed message (protocol violation) or a wrong password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramError {
    Malformed(String),
    WrongPassword,
}

enum ScramState {
    Initial,
    /// After server-first: what the final message must match.
    SentFirst {
        client_first_bare: String,
        server_first: String,
        nonce: String,
        gs2_header: String,
    },
    Done,
}

/// One SCRAM-SHA-256 exchange with a client.
pub struct ScramExchange {
    verifier: Verifier,
    known: bool,
    state: ScramState,
}

fn malformed(what: &str) -> ScramError {
    ScramError::Malformed(format!("malformed SCRAM message: {what}"))
}

/// The value of attribute `key` (`r=...`) among comma-separated attributes.
fn attribute<'a>(attributes: &[&'a str], key: char) -> Option<&'a str> {
    attributes.iter().find_map(|a| a.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

impl ScramExchange {
    /// Takes the client-first message; returns server-first.
    pub fn client_first(&mut self, message: &[u8]) -> Result<String, ScramError> {
        if !matches!(self.state, ScramState::Initial) {
            return Err(malformed("unexpected client-first message"));
        }
        let message = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
        // gs2-header: a channel-binding flag, an optional authzid, then the bare message.
        let mut parts = message.splitn(3, ',');
        let (Some(flag), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(malformed("missing GS2 header"));
        };
        match flag {
            "n" | "y" => {}
            _ if flag.starts_with("p=") => {
                return Err(ScramError::Malformed(
                    "channel binding is not supported; connect with channel_binding=disable or prefer".to_string(),
                ))
            }
            _ => return Err(malformed("invalid channel-binding flag")),
        }
        if !authzid.is_empty() && !authzid.starts_with("a=") {
            return Err(malformed("invalid authorization identity"));
        }
        let attributes: Vec<&str> = bare.split(',').collect();
        if bare.starts_with("m=") {
            return Err(malformed("mandatory extensions are not supported"));
        }
        let client_nonce = attribute(&attributes, 'r').filter(|n| !n.is_empty()).ok_or_else(|| malformed("missing nonce"))?;
        if !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
            return Err(malformed("invalid nonce"));
        }
        let nonce = format!("{client_nonce}{}", BASE64.encode(random_bytes(NONCE_BYTES)));
        let server_first = format!("r={nonce},s={},i={}", BASE64.encode(&self.verifier.salt), self.verifier.iterations);
        self.state = ScramState::SentFirst {
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
            gs2_header: format!("{flag},{authzid},"),
        };
        Ok(server_first)
    }

    /// Takes the client-final message; returns server-final when the proof is right.
    pub fn client_final(&mut self, message: &[u8]) -> Result<String, ScramError> {
        let ScramState::SentFirst { client_first_bare, server_first, nonce, gs2_header } =
            std::mem::replace(&mut self.state, ScramState::Done)
        else {
            return Err(malformed("unexpected client-final message"));
        };
        let message = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
        let (without_proof, proof) = message.rsplit_once(",p=").ok_or_else(|| malformed("missing proof"))?;
        let attributes: Vec<&str> = without_proof.split(',').collect();
        let binding = attribute(&attributes, 'c').ok_or_else(|| malformed("missing channel binding"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(gs2_header.as_bytes()) {
            return Err(malformed("channel binding does not match the GS2 header"));
        }
        if attribute(&attributes, 'r') != Some(nonce.as_str()) {
            return Err(malformed("nonce does not match"));
        }
        let proof: [u8; 32] = BASE64.decode(proof).ok().and_then(|p| p.try_into().ok()).ok_or_else(|| malformed("invalid proof"))?;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = hmac_sha256(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for i in 0..32 {
            client_key[i] = proof[i] ^ client_signature[i];
        }
        // Compared without an early exit, so the time taken says nothing about the key.
        let difference = sha256(&client_key).iter().zip(&self.verifier.stored_key).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        let matches = difference == 0;
        if !(matches && self.known) {
            return Err(ScramError::WrongPassword);
        }
        let server_signature = hmac_sha256(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, as libpq computes it.
    fn client_final(password: &str, client_first_bare: &str, server_first: &str) -> String {
        let attributes: Vec<&str> = server_first.split(',').collect();
        let nonce = attribute(&attributes, 'r').unwrap();
        let salt = BASE64.decode(attribute(&attributes, 's').unwrap()).unwrap();
        let iterations: u32 = attribute(&attributes, 'i').unwrap().parse().unwrap();
        let verifier = Verifier::derive(password, salt.clone(), iterations);
        let mut salted = [0u8; 32];
        pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, NonZeroU32::new(iterations).unwrap(), &salt, password.as_bytes(), &mut salted);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac_sha256(&verifier.stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(signature).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", BASE64.encode(proof))
    }

    #[test]
    fn right_and_wrong_passwords() {
        let users = Users::parse("# comment\nalice:secret\n").unwrap();
        for (user, password, ok) in [("alice", "secret", true), ("alice", "wrong", false), ("bob", "secret", false)] {
            let mut exchange = users.start(user);
            let server_first = exchange.client_first(b"n,,n=,r=abcdef").unwrap();
            let last = client_final(password, "n=,r=abcdef", &server_first);
            let result = exchange.client_final(last.as_bytes());
            assert_eq!(result.is_ok(), ok, "{user}/{password}: {result:?}");
            if !ok {
                assert_eq!(result.unwrap_err(), ScramError::WrongPassword);
            }
        }
    }

    #[test]
    fn verifiers_round_trip_and_malformed_messages_fail() {
        let verifier = Verifier::from_password("pw");
        assert_eq!(Verifier::parse(&verifier.to_text()), Some(verifier.clone()));
        let users = Users::parse(&format!("carol:{}", verifier.to_text())).unwrap();
        let mut exchange = users.start("carol");
        let first = exchange.client_first(b"n,,n=,r=xyz").unwrap();
        assert!(exchange.client_final(client_final("pw", "n=,r=xyz", &first).as_bytes()).is_ok());
        for bad in [&b""[..], b"n,,", b"x,,n=,r=1", b"n,,m=1,r=2", b"n,,n=", b"\xff"] {
            assert!(users.start("carol").client_first(bad).is_err(), "{bad:?}");
        }
        let mut exchange = users.start("carol");
        exchange.client_first(b"n,,n=,r=xyz").unwrap();
        assert!(matches!(exchange.client_final(b"c=biws,r=wrong,p=AAAA"), Err(ScramError::Malformed(_))));
        assert!(Users::parse("nobody").is_err());
        assert!(Users::parse("x:SCRAM-SHA-256$0:AA==$AA==:AA==").is_err());
    }
}
