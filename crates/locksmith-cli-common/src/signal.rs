//! The signals that ask a subcommand to stop.

use std::future::Future;

/// Installs the SIGTERM and SIGINT handlers now and resolves when one arrives, with its name
/// (`"SIGTERM"` or `"SIGINT"`).
///
/// The handlers are installed when this is called, not when the future is first polled: from
/// then on a signal is the caller's to act on (stop cleanly, end its children), where the
/// default action would end the process at once. If they cannot be installed the future
/// never resolves, and the default action still ends the process.
///
/// Call it within a Tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = &'static str> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}
