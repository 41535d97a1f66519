//! PATCHED (hardening): robustness tests against hostile remote input.
//!
//! * known-bad datagrams that used to panic `Packet::parse` (or the Debug/serialize/wire_size
//!   of what it returned),
//! * a deterministic xorshift fuzz loop over `Packet::parse` (structured control packets with
//!   random types/subtypes/lengths/bodies, mutations of a real handshake, random bytes),
//! * `MultiplexListener::handle_input` driven with hostile handshakes (encryption mismatches,
//!   bad cookies, mutated packets, timers, random access control answers), delegating the
//!   connections it opens to a `DuplexConnection` that is fed hostile packets as well.
//!
//! Everything runs under `catch_unwind`; any panic fails the test with the offending input.

use std::{
    io::Cursor,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    panic::{catch_unwind, AssertUnwindSafe},
    time::{Duration, Instant},
};

use bytes::Bytes;
use srt_protocol::{
    connection::{self, DuplexConnection},
    listener::*,
    options::{KeySize, PacketCount, PacketSize, SrtVersion},
    packet::*,
    settings::*,
};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn hex(buf: &[u8]) -> String {
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses like srt-tokio does, then exercises everything that happens to a received packet
/// (Debug logging, statistics via wire_size, echoing back via serialize).
fn exercise_datagram(buf: &[u8]) {
    for ipv6 in [false, true] {
        if let Ok(packet) = Packet::parse(&mut Cursor::new(buf), ipv6) {
            let _ = format!("{packet:?}");
            let _ = packet.wire_size();
            let mut out = Vec::new();
            packet.serialize(&mut out);
            if let Ok(again) = Packet::parse(&mut Cursor::new(&out[..]), ipv6) {
                let _ = format!("{again:?}");
                let _ = again.wire_size();
            }
        }
    }
}

fn assert_no_panic(what: &str, buf: &[u8]) {
    if catch_unwind(|| exercise_datagram(buf)).is_err() {
        panic!("{what}: panicked on datagram {}", hex(buf));
    }
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn key_settings(key_size: KeySize, passphrase: &str) -> KeySettings {
    KeySettings {
        key_size,
        passphrase: passphrase.into(),
    }
}

fn keying_material(key_size: KeySize, passphrase: &str) -> KeyingMaterialMessage {
    CipherSettings::new_random(&key_settings(key_size, passphrase), &Default::default())
        .wrap_keying_material()
        .unwrap()
}

fn conclusion(
    cookie: i32,
    key_size: KeySize,
    ext_km: Option<SrtControlPacket>,
    sid: Option<String>,
) -> HandshakeControlInfo {
    HandshakeControlInfo {
        init_seq_num: SeqNumber::new_truncate(12345),
        max_packet_size: PacketSize(1500),
        max_flow_size: PacketCount(8192),
        shake_type: ShakeType::Conclusion,
        socket_id: SocketId(0x1234_5678),
        syn_cookie: cookie,
        peer_addr: IpAddr::from([127, 0, 0, 1]),
        info: HandshakeVsInfo::V5(HsV5Info {
            key_size,
            ext_hs: Some(SrtControlPacket::HandshakeRequest(SrtHandshake {
                version: SrtVersion::CURRENT,
                flags: SrtShakeFlags::SUPPORTED,
                send_latency: Duration::from_millis(120),
                recv_latency: Duration::from_millis(120),
            })),
            ext_km,
            ext_group: None,
            sid,
        }),
    }
}

fn induction() -> HandshakeControlInfo {
    HandshakeControlInfo {
        shake_type: ShakeType::Induction,
        syn_cookie: 0,
        info: HandshakeVsInfo::V5(HsV5Info::default()),
        ..conclusion(0, KeySize::Unspecified, None, None)
    }
}

fn hs_packet(info: HandshakeControlInfo) -> Packet {
    Packet::Control(ControlPacket {
        timestamp: TimeStamp::from_micros(0),
        dest_sockid: SocketId(0),
        control_type: ControlTypes::Handshake(info),
    })
}

fn serialize(packet: &Packet) -> Vec<u8> {
    let mut out = Vec::new();
    packet.serialize(&mut out);
    out
}

fn real_handshake() -> Vec<u8> {
    serialize(&hs_packet(conclusion(
        0x0102_0304,
        KeySize::AES128,
        Some(SrtControlPacket::KeyRefreshRequest(keying_material(
            KeySize::AES128,
            "password123",
        ))),
        Some("#!::r=live/stream,m=publish".into()),
    )))
}

#[test]
fn known_bad_datagrams() {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // empty / short string extensions in SRT control packets
    for subtype in [5u32, 6, 7, 8] {
        cases.push((
            "empty srt string packet",
            words(&[0xffff_0000 | subtype, 0, 0, 0]),
        ));
    }
    // group extension shorter than a word
    cases.push((
        "short group packet",
        [words(&[0xffff_0008, 0, 0, 0]), vec![1, 2]].concat(),
    ));
    // SRT Reject control packet: wire_size() hit unimplemented!
    cases.push(("srt reject packet", words(&[0xffff_0000, 0, 0, 0])));
    // NAK ending with an unterminated range: Debug panicked
    cases.push((
        "unterminated nak",
        words(&[0x8003_0000, 0, 0, 0, 0x8000_0005]),
    ));
    // NAK with inverted / top-bit ranges
    cases.push((
        "inverted nak",
        words(&[
            0x8003_0000,
            0,
            0,
            0,
            0x8000_0010,
            2,
            0x8000_0001,
            0xffff_ffff,
        ]),
    ));
    // ACK with negative RTT fields and a full-ack number of u32::MAX
    cases.push((
        "negative rtt ack",
        words(&[
            0x8002_0000,
            0xffff_ffff,
            0,
            0,
            5,
            0x8000_0000,
            0xffff_ffff,
            1,
        ]),
    ));
    // congestion warning / peer error / ack2 / drop request with odd lengths
    for ty in [0x8004_0000u32, 0x8008_0000, 0x8006_0000, 0x8007_0000] {
        cases.push(("misc control", words(&[ty, 0, 0, 0])));
    }

    // handshake conclusions with each extension type (including zero-length ones)
    let hs_header = |ext_flags: u32| {
        let mut hs = words(&[0x8000_0000, 0, 0, 0]);
        hs.extend(words(&[5, ext_flags, 1, 1500, 8192, (-1i32) as u32, 1, 2]));
        hs.extend([0u8; 16]);
        hs
    };
    for ext_type in 0u32..=9 {
        for len in 0u32..=2 {
            let mut hs = hs_header(0x7);
            hs.extend(words(&[(ext_type << 16) | len]));
            hs.extend(vec![0u8; len as usize * 4]);
            cases.push(("handshake extension", hs));
        }
    }
    // a KMREQ extension without keys (KF = 0)
    let mut km = hs_header(0x2);
    km.extend(words(&[
        (3 << 16) | 6,
        0x1220_2900,
        0,
        0x0200_0200,
        0x0000_0004,
        0,
        0,
    ]));
    cases.push(("kmreq without keys", km));
    // an induction with extension flags set
    let mut ind = hs_header(0x7);
    ind[4 + 16 + 20..4 + 16 + 24].copy_from_slice(&1u32.to_be_bytes());
    cases.push(("induction with flags", ind));
    // all short lengths of a real handshake
    let real = real_handshake();
    for len in 0..real.len() {
        cases.push(("truncated handshake", real[..len].to_vec()));
    }

    for (what, buf) in &cases {
        assert_no_panic(what, buf);
    }
}

fn random_control(rng: &mut XorShift) -> Vec<u8> {
    const TYPES: [u32; 11] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 0x7fff, 0x7ffe];
    let ty = if rng.chance(10) {
        rng.u32() & 0x7fff
    } else {
        TYPES[rng.below(TYPES.len() as u64) as usize]
    };
    let subtype = if rng.chance(4) {
        rng.u32() & 0xffff
    } else {
        rng.u32() % 10
    };
    let mut buf = words(&[
        0x8000_0000 | (ty << 16) | subtype,
        if rng.chance(2) {
            rng.u32()
        } else {
            rng.u32() % 4
        },
        rng.u32(),
        rng.u32(),
    ]);
    if ty == 0 && rng.chance(2) {
        // plausible handshake body
        let version = if rng.chance(8) {
            rng.u32()
        } else {
            4 + rng.u32() % 2
        };
        let shake = [
            1u32,
            0,
            (-1i32) as u32,
            (-2i32) as u32,
            1000 + rng.u32() % 3000,
            rng.u32(),
        ][rng.below(6) as usize];
        let key = [0u32, 2, 3, 4, rng.u32() & 0xffff][rng.below(5) as usize];
        let flags = if rng.chance(3) {
            0x4a17
        } else {
            rng.u32() & 0xff
        };
        buf.extend(words(&[
            version,
            (key << 16) | flags,
            rng.u32(),
            rng.u32(),
            rng.u32(),
        ]));
        buf.extend(words(&[shake, rng.u32(), rng.u32()]));
        buf.extend(rng.bytes(16));
        for _ in 0..rng.below(5) {
            let ext_type = if rng.chance(5) {
                rng.u32() & 0xffff
            } else {
                rng.u32() % 10
            };
            let len = if rng.chance(5) {
                rng.u32() & 0xffff
            } else {
                rng.u32() % 12
            };
            buf.extend(words(&[(ext_type << 16) | len]));
            if ext_type == 3 || ext_type == 4 {
                // keying material header with random KF / lengths
                buf.extend(words(&[
                    0x1220_2900 | (rng.u32() & 0x3),
                    rng.u32(),
                    0x0200_0200 | (rng.u32() & 0x0300_0000),
                    ((rng.u32() % 5) << 8) | [4u32, 6, 8, rng.u32() & 0xff][rng.below(4) as usize],
                ]));
            }
            let body = (rng.below(48)) as usize;
            buf.extend(rng.bytes(body));
        }
    } else {
        let len = match rng.below(4) {
            0 => rng.below(4),
            1 => 4 * rng.below(8),
            2 => rng.below(64),
            _ => rng.below(400),
        } as usize;
        buf.extend(rng.bytes(len));
    }
    buf
}

fn mutate(rng: &mut XorShift, mut buf: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        if buf.is_empty() {
            break;
        }
        let i = rng.below(buf.len() as u64) as usize;
        match rng.below(6) {
            0 => buf[i] ^= 1 << rng.below(8),
            1 => buf[i] = rng.next() as u8,
            2 => buf.truncate(i),
            3 => {
                let w = rng.u32().to_be_bytes();
                buf.splice(i..i, w);
            }
            4 => {
                // overwrite a 32-bit word with an interesting value
                let v = [
                    0u32,
                    1,
                    0xffff_ffff,
                    0x8000_0000,
                    0x7fff_ffff,
                    0xffff,
                    rng.u32(),
                ][rng.below(7) as usize];
                let i = i & !3;
                if i + 4 <= buf.len() {
                    buf[i..i + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            _ => {
                let n = rng.below(16) as usize;
                let extra = rng.bytes(n);
                buf.extend(extra);
            }
        }
    }
    buf
}

#[test]
fn fuzz_packet_parse() {
    const ITERATIONS: usize = 200_000;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let real = real_handshake();
    let start = Instant::now();
    for i in 0..ITERATIONS {
        let buf = match i % 4 {
            0 | 1 => random_control(&mut rng),
            2 => mutate(&mut rng, real.clone()),
            _ => {
                let len = rng.below(80) as usize;
                rng.bytes(len)
            }
        };
        assert_no_panic(&format!("fuzz iteration {i}"), &buf);
    }
    eprintln!(
        "fuzz_packet_parse: {ITERATIONS} iterations in {:?}",
        start.elapsed()
    );
}

fn cookie_of(packet: &Packet) -> Option<i32> {
    packet.control()?.handshake().map(|hs| hs.syn_cookie)
}

/// Runs one input through the listener and follows the resulting chain of actions the way
/// srt-tokio's listener loop does. Returns the handshake packets sent back and opened
/// connections.
#[derive(Default)]
struct Outcome {
    sent: Vec<Packet>,
    rejected: Vec<Option<Packet>>,
    access_requests: Vec<SessionId>,
    opened: Vec<connection::Connection>,
    delegated: Vec<(Packet, SocketAddr)>,
}

fn step(listener: &mut MultiplexListener, now: Instant, input: Input) -> Outcome {
    let mut outcome = Outcome::default();
    let mut input = input;
    for _ in 0..100 {
        let action = listener.handle_input(now, input);
        let next = NextInputContext::for_action(&action);
        match action {
            Action::WaitForInput | Action::Close => break,
            Action::SendPacket((packet, _)) => {
                let _ = serialize(&packet);
                outcome.sent.push(packet);
            }
            Action::RequestAccess(id, _) => outcome.access_requests.push(id),
            Action::RejectConnection(_, packet) => {
                let packet = packet.map(|(p, _)| p);
                if let Some(p) = &packet {
                    let _ = serialize(p);
                }
                outcome.rejected.push(packet);
            }
            Action::OpenConnection(_, boxed) => {
                let (packet, connection) = *boxed;
                if let Some((p, _)) = packet {
                    let _ = serialize(&p);
                }
                outcome.opened.push(connection);
            }
            Action::DelegatePacket(_, packet) => outcome.delegated.push(packet),
            Action::DropConnection(_) | Action::UpdateStatistics(_) => {}
        }
        input = next.input_from(Ok::<(), ()>(()));
    }
    outcome
}

fn reject_reason(packet: &Option<Packet>) -> Option<RejectReason> {
    match packet.as_ref()?.control()?.handshake()?.shake_type {
        ShakeType::Rejection(reason) => Some(reason),
        _ => None,
    }
}

fn handshake_until_access_request(
    listener: &mut MultiplexListener,
    now: Instant,
    from: SocketAddr,
    shake: impl FnOnce(i32) -> HandshakeControlInfo,
) -> Outcome {
    let out = step(
        listener,
        now,
        Input::Packet(Ok((hs_packet(induction()), from))),
    );
    let cookie = cookie_of(&out.sent[0]).unwrap();
    // go through the wire format, like a real datagram
    let bytes = serialize(&hs_packet(shake(cookie)));
    match Packet::parse(&mut Cursor::new(bytes), false) {
        Ok(packet) => step(listener, now, Input::Packet(Ok((packet, from)))),
        Err(e) => step(listener, now, Input::Packet(Err(e.into()))),
    }
}

#[test]
fn encryption_mismatches_are_rejected() {
    let now = Instant::now();
    let with_key = |size| ConnInitSettings {
        key_settings: Some(key_settings(size, "password123")),
        ..ConnInitSettings::default()
    };
    let kmreq = |size, pass: &str| {
        Some(SrtControlPacket::KeyRefreshRequest(keying_material(
            size, pass,
        )))
    };
    let kmrsp = |size, pass: &str| {
        Some(SrtControlPacket::KeyRefreshResponse(keying_material(
            size, pass,
        )))
    };
    use CoreRejectReason::*;
    use KeySize::*;
    let cases: Vec<(
        &str,
        ConnInitSettings,
        Option<KeySettings>,
        KeySize,
        Option<SrtControlPacket>,
        Option<CoreRejectReason>,
    )> = vec![
        (
            "caller encrypted, listener not",
            ConnInitSettings::default(),
            None,
            AES128,
            kmreq(AES128, "password123"),
            Some(Unsecure),
        ),
        (
            "key size mismatch",
            with_key(AES128),
            None,
            AES256,
            kmreq(AES256, "password123"),
            Some(BadSecret),
        ),
        (
            "key size mismatch from access control",
            ConnInitSettings::default(),
            Some(key_settings(AES192, "password123")),
            AES128,
            kmreq(AES128, "password123"),
            Some(BadSecret),
        ),
        (
            "kmrsp instead of kmreq",
            with_key(AES128),
            None,
            AES128,
            kmrsp(AES128, "password123"),
            Some(Rogue),
        ),
        (
            "caller not encrypted, listener is",
            with_key(AES128),
            None,
            Unspecified,
            None,
            Some(Unsecure),
        ),
        (
            "wrong passphrase",
            with_key(AES128),
            None,
            AES128,
            kmreq(AES128, "wrongpassword"),
            Some(BadSecret),
        ),
        (
            "matching",
            with_key(AES128),
            None,
            AES128,
            kmreq(AES128, "password123"),
            None,
        ),
    ];
    for (i, (what, settings, accept_with, caller_size, km, expected)) in
        cases.into_iter().enumerate()
    {
        let mut listener = MultiplexListener::new(now, "0.0.0.0:2000".parse().unwrap(), settings);
        let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4000 + i as u16);
        let result = catch_unwind(AssertUnwindSafe(|| {
            let out = handshake_until_access_request(&mut listener, now, from, |cookie| {
                conclusion(cookie, caller_size, km, None)
            });
            assert_eq!(out.access_requests.len(), 1, "{what}");
            step(
                &mut listener,
                now,
                Input::AccessResponse(Some((
                    SessionId(from),
                    AccessControlResponse::Accepted(accept_with),
                ))),
            )
        }));
        let out = result.unwrap_or_else(|_| panic!("{what}: listener panicked"));
        match expected {
            Some(reason) => {
                assert_eq!(out.rejected.len(), 1, "{what}");
                assert_eq!(
                    reject_reason(&out.rejected[0]),
                    Some(reason.into()),
                    "{what}"
                );
                assert!(out.opened.is_empty(), "{what}");
            }
            None => assert_eq!(out.opened.len(), 1, "{what}"),
        }
        // the listener is still alive and serves the next peer
        let other = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5000);
        let out = step(
            &mut listener,
            now,
            Input::Packet(Ok((hs_packet(induction()), other))),
        );
        assert_eq!(out.sent.len(), 1, "{what}");
    }
}

/// Feeds hostile packets into an open connection (the per-connection task).
fn fuzz_connection(
    rng: &mut XorShift,
    connection: &mut DuplexConnection,
    mut now: Instant,
    rounds: usize,
) {
    let remote = connection.settings().remote;
    let local_sockid = connection.settings().local_sockid;
    for _ in 0..rounds {
        now += Duration::from_millis(rng.below(50));
        let input = match rng.below(4) {
            0 => {
                let n = rng.below(3000) as usize;
                connection::Input::Data(Some((now, Bytes::from(rng.bytes(n)))))
            }
            1 => connection::Input::Timer,
            _ => {
                let mut buf = random_control(rng);
                if rng.chance(3) {
                    buf[0] &= 0x7f; // data packet
                }
                buf[12..16].copy_from_slice(&local_sockid.0.to_be_bytes());
                match Packet::parse(&mut Cursor::new(&buf[..]), false) {
                    Ok(packet) => connection::Input::Packet(Ok((packet, remote))),
                    Err(_) => continue,
                }
            }
        };
        let mut input = Some(input);
        for _ in 0..50 {
            let action =
                connection.handle_input(now, input.take().unwrap_or(connection::Input::Timer));
            match action {
                connection::Action::SendPacket((packet, _)) => {
                    let _ = serialize(&packet);
                }
                connection::Action::Close => return,
                connection::Action::WaitForData(_) => break,
                _ => {}
            }
        }
    }
}

#[test]
fn fuzz_listener() {
    const STEPS: usize = 60_000;
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let start = Instant::now();
    let mut now = start;
    let mut listeners = [
        MultiplexListener::new(
            now,
            "0.0.0.0:2000".parse().unwrap(),
            ConnInitSettings::default(),
        ),
        MultiplexListener::new(
            now,
            "0.0.0.0:2001".parse().unwrap(),
            ConnInitSettings {
                key_settings: Some(key_settings(KeySize::AES128, "password123")),
                ..ConnInitSettings::default()
            },
        ),
    ];
    let mut cookies = [[0i32; 8]; 2];
    let sizes = [
        KeySize::Unspecified,
        KeySize::AES128,
        KeySize::AES192,
        KeySize::AES256,
    ];
    // key wrapping runs PBKDF2 (slow in debug builds): prepare the keying material once
    let passwords = ["password123", "wrongpassword"];
    let kms: Vec<Vec<KeyingMaterialMessage>> = sizes
        .iter()
        .map(|size| {
            passwords
                .iter()
                .map(|pass| keying_material(*size, pass))
                .collect()
        })
        .collect();
    let real = real_handshake();
    let (mut opened, mut rejected) = (0, 0);
    for i in 0..STEPS {
        let l = rng.below(2) as usize;
        let c = rng.below(8) as usize;
        let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, l as u8, c as u8)), 7000);
        if rng.chance(20) {
            now += Duration::from_millis(rng.below(4000));
        }
        let input = match rng.below(7) {
            0 => Input::Packet(Ok((hs_packet(induction()), from))),
            1 | 2 => {
                let cookie = if rng.chance(10) {
                    rng.u32() as i32
                } else {
                    cookies[l][c]
                };
                let size_index = rng.below(4) as usize;
                let size = sizes[size_index];
                let km_size = if rng.chance(3) {
                    rng.below(4) as usize
                } else {
                    size_index
                };
                let pass = if rng.chance(4) { 1 } else { 0 };
                let km = kms[km_size][pass].clone();
                let km = match rng.below(4) {
                    0 => None,
                    1 => Some(SrtControlPacket::KeyRefreshResponse(km)),
                    _ => Some(SrtControlPacket::KeyRefreshRequest(km)),
                };
                let sid = rng.chance(2).then(|| "#!::r=live/x,m=publish".to_string());
                let mut shake = conclusion(cookie, size, km, sid);
                if rng.chance(10) {
                    if let HandshakeVsInfo::V5(info) = &mut shake.info {
                        info.ext_hs =
                            [None, Some(SrtControlPacket::Reject)][rng.below(2) as usize].clone();
                    }
                }
                let mut bytes = serialize(&hs_packet(shake));
                if rng.chance(3) {
                    bytes = mutate(&mut rng, bytes);
                }
                match Packet::parse(&mut Cursor::new(&bytes[..]), false) {
                    Ok(packet) => Input::Packet(Ok((packet, from))),
                    Err(e) => Input::Packet(Err(e.into())),
                }
            }
            3 => {
                let buf = if rng.chance(2) {
                    random_control(&mut rng)
                } else {
                    mutate(&mut rng, real.clone())
                };
                match Packet::parse(&mut Cursor::new(&buf[..]), false) {
                    Ok(packet) => Input::Packet(Ok((packet, from))),
                    Err(e) => Input::Packet(Err(e.into())),
                }
            }
            4 if rng.chance(4) => {
                // srt-tokio reports a failed delegation when the connection task has gone away
                Input::Failure(ResultOf::DelegatePacket(SessionId(from)))
            }
            4 => Input::Timer,
            _ => {
                let response = match rng.below(5) {
                    0 => AccessControlResponse::Accepted(None),
                    1 => AccessControlResponse::Accepted(Some(key_settings(
                        sizes[rng.below(4) as usize],
                        "password123",
                    ))),
                    2 => AccessControlResponse::Rejected(RejectReason::User(
                        3000 + rng.below(100) as i32,
                    )),
                    3 => AccessControlResponse::Dropped,
                    _ => AccessControlResponse::Accepted(Some(key_settings(
                        KeySize::AES128,
                        "password123",
                    ))),
                };
                Input::AccessResponse(Some((SessionId(from), response)))
            }
        };
        let listener = &mut listeners[l];
        let out = catch_unwind(AssertUnwindSafe(|| step(listener, now, input)))
            .unwrap_or_else(|_| panic!("listener panicked at step {i}"));
        for packet in &out.sent {
            if let Some(cookie) = cookie_of(packet) {
                cookies[l][c] = cookie;
            }
        }
        rejected += out.rejected.len();
        for connection in out.opened {
            opened += 1;
            let mut connection = DuplexConnection::new(connection);
            catch_unwind(AssertUnwindSafe(|| {
                fuzz_connection(&mut rng, &mut connection, now, 200)
            }))
            .unwrap_or_else(|_| panic!("connection panicked after step {i}"));
        }
    }
    eprintln!(
        "fuzz_listener: {STEPS} steps, {opened} connections opened, {rejected} rejections, in {:?}",
        start.elapsed()
    );
    assert!(opened > 0 && rejected > 0);
}
