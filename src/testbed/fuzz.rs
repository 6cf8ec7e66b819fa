//! Fuzz entry points: one function per kind of input a node takes from outside, each
//! feeding arbitrary bytes to the real parser. None may panic, whatever the bytes; where a
//! parser has a property that must hold on every input (a decoded packet re-encodes to
//! itself), the function asserts it, so a violation shows up as a panic too.
//!
//! The cargo-fuzz targets of `integration/fuzz` are one-line calls of these, and the
//! bounded property test `integration/fuzz_inputs.rs` runs them on mutations of
//! [`seeds`] in the normal test suite.

pub mod seeds;

use crate::net::frame::{FrameError, append_frame, frame_len};
use crate::net::token::{JoinToken, PROOF_LEN, Role};
use crate::net::{bulk, stream};
use crate::proto::{Message, NodeId, Packet};
use crate::topology::Topology;

/// One fuzz entry point: the name of its cargo-fuzz target (and corpus directory), the
/// function, and its seed inputs.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Target and corpus directory name.
    pub name: &'static str,
    /// The entry point.
    pub run: fn(&[u8]),
    /// Real encodings to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every entry point (the admin socket's only with the `cli` feature, which has it).
pub fn targets() -> Vec<Target> {
    let target = |name, run, seeds| Target { name, run, seeds };
    vec![
        target("packet", packet, seeds::packet_inputs),
        target("frame", frame, seeds::frame_inputs),
        target("token", token, seeds::token_inputs),
        #[cfg(feature = "cli")]
        target("admin_request", admin_request, seeds::admin_inputs),
        target("topology", topology, seeds::topology_inputs),
        target("reduce", reduce, seeds::reduce_inputs),
    ]
}

/// A wire packet: [`Packet::decode`] (and [`Message::decode`], the core's own messages)
/// of the bytes as one frame body. A packet that decodes must re-encode, decode to the
/// same packet, and encode to the same bytes again.
pub fn packet(data: &[u8]) {
    if let Ok(p) = Packet::decode(data) {
        packet_round_trip(&p);
    }
    if let Ok(m) = Message::decode(data) {
        let bytes = m.encode().expect("a decoded message re-encodes");
        assert_eq!(
            bytes.len(),
            m.encoded_len(),
            "encoded_len is the encoded size"
        );
        let again = Message::decode(&bytes).expect("a re-encoded message decodes");
        assert_eq!(again, m, "a message survives re-encoding");
        assert_eq!(again.encode().ok(), Some(bytes), "encoding is stable");
    }
}

/// Encodes, decodes and encodes `p` again: the same packet and the same bytes.
fn packet_round_trip(p: &Packet) {
    let bytes = p.encode().expect("a decoded packet re-encodes");
    let again = Packet::decode(&bytes).expect("a re-encoded packet decodes");
    assert_eq!(&again, p, "a packet survives re-encoding");
    assert_eq!(again.encode().ok(), Some(bytes), "encoding is stable");
}

/// A frame's body and the bytes after the frame.
pub type Split<'a> = (&'a [u8], &'a [u8]);

/// What [`crate::net::frame::read_frame`] returns on a stream that holds `bytes` and
/// then ends, and the bytes after the frame: `Ok(None)` at a clean end between frames,
/// [`FrameError::Truncated`] inside one, [`FrameError::TooLarge`] for a prefix over the
/// limit (checked by the same [`frame_len`] before anything is allocated).
pub fn next_frame(bytes: &[u8]) -> Result<Option<Split<'_>>, FrameError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let (prefix, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(FrameError::Truncated)?;
    let len = frame_len(*prefix)?;
    if rest.len() < len {
        return Err(FrameError::Truncated);
    }
    Ok(Some(rest.split_at(len)))
}

/// A QUIC stream's bytes as a peer sent them: frames split off as
/// [`crate::net::frame::read_frame`] does and handled as the link's reader does. Each
/// body is a [`Packet`] (round-tripped as in [`packet`]); a first frame that opens a data
/// stream ([`Packet::Data`]) or a bulk transfer ([`Packet::Bulk`]) has its header judged
/// by [`stream::admissible`] or [`bulk::admit`], after which the rest is raw payload. A
/// frame's bytes are also the join-token proof the acceptor reads first: checked as in
/// [`token`]. Every frame split off must frame back to the same bytes.
pub fn frame(data: &[u8]) {
    let mailbox = bulk::Mailbox::default();
    let peer = NodeId::from_bytes([1; 16]);
    let token = fixed_token();
    let mut rest = data;
    let mut first = true;
    // A framing error ends the stream: the link closes the connection.
    while let Ok(Some((body, after))) = next_frame(rest) {
        let mut reframed = Vec::new();
        append_frame(&mut reframed, body).expect("a frame read back is within the limit");
        assert_eq!(
            reframed,
            rest[..rest.len() - after.len()],
            "frames re-frame"
        );
        rest = after;
        let was_first = std::mem::take(&mut first);
        if was_first {
            proof_check(&token, &[0; 32], body);
        }
        match Packet::decode(body) {
            Ok(Packet::Data(header)) if was_first => {
                let _ = stream::admissible(&header);
                return;
            }
            Ok(Packet::Bulk(header)) if was_first => {
                if let Some((_, reserved)) = bulk::admit(&mailbox, peer, &header) {
                    mailbox.release(reserved);
                }
                assert_eq!(
                    mailbox.unclaimed(),
                    0,
                    "a released reservation is given back"
                );
                return;
            }
            Ok(p) => packet_round_trip(&p),
            Err(_) => {}
        }
    }
}

/// A join token as text, parsed as the command line and the data directory's token file
/// are (`FromStr`): a token that parses must print as the text did (trimmed, any case)
/// and parse again to itself. The same bytes are also a proof check: the first 32 bytes
/// (the keying material a TLS session exports) and the rest (a peer's proof) go to the
/// HMAC check, which must accept exactly the right proof.
pub fn token(data: &[u8]) {
    // The command line and the token file are text; bytes that are not UTF-8 never reach
    // the parser.
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(t) = text.parse::<JoinToken>()
    {
        let printed = t.to_string();
        assert!(
            text.trim().eq_ignore_ascii_case(&printed),
            "a token parsed from {text:?} prints as {printed:?}"
        );
        assert_eq!(
            printed.parse::<JoinToken>().ok(),
            Some(t),
            "tokens round-trip"
        );
    }
    let (exporter, proof) = data.split_at(data.len().min(32));
    proof_check(&fixed_token(), exporter, proof);
}

/// The token the fuzz entry points check proofs against (the seeds hold its proofs).
pub fn fixed_token() -> JoinToken {
    format!("ovl1-{}", "5a".repeat(32))
        .parse()
        .expect("a valid token")
}

/// The acceptor's check of a peer's `proof` for a session exporting `exporter`, for both
/// roles: it passes exactly when the proof is the right one.
fn proof_check(token: &JoinToken, exporter: &[u8], proof: &[u8]) {
    use crate::net::token_ring::{Match, TokenRing};
    // A node that rotated to `token` from another: its proofs frame holds one or two.
    let previous: JoinToken = format!("ovl1-{}", "17".repeat(32))
        .parse()
        .expect("a valid token");
    let ring = TokenRing::new(previous.clone(), 0, None, None);
    ring.adopt(1, token.clone());
    for role in [Role::Dialer, Role::Acceptor] {
        let right = token.proof(role, exporter);
        let accepted = proof.len() == PROOF_LEN && token.verify(role, exporter, proof);
        assert_eq!(accepted, proof == right, "only the right proof verifies");
        assert!(
            token.verify(role, exporter, &right),
            "the right proof verifies"
        );
        let slots: Vec<&[u8]> = match proof.len() {
            PROOF_LEN | 64 => proof.chunks(PROOF_LEN).collect(),
            _ => Vec::new(),
        };
        let has = |p: &[u8]| slots.contains(&p);
        let expected = if has(&right) {
            Some(Match::Current)
        } else if has(&previous.proof(role, exporter)) {
            Some(Match::Behind)
        } else {
            None
        };
        assert_eq!(
            ring.verify(role, exporter, proof),
            expected,
            "a rotated node matches exactly the proofs of its tokens"
        );
    }
}

/// What a client sends the admin socket: the request line read and parsed as the node
/// does (at most 64 KiB, UTF-8, JSON), then for a broadcast the payload it announces
/// (length checked against the limit, cut-short payloads refused), and for a published
/// value the JSON checks and the JSON reducers every node runs on such values. A request
/// that parses must serialize and parse back to the same request.
#[cfg(feature = "cli")]
pub fn admin_request(data: &[u8]) {
    use crate::admin::{AdminRequest, JsonOp, combine, read_payload, read_request};
    thread_local! {
        // The payload reader times out a stalled client: it needs tokio's timer (plain
        // bytes are always ready, so the timer never fires here). One per thread, built
        // once: a runtime per input would cost more than the parsing.
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime for the admin reader");
    }
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let Ok((request, mut body)) = read_request(data).await else {
                return;
            };
            let Ok(request) = request else { return };
            let text = serde_json::to_string(&request).expect("a request serializes");
            let again: AdminRequest = serde_json::from_str(&text).expect("and parses back");
            let again_text = serde_json::to_string(&again).expect("a request serializes");
            assert_eq!(again_text, text, "a request survives a round trip");
            match request {
                AdminRequest::Broadcast { len } => {
                    if let Ok(payload) = read_payload(&mut body, len).await {
                        assert_eq!(payload.len() as u64, len, "a payload is read whole");
                    }
                }
                AdminRequest::Publish { json, .. } => {
                    let _ = serde_json::from_str::<serde_json::Value>(&json);
                    for op in [JsonOp::Sum, JsonOp::Min, JsonOp::Max] {
                        let _ = combine(op, json.as_bytes(), json.as_bytes());
                        let _ = combine(op, json.as_bytes(), b"[1, 2.5]");
                    }
                }
                _ => {}
            }
        })
    });
}

/// Topology file text: [`Topology::parse`], then everything a loaded topology answers
/// (every cell of its matrices, its sites) and the testbed's layout of it
/// ([`super::Plan::new`]). The parser must return an error, not panic, on any text.
pub fn topology(data: &[u8]) {
    // Files are read as UTF-8 text; other bytes are refused before the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = Topology::parse(text, "fuzz") else {
        return;
    };
    let n = t.clusters.len();
    assert!(n > 0, "a topology has a cluster");
    for a in 0..n {
        assert!(t.site_of(a) < t.site_count(), "sites are numbered densely");
        for b in 0..n {
            let _ = (t.latency(a, b), t.bandwidth_mbit(a, b));
        }
        assert_eq!(
            t.cluster_index(&t.clusters[a].name),
            Some(a),
            "names are unique"
        );
    }
    assert!(t.node_count() <= crate::topology::MAX_NODES);
    let _ = super::Plan::new(t, None);
}

/// The built-in reducers on two partial results a peer could send: the first byte picks
/// the operation and element type, the next two where the rest splits into the two
/// values. Combining must answer an error, not panic, on any bytes; two valid integer
/// vectors combine into a valid one, the same in either order.
pub fn reduce(data: &[u8]) {
    use crate::proto::collective::Reducers;
    use crate::proto::{NumKind, Reducer};
    let [pick, hi, lo, rest @ ..] = data else {
        return;
    };
    let kind = [NumKind::I64, NumKind::U64, NumKind::F64][usize::from(pick % 3)];
    let reducer = match (pick / 3) % 3 {
        0 => Reducer::Sum(kind),
        1 => Reducer::Min(kind),
        _ => Reducer::Max(kind),
    };
    let split = usize::from(u16::from_be_bytes([*hi, *lo])).min(rest.len());
    let (a, b) = rest.split_at(split);
    let reducers = Reducers::default();
    let valid = reducers.validate(&reducer, a).is_ok() && reducers.validate(&reducer, b).is_ok();
    let ab = reducers.combine(&reducer, a, b);
    let ba = reducers.combine(&reducer, b, a);
    if let Ok(v) = &ab {
        assert!(valid, "only valid values combine");
        assert!(
            reducers.validate(&reducer, v).is_ok(),
            "a combined value is valid input again"
        );
        if kind != NumKind::F64 {
            // Floats may differ in the bits of a NaN; integers may not.
            assert_eq!(ba.as_ref().ok(), Some(v), "integer reducers commute");
        }
    }
}
