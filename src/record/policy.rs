//! When a stream's recording starts, pauses, continues, splits and ends (sans-IO: events and
//! `now` in, actions out). The rules of the cloud API this daemon mirrors:
//! - `auto_record` starts a recording when the stream goes live (main or backup input);
//!   `start_recording` starts one on a live stream, `stop_recording` ends it;
//! - inputs gone → paused; back within `resume` → the same video continues; not back → the
//!   video ends;
//! - a video longer than `max` ends and the recording continues as a new video.

use std::time::Duration;

use tokio::time::Instant;

/// What the recorder is to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    StartVideo,
    /// The current video ends (finalised, `ready`).
    EndVideo(EndReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Stopped,
    /// The input did not come back within the resume time.
    InputGone,
    /// `max` reached: a new video follows at once.
    MaxDuration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("the stream is not live")]
    NotLive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Recording {
        video_since: Instant,
    },
    Paused {
        video_since: Instant,
        gone_at: Instant,
    },
}

#[derive(Debug)]
pub struct Policy {
    pub auto_record: bool,
    resume: Duration,
    max: Duration,
    live: bool,
    state: State,
}

impl Policy {
    pub fn new(auto_record: bool, resume: Duration, max: Duration) -> Policy {
        Policy {
            auto_record,
            resume,
            max,
            live: false,
            state: State::Idle,
        }
    }

    /// Whether an input is live now.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Whether a video is open (recording or paused within the resume time).
    #[cfg(test)]
    pub fn recording(&self) -> bool {
        self.state != State::Idle
    }

    /// The open video's start.
    #[cfg(test)]
    pub fn video_since(&self) -> Option<Instant> {
        match self.state {
            State::Idle => None,
            State::Recording { video_since } | State::Paused { video_since, .. } => {
                Some(video_since)
            }
        }
    }

    pub fn live_started(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.live = true;
        match self.state {
            State::Paused { video_since, .. } => self.state = State::Recording { video_since },
            State::Idle if self.auto_record => self.start(now, out),
            _ => {}
        }
    }

    pub fn inputs_gone(&mut self, now: Instant) {
        self.live = false;
        if let State::Recording { video_since } = self.state {
            self.state = State::Paused {
                video_since,
                gone_at: now,
            };
        }
    }

    /// `start_recording`: a no-op while a video is open.
    pub fn start_requested(
        &mut self,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Result<(), PolicyError> {
        if !self.live {
            return Err(PolicyError::NotLive);
        }
        if self.state == State::Idle {
            self.start(now, out);
        }
        Ok(())
    }

    /// `stop_recording`: `false` when nothing was recording.
    pub fn stop_requested(&mut self, out: &mut Vec<Action>) -> bool {
        if self.state == State::Idle {
            return false;
        }
        self.state = State::Idle;
        out.push(Action::EndVideo(EndReason::Stopped));
        true
    }

    pub fn tick(&mut self, now: Instant, out: &mut Vec<Action>) {
        match self.state {
            State::Paused { gone_at, .. } if now.duration_since(gone_at) >= self.resume => {
                self.state = State::Idle;
                out.push(Action::EndVideo(EndReason::InputGone));
            }
            State::Recording { video_since } if now.duration_since(video_since) >= self.max => {
                out.push(Action::EndVideo(EndReason::MaxDuration));
                self.start(now, out);
            }
            _ => {}
        }
    }

    fn start(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.state = State::Recording { video_since: now };
        out.push(Action::StartVideo);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESUME: Duration = Duration::from_secs(10);
    const MAX: Duration = Duration::from_secs(60);

    fn run(p: &mut Policy, f: impl FnOnce(&mut Policy, &mut Vec<Action>)) -> Vec<Action> {
        let mut out = Vec::new();
        f(p, &mut out);
        out
    }

    #[test]
    fn auto_record_starts_with_the_live_input_and_a_quick_return_continues_the_video() {
        let t0 = Instant::now();
        let mut p = Policy::new(true, RESUME, MAX);
        assert_eq!(
            run(&mut p, |p, o| p.live_started(t0, o)),
            [Action::StartVideo]
        );
        p.inputs_gone(t0 + Duration::from_secs(5));
        assert!(run(&mut p, |p, o| p.tick(t0 + Duration::from_secs(14), o)).is_empty());
        // Back after 9 s: the same video.
        assert!(run(&mut p, |p, o| p
            .live_started(t0 + Duration::from_secs(14), o))
        .is_empty());
        assert_eq!(p.video_since(), Some(t0));
        // Gone for longer than the resume time: the video ends; the next live starts another.
        p.inputs_gone(t0 + Duration::from_secs(20));
        assert_eq!(
            run(&mut p, |p, o| p.tick(t0 + Duration::from_secs(30), o)),
            [Action::EndVideo(EndReason::InputGone)]
        );
        assert!(!p.recording());
        assert_eq!(
            run(&mut p, |p, o| p
                .live_started(t0 + Duration::from_secs(40), o)),
            [Action::StartVideo]
        );
    }

    #[test]
    fn manual_start_needs_a_live_stream_and_stop_says_whether_it_stopped_anything() {
        let t0 = Instant::now();
        let mut p = Policy::new(false, RESUME, MAX);
        assert_eq!(
            run(&mut p, |p, o| assert_eq!(
                p.start_requested(t0, o),
                Err(PolicyError::NotLive)
            )),
            []
        );
        assert!(
            run(&mut p, |p, o| p.live_started(t0, o)).is_empty(),
            "no auto_record"
        );
        assert_eq!(
            run(&mut p, |p, o| p.start_requested(t0, o).unwrap()),
            [Action::StartVideo]
        );
        assert!(run(&mut p, |p, o| p.start_requested(t0, o).unwrap()).is_empty());
        assert_eq!(
            run(&mut p, |p, o| assert!(p.stop_requested(o))),
            [Action::EndVideo(EndReason::Stopped)]
        );
        assert!(run(&mut p, |p, o| assert!(!p.stop_requested(o))).is_empty());
    }

    #[test]
    fn a_long_recording_continues_as_a_new_video_at_the_maximum() {
        let t0 = Instant::now();
        let mut p = Policy::new(true, RESUME, MAX);
        run(&mut p, |p, o| p.live_started(t0, o));
        assert!(run(&mut p, |p, o| p
            .tick(t0 + MAX - Duration::from_millis(1), o))
        .is_empty());
        assert_eq!(
            run(&mut p, |p, o| p.tick(t0 + MAX, o)),
            [Action::EndVideo(EndReason::MaxDuration), Action::StartVideo]
        );
        assert_eq!(p.video_since(), Some(t0 + MAX));
    }
}
