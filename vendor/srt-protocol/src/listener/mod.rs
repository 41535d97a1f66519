mod input;
mod session;
mod statistics;

use std::{collections::HashMap, fmt::Debug, net::SocketAddr, time::Duration, time::Instant};

use crate::{packet::*, protocol::time::Timer, settings::ConnInitSettings};

use session::*;

pub use input::*;
pub use statistics::*;

#[derive(Clone, Debug)]
pub struct ListenerSettings {}

/// PATCHED (hardening): a session that is not open (handshake in progress, waiting for access
/// control, rejecting, dropping) this long after it was created is expired on `Input::Timer`.
/// Previously pending sessions were never removed (the timer code was commented out).
pub const PENDING_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// PATCHED (hardening): at most this many sessions that are not open at a time; an induction
/// from a new address beyond that is dropped (the peer retries). Bounds the memory a flood of
/// (spoofed) inductions can pin to about MAX_PENDING_SESSIONS * PENDING_SESSION_TIMEOUT.
pub const MAX_PENDING_SESSIONS: usize = 1024;

#[derive(Debug)]
struct Session {
    created: Instant,
    state: SessionState,
}

#[derive(Debug)]
pub struct MultiplexListener {
    start_time: Instant,
    local_address: SocketAddr,
    settings: ConnInitSettings,
    sessions: HashMap<SessionId, Session>,
    stats: ListenerStatistics,
    stats_timer: Timer,
    // PATCHED (hardening): log the MAX_PENDING_SESSIONS cap being hit once, not per packet
    pending_cap_warned: bool,
}

impl MultiplexListener {
    pub fn new(now: Instant, local_address: SocketAddr, settings: ConnInitSettings) -> Self {
        Self {
            start_time: now,
            local_address,
            settings,
            sessions: Default::default(),
            stats: Default::default(),
            stats_timer: Timer::new(now, Duration::from_secs(1)),
            pending_cap_warned: false,
        }
    }

    pub fn handle_input(&mut self, now: Instant, input: Input) -> Action {
        match input {
            Input::Packet(packet) => self.handle_input_packet(now, packet),
            Input::AccessResponse(response) => self.handle_input_access_response(now, response),
            Input::Timer => self.handle_timer(now),
            Input::Success(result_of) => self.handle_success(now, result_of),
            Input::Failure(result_of) => self.handle_failure(now, result_of),
        }
    }

    fn handle_input_packet(&mut self, now: Instant, packet: ReceivePacketResult) -> Action {
        match packet {
            Ok(packet) => self.handle_packet(now, packet),
            Err(error) => self.handle_packet_receive_error(now, error),
        }
    }

    fn handle_input_access_response(
        &mut self,
        now: Instant,
        response: Option<(SessionId, AccessControlResponse)>,
    ) -> Action {
        match response {
            Some((session_id, response)) => {
                self.handle_access_control_response(now, session_id, response)
            }
            None => self.handle_close(),
        }
    }

    fn handle_packet(&mut self, now: Instant, packet: (Packet, SocketAddr)) -> Action {
        self.stats.rx_packets += 1;
        //self.stats.rx_bytes += packet
        let session_id = SessionId(packet.1);
        if !self.sessions.contains_key(&session_id) {
            // PATCHED (hardening): remote input; previously *any* parseable packet from a new
            // source address created a session that was never removed. A fresh session only
            // reacts to an induction handshake (everything else is NotHandled and leaves it
            // unchanged), so nothing else creates one now, and their number is capped.
            let is_induction = matches!(
                packet.0.control().and_then(ControlPacket::handshake),
                Some(HandshakeControlInfo {
                    shake_type: ShakeType::Induction,
                    ..
                })
            );
            if !is_induction {
                return Action::WaitForInput;
            }
            if self.pending_session_count() >= MAX_PENDING_SESSIONS {
                if !self.pending_cap_warned {
                    self.pending_cap_warned = true;
                    self.warn(
                        now,
                        "too many pending sessions, dropping inductions; first from",
                        &packet.1,
                    );
                } else {
                    log::debug!(
                        "too many pending sessions, dropping induction from {}",
                        packet.1
                    );
                }
                return Action::WaitForInput;
            }
            let session = Session {
                created: now,
                state: SessionState::new_pending(self.settings.clone()),
            };
            let _ = self.sessions.insert(session_id, session);
        }
        match self.sessions.get_mut(&session_id) {
            Some(session) => session.state.handle_packet(now, session_id, packet),
            None => Action::WaitForInput,
        }
    }

    fn pending_session_count(&self) -> usize {
        self.sessions
            .values()
            .filter(|s| !s.state.is_open())
            .count()
    }

    fn is_expired(now: Instant, session: &Session) -> bool {
        !session.state.is_open()
            && now.saturating_duration_since(session.created) >= PENDING_SESSION_TIMEOUT
    }

    /// PATCHED (hardening): removes expired sessions that nobody else holds state for; returns
    /// the first expired session that is waiting for access control, which must be rejected
    /// through an Action so srt-tokio drops its pending connection.
    fn expire_pending_sessions(&mut self, now: Instant) -> Option<SessionId> {
        self.sessions.retain(|_, session| {
            !Self::is_expired(now, session) || session.state.is_awaiting_access_control()
        });
        if self.pending_cap_warned && self.pending_session_count() < MAX_PENDING_SESSIONS {
            self.pending_cap_warned = false;
        }
        self.sessions
            .iter()
            .find(|(_, session)| Self::is_expired(now, session))
            .map(|(id, _)| *id)
    }

    fn reject_expired_session(&mut self, now: Instant, session_id: SessionId) -> Action {
        self.warn(now, "pending session expired", &session_id);
        match self.sessions.get_mut(&session_id) {
            Some(session) => session.state.handle_access_control_response(
                now,
                session_id,
                AccessControlResponse::Rejected(CoreRejectReason::Timeout.into()),
            ),
            None => Action::WaitForInput,
        }
    }

    fn handle_packet_receive_error(&mut self, now: Instant, error: ReceivePacketError) -> Action {
        self.warn(now, "packet", &error);

        use ReceivePacketError::*;
        match error {
            Parse(_) => self.stats.rx_parse_errors += 1,
            Io(_) => self.stats.rx_io_errors += 1,
        }

        Action::WaitForInput
    }

    fn handle_access_control_response(
        &mut self,
        now: Instant,
        session_id: SessionId,
        response: AccessControlResponse,
    ) -> Action {
        match self.sessions.get_mut(&session_id) {
            Some(session) => session
                .state
                .handle_access_control_response(now, session_id, response),
            None => Action::DropConnection(session_id),
        }
    }

    fn handle_timer(&mut self, now: Instant) -> Action {
        // PATCHED (hardening): expire pending sessions (see PENDING_SESSION_TIMEOUT)
        let expired_access_request = self.expire_pending_sessions(now);
        if self.stats_timer.check_expired(now).is_some() {
            Action::UpdateStatistics(&self.stats)
        } else if let Some(session_id) = expired_access_request {
            self.reject_expired_session(now, session_id)
        } else {
            // TODO: create an action that returns an action with an Iterator that ticks time forward
            //  for all the sessions, yielding the results to the I/O loop
            Action::WaitForInput
        }
    }

    fn handle_success(&mut self, _now: Instant, result_of: ResultOf) -> Action {
        use ResultOf::*;
        match result_of {
            SendPacket(_) => {
                self.stats.tx_packets += 1;
            }
            RequestAccess(_) => {
                self.stats.cx_inbound += 1;
            }
            RejectConnection(session_id) => {
                self.stats.cx_rejected += 1;
                self.sessions.remove(&session_id);
                // PATCHED (hardening): reject the next expired session waiting for access
                // control right away instead of one per timer tick.
                if let Some(next) = self.expire_pending_sessions(_now) {
                    return self.reject_expired_session(_now, next);
                }
            }
            OpenConnection(_) => {
                self.stats.cx_opened += 1;
            }
            DelegatePacket(_) => {
                self.stats.delegated_packets += 1;
            }
            DropConnection(session_id) => {
                self.stats.cx_dropped += 1;
                self.sessions.remove(&session_id);
            }
            UpdateStatistics => {}
        }
        Action::WaitForInput
    }

    fn handle_failure(&mut self, now: Instant, result_of: ResultOf) -> Action {
        self.warn(now, "failure", &result_of);

        use ResultOf::*;
        match result_of {
            DelegatePacket(session_id) => Action::DropConnection(session_id),
            // TODO: stats? anything else?
            _ => Action::WaitForInput,
        }
    }

    fn handle_close(&mut self) -> Action {
        Action::Close
    }

    fn warn(&self, now: Instant, tag: &str, debug: &impl Debug) {
        log::warn!(
            "{:?}|listen:{}|{} - {:?}",
            TimeSpan::from_interval(self.start_time, now),
            self.local_address.port(),
            tag,
            debug
        );
    }
}

#[cfg(test)]
mod test {
    use assert_matches::assert_matches;
    use std::{
        net::{IpAddr, Ipv4Addr},
        time::Duration,
    };

    use rand::random;

    use crate::options::{KeySize, PacketCount, PacketSize, SrtVersion};

    use super::*;

    fn conn_addr() -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8765)
    }

    fn test_induction() -> HandshakeControlInfo {
        HandshakeControlInfo {
            init_seq_num: random(),
            max_packet_size: PacketSize(1316),
            max_flow_size: PacketCount(256_000),
            shake_type: ShakeType::Induction,
            socket_id: SocketId(15),
            syn_cookie: 0,
            peer_addr: IpAddr::from([127, 0, 0, 1]),
            info: HandshakeVsInfo::V5(HsV5Info::default()),
        }
    }

    fn test_conclusion() -> HandshakeControlInfo {
        HandshakeControlInfo {
            init_seq_num: random(),
            max_packet_size: PacketSize(1316),
            max_flow_size: PacketCount(256_000),
            shake_type: ShakeType::Conclusion,
            socket_id: SocketId(15),
            syn_cookie: crate::protocol::pending_connection::cookie::gen_cookie(&conn_addr()),
            peer_addr: IpAddr::from([127, 0, 0, 1]),
            info: HandshakeVsInfo::V5(HsV5Info {
                key_size: KeySize::Unspecified,
                ext_hs: Some(SrtControlPacket::HandshakeRequest(SrtHandshake {
                    version: SrtVersion::CURRENT,
                    flags: SrtShakeFlags::SUPPORTED,
                    send_latency: Duration::from_secs(1),
                    recv_latency: Duration::from_secs(2),
                })),
                ext_km: None,
                ext_group: None,
                sid: None,
            }),
        }
    }

    fn dest_sock_id() -> SocketId {
        SocketId(6)
    }

    fn session_id() -> SessionId {
        SessionId(conn_addr())
    }

    fn build_hs_pack(i: HandshakeControlInfo) -> Packet {
        Packet::Control(ControlPacket {
            timestamp: TimeStamp::from_micros(0),
            dest_sockid: dest_sock_id(),
            control_type: ControlTypes::Handshake(i),
        })
    }

    #[test]
    fn connect() {
        let settings = ConnInitSettings::default();
        let local = "0.0.0.0:2000".parse().unwrap();
        let mut listener = MultiplexListener::new(Instant::now(), local, settings);

        let packet = build_hs_pack(test_induction());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::SendPacket(_));

        let packet = build_hs_pack(test_conclusion());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::RequestAccess(_, _));

        let action = listener.handle_input(
            Instant::now(),
            Input::AccessResponse(Some((session_id(), AccessControlResponse::Accepted(None)))),
        );
        assert_matches!(action, Action::OpenConnection(_, _));

        use crate::listener::ResultOf::*;

        let action =
            listener.handle_input(Instant::now(), Input::Success(OpenConnection(session_id())));
        assert_matches!(action, Action::WaitForInput);

        let packet = build_hs_pack(test_conclusion());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::DelegatePacket(_, _));
    }

    #[test]
    fn reject() {
        let settings = ConnInitSettings::default();
        let local = "127.0.0.1:2000".parse().unwrap();
        let mut listener = MultiplexListener::new(Instant::now(), local, settings);

        let packet = build_hs_pack(test_induction());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::SendPacket(_));

        let packet = build_hs_pack(test_conclusion());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::RequestAccess(_, _));

        let action = listener.handle_input(
            Instant::now(),
            Input::AccessResponse(Some((
                session_id(),
                AccessControlResponse::Rejected(RejectReason::User(100)),
            ))),
        );
        assert_matches!(
            action,
            Action::RejectConnection(_, Some((Packet::Control(_), _)))
        );

        let packet = build_hs_pack(test_conclusion());
        let action =
            listener.handle_input(Instant::now(), Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(
            action,
            Action::RejectConnection(_, Some((Packet::Control(_), _)))
        );

        let action = listener.handle_input(
            Instant::now(),
            Input::Success(ResultOf::RejectConnection(session_id())),
        );
        assert_eq!(action, Action::WaitForInput);
    }

    // PATCHED (hardening): tests for session creation, expiry and cap

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 9000)
    }

    fn induction_from(listener: &mut MultiplexListener, now: Instant, from: SocketAddr) -> bool {
        let packet = build_hs_pack(test_induction());
        matches!(
            listener.handle_input(now, Input::Packet(Ok((packet, from)))),
            Action::SendPacket(_)
        )
    }

    #[test]
    fn non_induction_creates_no_session() {
        let start = Instant::now();
        let mut listener = MultiplexListener::new(
            start,
            "127.0.0.1:2000".parse().unwrap(),
            ConnInitSettings::default(),
        );
        let data = Packet::Data(DataPacket {
            seq_number: SeqNumber::new_truncate(1),
            message_loc: PacketLocation::ONLY,
            in_order_delivery: false,
            encryption: DataEncryption::None,
            retransmitted: false,
            message_number: MsgNumber::new_truncate(1),
            timestamp: TimeStamp::from_micros(0),
            dest_sockid: SocketId(1),
            payload: Default::default(),
        });
        for (i, packet) in [data, build_hs_pack(test_conclusion())]
            .into_iter()
            .enumerate()
        {
            let action = listener.handle_input(start, Input::Packet(Ok((packet, addr(i as u32)))));
            assert_eq!(action, Action::WaitForInput);
        }
        assert!(listener.sessions.is_empty());
    }

    #[test]
    fn pending_sessions_expire_and_are_capped() {
        let start = Instant::now();
        let mut listener = MultiplexListener::new(
            start,
            "127.0.0.1:2000".parse().unwrap(),
            ConnInitSettings::default(),
        );
        for i in 0..MAX_PENDING_SESSIONS as u32 {
            assert!(induction_from(&mut listener, start, addr(i)));
        }
        // over the cap: dropped
        assert!(!induction_from(&mut listener, start, addr(1_000_000)));
        assert_eq!(listener.sessions.len(), MAX_PENDING_SESSIONS);

        // not yet expired
        let _ = listener.handle_input(start + PENDING_SESSION_TIMEOUT / 2, Input::Timer);
        assert_eq!(listener.sessions.len(), MAX_PENDING_SESSIONS);

        // expired
        let later = start + PENDING_SESSION_TIMEOUT;
        let _ = listener.handle_input(later, Input::Timer);
        assert!(listener.sessions.is_empty());
        assert!(induction_from(&mut listener, later, addr(1_000_000)));
    }

    #[test]
    fn expired_access_request_is_rejected() {
        let start = Instant::now();
        let mut listener = MultiplexListener::new(
            start,
            "127.0.0.1:2000".parse().unwrap(),
            ConnInitSettings::default(),
        );
        assert!(induction_from(&mut listener, start, conn_addr()));
        let packet = build_hs_pack(test_conclusion());
        let action = listener.handle_input(start, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::RequestAccess(_, _));

        let later = start + PENDING_SESSION_TIMEOUT;
        let mut rejected = false;
        for _ in 0..3 {
            match listener.handle_input(later, Input::Timer) {
                Action::RejectConnection(id, Some((Packet::Control(cp), _))) => {
                    assert_eq!(id, session_id());
                    assert_eq!(
                        cp.handshake().unwrap().shake_type,
                        ShakeType::Rejection(CoreRejectReason::Timeout.into())
                    );
                    rejected = true;
                    break;
                }
                Action::UpdateStatistics(_) | Action::WaitForInput => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(rejected);
        let action = listener.handle_input(
            later,
            Input::Success(ResultOf::RejectConnection(session_id())),
        );
        assert_eq!(action, Action::WaitForInput);
        assert!(listener.sessions.is_empty());

        // a late answer from the application is harmless
        let action = listener.handle_input(
            later,
            Input::AccessResponse(Some((session_id(), AccessControlResponse::Accepted(None)))),
        );
        assert_eq!(action, Action::DropConnection(session_id()));
    }

    #[test]
    fn open_sessions_do_not_expire() {
        let start = Instant::now();
        let mut listener = MultiplexListener::new(
            start,
            "127.0.0.1:2000".parse().unwrap(),
            ConnInitSettings::default(),
        );
        assert!(induction_from(&mut listener, start, conn_addr()));
        let packet = build_hs_pack(test_conclusion());
        let action = listener.handle_input(start, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::RequestAccess(_, _));
        let action = listener.handle_input(
            start,
            Input::AccessResponse(Some((session_id(), AccessControlResponse::Accepted(None)))),
        );
        assert_matches!(action, Action::OpenConnection(_, _));

        let later = start + 3 * PENDING_SESSION_TIMEOUT;
        let _ = listener.handle_input(later, Input::Timer);
        let _ = listener.handle_input(later, Input::Timer);
        assert_eq!(listener.sessions.len(), 1);

        // a second (stale) access control response for the open session used to hit unreachable!
        let action = listener.handle_input(
            later,
            Input::AccessResponse(Some((session_id(), AccessControlResponse::Accepted(None)))),
        );
        assert_eq!(action, Action::WaitForInput);

        let packet = build_hs_pack(test_conclusion());
        let action = listener.handle_input(later, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::DelegatePacket(_, _));
    }
}
