//! The signals `locksmith run` stops on while waiting and forwards to the command's group while
//! it runs.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

/// Listeners for SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2.
#[derive(Debug)]
pub(crate) struct Signals {
    int: Stream,
    term: Stream,
    hup: Stream,
    quit: Stream,
    usr1: Stream,
    usr2: Stream,
}

impl Signals {
    /// Installs the listeners (from then on these signals no longer end the process).
    pub(crate) fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet returned is returned by the next call.
    pub(crate) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.usr1.recv() => Signal::SIGUSR1,
            _ = self.usr2.recv() => Signal::SIGUSR2,
        }
    }
}
