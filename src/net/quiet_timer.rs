//! quinn on tokio, with connection timers that never wake the runtime for nothing.
//!
//! Every quinn connection keeps one timer, moved to its earliest deadline each time the
//! connection is polled: a loss-detection deadline after each packet sent, pushed back
//! by seconds (to the keep-alive) when the acknowledgement comes. Tokio's `Sleep::reset`
//! to a later instant leaves the entry in the timer wheel and wakes the runtime at the
//! old instant to move it; so every packet acknowledged cost a wake-up for nothing. On
//! the netns testbed (das-4, 40 nodes, settled) a node woke about 108 times a second,
//! 41 of them with nothing to do. [`QuietTimer`] puts a fresh `Sleep` in place instead
//! when its deadline moves later (the old one leaves the wheel as it is dropped), and
//! resets the same one when it moves earlier.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::time::{Sleep, sleep_until};

/// quinn's tokio runtime with [`QuietTimer`] for its connection timers; what
/// [`super::endpoint_on`] gives every endpoint.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietRuntime;

impl quinn::Runtime for QuietRuntime {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
        Box::pin(QuietTimer::new(at))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        tokio::spawn(future);
    }

    fn wrap_udp_socket(
        &self,
        socket: std::net::UdpSocket,
    ) -> io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)
    }

    fn now(&self) -> Instant {
        quinn::Runtime::now(&quinn::TokioRuntime)
    }
}

/// A timer whose deadline moved later leaves tokio's wheel at once (see the module docs).
#[derive(Debug)]
pub struct QuietTimer {
    sleep: Pin<Box<Sleep>>,
}

impl QuietTimer {
    /// A timer due at `at`; it registers with tokio when first polled.
    pub fn new(at: Instant) -> Self {
        QuietTimer {
            sleep: Box::pin(sleep_until(at.into())),
        }
    }

    /// When the timer is due.
    pub fn deadline(&self) -> Instant {
        self.sleep.deadline().into_std()
    }
}

impl quinn::AsyncTimer for QuietTimer {
    fn reset(self: Pin<&mut Self>, at: Instant) {
        let this = self.get_mut();
        if at > this.deadline() {
            // Dropping the old `Sleep` takes it out of the wheel; the new one registers
            // at `at` when polled.
            this.sleep.set(sleep_until(at.into()));
        } else {
            this.sleep.as_mut().reset(at.into());
        }
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context) -> Poll<()> {
        Future::poll(self.get_mut().sleep.as_mut(), cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::AsyncTimer;
    use std::time::Duration;

    /// A deadline moved later is kept (not the first one), and one moved back earlier
    /// again is kept too: the timer fires at the deadline it was last given.
    #[tokio::test]
    async fn a_timer_fires_at_the_deadline_it_was_last_given() {
        let start = Instant::now();
        let mut timer = Box::pin(QuietTimer::new(start + Duration::from_millis(10)));
        let poll_once = |t: &mut Pin<Box<QuietTimer>>| {
            let waker = futures::task::noop_waker();
            t.as_mut().poll(&mut Context::from_waker(&waker))
        };
        assert!(poll_once(&mut timer).is_pending());
        timer.as_mut().reset(start + Duration::from_millis(150));
        assert_eq!(timer.deadline(), start + Duration::from_millis(150));
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        assert!(start.elapsed() >= Duration::from_millis(150));
        timer
            .as_mut()
            .reset(Instant::now() + Duration::from_secs(60));
        assert!(poll_once(&mut timer).is_pending());
        let moved = Instant::now();
        timer.as_mut().reset(moved + Duration::from_millis(20));
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        assert!(moved.elapsed() >= Duration::from_millis(20));
        assert!(
            moved.elapsed() < Duration::from_secs(30),
            "fired at the earlier deadline"
        );
    }
}
