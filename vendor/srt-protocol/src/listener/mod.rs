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

/// PATCHED (stale sessions): an open session not heard from for this long (or three times the
/// listener's `peer_idle_timeout`, if longer) is dropped on `Input::Timer`. srt-tokio learns
/// that a connection ended only when delegating a packet to it fails, so the session of a peer
/// that vanished, or of a connection we closed, stayed until that address sent again. A live
/// peer sends at least a keepalive every second and the connection itself gives up after
/// `peer_idle_timeout` (5 s by default) of silence: three times that only drops connections
/// that are over by SRT's own rules.
pub const OPEN_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// PATCHED (stale sessions): an induction from the address of an open session silent this
/// long is a new caller on a reused address:port; the old session is dropped and the induction
/// answered. A live peer is heard from every second (keepalives), so three silent seconds mean
/// three keepalives missed in a row: someone spoofing a live peer's address cannot end its
/// connection with an induction, only one already close to its own idle timeout.
pub const STALE_SESSION_REPLACE_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug)]
struct Session {
    created: Instant,
    /// PATCHED (stale sessions): the last packet from the peer that belongs to the session (an
    /// induction to an open session does not: it is a new caller or a spoofer).
    last_heard: Instant,
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
    // PATCHED (stale sessions): an induction from the address of an open session, delegated
    // to it or replacing it; answered if that connection is dropped (stale, or delegating to it
    // failed). One slot is enough: the delegation's or drop's result is the very next input.
    held_induction: Option<(Packet, SocketAddr)>,
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
            held_induction: None,
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
        self.route_packet(now, packet)
    }

    fn route_packet(&mut self, now: Instant, packet: (Packet, SocketAddr)) -> Action {
        let session_id = SessionId(packet.1);
        let induction = is_induction(&packet.0);
        match self.sessions.get_mut(&session_id) {
            None => return self.new_session(now, session_id, packet, induction),
            Some(session) if induction && session.state.is_open() => {
                let silent = now.saturating_duration_since(session.last_heard);
                return self.induction_for_open_session(now, session_id, silent, packet);
            }
            Some(session) => session.last_heard = now,
        }
        match self.sessions.get_mut(&session_id) {
            Some(session) => session.state.handle_packet(now, session_id, packet),
            None => Action::WaitForInput,
        }
    }

    fn new_session(
        &mut self,
        now: Instant,
        session_id: SessionId,
        packet: (Packet, SocketAddr),
        induction: bool,
    ) -> Action {
        // PATCHED (hardening): remote input; previously *any* parseable packet from a new
        // source address created a session that was never removed. A fresh session only
        // reacts to an induction handshake (everything else is NotHandled and leaves it
        // unchanged), so nothing else creates one now, and their number is capped.
        if !induction {
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
            last_heard: now,
            state: SessionState::new_pending(self.settings.clone()),
        };
        let _ = self.sessions.insert(session_id, session);
        match self.sessions.get_mut(&session_id) {
            Some(session) => session.state.handle_packet(now, session_id, packet),
            None => Action::WaitForInput,
        }
    }

    /// PATCHED (stale sessions): an induction from the address of an open session. A caller
    /// on a reused address:port (the old peer vanished without a shutdown) used to be taken for
    /// the old connection and never answered. Stale session (STALE_SESSION_REPLACE_AFTER):
    /// dropped, the induction answered after the drop. Otherwise delegated as before (the
    /// connection ignores it), and kept: if delegating fails, the connection is over and the
    /// induction is answered once the session is dropped.
    fn induction_for_open_session(
        &mut self,
        now: Instant,
        session_id: SessionId,
        silent: Duration,
        packet: (Packet, SocketAddr),
    ) -> Action {
        if silent >= STALE_SESSION_REPLACE_AFTER {
            self.info(now, "induction replaces a silent open session", &session_id);
            let _ = self.sessions.remove(&session_id);
            self.held_induction = Some(packet);
            return Action::DropConnection(session_id);
        }
        self.held_induction = Some(packet.clone());
        Action::DelegatePacket(session_id, packet)
    }

    /// PATCHED (stale sessions): after a connection was dropped, answers the induction held for
    /// its address, or drops the next silent open session.
    fn after_drop(&mut self, now: Instant, session_id: SessionId) -> Action {
        match self.held_induction.take() {
            Some(packet) if packet.1 == session_id.0 => self.route_packet(now, packet),
            _ => match self.drop_silent_open_session(now) {
                Some(next) => Action::DropConnection(next),
                None => Action::WaitForInput,
            },
        }
    }

    /// PATCHED (stale sessions): removes an open session silent past OPEN_SESSION_IDLE_TIMEOUT;
    /// the caller returns Action::DropConnection for it so that srt-tokio lets its connection go.
    fn drop_silent_open_session(&mut self, now: Instant) -> Option<SessionId> {
        let timeout =
            OPEN_SESSION_IDLE_TIMEOUT.max(self.settings.peer_idle_timeout.saturating_mul(3));
        let session_id = *self
            .sessions
            .iter()
            .find(|(_, s)| {
                s.state.is_open() && now.saturating_duration_since(s.last_heard) >= timeout
            })?
            .0;
        let _ = self.sessions.remove(&session_id);
        self.info(now, "dropping a silent open session", &session_id);
        Some(session_id)
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
        } else if let Some(session_id) = self.drop_silent_open_session(now) {
            Action::DropConnection(session_id)
        } else {
            // TODO: create an action that returns an action with an Iterator that ticks time forward
            //  for all the sessions, yielding the results to the I/O loop
            Action::WaitForInput
        }
    }

    fn handle_success(&mut self, now: Instant, result_of: ResultOf) -> Action {
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
                if let Some(next) = self.expire_pending_sessions(now) {
                    return self.reject_expired_session(now, next);
                }
            }
            OpenConnection(_) => {
                self.stats.cx_opened += 1;
            }
            DelegatePacket(_) => {
                self.stats.delegated_packets += 1;
                // PATCHED (stale sessions): the connection is alive and got the induction
                self.held_induction = None;
            }
            DropConnection(session_id) => {
                self.stats.cx_dropped += 1;
                self.sessions.remove(&session_id);
                return self.after_drop(now, session_id);
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
            // PATCHED (stale sessions): srt-tokio forgets the connection before closing it, so
            // a failed close still ends it; the session goes as on success.
            DropConnection(session_id) => {
                self.sessions.remove(&session_id);
                self.after_drop(now, session_id)
            }
            // TODO: stats? anything else?
            _ => Action::WaitForInput,
        }
    }

    fn handle_close(&mut self) -> Action {
        Action::Close
    }

    fn info(&self, now: Instant, tag: &str, debug: &impl Debug) {
        log::info!(
            "{:?}|listen:{}|{} - {:?}",
            TimeSpan::from_interval(self.start_time, now),
            self.local_address.port(),
            tag,
            debug
        );
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

/// PATCHED (hardening): only an induction handshake may create a session.
fn is_induction(packet: &Packet) -> bool {
    matches!(
        packet.control().and_then(ControlPacket::handshake),
        Some(HandshakeControlInfo {
            shake_type: ShakeType::Induction,
            ..
        })
    )
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

        // past the pending timeout; open sessions go only when silent (see below)
        let later = start + PENDING_SESSION_TIMEOUT;
        assert!(later < start + OPEN_SESSION_IDLE_TIMEOUT);
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

    // PATCHED (stale sessions): open sessions whose connection is over

    fn open_session(start: Instant) -> MultiplexListener {
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
        let action = listener.handle_input(
            start,
            Input::Success(ResultOf::OpenConnection(session_id())),
        );
        assert_eq!(action, Action::WaitForInput);
        listener
    }

    fn keepalive_at(listener: &mut MultiplexListener, now: Instant) {
        let packet = Packet::Control(ControlPacket {
            timestamp: TimeStamp::from_micros(0),
            dest_sockid: dest_sock_id(),
            control_type: ControlTypes::KeepAlive,
        });
        let action = listener.handle_input(now, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::DelegatePacket(_, _));
        let action =
            listener.handle_input(now, Input::Success(ResultOf::DelegatePacket(session_id())));
        assert_eq!(action, Action::WaitForInput);
    }

    /// The first action of a few timer ticks at `now` that is not a statistics update.
    fn tick(listener: &mut MultiplexListener, now: Instant) -> Action<'static> {
        for _ in 0..3 {
            match listener.handle_input(now, Input::Timer) {
                Action::UpdateStatistics(_) => {}
                Action::DropConnection(id) => return Action::DropConnection(id),
                Action::WaitForInput => return Action::WaitForInput,
                other => panic!("unexpected {other:?}"),
            }
        }
        Action::WaitForInput
    }

    fn is_induction_response(action: &Action) -> bool {
        matches!(
            action,
            Action::SendPacket((Packet::Control(cp), to))
                if *to == conn_addr()
                    && cp.handshake().map(|hs| hs.shake_type) == Some(ShakeType::Induction)
        )
    }

    #[test]
    fn silent_open_session_is_dropped_on_timer() {
        let start = Instant::now();
        let mut listener = open_session(start);
        // heard from: kept past the bound counted from its start
        keepalive_at(&mut listener, start + OPEN_SESSION_IDLE_TIMEOUT / 2);
        let action = tick(&mut listener, start + OPEN_SESSION_IDLE_TIMEOUT);
        assert_eq!(action, Action::WaitForInput);
        assert_eq!(listener.sessions.len(), 1);

        let later = start + OPEN_SESSION_IDLE_TIMEOUT / 2 + OPEN_SESSION_IDLE_TIMEOUT;
        let action = tick(&mut listener, later);
        assert_eq!(action, Action::DropConnection(session_id()));
        assert!(listener.sessions.is_empty());
        let action = listener.handle_input(
            later,
            Input::Success(ResultOf::DropConnection(session_id())),
        );
        assert_eq!(action, Action::WaitForInput);

        // the address is a new caller again
        assert!(induction_from(&mut listener, later, conn_addr()));
    }

    #[test]
    fn induction_replaces_stale_open_session() {
        let start = Instant::now();
        let mut listener = open_session(start);
        let later = start + STALE_SESSION_REPLACE_AFTER;
        let packet = build_hs_pack(test_induction());
        let action = listener.handle_input(later, Input::Packet(Ok((packet, conn_addr()))));
        assert_eq!(action, Action::DropConnection(session_id()));
        let action = listener.handle_input(
            later,
            Input::Success(ResultOf::DropConnection(session_id())),
        );
        assert!(is_induction_response(&action), "{action:?}");

        // and the new caller goes on to a new connection
        let packet = build_hs_pack(test_conclusion());
        let action = listener.handle_input(later, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::RequestAccess(_, _));
    }

    #[test]
    fn induction_spoofing_live_session_does_not_disturb_it() {
        let start = Instant::now();
        let mut listener = open_session(start);
        let heard = start + Duration::from_secs(5);
        keepalive_at(&mut listener, heard);
        let spoofed = heard + STALE_SESSION_REPLACE_AFTER - Duration::from_millis(1);
        for _ in 0..10 {
            let packet = build_hs_pack(test_induction());
            let action = listener.handle_input(spoofed, Input::Packet(Ok((packet, conn_addr()))));
            assert_matches!(action, Action::DelegatePacket(_, _));
            let action = listener.handle_input(
                spoofed,
                Input::Success(ResultOf::DelegatePacket(session_id())),
            );
            assert_eq!(action, Action::WaitForInput);
        }
        assert_eq!(tick(&mut listener, spoofed), Action::WaitForInput);
        assert!(listener.sessions[&session_id()].state.is_open());
        // the inductions did not count as the peer being heard from
        let action = tick(&mut listener, heard + OPEN_SESSION_IDLE_TIMEOUT);
        assert_eq!(action, Action::DropConnection(session_id()));
    }

    #[test]
    fn induction_to_ended_connection_is_answered() {
        let start = Instant::now();
        let mut listener = open_session(start);
        // recent, but srt-tokio's connection task is gone: delegating fails
        let now = start + Duration::from_millis(100);
        let packet = build_hs_pack(test_induction());
        let action = listener.handle_input(now, Input::Packet(Ok((packet, conn_addr()))));
        assert_matches!(action, Action::DelegatePacket(_, _));
        let action =
            listener.handle_input(now, Input::Failure(ResultOf::DelegatePacket(session_id())));
        assert_eq!(action, Action::DropConnection(session_id()));
        let action =
            listener.handle_input(now, Input::Success(ResultOf::DropConnection(session_id())));
        assert!(is_induction_response(&action), "{action:?}");
    }
}
